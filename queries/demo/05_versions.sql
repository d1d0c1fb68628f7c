-- Every kept version of one cell (the amount was corrected twice), newest
-- first, from the long-form versions table function.
SELECT column_name, version, double_value AS amount
FROM cellar_versions('consumption', 3)
WHERE card_id = 7 AND seller_id = 'market' AND device_id = 'pos-10' AND order_no = 'o00000'
  AND column_name = 'amount'
ORDER BY version DESC;
