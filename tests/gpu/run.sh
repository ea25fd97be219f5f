#!/usr/bin/env bash
# run.sh — the GPU suite, one call on a GPU machine: builds if needed, verifies every family
# on fresh random inputs, runs a sweep end to end into a fresh DB, checks dispatch serves its
# winners, and prints the bench table. Logs go to $LOGS (default /tmp/kt-gpu) and, packed
# as logs.tar.gz with the bench JSON, to $OUT when set (the device tool's folder). Ends with
# "N passed, N failed".
#   usage: tests/gpu/run.sh [full|quick|verify|sweep|fault|bench|speed|sanitize]
#          (quick: fewer M values; verify/sweep/fault/bench: that group of steps alone;
#          speed: the 5 x 18 sweep timed cold and warm, then the bench from it;
#          sanitize: compute-sanitizer over the tuned winners, KT_SANITIZE_DB's or a fresh sweep's)
set -u
cd "$(dirname "$0")/../.."
LOGS=${LOGS:-/tmp/kt-gpu}
rm -rf "$LOGS" && mkdir -p "$LOGS"
export KT_CACHE_DIR=${KT_CACHE_DIR:-/tmp/kt-gpu-cache-$$}
KT=./bin/kt
MODE=${1:-full}
# want GROUP: whether this run includes that group of steps.
want() { [ "$MODE" = full ] || [ "$MODE" = quick ] || [ "$MODE" = "$1" ]; }

[ -x "$KT" ] || make -j"$(nproc)" bin/kt >"$LOGS/build.log" 2>&1 || { echo "build failed: see $LOGS/build.log"; exit 1; }

source tests/gpu/step.sh # step NAME CMD...

step devices $KT devices
cat "$LOGS/devices.log"

if [ "$MODE" = quick ]; then MS=1,16,256; SAMPLE=2; else MS=1,2,16,64,256,4096; SAMPLE=3; fi
# The five target shapes plus DeepSeek-V3 shapes and an odd small one.
if want verify; then
step verify_fp8_gemm $KT verify --family fp8_gemm --shape targets --shape N=2304,K=7168 --shape N=128,K=128 \
    --m $MS --sample $SAMPLE --seed $RANDOM
step verify_act_quant $KT verify --family act_quant --shape targets --shape K=7168 --m $MS --sample $SAMPLE --seed $RANDOM
step verify_mla_indexer bash tests/gpu/indexer.sh $KT
step verify_quant_fp8_gemm $KT verify --family quant_fp8_gemm --shape targets --shape N=2304,K=7168 --shape N=128,K=128 \
    --m $MS --sample $SAMPLE --seed $RANDOM
# The contract's test family over its whole space (SET ids written in either order, +inf lse
# rows), on both compares; the act_quant -> fp8_gemm pipeline of the stages' defaults.
step verify_probe $KT verify --family probe --shape targets --shape LAYOUT=V4,N=1 --m 1,10,4096 --sample 6 --seed $RANDOM
step verify_probe_cpu_compare env KT_CHECK_ON_GPU=0 $KT verify --family probe --shape targets --m 1,10 --sample 6 --seed $RANDOM
step verify_act_quant_fp8_gemm $KT verify --family act_quant_fp8_gemm --shape targets --m $MS --seed $RANDOM
# The GPU compare (tuner/check.cu, the default) against the CPU compare (KT_CHECK_ON_GPU=0) on the same
# seeded inputs and variants: the same rel_err up to summation order, for outputs of every
# dtype the families have (bf16; e4m3 + f32) and both references (CPU at M=1, GPU above).
compare_check() {
    local gemm=(verify --family fp8_gemm --shape N=1024,K=4096 --shape N=4096,K=512 --m 1,64,4096 --sample 2 --seed 7)
    local quant=(verify --family act_quant --shape K=4096 --shape K=7168 --m 1,64,4096 --sample 2 --seed 7)
    { $KT "${gemm[@]}" && $KT "${quant[@]}"; } >"$LOGS/check_gpu.txt" || return 1
    { KT_CHECK_ON_GPU=0 $KT "${gemm[@]}" && KT_CHECK_ON_GPU=0 $KT "${quant[@]}"; } >"$LOGS/check_cpu.txt" || return 1
    # "ok   SHAPE M=m CONFIG: rel_err X, T us": the same lines in the same order, X equal to the
    # 7 digits printed (1e-6 relative: the two sums differ by ~1e-12 from their order; a
    # wrong dtype, offset or lost block of elements by far more)
    paste -d' ' <(grep '^ok ' "$LOGS/check_gpu.txt") <(grep '^ok ' "$LOGS/check_cpu.txt") | awk '
        { n++; a = $6 + 0; b = $(NF - 2) + 0; d = a > b ? a - b : b - a
          if ($2 != $(NF - 6) || $3 != $(NF - 5) || $4 != $(NF - 4) || d > 1e-6 * (a > b ? a : b)) {
              bad++; print "differ: " $0 } }
        END { printf "%d variants compared, %d differ\n", n, bad; exit !(n >= 20 && bad == 0) }'
}
step check_gpu_vs_cpu compare_check
# sparse MLA decode's own suite (both layouts, B 1-128, HQ 16-128, SQ 1 and 2, holes, empty
# rows, short contexts, sinks; the bench of its target cases), counted as one step
step mla bash tests/gpu/mla.sh "$KT" "$LOGS/mla"
fi

