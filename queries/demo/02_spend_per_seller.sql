-- Orders and spending per seller over the whole table (an aggregate that
-- reads only the seller_id and amount columns of the segments).
SELECT seller_id, count(*) AS orders, round(sum(amount), 2) AS total
FROM consumption
GROUP BY seller_id
ORDER BY total DESC;
