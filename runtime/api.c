/* api.c — the embedding API (kt_api.h) over dispatch: a session is a device and a read-only
 * DB, a kernel is one dispatched (family, shape, batch) with its loaded module. */
#include "kt_api.h"

#include "kt.h"

#include <stdlib.h>
#include <string.h>

struct kt_session {
    kt_db *db;
};

struct kt_kernel {
    const kt_family *f;
    kt_problem p;
    kt_module mod;
    kt_tensor_desc t[KT_MAX_TENSORS];
    int n_tensors;
    char describe[512];
};

const char *kt_api_error(void) { return kt_error(); }

int kt_session_open(const char *db_path, int device, kt_session **out) {
    if (kt_gpu_open(device, NULL)) return -1;
    kt_session *s = calloc(1, sizeof *s);
    if (!s) return kt_fail("out of memory");
    if (db_path && kt_db_open(db_path, 1, &s->db)) {
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int kt_session_kernel(kt_session *s, const char *family, const char *shape, long m, kt_kernel **out) {
    const kt_family *f = kt_family_find(family);
    if (!f) return -1;
    kt_kernel *k = calloc(1, sizeof *k);
    if (!k) return kt_fail("out of memory");
    k->f = f;
    kt_lookup_level level;
    if (kt_parse_shape(f, shape, &k->p)) return free(k), -1;
    k->p.m = m;
    if (kt_dispatch(s->db, f, &k->p, &k->mod, &level)) return free(k), -1;
    k->n_tensors = f->tensors(&k->p, k->t);
    char cfg[256];
    kt_format_config(f, &k->mod.config, cfg, sizeof cfg);
    snprintf(k->describe, sizeof k->describe, "%s %s M=%ld -> %s (%s)", family, shape, m, cfg,
             kt_lookup_level_name(level));
    *out = k;
    return 0;
}

int kt_kernel_n_tensors(const kt_kernel *k) { return k->n_tensors; }

const char *kt_kernel_tensor(const kt_kernel *k, int i, const char **dtype, size_t *count) {
    if (i < 0 || i >= k->n_tensors) return NULL;
    if (dtype) *dtype = kt_dtype_name(k->t[i].dtype);
    if (count) *count = k->t[i].count;
    return k->t[i].name;
}

const char *kt_kernel_describe(const kt_kernel *k) { return k->describe; }

int kt_kernel_launch(const kt_kernel *k, const uint64_t *ptr, int n, void *stream) {
    if (n != k->n_tensors)
        return kt_fail("%s: %d device pointers given, the kernel takes %d", k->f->name, n, k->n_tensors);
    kt_launch l = {.mod = &k->mod, .config = &k->mod.config, .problem = &k->p, .stream = stream};
    for (int i = 0; i < n; i++) l.ptr[i] = ptr[i];
    return k->f->launch(&l);
}

void kt_kernel_free(kt_kernel *k) {
    if (!k) return;
    kt_module_unload(&k->mod);
    free(k);
}

void kt_session_close(kt_session *s) {
    if (!s) return;
    if (s->db) kt_db_close(s->db);
    free(s);
}
