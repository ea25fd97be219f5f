#!/usr/bin/env bash
# sass_configs.sh — whether two kt builds compile the same configs of any family to the same machine
# code, without a GPU: each config NVRTC-compiled by both (`kt compile --config C --emit`, one at a
# time, so that a build with a new tunable, which names its cubin's config with that tunable's
# default too, compares under the same --config), every kernel of the module disassembled (tools/
# cuobjdump.sh -sass) and compared with addresses and branch-label numbers taken out, and the
# encodings (scheduling included) compared as well. tools/sass_diff.sh does the FP8 GEMM families'
# fixed and sampled configs; this one takes the configs given.
# usage: tools/sass_configs.sh BASE_KT NEW_KT FAMILY ARCH CONFIG...
# Prints `same` or `DIFFER` per config; exits 1 unless every one is the same.
set -u
cd "$(dirname "$0")/.."
[ $# -ge 5 ] || { echo "usage: tools/sass_configs.sh BASE_KT NEW_KT FAMILY ARCH CONFIG..." >&2; exit 2; }
base=$1 new=$2 family=$3 arch=$4
shift 4
cuobjdump=$(bash tools/cuobjdump.sh) || { echo "sass_configs: no cuobjdump (tools/cuobjdump.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sass() {
    "$cuobjdump" -sass "$1" | grep -E '^\s+/\*[0-9a-f]{4,}\*/|Function :' |
        sed -E 's@/\*[0-9a-f]{4,}\*/@@; s@/\* 0x[0-9a-f]+ \*/@@g; s@\.L_x_[0-9]+@.L@g; s/[[:space:]]+/ /g'
}
encodings() { "$cuobjdump" -sass "$1" | grep -oE '/\* 0x[0-9a-f]{16} \*/' | tr -d '\n'; }
differ=0
for c in "$@"; do
    for who in base new; do
        kt=$([ "$who" = base ] && echo "$base" || echo "$new")
        rm -rf "${tmp:?}/$who" && mkdir -p "$tmp/$who"
        KT_CACHE_DIR=$tmp/cache_$who "$kt" compile --family "$family" --arch "$arch" --config "$c" --emit "$tmp/$who" \
            >"$tmp/$who.out" 2>&1
    done
    b=$(ls "$tmp"/base/*.cubin 2>/dev/null) n=$(ls "$tmp"/new/*.cubin 2>/dev/null)
    if [ -z "$b" ] || [ -z "$n" ]; then
        echo "DIFFER $family $arch $c: built by $([ -n "$b" ] && echo the base only || echo not the base)"
        differ=$((differ + 1))
        continue
    fi
    sass "$b" >"$tmp/b.sass"
    sass "$n" >"$tmp/n.sass"
    if cmp -s "$tmp/b.sass" "$tmp/n.sass"; then
        enc=$([ "$(encodings "$b")" = "$(encodings "$n")" ] && echo "encodings identical" || echo "encodings differ")
        echo "same   $family $arch $c ($(wc -l <"$tmp/b.sass") instructions, $enc)"
    else
        echo "DIFFER $family $arch $c ($(wc -l <"$tmp/b.sass") and $(wc -l <"$tmp/n.sass") instructions," \
            "$(diff "$tmp/b.sass" "$tmp/n.sass" | grep -c '^[<>]') lines differ)"
        differ=$((differ + 1))
    fi
done
[ "$differ" -eq 0 ]
