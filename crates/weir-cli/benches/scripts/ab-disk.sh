#!/usr/bin/env bash
# Interleaved A/B of two `weir` binaries on one command line, measured by CPU time: R
# rounds, each running A and B once (A first in odd rounds, B first in even ones), each
# under `/usr/bin/time -v` with a fresh --checkpoint-dir. Per run it prints events per
# CPU-second (N ÷ user+sys), events/s (N ÷ the job's "finished in"), peak RSS, and the
# run's checkpoint line (count, duration median and max); then the medians of each side
# and the median of the per-round B ÷ A ratios of events per CPU-s and of the checkpoint
# median. For the disk backend's write path (issue 25), where wall time moves with the
# machine's load and CPU time is the steadier figure. Environment variables for one side
# only: -A / -B "VAR=value ..." (passed through `env`).
#
#   crates/weir-cli/benches/scripts/ab-disk.sh [-r ROUNDS] [-A "ENV"] [-B "ENV"] BIN_A BIN_B -- ARGS...
#
# ARGS are the weir arguments and must include `--events N`. Example (BENCHMARKS.md):
#
#   crates/weir-cli/benches/scripts/ab-disk.sh -r 3 /work/bin-main-weir target/release/weir -- \
#       run keyed-count --events 6000000 --keys 3000000 --parallelism 2 \
#       --checkpoint-interval 1s --state-backend disk --incremental-checkpoints \
#       --discard-output --state-cache-entries 300000 --state-block-cache 20MiB \
#       --state-write-buffer 20MiB
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p' >&2
    exit 2
}

rounds=3
env_a=""
env_b=""
while getopts "r:A:B:h" opt; do
    case $opt in
    r) rounds=$OPTARG ;;
    A) env_a=$OPTARG ;;
    B) env_b=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 3 ] || usage
bin_a=$1 bin_b=$2
shift 2
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || usage
[ -x /usr/bin/time ] || { echo "ab-disk.sh: needs /usr/bin/time (GNU time)" >&2; exit 2; }

events=""
prev=""
for arg in "$@"; do
    [ "$prev" = "--events" ] && events=${arg//_/}
    prev=$arg
done
[ -n "$events" ] || { echo "ab-disk.sh: ARGS need --events N" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# to_ms "12.3 ms" | "1.2 s" -> milliseconds
to_ms() { awk -v v="$1" -v u="$2" 'BEGIN{ if (u == "s") v *= 1000; printf "%.1f", v }'; }

# run BIN ENV -> "ev_per_cpu_s ev_per_s peak_kb ckpts median_ms max_ms"
run() {
    local bin=$1 envs=$2 dir out tv secs cpu rss line med max n
    shift 2
    dir=$(mktemp -d "$work/ckpt.XXXX")
    out="$work/out" tv="$work/time"
    # shellcheck disable=SC2086 # ENV is a list of assignments
    /usr/bin/time -v -o "$tv" env $envs "$bin" "$@" --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
        { cat "$out" "$work/err" "$tv" >&2; echo "ab-disk.sh: $bin failed" >&2; exit 1; }
    rm -rf "$dir"
    secs=$(grep -o 'finished in [0-9.]* s' "$out" | head -n1 | awk '{print $3}')
    cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$tv")
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tv")
    line=$(grep '^checkpoints:' "$out" | head -n1)
    n=$(echo "$line" | awk '{print $2}')
    med=$(echo "$line" | sed -n 's/.*duration median \([0-9.]*\) \(m\{0,1\}s\).*/\1 \2/p')
    max=$(echo "$line" | sed -n 's/.*, max \([0-9.]*\) \(m\{0,1\}s\);.*/\1 \2/p')
    med=$(to_ms $med) max=$(to_ms $max)
    awk -v n="$events" -v s="$secs" -v c="$cpu" -v r="$rss" -v k="$n" -v m="$med" -v x="$max" \
        'BEGIN{printf "%.0f %.0f %s %s %s %s\n", n/c, n/s, r, k, m, x}'
}

echo "ab-disk.sh: A = $env_a $bin_a, B = $env_b $bin_b, $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "ARGS: $*"
: >"$work/a"
: >"$work/b"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2 == 1)); then order="a b"; else order="b a"; fi
    for side in $order; do
        if [ "$side" = a ]; then bin=$bin_a envs=$env_a; else bin=$bin_b envs=$env_b; fi
        res=$(run "$bin" "$envs" "$@")
        echo "$res" >>"$work/$side"
        echo "round $i/$rounds $side: $(echo "$res" | awk '{printf "%.1f k events per CPU-s, %.1f k events/s, peak %.0f MB, %s checkpoints, median %s ms, max %s ms", $1/1e3, $2/1e3, $3*1.024/1000, $4, $5, $6}'), load $(cut -d' ' -f1 /proc/loadavg)"
    done
done

paste -d' ' "$work/a" "$work/b" | awk '
function median(v, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
    return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
}
{ n++; ca[n] = $1; cb[n] = $7; ea[n] = $2; eb[n] = $8; ra[n] = $3; rb[n] = $9
  ma[n] = $5; mb[n] = $11; xa[n] = $6; xb[n] = $12; rc[n] = $7 / $1; rm[n] = $11 / $5 }
END {
    printf "\n| | A (median) | B (median) | median of per-round B ÷ A |\n|---|---:|---:|---:|\n"
    printf "| events per CPU-s | %.1f k | %.1f k | ×%.2f |\n", median(ca, n) / 1e3, median(cb, n) / 1e3, median(rc, n)
    printf "| events/s | %.1f k | %.1f k | |\n", median(ea, n) / 1e3, median(eb, n) / 1e3
    printf "| checkpoint median | %.0f ms | %.0f ms | ×%.2f |\n", median(ma, n), median(mb, n), median(rm, n)
    printf "| checkpoint max | %.0f ms | %.0f ms | |\n", median(xa, n), median(xb, n)
    printf "| peak RSS | %.0f MB | %.0f MB | |\n", median(ra, n) * 1.024 / 1000, median(rb, n) * 1.024 / 1000
}'
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at end"
