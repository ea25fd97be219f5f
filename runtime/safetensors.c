/* safetensors.c — the safetensors reader (runtime/safetensors.h): files are mapped read-only,
 * headers parsed with cJSON and validated entry by entry before any tensor is used. */
#include "safetensors.h"

#include "kt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A header larger than this is not a model file (the largest real ones are a few MB). */
#define MAX_HEADER (100u << 20)

static const struct {
    const char *name;
    size_t size;
} dtypes[KT_ST_N_DTYPES] = {{"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
                            {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
                            {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8}};

const char *kt_st_dtype_name(kt_st_dtype d) { return d < KT_ST_N_DTYPES ? dtypes[d].name : "?"; }
size_t kt_st_dtype_size(kt_st_dtype d) { return d < KT_ST_N_DTYPES ? dtypes[d].size : 0; }

size_t kt_st_numel(const kt_st_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

/* Reads one header entry (key = tensor name) into t. */
static int parse_entry(const char *file, const cJSON *e, size_t data_len, kt_st_tensor *t) {
    const char *key = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return kt_fail("%s: tensor %s: header entry needs dtype, shape and data_offsets", file, key);
    int d = 0;
    while (d < KT_ST_N_DTYPES && strcmp(dtypes[d].name, dt->valuestring)) d++;
    if (d == KT_ST_N_DTYPES) return kt_fail("%s: tensor %s: unknown dtype '%s'", file, key, dt->valuestring);
    t->dtype = (kt_st_dtype)d;
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > KT_ST_MAX_DIMS)
        return kt_fail("%s: tensor %s: %d dimensions (max %d)", file, key, t->ndim, KT_ST_MAX_DIMS);
    double numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *x = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble) ||
            x->valuedouble > 1e15)
            return kt_fail("%s: tensor %s: shape[%d] is not a non-negative integer", file, key, i);
        t->shape[i] = (long)x->valuedouble;
        numel *= x->valuedouble;
    }
    double o[2];
    for (int i = 0; i < 2; i++) {
        const cJSON *x = cJSON_GetArrayItem(off, i);
        if (cJSON_GetArraySize(off) != 2 || !cJSON_IsNumber(x) || x->valuedouble < 0 ||
            x->valuedouble != floor(x->valuedouble))
            return kt_fail("%s: tensor %s: data_offsets must be two non-negative integers", file, key);
        o[i] = x->valuedouble;
    }
    if (o[0] > o[1] || o[1] > (double)data_len)
        return kt_fail("%s: tensor %s: data_offsets [%.0f, %.0f] outside the %zu data bytes (truncated file?)", file,
                       key, o[0], o[1], data_len);
    if (o[1] - o[0] != numel * (double)dtypes[d].size)
        return kt_fail("%s: tensor %s: %.0f bytes for %s %.0f elements (%zu bytes each)", file, key, o[1] - o[0],
                       dtypes[d].name, numel, dtypes[d].size);
    t->begin = (size_t)o[0];
    t->end = (size_t)o[1];
    return 0;
}

static int by_begin(const void *a, const void *b) {
    const kt_st_tensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

/* No two tensors of one file share a byte (zero-size tensors hold none, so they are skipped). */
static int check_overlaps(const char *file, const kt_st_tensor *t, int n) {
    kt_st_tensor *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    if (!s) return kt_fail("out of memory");
    int m = 0;
    for (int i = 0; i < n; i++)
        if (t[i].begin != t[i].end) s[m++] = t[i];
    qsort(s, (size_t)m, sizeof *s, by_begin);
    int rc = 0;
    for (int i = 1; i < m && !rc; i++)
        if (s[i].begin < s[i - 1].end)
            rc = kt_fail("%s: tensor %s: data_offsets overlap those of tensor %s", file, s[i].name, s[i - 1].name);
    free(s);
    return rc;
}

int kt_st_parse_header(const char *name, const char *json, size_t len, size_t data_len, int file, kt_st_tensor **t,
                       int *n, size_t *cap) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return kt_fail("%s: safetensors header is not valid JSON", name);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return kt_fail("%s: safetensors header is not a JSON object", name);
    }
    int first = *n, rc = 0;
    for (const cJSON *e = root->child; e && !rc; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) rc = kt_fail("%s: __metadata__ is not an object", name);
            continue;
        }
        kt_st_tensor *grown = kt_grow(*t, cap, (size_t)*n, sizeof **t);
        if (!grown) {
            rc = -1;
            break;
        }
        *t = grown;
        kt_st_tensor *x = &(*t)[*n];
        memset(x, 0, sizeof *x);
        x->file = file;
        if ((rc = parse_entry(name, e, data_len, x))) break;
        if (!(x->name = strdup(e->string))) {
            rc = kt_fail("out of memory");
            break;
        }
        (*n)++;
    }
    if (!rc && *n > first)
        rc = check_overlaps(name, *t + first, *n - first); /* *t is NULL for a header of no tensors */
    cJSON_Delete(root);
    return rc;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const kt_st_tensor *)a)->name, ((const kt_st_tensor *)b)->name);
}

/* Sorts s's tensors by name and refuses a name found twice. */
static int sort_names(kt_st_set *s) {
    qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, by_name);
    for (int i = 1; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i].name, s->tensors[i - 1].name))
            return kt_fail("%s: tensor %s appears twice (also in %s)", s->files[s->tensors[i].file].path,
                           s->tensors[i].name, s->files[s->tensors[i - 1].file].path);
    return 0;
}

