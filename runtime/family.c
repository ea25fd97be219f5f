/* family.c — the family registry, the embedded sources, and the text forms of
 * shapes and configs that the CLI, the database and the JIT share. */
#include "kt.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define KT_FAMILY(n) extern const kt_family kt_family_##n;
#include "../kernels/registry.h"
#undef KT_FAMILY

static const kt_family *const families[] = {
#define KT_FAMILY(n) &kt_family_##n,
#include "../kernels/registry.h"
#undef KT_FAMILY
};

int kt_family_count(void) { return (int)(sizeof families / sizeof families[0]); }

const kt_family *kt_family_at(int i) { return families[i]; }

const kt_family *kt_family_find(const char *name) {
    for (int i = 0; i < kt_family_count(); i++)
        if (!strcmp(families[i]->name, name)) return families[i];
    char known[256] = "";
    for (int i = 0; i < kt_family_count(); i++) {
        strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
        strncat(known, families[i]->name, sizeof known - strlen(known) - 1);
    }
    kt_fail("unknown family '%s' (known: %s)", name ? name : "", known);
    return NULL;
}

extern const kt_source_file kt_embedded[];

const kt_source_file *kt_sources(void) { return kt_embedded; }

const char *kt_source_text(const char *name, size_t *len) {
    for (int i = 0; kt_embedded[i].name; i++)
        if (!strcmp(kt_embedded[i].name, name)) {
            if (len) *len = kt_embedded[i].len;
            return kt_embedded[i].text;
        }
    return NULL;
}

/* Hashes file's name and text into *h, then each embedded file its `#include "NAME"` lines
 * name (NAME's base name), depth first, each file once (seen[] by embedded index). */
static void hash_with_includes(const kt_source_file *files, const char *file, uint64_t *h, unsigned char *seen) {
    int k;
    for (k = 0; files[k].name && strcmp(files[k].name, file); k++) {}
    if (files[k].name && seen[k]) return;
    *h = kt_hash(file, strlen(file), *h);
    if (!files[k].name) return;
    seen[k] = 1;
    const char *text = files[k].text, *end = text + files[k].len;
    for (const char *line = text; line < end;) {
        const char *next = memchr(line, '\n', (size_t)(end - line));
        next = next ? next + 1 : end;
        const char *c = line;
        while (c < next && (*c == ' ' || *c == '\t')) c++;
        if (next - c > 10 && !strncmp(c, "#include", 8)) {
            const char *q = memchr(c, '"', (size_t)(next - c));
            const char *q2 = q ? memchr(q + 1, '"', (size_t)(next - q - 1)) : NULL;
            if (q2 && q2 - q - 1 < 128) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(q2 - q - 1), q + 1);
                const char *base = strrchr(name, '/');
                hash_with_includes(files, base ? base + 1 : name, h, seen);
            }
        }
        line = next;
    }
    *h = kt_hash(text, files[k].len, *h);
}

uint64_t kt_source_hash_in(const kt_source_file *files, const char *file) {
    int n = 0;
    while (files[n].name) n++;
    unsigned char *seen = calloc((size_t)n + 1, 1);
    uint64_t h = 0;
    if (!seen) return 0; /* out of memory: a hash no row has, so nothing stale is served */
    hash_with_includes(files, file, &h, seen);
    free(seen);
    return h;
}

uint64_t kt_source_hash(const char *file) { return kt_source_hash_in(kt_embedded, file); }

uint64_t kt_family_source_hash(const kt_family *f) { return kt_source_hash(f->source ? f->source : f->name); }

const long kt_gemm_buckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 0};

long kt_family_bucket(const kt_family *f, long m) {
    const long *b = f && f->batch_buckets ? f->batch_buckets : kt_gemm_buckets;
    int i;
    for (i = 0; b[i]; i++)
        if (m <= b[i]) return b[i];
    long top = i ? b[i - 1] : 1;
    while (top < m && top <= LONG_MAX / 2) top *= 2;
    return top;
}

double kt_family_work(const kt_family *f, const kt_problem *p) {
    if (f->work) return f->work(p);
    return f->flops ? f->flops(p) / 2 : 0;
}

