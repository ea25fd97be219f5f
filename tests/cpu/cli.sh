#!/usr/bin/env bash
# cli.sh — the CLI's answers to bad input on a machine without a GPU: one clear line on
# stderr and a non-zero exit, never a crash. Ends with "N passed, N failed".
set -u
KT=${1:?usage: cli.sh path/to/kt}
KT=$(cd "$(dirname "$KT")" && pwd)/$(basename "$KT") # absolute: some checks run in another folder
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

# expect_fail "what" "stderr pattern" kt-args...: exit status 1..125 (not a crash) and the pattern on stderr.
expect_fail() {
    local what=$1 pattern=$2; shift 2
    "$KT" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ $rc -ge 1 ] && [ $rc -lt 126 ] && grep -q -- "$pattern" "$tmp/err"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL cli: $what (exit $rc): $(head -c 300 "$tmp/err")"
    fi
}

expect_ok() {
    local what=$1 pattern=$2; shift 2
    if "$KT" "$@" >"$tmp/out" 2>"$tmp/err" && grep -q -- "$pattern" "$tmp/out"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL cli: $what: $(head -c 300 "$tmp/err")"
    fi
}

expect_fail "unknown command" "unknown command 'frobnicate'" frobnicate
expect_fail "unknown family" "unknown family 'nope'" compile --family nope --arch sm_120
expect_fail "unknown option" "unknown or incomplete option" compile --family fp8_gemm --bogus
expect_fail "unknown arch" "unknown --arch 'sm_42'" compile --family fp8_gemm --arch sm_42
expect_fail "malformed shape" "bad shape" bench --family fp8_gemm --shape N=12x --m 1 --config TILE_N=64
STEP_SHAPE=ROUTER=V4,FORMAT=fp8,E=256,HIDDEN=4096,INTER=512,DIST=uniform
expect_fail "a pipeline's --config: a stage's family" "stage 1 of moe_step is moe_route, not 'moe_gemm'" \
    verify --family moe_step --shape $STEP_SHAPE --m 1 --config "moe_gemm:TM=8;;"
expect_fail "a pipeline's --config: its part count" "3 parts ';'-separated" bench --family moe_step \
    --shape $STEP_SHAPE --m 1 --config "TM=8"
expect_fail "a pipeline's --config: a stage's config" "stage 3 (moe_gemm): bad config 'TN=12x'" bench \
    --family moe_step --shape $STEP_SHAPE --m 1 --config ";;TN=12x"
