# Sourced by the benchmark scripts beside it (ab-cli.sh, s3-rows.sh), not run: what they
# share, so that a fix to one (a new unit in the run summary, say) reaches both — the usage
# text, the `--events N` of a weir command line, the figures of a run summary's
# `checkpoints:` line, and awk's median.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

# usage: prints the sourcing script's header comment (from line 2 to its `set -euo` line)
# on stderr and exits 2 — the header is the script's one description of itself.
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p' >&2
    exit 2
}

# need_gnu_time NAME: exits 2, naming the script, unless GNU time is installed (the
# scripts read a run's CPU time and peak RSS from it).
need_gnu_time() {
    [ -x /usr/bin/time ] || { echo "$1: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
}

# events_arg ARGS... -> the N of `--events N` (underscores dropped: 50_000_000), or
# nothing if ARGS have no `--events`.
events_arg() {
    local arg prev=""
    for arg in "$@"; do
        [ "$prev" = "--events" ] && echo "${arg//_/}" && return
        prev=$arg
    done
}

# checkpoint_figures FILE -> "count median_ms max_ms last_size_bytes" from the run summary
# in FILE, whose line is `checkpoints: N completed, F failed; duration median X ms, max Y
# ms; …; last size Z bytes`; "0 - - -" when none completed (or no such line). Durations in
# s or µs are turned into ms.
checkpoint_figures() {
    grep -m1 '^checkpoints:' "$1" | awk '
    function ms(v, u) { return u ~ /^s/ ? v * 1000 : u ~ /^µs/ ? v / 1000 : v }
    {
        n = $2; med = max = size = "-"
        for (i = 1; i < NF; i++) {
            if ($i == "median") med = ms($(i+1), $(i+2))
            if ($i == "max" && $(i-1) ~ /ms,$|s,$/) max = ms($(i+1), $(i+2))
            if ($i == "size") size = $(i+1)
        }
    }
    END { if (n ~ /^[0-9]+$/) print n, med, max, size; else print "0 - - -" }'
}

# AWK_MEDIAN: awk's `median(v, n)` of v[1..n] (sorted in place), to put before an awk
# program: awk "$AWK_MEDIAN"' { … }'.
# shellcheck disable=SC2034 # used by the scripts that source this file
AWK_MEDIAN='
function median(v, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
}'