if want sweep; then
# A sweep end to end into a fresh DB; then every measured row must be ok (a wrong result is a bug).
rm -f "$LOGS/sweep.db"*
step sweep $KT tune --family fp8_gemm --shape N=1024,K=4096 --shape N=4096,K=512 --m 1,16 \
    --strategy random --budget 24 --db "$LOGS/sweep.db"
sweep_check() {
    $KT db export --format csv --db "$LOGS/sweep.db" >"$LOGS/sweep.csv" || return 1
    local rows bad
    rows=$(($(wc -l <"$LOGS/sweep.csv") - 1))
    # Variants refused for spilling are expected; any other failure is a bug.
    bad=$(grep -E ',(wrong-result|launch-error|compile-error),' "$LOGS/sweep.csv" | grep -vc 'ptxas spills')
    echo "$rows measurements, $bad not ok"
    [ "$rows" -ge 40 ] && [ "$bad" -eq 0 ]
}
step sweep_rows sweep_check
step sweep_show $KT db show --db "$LOGS/sweep.db"

# Dispatch: exact hit, nearest M bucket, nearest shape, default, each logged.
dispatch_check() {
    $KT bench --family fp8_gemm --shape N=1024,K=4096 --m 16 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d1" || return 1
    grep -q '(exact)' "$LOGS/d1" || return 1
    $KT bench --family fp8_gemm --shape N=1024,K=4096 --m 3 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d2" || return 1
    grep -q '(nearest-m)' "$LOGS/d2" || return 1
    $KT bench --family fp8_gemm --shape N=2048,K=4096 --m 16 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d3" || return 1
    grep -q '(nearest-shape)' "$LOGS/d3" || return 1
    $KT bench --family act_quant --shape K=4096 --m 16 --db "$LOGS/sweep.db" 2>&1 | tee "$LOGS/d4" || return 1
    grep -q '(default)' "$LOGS/d4"
}
step dispatch dispatch_check
fi

if want fault; then
# A sweep that survives: the selftest family plants variants that fault (FAULT=1: a wild
# store and a trap lose the context) and hang (HANG=1: only the watchdog ends them). The
# sweep must finish with them recorded as launch errors and an honest winner per M.
rm -f "$LOGS/fault.db"*
step fault_sweep env KT_WATCHDOG_S=5 $KT tune --family selftest --shape N=4096 --m 1,64 --strategy exhaustive \
    --db "$LOGS/fault.db"
# CSV rows of a DB without the header, the quoted config's commas made ';' (fields split on ',').
csv_rows() {
    $KT db export --format csv --db "$1" 2>/dev/null | tail -n +2 | tr -d '\r' |
        sed -E ':a;s/("[^",]*),([^"]*")/\1;\2/;ta'
}
fault_check() {
    csv_rows "$LOGS/fault.db" >"$LOGS/fault.csv"
    $KT db show --db "$LOGS/fault.db" >"$LOGS/fault_show.txt" || return 1
    local rows faults hangs ok winners
    rows=$(wc -l <"$LOGS/fault.csv")
    faults=$(grep -c 'FAULT=1;HANG=[01]",N=4096,[0-9]*,launch-error,' "$LOGS/fault.csv")
    hangs=$(grep -c 'FAULT=0;HANG=1",N=4096,[0-9]*,launch-error,watchdog: no answer in 5 s' "$LOGS/fault.csv")
    ok=$(grep -c 'FAULT=0;HANG=0",N=4096,[0-9]*,ok,' "$LOGS/fault.csv")
    winners=$(awk '/^winners/ {w = 1; next} w && /^$/ {w = 0} w && / selftest .*FAULT=0,HANG=0/' \
        "$LOGS/fault_show.txt" | wc -l)
    echo "$rows measurements: $faults faults, $hangs hangs, $ok ok; $winners honest winners"
    [ "$rows" -eq 24 ] && [ "$faults" -eq 12 ] && [ "$hangs" -eq 6 ] && [ "$ok" -eq 6 ] && [ "$winners" -eq 2 ]
}
step fault_rows fault_check