expect_fail "shape missing a dim" "K missing" tune --family fp8_gemm --shape N=1024 --m 1
expect_fail "shape not a multiple of 128" "multiples of 128" tune --family fp8_gemm --shape N=1000,K=4096 --m 1
expect_fail "bad M list" "bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,x
expect_fail "M out of range" "M=0\|bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m 0
# Strict input (issue 18): no wrap-around, no truncation, no blanks, no key twice, no empty
# list element, no contradictory options, no problem larger than a GPU.
expect_fail "empty M list element" "empty element" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,
expect_fail "M with a blank" "bad integer list" tune --family fp8_gemm --shape N=1024,K=4096 --m "1, 2"
expect_fail "M that wraps" "out of range" tune --family fp8_gemm --shape N=1024,K=4096 --m 4294967297
expect_fail "shape key twice" "K given twice" tune --family fp8_gemm --shape N=1024,K=512,K=4096 --m 1
expect_fail "shape value with a blank" "N needs an integer" tune --family fp8_gemm --shape "N= 1024,K=4096" --m 1
expect_fail "shape with an unknown key" "unknown name 'Q' (expected N,K)" tune --family fp8_gemm --shape N=1024,Q=4096 --m 1
expect_fail "--where with an unknown key" "unknown name 'BOGUS'" compile --family fp8_gemm --where BOGUS=1
expect_fail "--sample 0" "--sample: 0 is out of range" compile --family act_quant --sample 0
expect_fail "config key twice" "TILE_N given twice" compile --family fp8_gemm --config TILE_N=64,TILE_N=32
expect_fail "config value 2^32 + 64 (read as 64 before)" "VEC needs an integer from 0 to" compile --family act_quant --config VEC=4294967304
expect_fail "--where value that wraps" "needs an integer" compile --family fp8_gemm --where DIRECT=4294967297
expect_fail "--sample with --config" "contradict" compile --family act_quant --config VEC=8 --sample 3
expect_fail "--sample that overflows" "out of range" compile --family act_quant --sample 99999999999999999999
expect_fail "--budget with trailing junk" "--budget: '5x' is not an integer" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --budget 5x
expect_fail "--shard with junk" "--shard wants" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --shard 0/2x
expect_fail "--shard that wraps" "--shard wants" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --shard 0/4294967298
expect_fail "--workers with a blank" "--workers wants" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --workers " 2"
expect_fail "a shape no GPU holds" "more than a GPU holds" tune --family fp8_gemm --shape N=2147483520,K=2147483520 --m 1
expect_fail "sm_89 refused up front" "sm_89 and older lack griddepcontrol" compile --family act_quant --arch sm_89
expect_ok "compile help shows the --arch default" "defaults to sm_120" compile --help
# Without --sample or --config, compile says it compiles a sample of the space (the announcement
# comes before any compile: stopped after 5 s).
KT_CACHE_DIR="$tmp/cache" timeout 5 "$KT" compile --family fp8_gemm >"$tmp/out" 2>"$tmp/err"
if grep -q "compiling a seeded sample of 16 of the [0-9]* variants (--sample all" "$tmp/err" && grep -q "^fp8_gemm for sm_120: 16 variants" "$tmp/out"; then
    passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL cli: compile without --sample: $(head -c 300 "$tmp/err")"; fi
expect_fail "bad strategy" "--strategy must be" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --strategy magic
expect_fail "bad config name" "unknown name 'TILES'" bench --family fp8_gemm --shape N=1024,K=4096 --m 1 --config TILES=3
expect_fail "config rejected by constraints" "config rejected" compile --family fp8_gemm --arch sm_120 --config TILE_N=128,TILE_M=128,TILE_K=256,STAGES=6,WARPS=8
expect_fail "missing db" "cannot read database" db show --db "$tmp/none.db"
printf 'this is not a database, just text that is long enough to look like a header......' >"$tmp/junk.db"
expect_fail "corrupt db" "not a database\|not a kt database" db show --db "$tmp/junk.db"
expect_fail "export without format" "needs --format" db export --db "$tmp/junk.db"
expect_fail "bench: a --db given must exist" "cannot read database" bench --family fp8_gemm --shape N=1024,K=4096 --m 1 --db "$tmp/none.db"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
    expect_fail "tune without a GPU" "needs an NVIDIA GPU" tune --family fp8_gemm --shape N=1024,K=4096 --m 1 --db "$tmp/x.db"
    expect_fail "devices without a GPU" "needs an NVIDIA GPU" devices
    # no --db and no kt.db in the folder: the family defaults (said first), then the GPU check
    cd "$tmp"
    expect_fail "bench without kt.db: the defaults" "no kt.db here: fp8_gemm runs its family defaults" bench --family fp8_gemm --shape N=1024,K=4096 --m 1
    expect_fail "bench without kt.db: then the GPU" "needs an NVIDIA GPU" bench --family fp8_gemm --shape N=1024,K=4096 --m 1
    cd - >/dev/null
    expect_fail "allreduce without a GPU" "needs an NVIDIA GPU" bench allreduce --gpus 1
fi
# A random sweep measures --budget configs per (shape, M) after pruning (fake GPU: real
# compiles, made-up times).
KT_FAKE_GPU=1 KT_CACHE_DIR="$tmp/cache" "$KT" tune --family fp8_gemm --shape N=1024,K=4096 --m 1,64 \
    --strategy random --budget 5 --db "$tmp/random.db" >"$tmp/out" 2>"$tmp/err"