int kt_parse_size(const char *s, size_t len, long *v) {
    char buf[32];
    if (len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    return kt_parse_long(buf, 0, KT_MAX_INT_VALUE, v);
}

/* Index of the name s[0..len) in a NULL-terminated list, or -1. */
static int name_index(const char *const *names, const char *s, size_t len) {
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == len && !strncmp(names[i], s, len)) return i;
    return -1;
}

/* Parses "A=1,B=2" into values[] and seen[] by the index of each name in names[n]; a name i
 * with categories[i] (may be NULL: none) takes one of those names, stored as its index. */
static int parse_assignments(const char *what, const char *s, const char *const *names, int n,
                             const char *const *const *categories, long *values, int *seen) {
    const char *p = s;
    if (!s || !*s) return kt_fail("empty %s", what);
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq) return kt_fail("bad %s '%s': expected NAME=VALUE[,NAME=VALUE...]", what, s);
        int i;
        for (i = 0; i < n; i++)
            if (strlen(names[i]) == (size_t)(eq - p) && !strncmp(names[i], p, eq - p)) break;
        if (i == n) {
            char known[256] = "";
            for (int j = 0; j < n; j++) {
                strncat(known, j ? "," : "", sizeof known - strlen(known) - 1);
                strncat(known, names[j], sizeof known - strlen(known) - 1);
            }
            return kt_fail("bad %s '%s': unknown name '%.*s' (expected %s)", what, s, (int)(eq - p), p, known);
        }
        if (seen[i]) return kt_fail("bad %s '%s': %s given twice", what, s, names[i]);
        const char *value = eq + 1, *end = strchr(value, ',');
        if (!end) end = value + strlen(value);
        if (categories && categories[i]) {
            int c = name_index(categories[i], value, (size_t)(end - value));
            if (c < 0) {
                char known[256] = "";
                for (int j = 0; categories[i][j]; j++) {
                    strncat(known, j ? "," : "", sizeof known - strlen(known) - 1);
                    strncat(known, categories[i][j], sizeof known - strlen(known) - 1);
                }
                return kt_fail("bad %s '%s': %s is one of %s, not '%.*s'", what, s, names[i], known, (int)(end - value),
                               value);
            }
            values[i] = c;
        } else if (kt_parse_size(value, (size_t)(end - value), &values[i])) {
            return kt_fail("bad %s '%s': %s needs an integer from 0 to %ld", what, s, names[i], KT_MAX_INT_VALUE);
        }
        seen[i] = 1;
        if (*end && !end[1]) return kt_fail("bad %s '%s': nothing after the last ','", what, s);
        p = *end ? end + 1 : end;
    }
    return 0;
}

int kt_parse_shape(const kt_family *f, const char *s, kt_problem *p) {
    long v[KT_MAX_DIMS] = {0};
    int seen[KT_MAX_DIMS] = {0};
    const char *names[KT_MAX_DIMS];
    const char *const *categories[KT_MAX_DIMS];
    for (int i = 0; i < f->n_keys; i++) {
        names[i] = f->keys[i].name;
        categories[i] = f->keys[i].kind == KT_KEY_CATEGORY ? f->keys[i].categories : NULL;
    }
    if (parse_assignments("shape", s, names, f->n_keys, categories, v, seen)) return -1;
    for (int i = 0; i < f->n_keys; i++) {
        if (!seen[i])
            return kt_fail("bad shape '%s': %s missing (family %s needs all of its keys)", s, names[i], f->name);
        if (!categories[i] && v[i] <= 0) return kt_fail("bad shape '%s': %s must be positive", s, names[i]);
        p->dim[i] = v[i];
    }
    p->n_dims = f->n_keys;
    return 0;
}

/* The text of key field i's value in p ("V4" for a category, "1536" for a size). */
static void format_key(const kt_key_field *k, long v, char *out, size_t n) {
    if (k->kind == KT_KEY_CATEGORY) {
        int count = 0;
        while (k->categories && k->categories[count]) count++;
        if (v >= 0 && v < count) {
            snprintf(out, n, "%s", k->categories[v]);
            return;
        }
    }
    snprintf(out, n, "%ld", v);
}

