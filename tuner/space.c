/* space.c — a family's tuning space: enumeration under its constraints (rejected
 * before any compile) and seeded sampling (the compile pool is tuner/compile_pool.c). */
#include "tuner.h"

#include <stdlib.h>
#include <string.h>

#define MAX_WHERE_PARTS 64

int kt_space_enumerate(const kt_family *f, int arch, const kt_problem *p, const char *where, kt_config **out,
                       int *rejected) {
    kt_config want[MAX_WHERE_PARTS];
    int fixed[MAX_WHERE_PARTS][KT_MAX_PARAMS] = {{0}}, parts = 1;
    for (const char *w = where; w && *w; w++) parts += *w == ';';
    if (parts > MAX_WHERE_PARTS) return kt_fail("--where: %d parts ';'-separated, at most %d", parts, MAX_WHERE_PARTS);
    for (int i = 0, at = 0; where && i < parts; i++) {
        char part[512];
        size_t len = strcspn(where + at, ";");
        if (len >= sizeof part) return kt_fail("--where: part %d is too long", i + 1);
        memcpy(part, where + at, len), part[len] = 0;
        at += (int)len + 1;
        if (kt_parse_where(f, part, &want[i], fixed[i])) return -1;
    }
    long total = 1;
    for (int i = 0; i < f->n_params; i++) total *= f->params[i].n_values;
    kt_config *list = malloc(sizeof *list * (size_t)total);
    if (!list) return kt_fail("out of memory enumerating %ld configs", total);
    int n = 0, bad = 0;
    char why[256];
    for (long idx = 0; idx < total; idx++) {
        kt_config c = {{0}};
        long rest = idx;
        /* The last parameter varies fastest, like nested loops written in order. */
        for (int i = f->n_params - 1; i >= 0; i--) {
            c.v[i] = f->params[i].values[rest % f->params[i].n_values];
            rest /= f->params[i].n_values;
        }
        int inside = 0; /* in one part at least: each fixes its params to its values */
        for (int w = 0; w < parts && !inside; w++) {
            int in = 1;
            for (int i = 0; i < f->n_params; i++) in &= !fixed[w][i] || c.v[i] == want[w].v[i];
            inside = in;
        }
        if (!inside) continue;
        if (f->check_config(&c, arch, why, sizeof why) || (p && !f->config_fits(&c, p)))
            bad++;
        else
            list[n++] = c;
    }
    if (rejected) *rejected = bad;
    *out = list;
    return n;
}

int kt_space_sample(const kt_family *f, kt_config *list, int n, int budget, uint64_t seed) {
    uint64_t rng = seed;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(kt_rng_next(&rng) % (uint64_t)(i + 1));
        kt_config t = list[i];
        list[i] = list[j];
        list[j] = t;
    }
    for (int i = 0; i < n; i++)
        if (!memcmp(&list[i], &f->default_config, sizeof(kt_config))) {
            kt_config t = list[0];
            list[0] = list[i];
            list[i] = t;
            break;
        }
    return budget < n ? budget : n;
}
