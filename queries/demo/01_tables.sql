-- The tables of the database, and the demo table's key, columns and options.
SHOW TABLES;
DESCRIBE consumption;
