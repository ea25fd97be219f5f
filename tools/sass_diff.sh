#!/usr/bin/env bash
# sass_diff.sh — whether a change to the FP8 GEMM kernels' source (kernels/common/fp8_gemm.cuh,
# fp8_gemm.cu, quant_fp8_gemm.cu) changed their machine code, without a GPU: NVRTC-compiles the
# same configs with two kt builds (`kt compile --config C --emit`), disassembles each kernel
# (tools/cuobjdump.sh -sass) and compares the instruction streams with addresses, encodings
# and branch-label numbers taken out; it says too whether the encodings (which carry the
# scheduling: stalls, barriers, register reuse) are identical. The configs: each family's
# default, dispatch's untuned configs for M = 1 and M = 64 (the register ring with and without
# split-K, its PUSH and pull epilogues, the pipeline with 2x2 warps and with PROMOTE), and
# seeded samples of the space at TILE_M 8 and 64 and of all of it, on sm_90 and sm_120
# (ARCHS="sm_90 sm_120 sm_120a" for more).
# usage: tools/sass_diff.sh BASE_KT [NEW_KT (default bin/kt)]      two kt binaries
#        tools/sass_diff.sh --rev REV [NEW_KT]                      builds REV's bin/kt first
# Prints one line per (family, arch, config): same (instruction for instruction), regs (the same
# but for register numbers), order (the same instructions, some placed elsewhere) or DIFFER
# (with the line counts), then the counts; exits 1 unless every one is the same, or where one
# build compiled a config the other could not.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${1:-}" = --rev ]; then
    [ -n "${2:-}" ] || { echo "usage: tools/sass_diff.sh --rev REV [NEW_KT]" >&2; exit 2; }
    mkdir -p "$tmp/base"
    git archive "$2" | tar -x -C "$tmp/base" || { echo "sass_diff: cannot read revision $2" >&2; exit 2; }
    make -C "$tmp/base" -s -j2 bin/kt >"$tmp/build.log" 2>&1 || { tail "$tmp/build.log"; exit 2; }
    base=$tmp/base/bin/kt
    shift 2
else
    base=${1:-}
    shift
fi
new=${1:-bin/kt}
[ -x "$base" ] && [ -x "$new" ] || { echo "usage: tools/sass_diff.sh BASE_KT|--rev REV [NEW_KT]" >&2; exit 2; }
cuobjdump=$(bash tools/cuobjdump.sh) || { echo "sass_diff: no cuobjdump (tools/cuobjdump.sh)" >&2; exit 2; }
export KT_CACHE_DIR="$tmp/cache"
ARCHS=${ARCHS:-sm_90 sm_120}

ring1="TILE_N=64,TILE_M=8,DIRECT=1,TILE_K=128,WARPS=4,WARPS_M=1,WARPS_K=2,STAGES=4,PROMOTE=0"
ring64="TILE_N=128,TILE_M=32,DIRECT=1,TILE_K=128,WARPS=8,WARPS_M=1,WARPS_K=1,STAGES=4,PROMOTE=1"
pipe64="TILE_N=128,TILE_M=64,DIRECT=0,TILE_K=128,WARPS=8,WARPS_M=2,WARPS_K=1,STAGES=3,SPLIT_K=1,PROMOTE=0"
pipe64p="TILE_N=128,TILE_M=64,DIRECT=0,TILE_K=128,WARPS=4,WARPS_M=2,WARPS_K=1,STAGES=3,SPLIT_K=1,PROMOTE=1"
qpipe1="TILE_N=64,TILE_M=8,DIRECT=0,TILE_K=256,WARPS=4,WARPS_M=1,WARPS_K=1,STAGES=2,SPLIT_K=1,PROMOTE=0"
qpipe32="TILE_N=64,TILE_M=32,DIRECT=0,TILE_K=256,WARPS=4,WARPS_M=4,WARPS_K=1,STAGES=2,SPLIT_K=2,PROMOTE=0"
# family|how (a --config, or sample:N:SEED[:WHERE])
jobs=(
    "fp8_gemm|default" "fp8_gemm|$ring1,SPLIT_K=1" "fp8_gemm|$ring1,SPLIT_K=2" "fp8_gemm|$ring1,SPLIT_K=4"
    "fp8_gemm|$ring64,SPLIT_K=1" "fp8_gemm|$ring64,SPLIT_K=2" "fp8_gemm|$pipe64" "fp8_gemm|$pipe64p"
    "fp8_gemm|sample:6:11" "fp8_gemm|sample:3:12:TILE_M=8" "fp8_gemm|sample:3:13:TILE_M=64"
    "quant_fp8_gemm|default" "quant_fp8_gemm|$ring1,SPLIT_K=1" "quant_fp8_gemm|$qpipe1" "quant_fp8_gemm|$qpipe32"
    "quant_fp8_gemm|sample:4:11"
)

