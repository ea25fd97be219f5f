/* kt_db_write.h — the winners database's write side (db/db_write.c, in libktdev): devices
 * and runs, measurements, winner selection, re-timings and the merge of shard databases.
 * The read side (open, lookup, show, export) is libkt's, in kt.h. */
#ifndef KT_DB_WRITE_H
#define KT_DB_WRITE_H
#include "kt.h"

/* Inserts or finds the device row; returns its id in *id. */
int kt_db_device_id(kt_db *db, const kt_db_device *d, long long *id);
/* Starts a run row (time, kt commit, command line); returns its id. */
int kt_db_run_begin(kt_db *db, long long device_id, const char *commit, const char *cmdline, long long *run_id);

typedef enum kt_status { KT_OK = 0, KT_COMPILE_ERROR, KT_LAUNCH_ERROR, KT_WRONG_RESULT, KT_SKIPPED } kt_status;
const char *kt_status_name(kt_status s);

/* One measured (or failed) variant on one problem. */
typedef struct kt_measurement {
    long long run_id, device_id;
    const char *family;
    char source_hash[17];
    char variant_id[17];
    char config[256]; /* "TILE_N=64,..." */
    char shape[128];  /* "N=1536,K=4096" */
    long m;
    kt_status status;
    char error[512];
    double median_us, min_us, max_us;
    double rel_err;
    int registers, spill_bytes;
    double compile_ms;
} kt_measurement;

/* Appends a measurement in its own transaction (committed when it returns): 0 when stored,
 * 1 when its unit (device, family, source hash, variant, shape, m) already had a row (another
 * process measured it first; that row stays), -1 on error. */
int kt_db_add_measurement(kt_db *db, const kt_measurement *m);
/* 1 if (device, family, source hash, variant, shape, m) already has a measurement, 0 if not,
 * -1 on error. When found, *status and *median_us (each may be NULL) get its first row's
 * status and median (NAN unless ok). */
int kt_db_find_measurement(kt_db *db, long long device_id, const char *family, const char *source_hash,
                           const char *variant_id, const char *shape, long m, kt_status *status, double *median_us);
/* Recomputes the winner of (device, family, source hash, shape, m bucket) from the OK
 * measurements of the bucket. A variant with a wrong-result or launch-error row in the
 * bucket cannot win; no candidate, no winner row. Where an m of the bucket was re-timed,
 * only the variants of its latest re-timing compete there, on their re-timed median;
 * elsewhere every OK row competes on its median. The fastest wins, except that a candidate
 * whose median is within KT_NOISE_BAND of the fastest's ties with it, and ties go to the
 * lowest variant id. (Overlapping min..max bands are no tie: on the H200 single rounds
 * spread +-2-4%, and band overlap handed wins to variants 3.5% slower.) The winner row
 * keeps the deciding median, min and max. */
int kt_db_update_winner(kt_db *db, long long device_id, const char *family, const char *source_hash, const char *shape,
                        long m);
#define KT_NOISE_BAND 0.01

/* One variant's interleaved re-timing: the median, fastest and slowest of its rounds'
 * medians. */
typedef struct kt_retime {
    char variant_id[17];
    int rounds;
    double median_us, min_us, max_us;
} kt_retime;

/* The finalists of (device, family, source hash, shape, m): up to max variants with an OK
 * row at m and no failure in m's bucket, by first-pass median (ties: variant id), into
 * variant_ids. *retimed is 1 when the latest re-timing of (shape, m) is of exactly these
 * variants (nothing left to re-time). Returns how many, or -1. */
int kt_db_finalists(kt_db *db, long long device_id, const char *family, const char *source_hash, const char *shape,
                    long m, int max, char (*variant_ids)[17], int *retimed);
/* Records the re-timing of n finalists of (shape, m) as one group, in one transaction. */
int kt_db_add_retimes(kt_db *db, long long run_id, long long device_id, const char *family, const char *source_hash,
                      const char *shape, long m, const kt_retime *r, int n);

/* One size's best NCCL all-reduce setting of a `kt bench allreduce` run (schema 4). */
typedef struct kt_allreduce_row {
    long long device_id, run_id;
    int world, nccl_version;
    size_t bytes;
    char proto[16], algo[16]; /* "" = NCCL's own choice */
    double median_us, min_us, max_us, default_us;
    double floor_us; /* 0: none (one GPU) */
} kt_allreduce_row;

/* Stores r as the setting of (device, world, size bucket of r->bytes), replacing an earlier
 * run's. Refuses (-1, naming the field) a world outside 1..8, an empty message, a setting
 * kt_allreduce_setting_known() does not know, and times that are not finite, positive and
 * ordered min <= median <= max. */
int kt_db_set_allreduce(kt_db *db, const kt_allreduce_row *r);

/* Merges the kt database at src_path into dst: devices mapped by their unique key, runs
 * and re-timings copied once, measurements copied unless dst already has the same
 * (device, family, source hash, variant, shape, m), the winner of every merged
 * (shape, M bucket) recomputed, and the all-reduce settings of src taken where dst has none
 * of that key or an older one, all in one transaction. src must be of this build's schema. Refuses dst itself. */
int kt_db_merge(kt_db *dst, const char *src_path);
/* kt db merge: merges the n databases in[] into the file out, created if absent, all or
 * nothing: every input is checked first, the merge is made in a temp copy, and only a
 * complete one replaces out (renamed into place, or copied over the old out with SQLite's
 * backup in one transaction). On failure out is left as it was, or absent. */
int kt_db_merge_files(const char *out, const char *const *in, int n);

#endif