# kill -9 during that sweep, then the same command again: it resumes, measures nothing
# twice and loses no committed row.
resume_check() {
    rm -f "$LOGS/resume.db"*
    KT_WATCHDOG_S=5 $KT tune --family selftest --strategy exhaustive --shape N=4096 --m 1,64 --db "$LOGS/resume.db" &
    local pid=$! before after units
    for _ in $(seq 600); do
        [ "$(csv_rows "$LOGS/resume.db" | wc -l)" -ge 3 ] && break
        sleep 0.1
    done
    kill -9 $pid
    wait $pid 2>/dev/null
    csv_rows "$LOGS/resume.db" >"$LOGS/resume_before.csv"
    KT_WATCHDOG_S=5 $KT tune --family selftest --strategy exhaustive --shape N=4096 --m 1,64 --db "$LOGS/resume.db" || return 1
    csv_rows "$LOGS/resume.db" >"$LOGS/resume_after.csv"
    before=$(wc -l <"$LOGS/resume_before.csv")
    after=$(wc -l <"$LOGS/resume_after.csv")
    units=$(cut -d, -f10,12,13 "$LOGS/resume_after.csv" | sort -u | wc -l)
    echo "killed at $before rows; $after rows after resuming, $units distinct (variant, shape, M)"
    [ "$before" -ge 3 ] && [ "$before" -lt 24 ] && [ "$after" -eq 24 ] && [ "$units" -eq 24 ] &&
        [ -z "$(grep -Fxvf "$LOGS/resume_after.csv" "$LOGS/resume_before.csv")" ]
}
step resume resume_check
fi

# The sweep-speed target (speed only, not part of full): the five target shapes x the 18 M
# buckets on one GPU from a cold start (empty JIT cache, empty DB), then warm (cache kept,
# empty DB); on a host with more GPUs, warm again with a worker on each.
if [ "$MODE" = speed ]; then
rm -rf "$KT_CACHE_DIR"
gpus=$(grep -c '^[0-9]*: ' "$LOGS/devices.log")
runs="cold warm"
[ "$gpus" -gt 1 ] && runs="cold warm warm_all"
for run in $runs; do
    rm -f "$LOGS/$run.db"*
    workers=1
    [ "$run" = warm_all ] && workers=$gpus
    step "tune_$run" $KT tune --family fp8_gemm --shape targets --workers $workers \
        --m 1,2,4,8,16,24,32,48,64,96,128,256,512,1024,1536,2048,3072,4096 --db "$LOGS/$run.db"
    tail -n 2 "$LOGS/tune_$run.log" | tr '\r' '\n' | grep -E "sweep done|workers' time" # time, units, setups
done
cp "$LOGS/cold.db" "$LOGS/targets.db"
# The regret of the fast search: every config of two shapes at a few Ms, for
# tools/regret.sh cold.db exhaustive.db (run where sqlite3 is).
rm -f "$LOGS/exhaustive.db"*
step tune_exhaustive_4096x512 $KT tune --family fp8_gemm --shape N=4096,K=512 --m 1,16,64,256 --strategy exhaustive \
    --db "$LOGS/exhaustive.db"
step tune_exhaustive_8192x1024 $KT tune --family fp8_gemm --shape N=8192,K=1024 --m 1,16,256 --strategy exhaustive \
    --db "$LOGS/exhaustive.db"
fi

if want bench || [ "$MODE" = speed ]; then
# The bench table at the five target shapes from a sweep of them (speed: the cold sweep's).
if [ "$MODE" != speed ]; then
    rm -f "$LOGS/targets.db"*
    step tune_targets $KT tune --family fp8_gemm --shape targets --m 1,16,64,256 --db "$LOGS/targets.db"
