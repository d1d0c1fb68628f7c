-- The plan shows the key ranges the scan reads.
EXPLAIN SELECT order_no, amount FROM consumption WHERE card_id IN (3, 5) AND amount > 40;
