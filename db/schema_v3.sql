-- schema_v3.sql — schema version 3 of the kt winners database: a measurement is unique per
-- (device, family, source hash, shape, m, variant), so sweeps of several processes on one
-- database (one per GPU or shard) never store a unit twice: the first committed row stays,
-- a later insert of the same unit is ignored (db/db.c, kt_db_add_measurement). db/db.c
-- applies this file as migration step 2.
--
-- Databases written before this may hold several rows of one unit. The row each unit keeps
-- is the one the winner rule of version 2 decided by: a wrong-result or launch-error row
-- (the variant could not win its bucket), else the first ok row, else the first row. The
-- other rows are not lost: they move to measurements_folded (same columns; db/db.c drops it
-- again when nothing was folded and says on stderr how many rows were), and winners that
-- pointed at one of them point at the row its unit keeps.

CREATE TEMP TABLE unit_keep AS
SELECT id, first_value(id) OVER (
           PARTITION BY device_id, family, source_hash, shape, m, variant_id
           ORDER BY CASE status WHEN 'wrong-result' THEN 0 WHEN 'launch-error' THEN 0 WHEN 'ok' THEN 1 ELSE 2 END, id
       ) AS keep
FROM measurements;

UPDATE winners SET measurement_id = (SELECT keep FROM unit_keep WHERE unit_keep.id = winners.measurement_id);

CREATE TABLE measurements_folded AS
SELECT m.* FROM measurements m JOIN unit_keep u ON u.id = m.id WHERE u.keep <> u.id;

DELETE FROM measurements WHERE id IN (SELECT id FROM unit_keep WHERE keep <> id);
DROP TABLE temp.unit_keep;

DROP INDEX measurements_problem;  -- a prefix of the unique index below
CREATE UNIQUE INDEX measurements_unit ON measurements (device_id, family, source_hash, shape, m, variant_id);