# compile WHO FAMILY ARCH HOW: emits DIR/WHO/FAMILY/ARCH/<config>.cubin (renamed from the variant
# id, which follows the source hash, to its config) and lists the configs it could not build.
compile() {
    local who=$1 family=$2 arch=$3 how=$4 kt dir args
    kt=$([ "$who" = base ] && echo "$base" || echo "$new")
    dir=$tmp/$who/$family/$arch
    mkdir -p "$dir/raw"
    case $how in
        default) args=(--sample 1) ;;
        sample:*) IFS=: read -r _ n seed where <<<"$how"
                  args=(--sample "$n" --seed "$seed")
                  [ -n "$where" ] && args+=(--where "$where") ;;
        *) args=(--config "$how") ;;
    esac
    "$kt" compile --family "$family" --arch "$arch" "${args[@]}" --emit "$dir/raw" >"$dir/out" 2>&1
    awk 'NF >= 7 && length($1) == 16 && $1 ~ /^[0-9a-f]+$/ {print $1, $NF}' "$dir/out" | while read -r id config; do
        [ -f "$dir/raw/$id.cubin" ] && mv "$dir/raw/$id.cubin" "$dir/$config.cubin" || echo "$config" >>"$dir/failed"
    done
}

# sass FILE: the instruction lines of every kernel, addresses, encodings and label numbers out.
sass() {
    "$cuobjdump" -sass "$1" | grep -E '^\s+/\*[0-9a-f]{4,}\*/|Function :' |
        sed -E 's@/\*[0-9a-f]{4,}\*/@@; s@/\* 0x[0-9a-f]+ \*/@@g; s@\.L_x_[0-9]+@.L@g; s/[[:space:]]+/ /g'
}
# regs: the same with register numbers and ptxas's .reuse hints (which follow the allocation)
# out: a different allocation of the same instructions.
regs() { sed -E 's/\bU?R[0-9]+\b/R/g; s/\bU?P[0-6]\b/P/g; s/\.reuse//g' "$1"; }
# opcodes: the sorted opcodes (predicates and operands out): what the two have in different kinds.
opcodes() { awk '{o = $1; if (o ~ /^@/) o = $2; print o}' "$1" | sort; }
encodings() { "$cuobjdump" -sass "$1" | grep -oE '/\* 0x[0-9a-f]{16} \*/' | tr -d '\n'; }

for arch in $ARCHS; do
    for job in "${jobs[@]}"; do
        family=${job%%|*}
        how=${job#*|}
        compile base "$family" "$arch" "$how"
        compile new "$family" "$arch" "$how"
    done
done

same=0 renamed=0 reordered=0 differ=0 failed=0
for arch in $ARCHS; do
    for family in fp8_gemm quant_fp8_gemm; do
        b=$tmp/base/$family/$arch n=$tmp/new/$family/$arch
        for f in $(cd "$b" && ls -- *.cubin 2>/dev/null; cd "$n" && ls -- *.cubin 2>/dev/null); do echo "$f"; done | sort -u >"$tmp/list"
        while read -r f; do
            config=${f%.cubin}
            if [ ! -f "$b/$f" ] || [ ! -f "$n/$f" ]; then
                echo "FAILED $family $arch $config: built by one kt only"
                failed=$((failed + 1))
                continue
            fi
            sass "$b/$f" >"$tmp/b.sass"
            sass "$n/$f" >"$tmp/n.sass"
            total=$(wc -l <"$tmp/b.sass")
            if cmp -s "$tmp/b.sass" "$tmp/n.sass"; then
                enc=$([ "$(encodings "$b/$f")" = "$(encodings "$n/$f")" ] && echo "encodings identical" || echo "encodings differ")
                echo "same   $family $arch $config ($total instructions, $enc)"
                same=$((same + 1))
            elif [ "$(wc -l <"$tmp/n.sass")" -eq "$total" ] && cmp -s <(regs "$tmp/b.sass") <(regs "$tmp/n.sass"); then
                d=$(diff "$tmp/b.sass" "$tmp/n.sass" | grep -c '^>')
                echo "regs   $family $arch $config ($total instructions, the same in order; $d use other register numbers)"
                renamed=$((renamed + 1))
            elif [ "$(wc -l <"$tmp/n.sass")" -eq "$total" ] && cmp -s <(regs "$tmp/b.sass" | sort) <(regs "$tmp/n.sass" | sort); then
                d=$(diff <(regs "$tmp/b.sass") <(regs "$tmp/n.sass") | grep -c '^>')
                echo "order  $family $arch $config ($total instructions, the same multiset; $d placed or allocated differently)"
                reordered=$((reordered + 1))
            else
                d=$(diff "$tmp/b.sass" "$tmp/n.sass" | grep -c '^[<>]')
                ops=$(diff <(opcodes "$tmp/b.sass") <(opcodes "$tmp/n.sass") | grep -c '^[<>]')
                echo "DIFFER $family $arch $config ($total and $(wc -l <"$tmp/n.sass") instructions, $d lines differ; opcodes: $ops differ as a multiset)"
                differ=$((differ + 1))
            fi
        done <"$tmp/list"
        for who in base new; do
            [ -f "$tmp/$who/$family/$arch/failed" ] || continue
            while read -r c; do echo "note: $family $arch $c did not build with the $who kt"; done <"$tmp/$who/$family/$arch/failed"
        done
    done
done
echo "$same same, $renamed same but for register numbers, $reordered same instructions in another order, $differ differ, $failed failed"
[ $differ -eq 0 ] && [ $failed -eq 0 ] && [ $renamed -eq 0 ] && [ $reordered -eq 0 ]