fi
# The fused act_quant + GEMM's winners, for the bench's fused_us column, and act_quant's for
# its quant+kt_us column (act_quant then the GEMM winner: the decode cost once both are tuned).
step tune_fused $KT tune --family quant_fp8_gemm --shape targets --m 1,16,64,256 --db "$LOGS/targets.db"
step tune_act_quant $KT tune --family act_quant --shape targets --m 1,16,64,256 --db "$LOGS/targets.db"
step bench $KT bench --family fp8_gemm --shape targets --m 1,16,64,256 --db "$LOGS/targets.db" --json "$LOGS/bench.json"
cat "$LOGS/bench.log"
# Both floors are bounds: no case beats the copy floor or the measured mma rate (a case that
# did would mean a floor measured wrong, e.g. an mma loop the compiler partly folded away);
# and the run measured its on-chip read rates.
floors_check() {
    awk -f tools/bench_json.awk -f /dev/fd/3 "$LOGS/bench.json" 3<<'PROGRAM'
num("kt_us") > 0 {
            kt = num("kt_us"); fl = num("floor_us"); mma = num("mma_floor_us"); n++
            if (mma < 0) { print "no mma floor: " $0; bad++; next }
            if (!(mma > 0 && fl > 0 && kt >= mma && kt >= fl)) { print "beats a floor: " $0; bad++ }
            # the on-chip read rates (bench/memory.cu) were measured: numbers, not null (the H200
            # this suite runs on has thread-block clusters)
            if (num("l2_read_bytes_per_s") <= 0 || num("dsmem_read_bytes_per_s_cluster_8") <= 0) {
                print "no on-chip read rates: " $0; bad++ } }
        END { printf "%d cases within both floors, %d not\n", n, bad; exit !(n >= 20 && bad == 0) }
PROGRAM
}
step bench_floors floors_check
cat "$LOGS/bench_floors.log"
# Issue 3's targets, case by case (a report: the M = 64 and 256 targets are still open, see
# bench/NOTES.md, so a miss does not fail the suite).
bash tools/targets.sh "$LOGS/bench.json" >"$LOGS/targets.log" 2>&1
cat "$LOGS/targets.log"
# Shapes a user brings: DeepSeek-V3's q_a_proj (1536 x 7168), an expert's gate+up (4096 x 7168)
# and down (7168 x 2048), against this run's cuBLASLt and cuBLAS baselines.
V3="--shape N=1536,K=7168 --shape N=4096,K=7168 --shape N=7168,K=2048"
step tune_v3 $KT tune --family fp8_gemm $V3 --m 1,16,64 --db "$LOGS/v3.db"
step bench_v3 $KT bench --family fp8_gemm $V3 --m 1,16,64 --db "$LOGS/v3.db" --json "$LOGS/bench_v3.json"
cat "$LOGS/bench_v3.log"
bash tools/targets.sh "$LOGS/bench_v3.json" >"$LOGS/targets_v3.log" 2>&1
cat "$LOGS/targets_v3.log"
# The same shapes untuned: a DB without fp8_gemm rows, so dispatch serves its per-problem
# default (kernels/fp8_gemm.c, default_for). Every case verified, served at the default
# level, and near the tuned winners above (1.14x geometric mean on the H200 when added;
# the fixed default it replaced was 2.39x).
untuned_check() {
    rm -f "$LOGS/untuned.db"*
    $KT tune --family act_quant --shape K=128 --m 1 --budget 1 --db "$LOGS/untuned.db" >/dev/null 2>&1 || return 1
    $KT bench --family fp8_gemm $V3 --m 1,16,64 --db "$LOGS/untuned.db" --json "$LOGS/bench_untuned.json" \
        >"$LOGS/untuned.txt" 2>&1 || { cat "$LOGS/untuned.txt"; return 1; }
    cat "$LOGS/untuned.txt"
    [ "$(grep 'kt: fp8_gemm .*(default)' "$LOGS/untuned.txt" | sort -u | wc -l)" -eq 9 ] || { echo "not served by the default"; return 1; } # bench dispatches a GEMM twice (alone, and in the act_quant pipeline)
    awk -f tools/bench_json.awk -f /dev/fd/3 "$LOGS/bench_v3.json" "$LOGS/bench_untuned.json" 3<<'PROGRAM'
match($0, /"shape": "[^"]*", "M": [0-9]+/) { key = substr($0, RSTART, RLENGTH)
            if (FILENAME ~ /untuned/) { u[key] = num("kt_us"); e = num("rel_err"); if (!(e >= 0 && e < 1e-2)) bad++ }
            else t[key] = num("kt_us") }
        END { for (k in u) if (k in t && t[k] > 0 && u[k] > 0) { n++; s += log(u[k] / t[k]) }
            g = n ? exp(s / n) : 0
            printf "%d untuned cases: %.2fx the tuned winners (geometric mean), %d not verified\n", n, g, bad
            exit !(n == 9 && !bad && g < 1.5) }