rows=$("$KT" db export --format csv --db "$tmp/random.db" 2>/dev/null | tail -n +2 | wc -l)
if [ "$rows" -eq 10 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL cli: random budget: $rows rows, expected 10: $(tail -c 300 "$tmp/err")"; fi

# The probe family (the contract's test family) end to end on the fake GPU: an exhaustive
# sweep over shapes with a categorical key, its own batch ladder (B 10 -> bucket 16), then
# the DB's show and export.
expect_fail "bad category" "LAYOUT is one of V3,V4, not 'V9'" tune --family probe --shape LAYOUT=V9,N=64 --m 1
KT_FAKE_GPU=1 KT_CACHE_DIR="$tmp/cache" "$KT" tune --family probe --shape LAYOUT=V4,N=4096 --shape LAYOUT=V3,N=512 \
    --m 1,10 --strategy exhaustive --db "$tmp/probe.db" >"$tmp/out" 2>"$tmp/err"
rows=$("$KT" db export --format csv --db "$tmp/probe.db" 2>/dev/null | grep -c 'LAYOUT=V[34],N=')
if [ "$rows" -eq 24 ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL cli: probe sweep: $rows rows, expected 24: $(tail -c 300 "$tmp/err")"; fi
expect_ok "probe winners in its own buckets" "probe.*LAYOUT=V4,N=4096.* 16 " db show --db "$tmp/probe.db"
expect_ok "probe export names the category" '"shape": "LAYOUT=V3,N=512"' db export --format json --db "$tmp/probe.db"
expect_fail "export in an unknown format" "unknown export format 'xml' (json or csv)" db export --format xml --db "$tmp/probe.db"
expect_ok "list probe shows the key kinds" "LAYOUT={V3|V4} N  (batch: B)" list probe

expect_fail "allreduce: too many GPUs" "one count from 1 to 8" bench allreduce --gpus 9
expect_fail "allreduce: bad batch list" "bad integer list" bench allreduce --batch 1,x
expect_fail "bench launch: a chain no longer than the short one" "one count from 17 to 65536" bench launch --kernels 16
expect_fail "bench launch: not a count" "one count from 17" bench launch --kernels x
expect_fail "bench launch: unknown option" "unknown or incomplete option" bench launch --blocks 4
expect_fail "bench stream: a size under 64 KiB" "sizes from 64 to 2097152" bench stream --kb 1024,32
expect_fail "bench stream: a size over 2 GiB" "sizes from 64 to 2097152" bench stream --kb 1082897,2097153
expect_fail "bench stream: not a size" "--kb" bench stream --kb 4k
expect_fail "bench stream: unknown option" "unknown or incomplete option" bench stream --mb 4
# check "what" 'CONDITION': evaluates the shell condition and counts it.
check() {
    if eval "$2"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL cli: $1: $(head -c 300 "$tmp/err")"; fi
}

# Errors about the user's files name the file: a folder given as --db, a truncated database.
expect_fail "--db a folder" "$tmp is a folder, not a database file" db show --db "$tmp"
head -c 8192 "$tmp/random.db" >"$tmp/trunc.db"
expect_fail "a truncated database" "trunc.db is damaged: database disk image is malformed" db show --db "$tmp/trunc.db"
# A failed merge leaves nothing (a new OUT) or the previous file (an existing OUT), and no temp file.
expect_fail "merge of a damaged input" "trunc.db is damaged" db merge --db "$tmp/merged.db" "$tmp/random.db" "$tmp/trunc.db"
check "a failed merge into a new file leaves nothing" '[ ! -e "$tmp/merged.db" ] && ! ls "$tmp" | grep -q merge-'
cp "$tmp/random.db" "$tmp/out.db" && cp "$tmp/random.db" "$tmp/out.before"
expect_fail "merge into an existing file, an input damaged" "damaged" db merge --db "$tmp/out.db" "$tmp/random.db" "$tmp/trunc.db"
check "a failed merge leaves the previous file" 'cmp -s "$tmp/out.db" "$tmp/out.before" && ! ls "$tmp" | grep -q merge-'
"$KT" db merge --db "$tmp/merged.db" "$tmp/random.db" >/dev/null 2>"$tmp/err"
check "a merge into a new file" '[ $? -eq 0 ] && [ "$("$KT" db export --format csv --db "$tmp/merged.db" | tail -n +2 | wc -l)" -eq 10 ]'

# A deployed database: read-only file in a folder this user cannot write (owned by root, read
# as nobody when the suite runs as root, as CI does). show, export and the runtime's open work
# and leave no -wal/-shm beside it (before: "attempt to write a readonly database").
as_user() { if [ "$(id -u)" -eq 0 ]; then setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$@"; else "$@"; fi; }
chmod 755 "$tmp"
mkdir "$tmp/deploy" && cp "$tmp/random.db" "$tmp/deploy/kt.db" && cp "$KT" "$tmp/kt" && chmod 755 "$tmp/kt"
chmod 444 "$tmp/deploy/kt.db" && chmod 555 "$tmp/deploy"
as_user "$tmp/kt" db show --db "$tmp/deploy/kt.db" >"$tmp/out" 2>"$tmp/err"
check "db show of a read-only deployment" '[ $? -eq 0 ] && grep -q "^winners" "$tmp/out"'
as_user "$tmp/kt" db export --format csv --db "$tmp/deploy/kt.db" >"$tmp/out" 2>"$tmp/err"
check "db export of a read-only deployment" '[ $? -eq 0 ] && [ "$(tail -n +2 "$tmp/out" | wc -l)" -eq 10 ]'
# (No check that -wal/-shm stay absent: in a folder the reader cannot write, none can appear
# whatever kt does, so such a check could not fail. It passed with the immutable open removed.)
mkdir -m 777 "$tmp/usercache"
as_user env KT_FAKE_GPU=1 KT_CACHE_DIR="$tmp/usercache" "$tmp/kt" tune --family selftest --shape N=4096 --m 1 \
    --db "$tmp/deploy/kt.db" >/dev/null 2>"$tmp/err"
check "tuning into a read-only deployment fails naming it" '[ $? -ne 0 ] && grep -q "deploy/kt.db" "$tmp/err"'
# An unusable JIT cache folder is said once, and compiling goes on without it.
printf x >"$tmp/afile"
KT_CACHE_DIR="$tmp/afile" "$KT" compile --family act_quant --sample 2 >"$tmp/out" 2>"$tmp/err"
check "KT_CACHE_DIR a file: said once, compiled anyway" '[ $? -eq 0 ] && grep -q "^2 compiled, 0 failed" "$tmp/out" &&
    [ "$(grep -c "JIT cache folder .*afile is unusable (not a folder)" "$tmp/err")" -eq 1 ]'
env -u HOME -u KT_CACHE_DIR "$KT" compile --family act_quant --sample 2 >"$tmp/out" 2>"$tmp/err"
check "HOME unset: said once, compiled anyway" '[ $? -eq 0 ] && [ "$(grep -c "HOME and KT_CACHE_DIR are unset" "$tmp/err")" -eq 1 ]'
mkdir "$tmp/rocache" && chmod 555 "$tmp/rocache"
as_user env KT_CACHE_DIR="$tmp/rocache" "$tmp/kt" compile --family act_quant --sample 2 >"$tmp/out" 2>"$tmp/err"
check "a read-only cache folder: said once, compiled anyway" '[ $? -eq 0 ] && [ "$(grep -c "JIT cache" "$tmp/err")" -eq 1 ]'
chmod 755 "$tmp/deploy" "$tmp/rocache"
# kt run: bad input, and the float64 host reference on a tiny synthetic model (no GPU needed)
mkdir -p "$tmp/m" "$tmp/bad"
cp tests/fixtures/tiny_v4/config.json "$tmp/m/config.json" # one layer of each attention kind, hash layer first
printf '{"model_type": "deepseek_v4", "hidden_size": 128}' >"$tmp/bad/config.json"
printf '1 2 3\n4 5\n' >"$tmp/m/ragged.txt"
expect_fail "run without --model" "needs --model" run
expect_fail "run: no config.json" "cannot read $tmp/none/config.json" run --model "$tmp/none" --reference kt
expect_fail "run: config missing a field" "config.json: missing field vocab_size" run --model "$tmp/bad" --reference kt
expect_fail "run: no safetensors" "no .safetensors files" run --model "$tmp/m" --reference kt
expect_fail "run: bad batch" "--batch: expected 1 to 4096" run --model "$tmp/m" --batch 0
# damaged model files: a truncated header, a header length past any file, a header without the tensors
mkdir -p "$tmp/st" && cp "$tmp/m/config.json" "$tmp/st/"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":' >"$tmp/st/model.safetensors"
expect_fail "run: truncated safetensors" "model.safetensors: header length 16 exceeds the file (13 bytes)" run --model "$tmp/st" --reference kt
printf '\xff\xff\xff\xff\xff\xff\xff\x7f' >"$tmp/st/model.safetensors"
expect_fail "run: safetensors header length 2^63-1" "header length 9223372036854775807 exceeds" run --model "$tmp/st" --reference kt
printf '\x02\x00\x00\x00\x00\x00\x00\x00{}' >"$tmp/st/model.safetensors"
expect_fail "run: safetensors without the model's tensors" "tensor model.embed_tokens.weight is missing" run --model "$tmp/st" --reference kt
printf '{"model_type": "deepseek_v4", "hidden_size": 4294967424' >"$tmp/st/config.json"
expect_fail "run: config.json cut short" "config.json" run --model "$tmp/st" --reference kt
expect_fail "run: tp 2" "only world size 1" run --model "$tmp/m" --tp 2
# the GPU step's HC module holds a sequence's streams in one block's registers: a wider model is refused first
mkdir -p "$tmp/wide" && sed 's/"hidden_size": *128/"hidden_size": 8320/' "$tmp/m/config.json" >"$tmp/wide/config.json"
expect_fail "run: streams too wide for the HC module" "HC module takes hc_mult x hidden_size <= 16384 and hidden_size <= 4096 (here 4 x 8320)" run --model "$tmp/wide" --synthetic
expect_fail "run: ragged prompt" "line 2 has 2 tokens" run --model "$tmp/m" --synthetic --reference kt --batch 2 --prompt "$tmp/m/ragged.txt"
expect_fail "run: context too short" "exceed --context 4" run --model "$tmp/m" --synthetic --reference kt --steps 8 --context 4
expect_ok "run: host reference, synthetic weights" "step 11:" run --model "$tmp/m" --synthetic --reference kt --batch 2 --steps 11 --context 16
# without --prompt each sequence starts on its own seeded token (step 0's "tok->next" pairs)
starts=$(awk '/^step 0:/ {split($3, a, "->"); split($4, b, "->"); print a[1], b[1]}' "$tmp/out")
if [ -n "$starts" ] && [ "${starts% *}" != "${starts#* }" ]; then passed=$((passed + 1)); else
    failed=$((failed + 1)) && echo "FAIL cli: run without --prompt: the 2 sequences start on one token ($starts)"; fi
# --plan: the step's parts without a GPU; this model's shapes keep each part plain, with the reason
expect_fail "run: bad --plan arch" "--plan: expected sm_90" run --model "$tmp/m" --synthetic --plan sm_80
expect_fail "run: bad --experts" "--experts: expected fp8 or mxfp4, got 'fp4'" run --model "$tmp/m" --synthetic --experts fp4
expect_fail "run: --experts on the host reference" "--experts chooses the GPU step's seeded experts" run --model "$tmp/m" --synthetic --reference kt --experts mxfp4
mkdir -p "$tmp/oddvocab" # V4-Flash's shapes but a vocabulary that 4 ranks cannot share
printf '%s\n' '{"model_type": "deepseek_v4", "vocab_size": 129281, "hidden_size": 4096, "num_hidden_layers": 2,' \
    '"num_attention_heads": 64, "head_dim": 512, "q_lora_rank": 1024, "n_routed_experts": 256,' \
    '"num_experts_per_tok": 6, "moe_intermediate_size": 2048, "qk_rope_head_dim": 64}' >"$tmp/oddvocab/config.json"
expect_fail "run: --tp-shapes that do not divide the vocabulary" "and vocabulary (129281)" run --model "$tmp/oddvocab" --synthetic --tp-shapes 4 --plan sm_90
expect_ok "run --plan: attention plain (1 head)" "part: attention plain: mla_decode B=2: HQ=1" run --model "$tmp/m" --synthetic --batch 2 --context 16 --plan sm_90
expect_ok "run --plan: indexer plain (2 heads)" "part: indexer plain: mla_indexer takes 64 heads of 128, the model has 2" run --model "$tmp/m" --synthetic --batch 2 --context 16 --plan sm_120
expect_ok "run --plan: moe plain (4 experts)" "part: moe plain: moe_route B=2: E=4" run --model "$tmp/m" --synthetic --batch 2 --context 16 --plan sm_90
expect_ok "run --plan --plain-kernels" "part: moe plain: --plain-kernels" run --model "$tmp/m" --synthetic --plan sm_90 --plain-kernels
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1'; then
    expect_fail "run without a GPU" "needs an NVIDIA GPU" run --model "$tmp/m" --synthetic
    # the embedding API through ctypes: the library loads, its calls bind, errors come back
    if python3 -c "import sys; sys.path.insert(0, 'python'); import kt_embed
try:
    kt_embed.Session()
except kt_embed.KtError as e:
    sys.exit(0 if 'needs an NVIDIA GPU' in str(e) else 1)
sys.exit(1)" 2>"$tmp/py.err"; then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAIL cli: kt_embed without a GPU: $(tail -c 300 "$tmp/py.err")"; fi
fi

# An older schema: read-only commands read it as it is and leave it so; kt db migrate brings it
# forward keeping every winner (the report fixture is a real GPU sweep's file of schema 2).
cp tests/fixtures/h200_small.db "$tmp/v2.db"
"$KT" db show --db "$tmp/v2.db" >"$tmp/out" 2>"$tmp/err"
check "db show of a schema-2 file reads it unchanged" '[ $? -eq 0 ] && grep -q "^winners" "$tmp/out" && cmp -s "$tmp/v2.db" tests/fixtures/h200_small.db'
winners() { python3 -c "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*) from winners').fetchone()[0])" "$1" 2>/dev/null || echo none; }
before=$(winners "$tmp/v2.db")
"$KT" db migrate --db "$tmp/v2.db" >"$tmp/out" 2>"$tmp/err"
check "db migrate of a schema-2 file" '[ $? -eq 0 ] && "$KT" db show --db "$tmp/v2.db" | grep -q "^winners"'
check "db migrate keeps every winner" '[ "$before" != none ] && [ "$before" -gt 0 ] && [ "$(winners "$tmp/v2.db")" = "$before" ]'
"$KT" db migrate --db "$tmp/none.db" >"$tmp/out" 2>"$tmp/err"
check "db migrate of a missing file creates nothing" '[ $? -ne 0 ] && [ ! -e "$tmp/none.db" ]'

expect_ok "help" "usage: kt COMMAND" --help
expect_ok "list" "fp8_gemm" list
expect_ok "list family" "TILE_N" list fp8_gemm
expect_ok "list family: untuned problems get a default of their own" "untuned problem gets one chosen for its M" list quant_fp8_gemm
KT_CACHE_DIR="$tmp/cache" expect_ok "compile one config" "1 compiled, 0 failed" compile --family act_quant --arch sm_90 --config VEC=8

# stdout is line-buffered into a file: a variant's line shows while the command still compiles the
# others (with full buffering nothing shows before exit, and a caller's timeout loses every line)
KT_CACHE_DIR="$tmp/cache_lb" "$KT" compile --family mla_decode --arch sm_90 --sample 4 >"$tmp/lb" 2>/dev/null &
lb_pid=$! lb_seen=0
for _ in $(seq 1200); do
    grep -q '^[0-9a-f]\{16\} ' "$tmp/lb" && { kill -0 "$lb_pid" 2>/dev/null && lb_seen=1; break; }
    kill -0 "$lb_pid" 2>/dev/null || break
    sleep 0.1
done
wait "$lb_pid"
check "a command's lines reach a file while it runs" '[ $lb_seen = 1 ]'

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
