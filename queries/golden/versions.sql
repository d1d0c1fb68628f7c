-- Versions: the long-form table function, TTL, and time travel.
CREATE TABLE m (id BIGINT PRIMARY KEY, v BIGINT, s VARCHAR) WITH (max_versions = 3);
INSERT INTO m VALUES (1, 10, 'first'), (2, 20, 'only');
-- @advance 1000
UPDATE m SET v = 11 WHERE id = 1;
-- @advance 1000
UPDATE m SET v = 12, s = 'third' WHERE id = 1;
SELECT * FROM m;
SELECT * FROM cellar_versions('m') ORDER BY id, column_name, version DESC;
SELECT id, column_name, version, int_value FROM cellar_versions('m', 1) WHERE id = 1;
SELECT id, column_name, version, int_value, string_value FROM cellar_versions('m', NULL, 1469059200000, 1469059201001) ORDER BY id, column_name, version;
SELECT * FROM cellar_as_of('m', 1469059201000) ORDER BY id;
SELECT * FROM cellar_as_of('m', 1469059199999);
-- @flush m
SELECT * FROM cellar_as_of('m', 1469059200000) ORDER BY id;
EXPLAIN SELECT * FROM cellar_versions('m', 2) WHERE id = 1;
-- TTL: a 10 s TTL hides old cells.
ALTER TABLE m SET (ttl = 10);
-- @advance 9000
SELECT * FROM m ORDER BY id;
-- @advance 1000
SELECT * FROM m ORDER BY id;
SELECT count(*) FROM m;
-- @advance 1
SELECT * FROM m;
SELECT * FROM cellar_versions('missing');
SELECT * FROM cellar_versions('m', 0);
SELECT * FROM cellar_as_of('m');
