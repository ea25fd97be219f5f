/* test_report.c — kt report on a database of a family this build does not know (its shape
 * text with a category, LAYOUT=V4, as the new families write it): the page still has its
 * plots, says why floor and roof are missing, and escapes every text from the DB. */
#include "../../db/kt_db_write.h"
#include "../../report/report.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const kt_db_device gpu = {"NVIDIA H200", 90, 132, 13000, 13000};

static int add(kt_db *db, long long dev, long long run, const char *variant, const char *config, long m,
               kt_status status, double us, const char *error) {
    kt_measurement r;
    memset(&r, 0, sizeof r);
    r.run_id = run, r.device_id = dev, r.family = "mla_future", r.m = m, r.status = status;
    snprintf(r.source_hash, sizeof r.source_hash, "00000000000000aa");
    snprintf(r.variant_id, sizeof r.variant_id, "%s", variant);
    snprintf(r.config, sizeof r.config, "%s", config);
    snprintf(r.shape, sizeof r.shape, "LAYOUT=V4,HQ=64,TOPK=512");
    snprintf(r.error, sizeof r.error, "%s", error);
    r.median_us = us, r.min_us = us * 0.95, r.max_us = us * 1.05;
    return kt_db_add_measurement(db, &r) || kt_db_update_winner(db, dev, "mla_future", r.source_hash, r.shape, m);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

KT_TEST(report_unknown_family_escaped) {
    char dir[] = "/tmp/kt_test_report_XXXXXX", path[96], out[128], page[160];
    EXPECT(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/kt.db", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    snprintf(page, sizeof page, "%s/index.html", out);
    kt_db *db;
    long long dev, run;
    int rc = kt_db_open(path, 0, &db) || kt_db_device_id(db, &gpu, &dev) ||
             kt_db_run_begin(db, dev, "abc123", "kt tune --family mla_future <&>", &run) ||
             add(db, dev, run, "v1", "SPLIT=2,BLOCK=64", 1, KT_OK, 20.5, "") ||
             add(db, dev, run, "v2", "SPLIT=4,BLOCK=64", 1, KT_OK, 12.25, "") ||
             add(db, dev, run, "v3", "SPLIT=8,BLOCK=64", 1, KT_WRONG_RESULT, 0,
                 "out[3] <script>alert(1)</script> & \"q\"") ||
             add(db, dev, run, "v2", "SPLIT=4,BLOCK=64", 4, KT_OK, 14.0, "");
    EXPECT(rc == 0);
    kt_db_close(db);
    kt_report_options o = {.db_path = path, .out_dir = out, .cmdline = "kt report <test>"};
    int plots = 0;
    EXPECT(kt_report_write(&o, &plots) == 0);
    /* 2 problems' variants, the family's winners and buckets; no roofline (no flops known). */
    EXPECT(plots == 4);
    char *html = kt_read_file(page, NULL);
    EXPECT(html != NULL);
    if (!html) return;
    EXPECT(count(html, "<svg") == 4 && count(html, "data-plot=\"roofline\"") == 0);
    EXPECT(strstr(html, "LAYOUT=V4,HQ=64,TOPK=512 M=1") != NULL);
    EXPECT(strstr(html, "this build of kt has no family mla_future") != NULL);
    EXPECT(strstr(html, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;q&quot;") != NULL);
    EXPECT(!strstr(html, "<script") && !strstr(html, "<&>") && !strstr(html, "<test>"));
    EXPECT(strstr(html, "Common to every row: <code>BLOCK=64</code>") != NULL);
    EXPECT(strstr(html, ">SPLIT=4<") != NULL); /* rows labelled by what differs */
    free(html);
    unlink(page);
    rmdir(out);
    unlink(path);
    char side[128]; /* a read-only reader of a WAL database leaves these */
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    EXPECT(rmdir(dir) == 0);
}

KT_TEST(report_html_escape) {
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    kt_html_escape(f, "a<b>&'\"c");
    fclose(f);
    EXPECT(!strcmp(s, "a&lt;b&gt;&amp;&#39;&quot;c"));
    free(s);
}
