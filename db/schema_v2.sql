-- schema_v2.sql — schema version 2 of the kt winners database: the interleaved
-- re-timings a sweep makes of each problem's finalists before it chooses the winner.
-- A measurement row, once committed, never changes; a re-timing is rows of its own, one
-- group per (run, shape, m). The latest group of a (shape, m) decides among its
-- variants (db/db.c, replace_winner). db/db.c applies this file as migration step 1.

CREATE TABLE retimes (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    device_id   INTEGER NOT NULL REFERENCES devices (id),
    family      TEXT NOT NULL,
    source_hash TEXT NOT NULL,
    variant_id  TEXT NOT NULL,
    shape       TEXT NOT NULL,
    m           INTEGER NOT NULL CHECK (m > 0),
    rounds      INTEGER NOT NULL CHECK (rounds > 0),
    median_us   REAL NOT NULL,  -- median over the rounds of each round's median
    min_us      REAL NOT NULL,  -- the fastest and the slowest round: the noise band
    max_us      REAL NOT NULL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE INDEX retimes_problem ON retimes (device_id, family, source_hash, shape, m);
