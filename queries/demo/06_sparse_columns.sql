-- Sparse columns: refunds and coupons exist on few rows; missing cells are NULL.
SELECT category,
       count(*) AS orders,
       count(*) FILTER (WHERE refund) AS refunds,
       count(coupon) AS with_coupon
FROM consumption
GROUP BY category
ORDER BY category;
