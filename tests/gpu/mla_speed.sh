#!/usr/bin/env bash
# mla_speed.sh — issue 20's speed targets for mla_decode on the GPU, one bounded call (~150 s):
# (a) kt verify on fresh seeds of the default (PATH 2 since the fifteenth session) at the
#     issue's cases (B 1,3,8,64,128; HQ 16,64,128; SQ 1,2; top-k 100/512/1152/2048) and of
#     seeded PATH 2 and PATH 3 configs (WPM, HPC, CHUNK, STAGES drawn);
# (b) kt bench of the old default (main's build, $KT_MAIN, PATH 0) and the new one at the
#     target cases, B 1 and 64, PATH 3 against PATH 2 at three B = 64 cases, three B = 1
#     candidates, then a short kt tune of them and the bench of its winners;
#     a table of old / new / tuned against the roof (bytes / copy rate, flops / 650 TFLOP/s);
#     KT_MLA_TUNE=0 skips the tune, KT_MLA_DRAWN=N draws N PATH 2 and 3 configs (6), KT_MLA_NCU_BY=S
#     runs ncu only while the call is under S seconds (125), KT_MLA_VERIFY_S bounds each verify (45);
# (c) kt profile --ncu of the new default at V4 HQ 16 B 64 and B 1 while the time allows.
# Logs under $OUT/mla (or /tmp/kt-gpu-mla); a PASS/FAIL line per check; "N passed, N failed".
#   usage: OUT=DIR tests/gpu/mla_speed.sh
set -u
cd "$(dirname "$0")/../.."
KT=${KT:-./bin/kt}
OLD=${KT_MAIN:-.gpu/kt_main}
LOGS=${OUT:-/tmp/kt-gpu}/mla
SEED=${KT_SEED:-$RANDOM}
source tests/gpu/step.sh # step NAME CMD...
echo "mla_speed.sh: seed $SEED, new $KT, old $OLD"
v() { timeout "${KT_MLA_VERIFY_S:-45}" "$KT" verify --family mla_decode --seed "$SEED" "$@"; }
step verify_v4_h64 v --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=1 --m 1,3,8,64,128
step verify_v4_h16_mtp v --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=2 --m 1,3,8,64,128
step verify_v32_h128 v --shape LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 --m 1,3,8,64,128
step verify_v32_h16_mtp v --shape LAYOUT=V32,HQ=16,TOPK=2048,SQ=2 --m 1,3,8,64,128
step verify_odd_topk v --shape LAYOUT=V4,HQ=128,TOPK=1152,SQ=1 --shape LAYOUT=V32,HQ=64,TOPK=100,SQ=2 --m 1,3,8
for path in 2 3; do
    step "verify_path${path}_drawn" v --where PATH=$path --sample "${KT_MLA_DRAWN:-6}" \
        --shape LAYOUT=V4,HQ=64,TOPK=512,SQ=2 --shape LAYOUT=V32,HQ=32,TOPK=2048,SQ=1 --m 1,8,64
done
# The defaults as dispatch serves them: a DB without mla_decode rows (kt bench needs one)
rm -f "$LOGS/untuned.db"*
step untuned_db timeout 30 "$KT" tune --family act_quant --shape K=128 --m 1 --budget 1 --db "$LOGS/untuned.db"
bench() { timeout 40 "$1" bench --family mla_decode --shape targets --m 1,64 --db "$LOGS/untuned.db" --json "$2"; }
if [ -x "$OLD" ]; then
    step bench_old bench "$OLD" "$LOGS/old.json"
else
    echo "FAIL bench_old: no old build at $OLD (KT_MAIN)"
    failed=$((failed + 1))
fi
step bench_new bench "$KT" "$LOGS/new.json"
if [ "${KT_MLA_TUNE:-1}" = 1 ]; then # a short tune and its winners (KT_MLA_TUNE=0 skips them)
    rm -f "$LOGS/tuned.db"*
    step tune timeout 75 "$KT" tune --family mla_decode --shape targets --m 1,64 --budget 10 --seed "$SEED" \
        --db "$LOGS/tuned.db"
    step bench_tuned timeout 50 "$KT" bench --family mla_decode --shape targets --m 1,64 --db "$LOGS/tuned.db" \
        --json "$LOGS/tuned.json"
