/* family.c — the family registry, the embedded sources, and the text forms of
 * shapes and configs that the CLI, the database and the JIT share. */
#include "kt.h"

#include <errno.h>
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

extern const struct { const char *name; const char *text; size_t len; } kt_embedded[];

const char *kt_source_text(const char *name, size_t *len) {
    for (int i = 0; kt_embedded[i].name; i++)
        if (!strcmp(kt_embedded[i].name, name)) {
            if (len) *len = kt_embedded[i].len;
            return kt_embedded[i].text;
        }
    return NULL;
}

static int is_header(const char *name) {
    size_t n = strlen(name);
    return (n > 4 && !strcmp(name + n - 4, ".cuh")) || (n > 2 && !strcmp(name + n - 2, ".h"));
}

uint64_t kt_source_hash(const char *file) {
    size_t len = 0;
    const char *src = kt_source_text(file, &len);
    uint64_t h = kt_hash(file, strlen(file), 0);
    if (src) h = kt_hash(src, len, h);
    for (int i = 0; kt_embedded[i].name; i++)
        if (is_header(kt_embedded[i].name)) {
            h = kt_hash(kt_embedded[i].name, strlen(kt_embedded[i].name), h);
            h = kt_hash(kt_embedded[i].text, kt_embedded[i].len, h);
        }
    return h;
}

uint64_t kt_family_source_hash(const kt_family *f) { return kt_source_hash(f->source); }

/* Parses "A=1,B=2" calling set(index of name, value); names come from names[n]. */
static int parse_assignments(const char *what, const char *s, const char *const *names, int n,
                             long *values, int *seen) {
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
        char *end;
        errno = 0;
        long v = strtol(eq + 1, &end, 10);
        if (end == eq + 1 || errno || v < 0 || (*end && *end != ','))
            return kt_fail("bad %s '%s': '%s' needs a non-negative integer", what, s, names[i]);
        values[i] = v;
        seen[i] = 1;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int kt_parse_shape(const kt_family *f, const char *s, kt_problem *p) {
    long v[KT_MAX_DIMS] = {0};
    int seen[KT_MAX_DIMS] = {0};
    if (parse_assignments("shape", s, f->dim_names, f->n_dims, v, seen)) return -1;
    for (int i = 0; i < f->n_dims; i++) {
        if (!seen[i]) return kt_fail("bad shape '%s': %s missing (family %s needs all of its dims)", s, f->dim_names[i], f->name);
        if (v[i] <= 0) return kt_fail("bad shape '%s': %s must be positive", s, f->dim_names[i]);
        p->dim[i] = v[i];
    }
    p->n_dims = f->n_dims;
    return 0;
}

void kt_format_shape(const kt_family *f, const kt_problem *p, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < f->n_dims && used < n; i++)
        used += snprintf(out + used, n - used, "%s%s=%ld", i ? "," : "", f->dim_names[i], p->dim[i]);
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
    if (parse_assignments("config", s, names, f->n_params, v, seen)) return -1;
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
    if (parse_assignments("--where", s, names, f->n_params, v, fixed)) return -1;
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
