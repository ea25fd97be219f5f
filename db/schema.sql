-- schema.sql — schema version 1 of the kt winners database: the devices measured on,
-- the tuning runs, every measurement (ok or failed) with its provenance, and the
-- per-(device, family, source hash, shape, M bucket) winners served at run time.
-- db/db.c applies this file as migration step 0 (empty file -> version 1) and records
-- the version in meta; later versions are further steps, so this file never changes.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value NOT NULL                  -- 'schema_version' -> integer
);

CREATE TABLE devices (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL,
    cc             INTEGER NOT NULL,  -- compute capability, major*10+minor
    sm_count       INTEGER NOT NULL,
    driver_version INTEGER NOT NULL,
    nvrtc_version  INTEGER NOT NULL,
    UNIQUE (name, cc, sm_count, driver_version, nvrtc_version)
);

CREATE TABLE runs (
    id         INTEGER PRIMARY KEY,
    started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),  -- ISO-8601 UTC
    kt_commit  TEXT,
    cmdline    TEXT,
    device_id  INTEGER NOT NULL REFERENCES devices (id)
);

CREATE TABLE measurements (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    device_id   INTEGER NOT NULL REFERENCES devices (id),
    family      TEXT NOT NULL,
    source_hash TEXT NOT NULL,        -- 16 hex digits; rows of another hash are stale
    variant_id  TEXT NOT NULL,
    config      TEXT NOT NULL,        -- "TILE_N=64,..."
    shape       TEXT NOT NULL,        -- "N=1536,K=4096"
    m           INTEGER NOT NULL CHECK (m > 0),
    status      TEXT NOT NULL
                CHECK (status IN ('ok', 'compile-error', 'launch-error', 'wrong-result', 'skipped')),
    error       TEXT,
    median_us   REAL,
    min_us      REAL,
    max_us      REAL,
    rel_err     REAL,
    registers   INTEGER,
    spill_bytes INTEGER,
    compile_ms  REAL,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CHECK (status <> 'ok' OR median_us IS NOT NULL)  -- a usable row always has its time
);

CREATE INDEX measurements_problem ON measurements (device_id, family, source_hash, shape, m);

CREATE TABLE winners (
    device_id      INTEGER NOT NULL REFERENCES devices (id),
    family         TEXT NOT NULL,
    source_hash    TEXT NOT NULL,
    shape          TEXT NOT NULL,
    m_bucket       INTEGER NOT NULL,   -- kt_m_bucket(): the bucket's upper bound
    variant_id     TEXT NOT NULL,
    config         TEXT NOT NULL,
    median_us      REAL NOT NULL,
    min_us         REAL,
    max_us         REAL,
    measurement_id INTEGER NOT NULL REFERENCES measurements (id),
    updated_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (device_id, family, source_hash, shape, m_bucket)
);
