/* dispatch.c — serves a kernel for (family, problem) on the current GPU: the DB winner
 * by exact -> nearest M bucket -> nearest shape -> family default, compiled through the
 * JIT cache and loaded; the level used is logged so a fallback is never silent. */
#include "kt.h"
#include "nvtx.h"

#include <string.h>

/* The config for p when the DB has none: the family's choice for p if it has one that builds
 * for arch and fits p, else its default_config. */
kt_config kt_default_config(const kt_family *f, const kt_problem *p, int sms, int arch) {
    kt_config c = f->default_config;
    char why[256];
    if (f->default_for) {
        f->default_for(p, sms, &c);
        if (f->check_config(&c, arch, why, sizeof why) || !f->config_fits(&c, p)) c = f->default_config;
    }
    return c;
}

int kt_dispatch_config(kt_db *db, const kt_family *f, const kt_problem *p, kt_config *c, kt_lookup_level *level) {
    char why[256];
    if (f->n_stages) return kt_fail("%s is a pipeline: its stages are dispatched (kt_pipeline_dispatch)", f->name);
    if (f->check_problem(p, why, sizeof why) || kt_check_problem_size(f, p, why, sizeof why)) return kt_fail("%s", why);
    kt_db_device dev;
    kt_gpu_db_device(kt_gpu_current(), &dev);
    kt_winner w = {0};
    int found = db ? kt_db_lookup(db, &dev, f, p, &w) : 1;
    if (found < 0) return -1;
    if (found == 0 && kt_parse_config(f, w.config, c)) return -1;
    /* A winner of a neighbouring shape may not fit this one (e.g. split-K > k-blocks). */
    if (found == 0 && (f->check_config(c, kt_gpu_arch(), why, sizeof why) || !f->config_fits(c, p))) found = 1;
    if (found == 1) {
        *c = kt_default_config(f, p, dev.sm_count, kt_gpu_arch());
        w.level = KT_DEFAULT;
    }
    *level = w.level;
    return 0;
}

/* Compiles c for this GPU and loads it into out, logging the choice (how: its lookup level, or
 * "given"). Compiling and loading inside kt/<family>/<key>/dispatch (nvtx.h): a timeline shows
 * what start-up spends per kernel. */
static int load_config(const kt_family *f, const kt_problem *p, const kt_config *c, const char *how, kt_module *out) {
    char shape[128], cfg[256];
    kt_format_shape(f, p, shape, sizeof shape);
    kt_format_config(f, c, cfg, sizeof cfg);
    fprintf(stderr, "kt: %s %s M=%ld -> %s (%s)\n", f->name, shape, p->m, cfg, how);
    kt_nvtx_push(f, p, "dispatch");
    kt_cubin cubin;
    int rc = kt_compile(f, c, kt_gpu_arch(), &cubin);
    if (!rc) {
        rc = kt_module_load(f, c, &cubin, out);
        kt_cubin_free(&cubin);
    }
    kt_nvtx_pop();
    return rc;
}

int kt_dispatch(kt_db *db, const kt_family *f, const kt_problem *p, kt_module *out, kt_lookup_level *level) {
    kt_config c;
    kt_lookup_level lv;
    if (kt_dispatch_config(db, f, p, &c, &lv)) return -1;
    int rc = load_config(f, p, &c, kt_lookup_level_name(lv), out);
    if (level) *level = lv;
    return rc;
}

void kt_stage_problem(const kt_family *f, int s, const kt_problem *p, kt_problem *out) {
    *out = *p;
    if (f->stages[s].problem) f->stages[s].problem(p, out);
}

int kt_parse_stage_configs(const kt_family *f, const char *text, kt_config *pinned, unsigned *mask) {
    *mask = 0;
    int parts = 1;
    for (const char *c = text; *c; c++) parts += *c == ';';
    if (parts != f->n_stages)
        return kt_fail("--config '%s': %d parts ';'-separated (one a stage of %s, empty for its winner), not %d", text,
                       f->n_stages, f->name, parts);
    const char *part = text;
    for (int s = 0; s < f->n_stages; s++) {
        size_t n = strcspn(part, ";");
        char one[512], why[256];
        if (n >= sizeof one) return kt_fail("--config '%s': stage %d's part is too long", text, s + 1);
        memcpy(one, part, n), one[n] = 0;
        part += n + 1;
        const kt_family *g = f->stages[s].family;
        const char *cfg = one, *colon = strchr(one, ':');
        if (colon && ((size_t)(colon - one) != strlen(g->name) || strncmp(one, g->name, strlen(g->name))))
            return kt_fail("--config '%s': stage %d of %s is %s, not '%.*s'", text, s + 1, f->name, g->name,
                           (int)(colon - one), one);
        if (colon) cfg = colon + 1;
        if (!*cfg) continue;
        if (kt_parse_config(g, cfg, &pinned[s])) {
            snprintf(why, sizeof why, "%s", kt_error()); /* kt_fail writes where kt_error() reads */
            return kt_fail("--config, stage %d (%s): %s", s + 1, g->name, why);
        }
        *mask |= 1u << s;
    }
    return 0;
}

int kt_pipeline_dispatch_pinned(kt_db *db, const kt_family *f, const kt_problem *p, const kt_config *pinned,
                                unsigned mask, kt_module *mods) {
    for (int s = 0; s < f->n_stages; s++) {
        kt_problem sp;
        kt_stage_problem(f, s, p, &sp);
        memset(&mods[s], 0, sizeof mods[s]);
        const kt_family *g = f->stages[s].family;
        char why[256];
        int rc;
        if (!(mask >> s & 1))
            rc = kt_dispatch(db, g, &sp, &mods[s], NULL);
        else if (g->check_config(&pinned[s], kt_gpu_arch(), why, sizeof why))
            rc = kt_fail("stage %d (%s), the given config: %s", s + 1, g->name, why);
        else if (!g->config_fits(&pinned[s], &sp))
            rc = kt_fail("stage %d (%s), the given config does not fit its problem", s + 1, g->name);
        else
            rc = load_config(g, &sp, &pinned[s], "given", &mods[s]);
        if (rc) {
            for (int i = 0; i < s; i++) kt_module_unload(&mods[i]);
            return -1;
        }
    }
    return 0;
}

int kt_pipeline_dispatch(kt_db *db, const kt_family *f, const kt_problem *p, kt_module *mods) {
    return kt_pipeline_dispatch_pinned(db, f, p, NULL, 0, mods);
}

void kt_pipeline_unload(const kt_family *f, kt_module *mods) {
    for (int s = 0; s < f->n_stages; s++) kt_module_unload(&mods[s]);
}

int kt_pipeline_launch(const kt_family *f, const kt_module *mods, const kt_launch *l) {
    for (int s = 0; s < f->n_stages; s++) {
        const kt_stage *st = &f->stages[s];
        kt_problem sp;
        kt_stage_problem(f, s, l->problem, &sp);
        kt_tensor_desc t[KT_MAX_TENSORS];
        int n = st->family->tensors(&sp, t);
        kt_launch sl = {.mod = &mods[s],
                        .config = &mods[s].config,
                        .problem = &sp,
                        .stream = l->stream,
                        .copy = l->copy,
                        .copies = l->copies};
        for (int i = 0; i < n; i++) sl.ptr[i] = l->ptr[st->tensor[i]];
        if (st->family->launch(&sl)) return -1;
    }
    return 0;
}
