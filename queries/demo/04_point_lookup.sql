-- A full primary key is a point lookup (GetRow), never a scan.
SELECT *
FROM consumption
WHERE card_id = 7 AND seller_id = 'market' AND device_id = 'pos-10' AND order_no = 'o00000';
