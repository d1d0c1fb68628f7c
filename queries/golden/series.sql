-- A monthly series: each row goes to the table of its UTC month by its
-- time column (INTEGER, milliseconds since the epoch); SELECT reads
-- every month and skips those a predicate on the time column excludes
-- (SeriesScanExec in EXPLAIN). A TIMESTAMP goes into a BIGINT time column
-- as its milliseconds.
CREATE TABLE orders (card BIGINT, ts BIGINT, amount DOUBLE, PRIMARY KEY (card, ts)) WITH (series = 'monthly', time_column = 'ts');
INSERT INTO orders VALUES (1, 1704067200000, 10.0), (2, 1704153600000, 20.0), (1, 1706745600000, 30.0), (3, 1709251199999, 40.0), (1, 1709251200000, 50.0);
INSERT INTO orders VALUES (4, CAST(to_timestamp_millis(TIMESTAMP '2024-03-15 12:00:00') AS BIGINT), 60.0);
INSERT INTO orders VALUES (5, TIMESTAMP '2024-03-15 12:00:00', 70.0);
-- @flush orders_202401
SHOW TABLES;
SELECT * FROM orders ORDER BY ts, card;
EXPLAIN SELECT card, amount FROM orders WHERE ts >= 1706745600000 AND ts < 1709251200000;
SELECT card, amount FROM orders WHERE ts >= 1706745600000 AND ts < 1709251200000 ORDER BY card;
EXPLAIN SELECT count(*) FROM orders WHERE ts BETWEEN 1709251200000 AND 1711929599999;
SELECT count(*) FROM orders WHERE ts BETWEEN 1709251200000 AND 1711929599999;
SELECT card, sum(amount) FROM orders GROUP BY card ORDER BY card;
-- Each month is a table of its own.
SELECT * FROM orders_202402;
-- A row whose month cannot be told is refused, naming the column.
INSERT INTO orders (card, amount) VALUES (9, 1.0);
CREATE TABLE ev (dev VARCHAR, at BIGINT, v BIGINT, PRIMARY KEY (dev)) WITH (series = 'monthly', time_column = 'at');
INSERT INTO ev (dev, v) VALUES ('a', 1);
INSERT INTO ev VALUES ('b', 1704067200000, 2), ('c', 1706745600000, 3);
SELECT * FROM ev ORDER BY dev;
-- Series options are checked.
CREATE TABLE bad (k BIGINT, PRIMARY KEY (k)) WITH (time_column = 'k');
CREATE TABLE bad (k VARCHAR, PRIMARY KEY (k)) WITH (series = 'monthly', time_column = 'k');
CREATE TABLE bad (k BIGINT, PRIMARY KEY (k)) WITH (series = 'weekly');
CREATE TABLE bad (k BIGINT, PRIMARY KEY (k)) WITH (series = 'monthly', archive_after_months = 3);
-- A series is dropped once its months are.
DROP TABLE ev;
DROP TABLE ev_202401;
DROP TABLE ev_202402;
DROP TABLE ev;
SHOW TABLES;
-- A time column declared TIMESTAMP: the series shows it as one (it is
-- stored as milliseconds; each month table shows it as BIGINT).
CREATE TABLE visits (site VARCHAR, at TIMESTAMP, n BIGINT, PRIMARY KEY (site, at)) WITH (series = 'monthly', time_column = 'at');
INSERT INTO visits VALUES ('a', TIMESTAMP '2024-01-31 23:59:59.999', 1), ('a', TIMESTAMP '2024-02-01 00:00:00', 2);
INSERT INTO visits VALUES ('b', 1709251200000, 3);
SELECT * FROM visits ORDER BY at;
EXPLAIN SELECT n FROM visits WHERE at >= TIMESTAMP '2024-02-01 00:00:00' AND at < TIMESTAMP '2024-03-01 00:00:00';
SELECT n FROM visits WHERE at >= TIMESTAMP '2024-02-01 00:00:00' AND at < TIMESTAMP '2024-03-01 00:00:00';
SELECT * FROM visits_202401;
