-- One card's first orders in key order: card_id = 7 becomes a key range,
-- and the scan's key order serves ORDER BY ... LIMIT without a sort.
SELECT card_id, seller_id, device_id, order_no, amount, category
FROM consumption
WHERE card_id = 7
ORDER BY card_id, seller_id, device_id, order_no
LIMIT 5;