fi
# PATH 3 (q . k's codes on the f16 mma) against PATH 2 at the checkpoint's tuned winners, B = 64
pair() {
    local shape=$1 cfg=$2 path
    for path in 2 3; do
        timeout 30 "$KT" bench --family mla_decode --shape "$shape" --m 64 --config "$cfg,PATH=$path" | tail -n 1 || return 1
    done
}
step pair_v4_h16 pair LAYOUT=V4,HQ=16,TOPK=512,SQ=1 HPC=16,CHUNK=32,SPLIT=128,STAGES=2,WPM=4
step pair_v4_h64 pair LAYOUT=V4,HQ=64,TOPK=512,SQ=1 HPC=16,CHUNK=64,SPLIT=1024,STAGES=2,WPM=8
step pair_v32_h128 pair LAYOUT=V32,HQ=128,TOPK=2048,SQ=1 HPC=32,CHUNK=32,SPLIT=2048,STAGES=3,WPM=4
for n in v4_h16 v4_h64 v32_h128; do cat "$LOGS/pair_$n.log"; done
# B = 1 candidates beside the default: SPLIT 32 with 8 warps, and 4 or 2 chunks a CTA
for c in PATH=2,CHUNK=32,SPLIT=32,WPM=8 PATH=2,CHUNK=32,SPLIT=128,WPM=8 PATH=2,CHUNK=32,SPLIT=64,WPM=8; do
    step "bench_b1_${c//[=,]/_}" timeout 30 "$KT" bench --family mla_decode --shape targets --m 1 --config "$c"
    tail -n 12 "$LOGS/bench_b1_${c//[=,]/_}.log"
done
# The table: us (config) per case, and each against the roof; the issue's target beside it.
table() {
    python3 - "$LOGS" <<'EOF'
import json, os, sys
d = sys.argv[1]
runs = {}
for name in ("old", "new", "tuned"):
    f = os.path.join(d, name + ".json")
    if os.path.exists(f):
        runs[name] = {(r["shape"], r["M"]): r for r in json.load(open(f)) if r.get("status") == "ok"}
def roof(r):  # the issue's: bytes / copy rate, flops / 650 TFLOP/s (the bench's own roof_us uses its probe's rate)
    flops = r["mma_floor_us"] * r.get("bf16_mma_flops_per_s", r["mma_flops_per_s"])
    return max(r["floor_us"], flops / 650e12)
def target(shape, m):
    if "V4" in shape or "LAYOUT=4," in shape:
        return "B=1 < 6 us" if m == 1 else "1.5x roof"
    if "HQ=128" in shape:
        return "B=1 < 8 us" if m == 1 else "1.5x roof"
    return "-" if m == 1 else "1.3x roof"
keys = sorted({k for r in runs.values() for k in r})
print("| case | B | roof (650 TF) | bench roof_us | " + " | ".join(f"{n} us (x roof)" for n in runs) + " | target | new config |")
for k in keys:
    any_r = next(r[k] for r in runs.values() if k in r)
    cells = []
    for n in runs:
        r = runs[n].get(k)
        cells.append(f"{r['kt_us']:.2f} ({r['kt_us'] / roof(r):.1f})" if r else "-")
    cfg = runs.get("new", {}).get(k, {}).get("config", "-")
    print(f"| {k[0]} | {k[1]} | {roof(any_r):.2f} | {any_r.get('roof_us', float('nan')):.2f} | " + " | ".join(cells)
          + f" | {target(k[0], k[1])} | {cfg} |")
for n in ("tuned",):
    for k, r in sorted(runs.get(n, {}).items()):
        print(f"{n} winner {k[0]} B={k[1]}: {r['config']}")
EOF
}
step table table
cat "$LOGS/table.log"
# ncu of the new default where B = 64 and B = 1 miss most, while the call is under ~2 minutes
for m in 64 1; do
    [ "$SECONDS" -lt "${KT_MLA_NCU_BY:-125}" ] || break
    step "ncu_v4_h16_b$m" timeout 35 "$KT" profile --family mla_decode --shape LAYOUT=V4,HQ=16,TOPK=512,SQ=1 \
        --m "$m" --iters 20 --ncu
    grep -iE "dram|occupancy|stall|mla_split|mla_combine" "$LOGS/ncu_v4_h16_b$m.log" | head -20
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
