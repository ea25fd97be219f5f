-- schema_v4.sql — schema version 4 of the kt winners database: the best NCCL all-reduce
-- setting per (device, world size, message size bucket), as `kt bench allreduce --db` timed
-- it (every protocol/algorithm in its own process, bench/allreduce.c), with its provenance:
-- the run (kt commit, command line, time), NCCL's version, the time of NCCL's own choice in
-- the same run and the floor. The runtime's tensor-parallel start reads it (runtime/tp.c,
-- kt_tp_configure) and sets NCCL_PROTO / NCCL_ALGO before the communicator is made.
-- A later run's row of a key replaces the earlier one. db/db.c applies this file as
-- migration step 3; older files gain the empty table.

CREATE TABLE allreduce_winners (
    device_id    INTEGER NOT NULL REFERENCES devices (id),
    world        INTEGER NOT NULL CHECK (world BETWEEN 1 AND 8),
    bytes_bucket INTEGER NOT NULL CHECK (bytes_bucket > 0 AND (bytes_bucket & (bytes_bucket - 1)) = 0),
    bytes        INTEGER NOT NULL CHECK (bytes > 0 AND bytes <= bytes_bucket AND 2 * bytes > bytes_bucket),
    proto        TEXT NOT NULL CHECK (proto IN ('', 'LL', 'LL128', 'Simple')),   -- '': NCCL's own choice
    algo         TEXT NOT NULL CHECK (algo IN ('', 'Ring', 'Tree')),
    median_us    REAL NOT NULL CHECK (median_us > 0),
    min_us       REAL NOT NULL CHECK (min_us > 0 AND min_us <= median_us),
    max_us       REAL NOT NULL CHECK (max_us >= median_us),
    default_us   REAL NOT NULL CHECK (default_us > 0),  -- NCCL's own choice, same run and size
    floor_us     REAL CHECK (floor_us > 0),             -- ring bytes / bus bandwidth; NULL on one GPU
    nccl_version INTEGER NOT NULL CHECK (nccl_version > 0),
    run_id       INTEGER NOT NULL REFERENCES runs (id),
    updated_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK ((proto = '') = (algo = '')),
    PRIMARY KEY (device_id, world, bytes_bucket)
);