PROGRAM
}
step bench_untuned untuned_check
tail -n 1 "$LOGS/bench_untuned.log"
# The winners are sm_120 kernels: their sm_120 SASS uses the FP8 MMA and never local memory.
winners_sass() {
    local dir="$LOGS/sass" cfg n=0
    rm -rf "$dir" && mkdir -p "$dir"
    for cfg in $(grep -o '"config": "[^"]*"' "$LOGS/bench.json" | cut -d'"' -f4 | sort -u); do
        $KT compile --family fp8_gemm --arch sm_120 --config "$cfg" --emit "$dir" >/dev/null || return 1
    done
    for f in "$dir"/*.cubin; do
        cuobjdump -sass "$f" >"$f.sass" || return 1
        grep -q 'QMMA.16832.F32.E4M3.E4M3' "$f.sass" || { echo "$f: no FP8 MMA"; return 1; }
        if grep -qE '\b(LDL|STL)\b' "$f.sass"; then echo "$f: local memory"; return 1; fi
        n=$((n + 1))
    done
    echo "$n winner cubins for sm_120: QMMA.16832.F32.E4M3.E4M3, no LDL/STL"
    [ "$n" -gt 0 ]
}
step winners_sass winners_sass
cat "$LOGS/winners_sass.log"
fi

# compute-sanitizer over `kt verify` of tuned winners (sanitize only, not part of full): memcheck
# on every winner of the three families at M = 1/16/64/256, synccheck on the GEMM winners among
# them, racecheck (slow: ~35 s a kernel) on those at M <= 64; four at a time per GPU. Each must verify and report
# no error or hazard. The winners are KT_SANITIZE_DB's, or those of a fast sweep of the targets.
if [ "$MODE" = sanitize ]; then
sanitize() {
    local db=${KT_SANITIZE_DB:-$LOGS/sanitize.db} gpus jobs="$LOGS/sanitize_jobs.txt" f
    local cs; cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    [ -x "$cs" ] || { echo "no compute-sanitizer"; return 1; }
    if [ -z "${KT_SANITIZE_DB:-}" ]; then
        rm -f "$db"*
        for f in fp8_gemm quant_fp8_gemm act_quant; do
            $KT tune --family $f --shape targets --m 1,16,64 --db "$db" >/dev/null || return 1
        done
    fi
    # "TOOL FAMILY SHAPE M CONFIG"
    KT=$KT tools/winners.sh "$db" >"$LOGS/sanitize_winners.txt" || return 1
    awk '$1 ~ /^(fp8_gemm|quant_fp8_gemm|act_quant)$/ && $3 ~ /^(1|16|64|256)$/ {
            print "memcheck " $0
            if ($1 != "act_quant") print "synccheck " $0
            if ($1 != "act_quant" && $3 <= 64) print "racecheck " $0 }' "$LOGS/sanitize_winners.txt" >"$jobs"
    gpus=$(grep -c '^[0-9]*: ' "$LOGS/devices.log")
    mkdir -p "$LOGS/sanitize"
    awk -v g="$gpus" '{ print (NR - 1) % g, $0 }' "$jobs" | xargs -P $((4 * gpus)) -L 1 bash -c '
        gpu=$0 tool=$1 fam=$2 shape=$3 m=$4 cfg=$5 log="'"$LOGS"'/sanitize/$1-$2-$3-$4.log"
        CUDA_VISIBLE_DEVICES=$gpu timeout 300 "'"$cs"'" --tool $tool --error-exitcode 99 \
            "'"$KT"'" verify --family $fam --shape $shape --m $m --config $cfg >"$log" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && grep -q "^1 verified, 0 failed" "$log" &&
            grep -qE "(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards)" "$log"; then
            echo "$tool clean $fam $shape M=$m"
        else echo "$tool NOT-CLEAN $fam $shape M=$m (exit $rc): see sanitize/$(basename "$log")"; fi' \
        >"$LOGS/sanitize_results.txt"
    grep NOT-CLEAN "$LOGS/sanitize_results.txt"
    awk '{ n[$1]++; if ($2 == "clean") c[$1]++ } END { for (t in n) printf "%s: %d of %d clean\n", t, c[t], n[t] }' \
        "$LOGS/sanitize_results.txt" | sort
    [ "$(wc -l <"$LOGS/sanitize_results.txt")" -eq "$(wc -l <"$jobs")" ] && [ "$(wc -l <"$jobs")" -gt 0 ] &&
        ! grep -q NOT-CLEAN "$LOGS/sanitize_results.txt"
}
step sanitize sanitize
cat "$LOGS/sanitize.log"
fi

if [ -n "${OUT:-}" ]; then
    cp "$LOGS/bench.json" "$LOGS/bench_v3.json" "$OUT/" 2>/dev/null
    tar -C "$LOGS" -czf "$OUT/logs.tar.gz" --exclude='*.db-*' .
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
