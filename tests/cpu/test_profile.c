/* test_profile.c — kt profile's reading of Nsight Compute's raw CSV (bench/ncu.c) on a made-up
 * report shaped like `ncu --csv --page raw --print-units base`, and the NVTX range names. */
#include "../../bench/profile.h"
#include "../../runtime/nvtx.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char report[] =
    "==PROF== Connected to process 4242 (/work/bin/kt)\n"
    "  loop    1 launches inside the NVTX ranges\n"
    "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"dram__bytes_read.sum\",\"dram__bytes_write.sum\","
    "\"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed\",\"lts__throughput.avg.pct_of_peak_sustained_elapsed\","
    "\"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active\","
    "\"sm__inst_executed_pipe_tensor_op_imma.avg.pct_of_peak_sustained_active\","
    "\"sm__pipe_tensor_op_dmma_cycles_active.max.pct_of_peak_sustained_active\","
    "\"sm__warps_active.avg.pct_of_peak_sustained_active\",\"sm__maximum_warps_per_active_cycle_pct\","
    "\"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio\","
    "\"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio\","
    "\"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio\","
    "\"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio\","
    "\"smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio\","
    "\"smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio\",\"launch__grid_size\"\n"
    "\"\",\"\",\"ns\",\"byte\",\"Kbyte\",\"%\",\"%\",\"%\",\"%\",\"%\",\"%\",\"%\",\"\",\"\",\"\",\"\",\"\",\"\",\"\"\n"
    "\"0\",\"fp8_gemm_kernel(\"\"a,b\"\")\",\"12,345\",\"9000000\",\"64\",\"71.5\",\"40.25\",\"12.5\",\"30\",\"99\","
    "\"11.9\","
    "\"12.5\",\"8.5\",\"1.0\",\"2.25\",\"0.5\",\"3.5\",\"n/a\",\"132\"\n"
    "==PROF== Disconnected from process 4242\n";

KT_TEST(ncu_csv_parsed_and_summarized) {
    kt_ncu_report r;
    EXPECT(kt_ncu_parse(report, &r) == 0);
    EXPECT(r.n_kernels == 1);
    if (r.n_kernels != 1) return;
    const kt_ncu_kernel *k = &r.kernels[0];
    EXPECT(!strcmp(k->name, "fp8_gemm_kernel(\"a,b\")"));
    EXPECT(kt_ncu_value(k, "gpu__time_duration.sum") == 12345);
    EXPECT(isnan(kt_ncu_value(k, "no_such_metric")));
    kt_ncu_summary s;
    kt_ncu_summarize(k, &s);
    EXPECT(fabs(s.duration_us - 12.345) < 1e-9); /* "ns", as ncu 2025.3 writes base time units */
    EXPECT(s.dram_bytes == 9000000 + 64000);
    EXPECT(s.dram_pct == 71.5 && s.l2_pct == 40.25 && isnan(s.sm_pct));
    /* The busiest tensor pipe averaged over SMs (a .max over SMs, 99, is not the pipe's use). */
    EXPECT(s.tensor_pct == 30 && strstr(s.tensor_metric, "imma"));
    EXPECT(s.occupancy_pct == 11.9 && s.theoretical_pct == 12.5);
    EXPECT(s.grid == 132);
    /* The top four stalls, largest first; "selected" is issuing, not a stall; n/a skipped. */
    EXPECT(s.n_stalls == 4);
    EXPECT(!strcmp(s.stall[0], "long_scoreboard") && s.stall_cycles[0] == 8.5);
    EXPECT(!strcmp(s.stall[1], "math_pipe_throttle") && s.stall_cycles[1] == 3.5);
    EXPECT(!strcmp(s.stall[2], "wait") && !strcmp(s.stall[3], "barrier"));
    kt_ncu_free(&r);
}

KT_TEST(ncu_csv_malformed_or_empty) {
    kt_ncu_report r;
    EXPECT(kt_ncu_parse("\"ID\",\"Kernel Name\"\n\"0\",\"k\",\"extra\"\n", &r) == -1);
    EXPECT(strstr(kt_error(), "ncu CSV") != NULL);
    EXPECT(kt_ncu_parse("\"ID\",\"Kernel Name\n", &r) == -1);
    EXPECT(kt_ncu_parse("==PROF== No kernels were profiled.\n", &r) == 0 && r.n_kernels == 0);
}

KT_TEST(nvtx_range_names) {
    const kt_family *f = kt_family_find("fp8_gemm");
    kt_problem p = {.n_dims = 2, .dim = {1536, 4096}, .m = 16};
    char name[512];
    kt_nvtx_filter(f, &p, "TILE_N=64", name, sizeof name);
    EXPECT(!strcmp(name, "kt/fp8_gemm/N=1536,K=4096,M=16/TILE_N=64/"));
}

/* The ranges opened for real; tests/cpu/profiles.sh runs this with tools/nvtx_record.c
 * injected and checks what a profiler receives. Without a tool attached they do nothing. */
KT_TEST(nvtx_ranges_pushed) {
    const kt_family *f = kt_family_find("act_quant");
    kt_problem p = {.n_dims = 1, .dim = {4096}, .m = 16};
    kt_nvtx_push(f, &p, "VEC=4,GROUPS_PER_BLOCK=4");
    kt_nvtx_pop();
    EXPECT(f != NULL);
}

/* The real thing: ncu 2025.3.1's raw CSV of kt profile --ncu on the fixture's fp8_gemm winner
 * (N=1536,K=4096 M=16) on the H200: every quantity of the summary is found by its name. */
KT_TEST(ncu_csv_from_the_h200) {
    char *text = kt_read_file("tests/fixtures/ncu_h200_fp8_gemm.csv", NULL);
    EXPECT(text != NULL);
    if (!text) return;
    kt_ncu_report r;
    EXPECT(kt_ncu_parse(text, &r) == 0 && r.n_kernels == 1);
    free(text);
    if (r.n_kernels != 1) return;
    kt_ncu_summary s;
    kt_ncu_summarize(&r.kernels[0], &s);
    EXPECT(!strcmp(r.kernels[0].name, "fp8_gemm"));
    EXPECT(s.duration_us > 9 && s.duration_us < 11);      /* 9.92 us: "ns" read as nanoseconds */
    EXPECT(s.dram_bytes > 6.3e6 && s.dram_bytes < 6.5e6); /* bytes() is 6.41e6 */
    EXPECT(s.dram_pct > 13 && s.dram_pct < 14 && s.l2_pct > 19 && s.l2_pct < 20 && s.sm_pct > 10 && s.sm_pct < 11);
    EXPECT(!strcmp(s.tensor_metric, "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"));
    EXPECT(s.occupancy_pct > 12 && s.occupancy_pct < 13 && s.theoretical_pct == 25);
    EXPECT(s.grid == 48 && s.block == 256 && s.registers == 120);
    EXPECT(s.n_stalls == 4 && !strcmp(s.stall[0], "long_scoreboard") && !strcmp(s.stall[1], "wait"));
    kt_ncu_free(&r);
}
