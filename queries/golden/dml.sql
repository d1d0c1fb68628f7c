-- INSERT = PutRow, UPDATE = UpdateRow, DELETE = DeleteRow; each returns its row count.
CREATE TABLE t (card BIGINT, seller VARCHAR, amount DOUBLE, category VARCHAR, PRIMARY KEY (card, seller));
INSERT INTO t VALUES (1, 'a', 10.5, 'food'), (1, 'b', 3.0, 'drink'), (2, 'a', 7.25, NULL), (3, 'c', 1.0, 'food');
SELECT * FROM t;
-- An INSERT of an existing key replaces the row (PutRow).
INSERT INTO t (card, seller, amount) VALUES (1, 'b', 4.0);
SELECT * FROM t WHERE card = 1;
UPDATE t SET amount = amount * 2 WHERE category = 'food';
SELECT card, seller, amount FROM t ORDER BY card, seller;
-- SET c = NULL deletes the cell.
UPDATE t SET category = NULL WHERE card = 1 AND seller = 'a';
SELECT * FROM t WHERE card = 1 AND seller = 'a';
DELETE FROM t WHERE amount < 5;
SELECT * FROM t;
INSERT INTO t SELECT card + 10, seller, amount, 'copied' FROM t;
SELECT count(*) AS n, sum(amount) AS total FROM t;
DELETE FROM t;
SELECT count(*) FROM t;
-- Errors.
INSERT INTO t VALUES (NULL, 'x', 1.0, NULL);
UPDATE t SET seller = 'z' WHERE card = 1;
INSERT INTO t VALUES (1, 'x', 'not a number', NULL);
