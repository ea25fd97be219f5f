#!/usr/bin/env bash
# sweep.sh — `kt tune` and `kt db merge` end to end on the fake GPU (KT_FAKE_GPU=1: real
# compiles and worker processes, fake times, the selftest family's planted faulting and
# hanging variants). A sweep killed with -9 and run again resumes: nothing is measured
# twice, no committed row is lost, and it ends with the rows and winners of a sweep that
# was never interrupted. Two shards merged give those rows and winners too. Both hold for
# the exhaustive strategy (selftest) and for fast (fp8_gemm: its later phases choose from
# committed results, and its shards take whole shapes). Merging a database into itself or
# an unreadable file fails clearly. The fast search replayed against a recorded H200
# exhaustive sweep (tools/replay.sh) keeps its regret; tools/ab.sh and tools/targets.sh
# compute what they print; the GPU suite's sanitize mode judges what the sanitizer reports.
# Ends with "N passed, N failed".
set -u
KT=${1:?usage: sweep.sh path/to/kt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export KT_FAKE_GPU=1 KT_WATCHDOG_S=2 KT_CACHE_DIR="$tmp/cache"
unset KT_FAKE_GPU_COUNT KT_FAKE_DELAY_MS
passed=0 failed=0

# tagged NAME=VALUE: how many live processes have that variable in their environment.
tagged() { grep -lzxF "$1" /proc/[0-9]*/environ 2>/dev/null | wc -l; }

# check "what" 'CONDITION': evaluates the shell condition and counts it.
check() {
    if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL sweep: $1"; fi
}

# 2 shapes x 2 M x 12 variants; 24 of the 48 units fault and 12 hang.
TUNE=(tune --family selftest --strategy exhaustive --shape N=4096 --shape N=1024 --m 1,64 --threads 2)
UNITS=48

# The measurements of a DB as CSV without the header, the commas inside quoted fields (config,
# a shape of several dims) made ';' so that fields split on ','. A comma is inside a quoted
# field when an odd number of quotes stands before it.
rows() {
    "$KT" db export --format csv --db "$1" 2>/dev/null | tail -n +2 | tr -d '\r' |
        sed -E ':a;s/^(([^"]*"[^"]*")*[^"]*"[^",]*),/\1;/;ta'
}
# What identifies a measurement across DBs: variant, shape, m, status, median.
units() { rows "$1" | cut -d, -f10,12,13,14,16 | sort; }
# The winners: shape, M bucket, config, variant, median (the device name is three words).
winners() {
    "$KT" db show --db "$1" |
        awk '/^winners/ {w = 1; next} w && /^$/ {w = 0} w && $1 == "kt" {print $5, $6, $7, $8, $9}' | sort
}

# kill_resume_shard NAME MIN_ROWS TUNE-ARGS...: against $tmp/NAME.units and NAME.winners, an
# uninterrupted sweep's. A sweep killed with -9 once MIN_ROWS rows are committed (three fake
# GPUs, a 10 s watchdog: workers in a hang end only because their sweep did) and run again
# resumes: it skips the committed rows, loses or changes none, measures every unit once and
# ends with the uninterrupted rows and winners. Two shards (two fake GPUs each) merged end
# with them too. The kill must land on a sweep still running, and nothing it commits may be
# read before it is dead: once MIN_ROWS rows are seen the sweep is stopped (SIGSTOP: it commits
# and spawns nothing more), its rows and processes are read, then it is killed and reaped;
# `wait` giving 137 says the kill landed. Where the sweep ended first (a loaded machine: the
# polls are slow against its 0.3 s jobs), the kill run is repeated with jobs twice as long, up
# to 3 times.
kill_once() { # kill_once DB TAG DELAY_MS TUNE-ARGS...: sets $killed_rc, $alive
    local db=$1 tag=$2 delay=$3 pid
    shift 3
    rm -f "$db" "$db-wal" "$db-shm"
    env "$tag" KT_FAKE_GPU_COUNT=3 KT_WATCHDOG_S=10 KT_FAKE_DELAY_MS=$delay "$KT" "$@" --db "$db" 2>"$tmp/$name-kill.log" &
    pid=$!
    for _ in $(seq 400); do
        [ "$(rows "$db" | wc -l)" -ge "$min" ] && break
        sleep 0.05
    done
    kill -STOP $pid 2>/dev/null
    alive=$(tagged "$tag")
    rows "$db" >"$tmp/$name-before.rows"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null # quiet: the shell reports the killed job
    killed_rc=$?
}

kill_resume_shard() {
    local name=$1 min=$2 db=$tmp/$1-kill.db total before rc delay alive killed_rc
    shift 2
    total=$(wc -l <"$tmp/$name.units")
    # The sweep and its workers (which inherit the environment, not the command line) carry a
    # tag of their own: tagged counts the live processes that have it.
    local tag="KT_TEST_SWEEP=$name-$$"
    for delay in 300 600 1200; do
        kill_once "$db" "$tag" $delay "$@"
        [ $killed_rc -eq 137 ] && break
    done
    before=$(wc -l <"$tmp/$name-before.rows")
    check "$name: killed mid-sweep ($before of $total rows, exit $killed_rc, jobs of $delay ms)" \
        '[ $killed_rc -eq 137 ] && [ "$before" -ge "$min" ] && [ "$before" -lt "$total" ]'
    # The stopped sweep and its workers: 3, or fewer where one had just faulted (its zombie is
    # not counted, and the stopped sweep has not replaced it).
    check "$name: the sweep and its workers seen before the kill ($alive)" '[ "$alive" -ge 2 ] && [ "$alive" -le 4 ]'
    # Hanging workers never end by themselves: only their parent's death (PR_SET_PDEATHSIG)
    # ends them, within a few seconds however loaded the machine is.
    for _ in $(seq 100); do
        [ "$(tagged "$tag")" -eq 0 ] && break
        sleep 0.05
    done
    check "$name: no worker outlives a killed sweep" '[ "$(tagged "$tag")" -eq 0 ]'
    "$KT" "$@" --db "$db" 2>"$tmp/$name-resume.log"
    rc=$?
    check "$name: resumed sweep finishes, skipping the committed rows" \
        '[ $rc -eq 0 ] && grep -q "$before already measured" "$tmp/$name-resume.log"'
    rows "$db" >"$tmp/$name-after.rows"
    check "$name: no committed row lost or changed" '[ -z "$(grep -Fxvf "$tmp/$name-after.rows" "$tmp/$name-before.rows")" ]'
    check "$name: every unit measured exactly once" '[ "$(wc -l <"$tmp/$name-after.rows")" -eq "$total" ] &&
        [ "$(cut -d, -f10,12,13 "$tmp/$name-after.rows" | sort -u | wc -l)" -eq "$total" ]'
    check "$name: resumed rows equal the uninterrupted sweep's" 'cmp -s "$tmp/$name.units" <(units "$db")'
    check "$name: resumed winners equal the uninterrupted sweep's" 'cmp -s "$tmp/$name.winners" <(winners "$db")'
    for i in 0 1; do
        KT_FAKE_GPU_COUNT=2 "$KT" "$@" --shard $i/2 --db "$tmp/$name-shard$i.db" 2>"$tmp/$name-shard$i.log"
        rc=$?
        check "$name: shard $i/2" '[ $rc -eq 0 ]'
    done
    "$KT" db merge --db "$tmp/$name-merged.db" "$tmp/$name-shard0.db" "$tmp/$name-shard1.db" >"$tmp/$name-merge.log" 2>&1
    rc=$?
    check "$name: merge" '[ $rc -eq 0 ]'
    check "$name: merged rows equal the unsharded sweep's" 'cmp -s "$tmp/$name.units" <(units "$tmp/$name-merged.db")'
    check "$name: merged winners equal the unsharded sweep's" 'cmp -s "$tmp/$name.winners" <(winners "$tmp/$name-merged.db")'
}

KT_PROGRESS_S=1 "$KT" "${TUNE[@]}" --db "$tmp/ref.db" 2>"$tmp/ref.log"
rc=$?
check "uninterrupted sweep" '[ $rc -eq 0 ]'
units "$tmp/ref.db" >"$tmp/ref.units"
winners "$tmp/ref.db" >"$tmp/ref.winners"
check "uninterrupted sweep has every unit once" '[ "$(sort -u "$tmp/ref.units" | wc -l)" -eq $UNITS ]'
check "faulting and hanging variants recorded" '[ "$(grep -c ",launch-error," "$tmp/ref.units")" -eq 36 ]'
check "a winner per (shape, M), all honest variants" \
    '[ "$(wc -l <"$tmp/ref.winners")" -eq 4 ] && [ "$(grep -c "FAULT=0,HANG=0" "$tmp/ref.winners")" -eq 4 ]'
# stderr is a file here, not a terminal: whole progress lines (the last one at least), no
# carriage return per unit.
check "a log gets whole progress lines, not one carriage return per unit" \
    '! grep -q "$(printf "\r")" "$tmp/ref.log" && grep -q "^\[$UNITS/$UNITS\] " "$tmp/ref.log"'
# Every KT_PROGRESS_S (1 s here; the sweep takes 10 s or more) a line of units, problems,
# compiles, measurements and failures, and ETA; the last one says done.
check "a log gets periodic progress lines with problems, compiles, failures and ETA" \
    '[ "$(grep -cE "^\[[0-9]+/[0-9]+\] problems [0-9]/4, compiled [0-9]+/12 \(0 failed\), measured [0-9]+ \([0-9]+ failed\); N=[0-9]+ M=(1|64); [0-9.]+s elapsed, ETA [0-9.]+s$" "$tmp/ref.log")" -ge 3 ] &&
     grep -q "^\[48/48\] problems 4/4, compiled 12/12 (0 failed), measured 48 (36 failed); done; .*, ETA 0.0s$" "$tmp/ref.log"'
# KT_PROGRESS_S=0: a line per unit and the last; --quiet: none.
small=(tune --family selftest --strategy exhaustive --shape N=4096 --m 1 --where FAULT=0,HANG=0 --threads 2)
KT_PROGRESS_S=0 "$KT" "${small[@]}" --db "$tmp/small.db" 2>"$tmp/small.log"
check "a line per unit at KT_PROGRESS_S=0" \
    '[ "$(grep -c "^\[[1-3]/3\] problems" "$tmp/small.log")" -eq 4 ] && grep -q "^\[3/3\] problems 1/1, .*; done;" "$tmp/small.log"'
KT_PROGRESS_S=0 "$KT" "${small[@]}" --db "$tmp/small-quiet.db" --quiet 2>"$tmp/small-quiet.log"
rc=$?
check "--quiet silences the progress" '[ $rc -eq 0 ] && ! grep -q "^\[\|ETA" "$tmp/small-quiet.log" && [ -s "$tmp/small-quiet.db" ]'
kill_resume_shard ref 5 "${TUNE[@]}"

# Three sweeps started together on a database that does not exist yet (a sweep per GPU or
# shard sharing one file): all finish, and the file holds each unit once with the rows and
# winners of the one uninterrupted sweep (before: duplicate rows, or "database is locked").
for i in 1 2 3; do
    "$KT" "${TUNE[@]}" --db "$tmp/shared.db" 2>"$tmp/shared$i.log" &
    eval "shared_pid$i=$!"
done
shared_rc=0
for i in 1 2 3; do eval "wait \$shared_pid$i" || shared_rc=1; done
check "three sweeps sharing a new database all finish" '[ $shared_rc -eq 0 ] && ! grep -q "locked" "$tmp"/shared?.log'
check "the shared database has each unit once, as the single sweep" 'cmp -s "$tmp/ref.units" <(units "$tmp/shared.db")'
check "the shared database has the single sweep's winners" 'cmp -s "$tmp/ref.winners" <(winners "$tmp/shared.db")'
for i in 0 1; do
    check "shard $i/2 measures half" '[ "$(rows "$tmp/ref-shard$i.db" | wc -l)" -eq $((UNITS / 2)) ]'
done
"$KT" db merge --db "$tmp/ref-merged.db" "$tmp/ref-shard1.db" >/dev/null 2>&1
check "merging again copies nothing twice" '[ "$(rows "$tmp/ref-merged.db" | wc -l)" -eq $UNITS ]'

# The fast strategy (the default) on fp8_gemm: two shapes, anchors at M = 1, 4, 16 with 2
# between. Killed once phase 1 is behind it, resumed, it must choose the same later-phase
# units from the committed rows as the uninterrupted sweep; its shards take whole shapes.
# Phase 1: each of the 6 anchors times the default, the config dispatch serves it untuned and
# its --budget 6.
FAST=(tune --family fp8_gemm --shape N=4096,K=512 --shape N=1024,K=4096 --m 1,2,4,16 --budget 6 --threads 2)
"$KT" "${FAST[@]}" --db "$tmp/fast.db" 2>"$tmp/fast.log"
rc=$?
check "uninterrupted fast sweep, every phase" '[ $rc -eq 0 ] && grep -q "phase 1/2/3: 48/[1-9][0-9]*/[1-9]" "$tmp/fast.log"'
units "$tmp/fast.db" >"$tmp/fast.units"
winners "$tmp/fast.db" >"$tmp/fast.winners"
check "fast sweep has every unit once and a winner per (shape, M)" \
    '[ "$(sort -u "$tmp/fast.units" | wc -l)" -eq "$(wc -l <"$tmp/fast.units")" ] && [ "$(wc -l <"$tmp/fast.winners")" -eq 8 ]'
kill_resume_shard fast 50 "${FAST[@]}"
for i in 0 1; do
    check "fast shard $i/2 sweeps one whole shape" '[ "$(units "$tmp/fast-shard$i.db" | cut -d, -f2 | sort -u | wc -l)" -eq 1 ]'
done

# Replayed times (KT_FAKE_TIME=replay:FILE): the winners are the recording's fastest, a config
# the recording lacks counts as 1 s, one it records as failed (0) fails, and the planted
# faults and hangs still misbehave.
cat >"$tmp/replay.txt" <<'EOT'
N=4096 1 VEC=1,FAULT=0,HANG=0 7.5
N=4096 1 VEC=2,FAULT=0,HANG=0 9.0
N=4096 1 VEC=4,FAULT=0,HANG=0 8.0
N=4096 64 VEC=1,FAULT=0,HANG=0 30.0
N=4096 64 VEC=2,FAULT=0,HANG=0 20.0
N=4096 64 VEC=4,FAULT=0,HANG=0 0
EOT
KT_FAKE_TIME=replay:"$tmp/replay.txt" "$KT" tune --family selftest --strategy exhaustive --shape N=4096 --m 1,64 \
    --db "$tmp/replay.db" 2>"$tmp/replay.log"
rc=$?
winners "$tmp/replay.db" >"$tmp/replay.winners"
check "replayed times decide the winners" '[ $rc -eq 0 ] && grep -q "N=4096 1 VEC=1,FAULT=0,HANG=0 .* 7.5" "$tmp/replay.winners" &&
    grep -q "N=4096 64 VEC=2,FAULT=0,HANG=0 .* 20" "$tmp/replay.winners" && grep -q "18 faults" "$tmp/replay.log" &&
    [ "$("$KT" db export --format csv --db "$tmp/replay.db" | grep -c "VEC=4.*launch-error,failed in the recording")" -eq 1 ]'
KT_FAKE_TIME=replay:"$tmp/none.txt" "$KT" tune --family selftest --shape N=4096 --m 1 --db "$tmp/replay2.db" 2>/dev/null
check "an unreadable recording fails the sweep" '[ $? -ne 0 ]'

# The fast search replayed against the H200's recorded exhaustive sweep of the current kernel
# (run I, b3077da; tools/replay.sh, default seed): a regret per recorded problem, and the
# search no worse than when recorded (mean 0.2% over 7 problems; a broken search misses by
# 10-30%).
KT="$KT" bash tools/replay.sh bench/recordings/h200_b3077da_exhaustive.txt.xz >"$tmp/replay.out" 2>&1
rc=$?
check "the fast search replayed on a recording: 7 problems, mean regret under 3%" '[ $rc -eq 0 ] &&
    [ "$(grep -c "^default " "$tmp/replay.out")" -eq 1 ] && [ "$(awk "/^default / {print NF}" "$tmp/replay.out")" -eq 9 ] &&
    awk "/^mean regret/ {exit !(\$3 + 0 < 3 && \$5 == 7)}" "$tmp/replay.out"'
KT="$KT" bash tools/replay.sh "$tmp/none.txt" 2>/dev/null
check "replay.sh: an unreadable recording fails" '[ $? -ne 0 ]'

# tools/ab.sh on two stand-in builds whose bench prints fixed times (the real kt reads the
# winners of the fast sweep's DB above): every winner timed by both, best of each, the change.
for b in old new; do
    us=2.00
    [ $b = new ] && us=1.50
    printf '#!/usr/bin/env bash\n[ "$1" = bench ] || exec "%s" "$@"\nshift 4; echo "$1 $3 %s 1.0"\n' \
        "$(realpath "$KT")" "$us" >"$tmp/kt_$b"
    chmod +x "$tmp/kt_$b"
done
bash tools/ab.sh "$tmp/kt_old" "$tmp/kt_new" "$tmp/fast.db" 2 >"$tmp/ab.out" 2>&1
rc=$?
check "ab.sh: each winner timed by both builds, and the mean change" '[ $rc -eq 0 ] &&
    [ "$(grep -c " 2.00 *1.50 *-25.0%" "$tmp/ab.out")" -eq 8 ] && grep -q "^mean change -25.00%, geometric mean -25.00% over 8 problems" "$tmp/ab.out"'
bash tools/ab.sh "$tmp/kt_old" "$KT" "$tmp/fast.db" >/dev/null 2>&1
check "ab.sh: a build that cannot bench fails the comparison" '[ $? -ne 0 ]'
# ab.sh --winners: one stand-in build times two DBs' winners, the second DB (alt.db: fast.db
# with its first winner's STAGES changed to 9) faster there only: one problem -50%, the rest 0.
printf '#!/usr/bin/env bash\nreal="%s"\nif [ "$1 $2" = "db show" ] && [ "${4##*/}" = alt.db ]; then\n' "$(realpath "$KT")" >"$tmp/kt_w"
cat >>"$tmp/kt_w" <<'STANDIN'
    "$real" db show --db "${4%alt.db}fast.db" |
        awk '/^winners/ {w = 1} w && !done && /STAGES=[0-9]/ {sub(/STAGES=[0-9]+/, "STAGES=9"); done = 1} 1'
    exit
fi
[ "$1" = bench ] || exec "$real" "$@"
shift 4; case "$5" in *STAGES=9*) us=1.00 ;; *) us=2.00 ;; esac; echo "$1 $3 $us 1.0"
STANDIN
chmod +x "$tmp/kt_w"
KT="$tmp/kt_w" bash tools/ab.sh --winners "$tmp/fast.db" "$tmp/alt.db" 1 >"$tmp/abw.out" 2>&1
rc=$?
check "ab.sh --winners: both DBs' winners timed, the differing config named, the geometric mean" '[ $rc -eq 0 ] &&
    [ "$(grep -c " 2.00 *2.00 *+0.0%" "$tmp/abw.out")" -eq 7 ] && [ "$(grep -c " 2.00 *1.00 *-50.0%.*(old " "$tmp/abw.out")" -eq 1 ] &&
    grep -q "^mean change -6.25%, geometric mean -8.30% over 8 problems" "$tmp/abw.out"'

# tools/tune_run.sh with a stand-in kt: `run` logs the dispatches of its --batch (as kt run's
# start-up does, both kernel sets: each line twice), `tune` records its arguments; one tune per
# family over the shapes seen, at the batch sizes seen; a failing run fails the script.
cat >"$tmp/kt_run" <<'STANDIN'
#!/usr/bin/env bash
if [ "$1" = run ]; then
    while [ "$1" != --batch ]; do shift; done
    [ "$2" = 13 ] && { echo "kt run: no GPU" >&2; exit 1; }
    for rep in 1 2; do
        echo "kt: fp8_gemm N=1024,K=4096 M=$2 -> TILE_N=64 (default)" >&2
        echo "kt: fp8_gemm N=4096,K=512 M=$2 -> TILE_N=32 (default)" >&2
        echo "kt: mla_decode LAYOUT=V4,HQ=16,TOPK=512,SQ=1 M=$2 -> HPC=16 (default)" >&2
    done
    echo "kt run: TPOT 1 ms"
elif [ "$1" = tune ]; then echo "$*" >>"$TUNE_LOG"; fi
STANDIN
chmod +x "$tmp/kt_run"
TUNE_LOG=$tmp/tunes.txt KT="$tmp/kt_run" bash tools/tune_run.sh "$tmp/rt.db" 1,64 --budget 4 -- --model m --synthetic >"$tmp/tune_run.out" 2>&1
rc=$?
check "tune_run.sh: one tune per family over its shapes at the batch sizes its step dispatched" '[ $rc -eq 0 ] &&
    [ "$(wc -l <"$tmp/tunes.txt")" -eq 2 ] &&
    grep -qx "tune --family fp8_gemm --shape N=1024,K=4096 --shape N=4096,K=512 --m 1,64 --db $tmp/rt.db --budget 4" "$tmp/tunes.txt" &&
    grep -qx "tune --family mla_decode --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=1 --m 1,64 --db $tmp/rt.db --budget 4" "$tmp/tunes.txt"'
TUNE_LOG=$tmp/tunes2.txt KT="$tmp/kt_run" bash tools/tune_run.sh "$tmp/rt.db" 1,13 -- --model m >/dev/null 2>&1
check "tune_run.sh: a kt run that fails fails the script before any tune" '[ $? -ne 0 ] && [ ! -e "$tmp/tunes2.txt" ]'

# tests/gpu/run.sh sanitize, run from a copy of the suite beside a stand-in kt (devices: two
# GPUs; verify: verified) and a stand-in compute-sanitizer that runs the command and reports
# clean (SANITIZER_DIRTY=TOOL: that tool reports an error). The fast sweep's DB above has 4
# winners at M = 1/16: memcheck, synccheck and racecheck each; one dirty tool fails the step.
mkdir -p "$tmp/suite/tests/gpu" "$tmp/suite/bin" "$tmp/suite/tools" "$tmp/fakebin"
cp tests/gpu/run.sh tests/gpu/step.sh "$tmp/suite/tests/gpu/" && cp tools/winners.sh "$tmp/suite/tools/"
printf '#!/usr/bin/env bash\ncase $1 in devices) echo "0: GPU"; echo "1: GPU";; verify) echo "1 verified, 0 failed";; *) exec "%s" "$@";; esac\n' \
    "$(realpath "$KT")" >"$tmp/suite/bin/kt"
cat >"$tmp/fakebin/compute-sanitizer" <<'SANITIZER'
#!/usr/bin/env bash
tool=$2; shift 4; "$@" || exit
if [ "${SANITIZER_DIRTY:-}" = "$tool" ]; then echo "========= ERROR SUMMARY: 1 error"; exit 99; fi
[ "$tool" = racecheck ] && echo "========= RACECHECK SUMMARY: 0 hazards displayed" || echo "========= ERROR SUMMARY: 0 errors"
SANITIZER
chmod +x "$tmp/suite/bin/kt" "$tmp/fakebin/compute-sanitizer"
sanitize_suite() { PATH="$tmp/fakebin:$PATH" KT_SANITIZE_DB="$tmp/fast.db" LOGS="$tmp/suite/logs" OUT= \
    bash "$tmp/suite/tests/gpu/run.sh" sanitize >"$tmp/sanitize.out" 2>&1; }
sanitize_suite
check "gpu suite's sanitize mode: every winner at M = 1/16 under each tool" '[ $? -eq 0 ] &&
    grep -q "^memcheck: 4 of 4 clean" "$tmp/sanitize.out" && grep -q "^racecheck: 4 of 4 clean" "$tmp/sanitize.out" &&
    grep -q "^synccheck: 4 of 4 clean" "$tmp/sanitize.out" && grep -q "^2 passed, 0 failed" "$tmp/sanitize.out"'
SANITIZER_DIRTY=synccheck sanitize_suite
check "gpu suite's sanitize mode: an error fails it" '[ $? -ne 0 ] && grep -q "^synccheck: 0 of 4 clean" "$tmp/sanitize.out" &&
    [ "$(grep -c "^synccheck NOT-CLEAN fp8_gemm" "$tmp/suite/logs/sanitize_results.txt")" -eq 4 ]'

# tools/targets.sh on a bench JSON in kt bench's form: (4096,512) M = 1 against TARGETS.md's
# 3.9 us (in-run baselines slower), M = 64 against this run's cuBLAS (4.0 < 4.2), M = 256
# against the in-run best, and a shape TARGETS.md lacks (DeepSeek-V3's) against the in-run
# best alone; one miss makes the exit status 1.
bench_case() { printf '  {"family": "fp8_gemm", "shape": "N=%s", "M": %s, "kt_us": %s, "floor_us": 0.5, "cublaslt_fp8_us": %s, "cublas_bf16_us": %s, "config": "X"},\n' "$@"; }
{ echo '['; bench_case 4096,K=512 1 2.50 5.0 4.5; bench_case 4096,K=512 64 2.70 5.5 4.0
  bench_case 4096,K=512 256 5.00 5.1 4.9; bench_case 7168,K=2048 16 6.00 10.0 9.5; echo ']'; } >"$tmp/bench.json"
bash tools/targets.sh "$tmp/bench.json" >"$tmp/targets.out" 2>&1
rc=$?
check "targets.sh: each case against the lower of TARGETS.md's peer and the run's baselines" '[ $rc -eq 1 ] &&
    grep -Eq "^N=4096,K=512 +1 +2.50 +2.60 .* met$" "$tmp/targets.out" &&
    grep -Eq "^N=4096,K=512 +64 +2.70 +2.67 .* MISSED$" "$tmp/targets.out" &&
    grep -Eq "^N=4096,K=512 +256 +5.00 +4.90 .* MISSED$" "$tmp/targets.out" &&
    grep -Eq "^N=7168,K=2048 +16 +6.00 +6.33 .* met$" "$tmp/targets.out" &&
    grep -q "^M <= 64: 2 of 3 met .*; M = 256: 0 of 1 met" "$tmp/targets.out"'
sed -i 's/"kt_us": 2.70/"kt_us": 2.60/; s/"kt_us": 5.00/"kt_us": 4.90/' "$tmp/bench.json"
bash tools/targets.sh "$tmp/bench.json" >"$tmp/targets.out" 2>&1
check "targets.sh: all met exits 0" '[ $? -eq 0 ] && grep -q "^M <= 64: 3 of 3 met .*; M = 256: 1 of 1 met" "$tmp/targets.out"'
bash tools/targets.sh "$tmp/none.json" >/dev/null 2>&1
check "targets.sh: an unreadable file fails" '[ $? -eq 2 ]'

# expect_fail "what" "stderr pattern" kt-args...: exit 1 and the pattern on stderr.
expect_fail() {
    local what=$1 pattern=$2; shift 2
    "$KT" "$@" >/dev/null 2>"$tmp/err"
    rc=$?
    check "$what" '[ $rc -eq 1 ] && grep -q -- "$pattern" "$tmp/err"'
}
expect_fail "merge into itself refused" "into itself" db merge --db "$tmp/ref-merged.db" "$tmp/ref-merged.db"
expect_fail "merge of a missing file refused" "cannot read .*none.db" db merge --db "$tmp/ref-merged.db" "$tmp/none.db"
expect_fail "merge without inputs shows usage" "usage: kt db merge" db merge --db "$tmp/ref-merged.db"
expect_fail "bad --shard refused" "--shard wants i/n" tune --family selftest --shape N=4096 --m 1 --shard 2/2
expect_fail "bad --workers refused" "--workers wants" tune --family selftest --shape N=4096 --m 1 --workers 0

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
