# budget.sh — sourced by the GPU scripts that run under one time budget (lt25.sh, seedkv.sh) once they set
# BUDGET (seconds) and T0 ($SECONDS at their start): zeroes the counts and defines
#   check RC WHAT  counts an ok / FAIL line;
#   say WORDS      prints the words after the seconds spent;
#   lim WANT       the timeout a run gets: WANT, or what is left of the budget; 0 when under 5 s are left.
passed=0 failed=0
check() { if [ "$1" = 0 ]; then passed=$((passed + 1)); echo "ok   $2"; else failed=$((failed + 1)); echo "FAIL $2"; fi; }
say() { echo "[$((SECONDS - T0))s] $*"; }
lim() {
    local l=$((BUDGET - 2 - (SECONDS - T0)))
    [ "$l" -lt "$1" ] || l=$1
    [ "$l" -ge 5 ] && echo "$l" || echo 0
}
