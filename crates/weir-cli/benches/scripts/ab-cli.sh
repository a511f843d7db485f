#!/usr/bin/env bash
# Interleaved A/B of two `weir` binaries on one command line: R rounds, each running A and
# B once (A first in odd rounds, B first in even ones, so neither always gets the warmer or
# quieter slot), each run with a fresh --checkpoint-dir. Prints every run, then the medians
# and the median of the per-round B ÷ A ratios: a burst of outside load hits both runs of a
# round, so the per-round ratio is steadier than the ratio of medians.
#
#   crates/weir-cli/benches/scripts/ab-cli.sh [-r ROUNDS] [-A "ARGS"] [-B "ARGS"] BIN_A BIN_B -- ARGS...
#
# ARGS are the weir arguments (`run keyed-count --events N ...`) and must include
# `--events N`; -A / -B add arguments to one side only (split on spaces), so BIN_A and
# BIN_B may be the same binary run two ways. events/s = N ÷ the job's time as the run
# summary prints it ("finished in X s"), or ÷ the process's wall time (start-up included)
# if the summary has no such line. Peak RSS comes from `/usr/bin/time -f %M` when it is
# installed. The script stops at the first run that fails. Examples (BENCHMARKS.md):
#
#   # two commits: "Before and after this pass, interleaved"
#   mkdir -p /tmp/a33b62c && git archive a33b62c | tar -x -C /tmp/a33b62c
#   (cd /tmp/a33b62c && cargo build --release -p weir-cli)   # -> /tmp/a33b62c/target/release/weir
#   cargo build --release -p weir-cli                         # -> target/release/weir
#   crates/weir-cli/benches/scripts/ab-cli.sh -r 7 /tmp/a33b62c/target/release/weir \
#       target/release/weir -- run keyed-count --events 50000000 --keys 100000 \
#       --emit updates --discard-output --parallelism 2
#   # one binary, two settings: checkpoints every 200 ms against off
#   crates/weir-cli/benches/scripts/ab-cli.sh -r 5 -A "--checkpoint-interval off" \
#       -B "--checkpoint-interval 200ms" target/release/weir target/release/weir -- \
#       run keyed-count --events 300000000 --keys 100000 --emit updates --discard-output
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p' >&2
    exit 2
}

rounds=5
extra_a=""
extra_b=""
while getopts "r:A:B:h" opt; do
    case $opt in
    r) rounds=$OPTARG ;;
    A) extra_a=$OPTARG ;;
    B) extra_b=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || usage
bin_a=$1 bin_b=$2
shift 2
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || usage

events=""
prev=""
for arg in "$@"; do
    [ "$prev" = "--events" ] && events=${arg//_/}
    prev=$arg
done
[ -n "$events" ] || { echo "ab-cli.sh: ARGS need --events N" >&2; exit 2; }

timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f %M -o)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run BIN -> prints "events_per_s peak_kb"
run() {
    local bin=$1 dir rss_file out t0 t1 secs rss
    shift
    dir=$(mktemp -d "$work/ckpt.XXXX")
    rss_file="$work/rss"
    out="$work/out"
    t0=$(date +%s.%N)
    if [ ${#timer[@]} -gt 0 ]; then
        "${timer[@]}" "$rss_file" "$bin" "$@" --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
            { cat "$out" "$work/err" >&2; echo "ab-cli.sh: $bin failed" >&2; exit 1; }
    else
        "$bin" "$@" --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
            { cat "$out" "$work/err" >&2; echo "ab-cli.sh: $bin failed" >&2; exit 1; }
    fi
    t1=$(date +%s.%N)
    rm -rf "$dir"
    secs=$(grep -o 'finished in [0-9.]* s' "$out" | head -n1 | awk '{print $3}')
    [ -n "$secs" ] || secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
    rss="-"
    [ -s "$rss_file" ] && rss=$(tail -n1 "$rss_file")
    awk -v n="$events" -v s="$secs" -v r="$rss" 'BEGIN{printf "%.0f %s\n", n/s, r}'
}

echo "ab-cli.sh: A = $bin_a $extra_a, B = $bin_b $extra_b, $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "ARGS: $*"
: >"$work/a"
: >"$work/b"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2 == 1)); then order="a b"; else order="b a"; fi
    for side in $order; do
        if [ "$side" = a ]; then bin=$bin_a extra=$extra_a; else bin=$bin_b extra=$extra_b; fi
        # shellcheck disable=SC2086 # -A / -B are lists of arguments
        res=$(run "$bin" "$@" $extra)
        echo "$res" >>"$work/$side"
        echo "round $i/$rounds $side: $(echo "$res" | awk '{printf "%.1f M events/s, peak %s kB", $1/1e6, $2}'), load $(cut -d' ' -f1 /proc/loadavg)"
    done
done

paste -d' ' "$work/a" "$work/b" | awk '
function median(v, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
}
{ n++; a[n] = $1; b[n] = $3; r[n] = $3 / $1; ra[n] = $2; rb[n] = $4; list = list sprintf("%s%.3f", n > 1 ? ", " : "", $3 / $1) }
END {
    printf "\n| | A (median) | B (median) | median of per-round B ÷ A |\n|---|---:|---:|---:|\n"
    printf "| events/s | %.1f M | %.1f M | ×%.2f |\n", median(a, n) / 1e6, median(b, n) / 1e6, median(r, n)
    if (ra[1] != "-") printf "| peak RSS | %.0f MB | %.0f MB | |\n", median(ra, n) * 1.024 / 1000, median(rb, n) * 1.024 / 1000
    printf "\nper-round B ÷ A: %s\n", list
}'
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at end"