void kt_format_shape(const kt_family *f, const kt_problem *p, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < f->n_keys && used < n; i++) {
        char v[64];
        format_key(&f->keys[i], p->dim[i], v, sizeof v);
        used += snprintf(out + used, n - used, "%s%s=%s", i ? "," : "", f->keys[i].name, v);
    }
}

int kt_param_value_index(const kt_param *p, int value) {
    for (int j = 0; j < p->n_values; j++)
        if (p->values[j] == value) return j;
    return -1;
}

int kt_parse_config(const kt_family *f, const char *s, kt_config *c) {
    const char *names[KT_MAX_PARAMS];
    long v[KT_MAX_PARAMS] = {0};
    int seen[KT_MAX_PARAMS] = {0};
    for (int i = 0; i < f->n_params; i++) names[i] = f->params[i].name;
    if (parse_assignments("config", s, names, f->n_params, NULL, v, seen)) return -1;
    *c = f->default_config;
    for (int i = 0; i < f->n_params; i++)
        if (seen[i]) c->v[i] = (int)v[i];
    return 0;
}

int kt_parse_where(const kt_family *f, const char *s, kt_config *values, int *fixed) {
    const char *names[KT_MAX_PARAMS];
    long v[KT_MAX_PARAMS] = {0};
    for (int i = 0; i < f->n_params; i++) {
        names[i] = f->params[i].name;
        fixed[i] = 0;
    }
    if (parse_assignments("--where", s, names, f->n_params, NULL, v, fixed)) return -1;
    for (int i = 0; i < f->n_params; i++) {
        if (fixed[i] && kt_param_value_index(&f->params[i], (int)v[i]) < 0)
            return kt_fail("bad --where '%s': %s=%ld is not one of its values", s, names[i], v[i]);
        values->v[i] = (int)v[i];
    }
    return 0;
}

void kt_format_config(const kt_family *f, const kt_config *c, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < f->n_params && used < n; i++)
        used += snprintf(out + used, n - used, "%s%s=%d", i ? "," : "", f->params[i].name, c->v[i]);
}

void kt_config_defines(const kt_family *f, const kt_config *c, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < f->n_params && used < n; i++)
        used += snprintf(out + used, n - used, "%s-DKT_%s=%d", i ? " " : "", f->params[i].name, c->v[i]);
}

int kt_check_problem_size(const kt_family *f, const kt_problem *p, char *why, size_t n) {
    char shape[128];
    kt_format_shape(f, p, shape, sizeof shape);
    /* The families size their tensors with products of dims and M: refuse any problem whose
     * full product does not fit 63 bits before one of them is computed. */
    uint64_t all = (uint64_t)(p->m > 0 ? p->m : 1);
    for (int i = 0; i < f->n_keys; i++) {
        if (f->keys[i].kind == KT_KEY_CATEGORY) continue; /* an index, not a size */
        if (p->dim[i] < 1 || __builtin_mul_overflow(all, (uint64_t)p->dim[i], &all) || all > INT64_MAX) {
            snprintf(why, n, "%s M=%ld: the product of its sizes overflows 64 bits", shape, p->m);
            return -1;
        }
    }
    kt_tensor_desc t[KT_MAX_TENSORS];
    int nt = f->tensors(p, t);
    uint64_t bytes = 0, b;
    for (int i = 0; i < nt; i++)
        if (__builtin_mul_overflow((uint64_t)t[i].count, (uint64_t)kt_dtype_size(t[i].dtype), &b) ||
            __builtin_add_overflow(bytes, b, &bytes))
            bytes = UINT64_MAX;
    if (bytes > KT_MAX_PROBLEM_BYTES) {
        snprintf(why, n, "%s M=%ld: its tensors take %.3g GB, more than a GPU holds (kt's limit: %.0f GB)", shape, p->m,
                 (double)bytes / 1e9, KT_MAX_PROBLEM_BYTES / 1e9);
        return -1;
    }
    return 0;
}
