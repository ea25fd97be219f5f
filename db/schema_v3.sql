-- schema_v3.sql — schema version 3 of the kt winners database: a measurement is unique per
-- (device, family, source hash, shape, m, variant), so sweeps of several processes on one
-- database (one per GPU or shard) never store a unit twice: the first committed row stays,
-- a later insert of the same unit is ignored (db/db.c, kt_db_add_measurement). Databases
-- written before this may hold duplicates: the first row of each unit is kept, winners
-- pointing at a later one are moved to it. db/db.c applies this file as migration step 2.

UPDATE winners SET measurement_id = (
    SELECT min(k.id) FROM measurements k JOIN measurements w ON w.id = winners.measurement_id
    WHERE k.device_id = w.device_id AND k.family = w.family AND k.source_hash = w.source_hash
      AND k.shape = w.shape AND k.m = w.m AND k.variant_id = w.variant_id);

DELETE FROM measurements WHERE id NOT IN (
    SELECT min(id) FROM measurements GROUP BY device_id, family, source_hash, shape, m, variant_id);

DROP INDEX measurements_problem;  -- a prefix of the unique index below
CREATE UNIQUE INDEX measurements_unit ON measurements (device_id, family, source_hash, shape, m, variant_id);