/* Maps path and parses its header into s (unsorted). */
static int open_one(kt_st_set *s, const char *path, size_t *cap) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return kt_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || st.st_size < 8) {
        close(fd);
        return kt_fail("%s: not a safetensors file (%lld bytes, needs an 8-byte header length)", path,
                       (long long)st.st_size);
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return kt_fail("%s: mmap failed: %s", path, strerror(errno));
    kt_st_file *files = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *files);
    if (!files) {
        munmap(map, (size_t)st.st_size);
        return kt_fail("out of memory");
    }
    s->files = files;
    kt_st_file *f = &s->files[s->n_files++];
    f->map = map;
    f->size = (size_t)st.st_size;
    f->path = strdup(path);
    uint64_t hlen;
    memcpy(&hlen, map, 8);
    if (hlen > MAX_HEADER || hlen > f->size - 8)
        return kt_fail("%s: header length %llu exceeds the file (%zu bytes): truncated or not safetensors", path,
                       (unsigned long long)hlen, f->size);
    int first = s->n_tensors;
    if (kt_st_parse_header(path, (const char *)map + 8, hlen, f->size - 8 - hlen, s->n_files - 1, &s->tensors,
                           &s->n_tensors, cap))
        return -1;
    for (int i = first; i < s->n_tensors; i++) s->tensors[i].data = (const char *)map + 8 + hlen + s->tensors[i].begin;
    return 0;
}

int kt_st_open_file(kt_st_set *s, const char *path) {
    memset(s, 0, sizeof *s);
    size_t cap = 0;
    if (open_one(s, path, &cap) || sort_names(s)) {
        kt_st_close(s);
        return -1;
    }
    return 0;
}

static int by_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int kt_st_open_dir(kt_st_set *s, const char *dir) {
    memset(s, 0, sizeof *s);
    DIR *d = opendir(dir);
    if (!d) return kt_fail("%s: cannot open model folder: %s", dir, strerror(errno));
    char *names[4096];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 4096;) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (!n) return kt_fail("%s: no .safetensors files in the model folder", dir);
    qsort(names, (size_t)n, sizeof *names, by_str);
    size_t cap = 0;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (!rc) rc = open_one(s, path, &cap);
        free(names[i]);
    }
    if (rc || sort_names(s)) {
        kt_st_close(s);
        return -1;
    }
    return 0;
}

void kt_st_close(kt_st_set *s) {
    for (int i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    for (int i = 0; i < s->n_files; i++) {
        if (s->files[i].map) munmap(s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    free(s->tensors);
    free(s->files);
    memset(s, 0, sizeof *s);
}

const kt_st_tensor *kt_st_find(const kt_st_set *s, const char *name) {
    kt_st_tensor key = {.name = (char *)name};
    return s->n_tensors ? bsearch(&key, s->tensors, (size_t)s->n_tensors, sizeof key, by_name) : NULL;
}

const char *kt_st_file_of(const kt_st_set *s, const kt_st_tensor *t) { return s->files[t->file].path; }

int kt_st_get(const kt_st_set *s, const char *name, int ndim, const long *shape, const kt_st_tensor **out) {
    const kt_st_tensor *t = kt_st_find(s, name);
    if (!t) return kt_fail("%s: tensor %s is missing", s->n_files ? s->files[0].path : "(no files)", name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char want[96] = "", got[96] = "";
        for (int i = 0; i < ndim; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%ld", i ? "," : "", shape[i]);
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%ld", i ? "," : "", t->shape[i]);
        return kt_fail("%s: tensor %s: shape [%s], the config needs [%s]", kt_st_file_of(s, t), name, got, want);
    }
    *out = t;
    return 0;
}

int kt_st_to_f32(const kt_st_set *s, const kt_st_tensor *t, float *out) {
    size_t n = kt_st_numel(t);
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        switch (t->dtype) {
            case KT_ST_F32:
                memcpy(&out[i], p + 4 * i, 4);
                break;
            case KT_ST_BF16:
                memcpy(&h, p + 2 * i, 2);
                out[i] = kt_bf16_to_float(h);
                break;
            case KT_ST_F16: {
                memcpy(&h, p + 2 * i, 2);
                int e = h >> 10 & 31, m = h & 1023;
                float v = e == 0    ? ldexpf((float)m, -24)
                          : e == 31 ? (m ? NAN : INFINITY)
                                    : ldexpf((float)(m | 1024), e - 25);
                out[i] = h & 0x8000 ? -v : v;
                break;
            }
            case KT_ST_F8_E4M3:
                out[i] = kt_e4m3_to_float(p[i]);
                break;
            case KT_ST_F8_E8M0: /* a power of two, 2^(e - 127); 0xff is NaN */
                out[i] = p[i] == 0xff ? NAN : ldexpf(1.0f, p[i] - 127);
                break;
            default:
                return kt_fail(
                    "%s: tensor %s: dtype %s where a float tensor (F32, BF16, F16, F8_E4M3, F8_E8M0) is needed",
                    kt_st_file_of(s, t), t->name, kt_st_dtype_name(t->dtype));
        }
    }
    return 0;
}

int kt_st_to_i32(const kt_st_set *s, const kt_st_tensor *t, int32_t *out) {
    size_t n = kt_st_numel(t);
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        int32_t v32;
        switch (t->dtype) {
            case KT_ST_I64:
                memcpy(&v, p + 8 * i, 8);
                break;
            case KT_ST_I32:
                memcpy(&v32, p + 4 * i, 4);
                v = v32;
                break;
            case KT_ST_U8:
                v = p[i];
                break;
            default:
                return kt_fail("%s: tensor %s: dtype %s where an integer tensor (I64, I32, U8) is needed",
                               kt_st_file_of(s, t), t->name, kt_st_dtype_name(t->dtype));
        }
        if (v < INT32_MIN || v > INT32_MAX)
            return kt_fail("%s: tensor %s: element %zu = %lld is out of int32 range", kt_st_file_of(s, t), t->name, i,
                           (long long)v);
        out[i] = (int32_t)v;
    }
    return 0;
}
