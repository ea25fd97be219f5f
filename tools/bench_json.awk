# bench_json.awk — fields of a `kt bench --json` case (one case per line) by name, for the awk
# programs that judge bench files (tools/targets.sh, tests/gpu/run.sh): use with -f before
# the program. num(key): the number, -1 if absent or not a number (null); str(key): the string,
# "" if absent.
function num(key,   r) { if (!match($0, "\"" key "\": [0-9.e+-]+")) return -1
                         r = substr($0, RSTART, RLENGTH); sub(/^.*: /, "", r); return r + 0 }
function str(key,   r) { if (!match($0, "\"" key "\": \"[^\"]*\"")) return ""
                         r = substr($0, RSTART, RLENGTH); sub(/^.*: "/, "", r); sub(/"$/, "", r); return r }
