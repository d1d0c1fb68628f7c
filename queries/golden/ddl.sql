-- DDL: tables with keys, declared columns and options.
CREATE TABLE orders (card BIGINT, seller VARCHAR, amount DOUBLE, note TEXT, PRIMARY KEY (card, seller))
  WITH (ttl = 86400, max_versions = 3, max_version_offset = 86400, allow_update = true);
DESCRIBE orders;
ALTER TABLE orders SET (ttl = -1, max_versions = 5);
ALTER TABLE orders ADD COLUMN paid BOOLEAN;
DESCRIBE orders;
SHOW TABLES;
CREATE TABLE IF NOT EXISTS orders (card BIGINT PRIMARY KEY);
CREATE TABLE keyed_by_blob (id VARBINARY PRIMARY KEY, v BIGINT);
SELECT * FROM keyed_by_blob;
DROP TABLE keyed_by_blob;
SHOW TABLES;
-- Errors name what was wrong and what is accepted.
CREATE TABLE orders (card BIGINT PRIMARY KEY);
CREATE TABLE nokey (a BIGINT);
CREATE TABLE badpk (a DOUBLE PRIMARY KEY);
CREATE TABLE badcol (a BIGINT PRIMARY KEY, d DATE);
CREATE TABLE badopt (a BIGINT PRIMARY KEY) WITH (colour = 'red');
CREATE TABLE badver (a BIGINT PRIMARY KEY) WITH (max_versions = 0);
CREATE TABLE ctas AS SELECT 1 AS a;
ALTER TABLE orders ADD COLUMN amount DOUBLE;
ALTER TABLE orders RENAME TO other;
DROP TABLE missing;
SELECT * FROM missing;
