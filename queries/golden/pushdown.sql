-- Key conditions become key ranges (shown in EXPLAIN); the rest is filtered.
CREATE TABLE t (card BIGINT, seller VARCHAR, amount DOUBLE, PRIMARY KEY (card, seller));
INSERT INTO t SELECT value % 10, 's' || (value % 7), value * 1.0 FROM generate_series(0, 99) AS g(value);
-- @flush t
INSERT INTO t VALUES (4, 's9', 1000.0);
EXPLAIN SELECT * FROM t WHERE card = 3 AND seller = 's3';
SELECT * FROM t WHERE card = 3 AND seller = 's3';
EXPLAIN SELECT seller, amount FROM t WHERE card IN (4, 2) AND seller >= 's5';
SELECT card, seller, amount FROM t WHERE card IN (4, 2) AND seller >= 's5';
EXPLAIN SELECT * FROM t WHERE card BETWEEN 2 AND 3 AND amount > 50;
SELECT * FROM t WHERE card BETWEEN 2 AND 3 AND amount > 50;
EXPLAIN SELECT * FROM t WHERE seller = 's1';
SELECT count(*) FROM t WHERE seller = 's1';
-- ORDER BY the key with LIMIT needs no sort: the scan is key-ordered.
EXPLAIN SELECT * FROM t ORDER BY card, seller LIMIT 3;
SELECT * FROM t ORDER BY card, seller LIMIT 3;
SELECT * FROM t WHERE card > 8 ORDER BY card DESC, seller DESC LIMIT 2;
SELECT * FROM t WHERE card = 4 AND seller = 's9';
SELECT * FROM t WHERE card = 99;
