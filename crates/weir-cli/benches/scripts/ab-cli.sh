#!/usr/bin/env bash
# Interleaved A/B of two `weir` binaries on one command line: R rounds, each running A and
# B once (A first in odd rounds, B first in even ones, so neither always gets the warmer or
# quieter slot), each run with a fresh --checkpoint-dir. Prints every run, then the medians
# and the median of the per-round B ÷ A ratios: a burst of outside load hits both runs of a
# round, so the per-round ratio is steadier than the ratio of medians.
#
#   crates/weir-cli/benches/scripts/ab-cli.sh [-r ROUNDS] [-c] [-A "WORDS"] [-B "WORDS"] BIN_A BIN_B -- ARGS...
#
# ARGS are the weir arguments (`run keyed-count --events N ...`) and must include
# `--events N`; -A / -B add words to one side only (split on spaces), so BIN_A and BIN_B
# may be the same binary run two ways: leading words of the form VAR=value set that side's
# environment (through `env`), the rest are added arguments. events/s = N ÷ the job's time
# as the run summary prints it ("finished in X s"), or ÷ the process's wall time (start-up
# included) if the summary has no such line. Peak RSS comes from `/usr/bin/time` when it is
# installed. The script stops at the first run that fails.
#
# -c adds, per run and as medians, events per CPU-second (N ÷ user+sys, from
# `/usr/bin/time`, which it then needs) and the run's checkpoints (count, duration median
# and max), with the per-round B ÷ A ratio of events per CPU-s and of the checkpoint
# median: for the disk backend's write path, where wall time moves with the machine's load
# and CPU time is the steadier figure. Examples (BENCHMARKS.md):
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
#   # the disk backend's write path by CPU time and checkpoints, B with an environment knob
#   crates/weir-cli/benches/scripts/ab-cli.sh -c -r 3 -B "WEIR_DISK_INGEST=2" \
#       /work/bin-main-weir target/release/weir -- run keyed-count --events 6000000 \
#       --keys 3000000 --parallelism 2 --checkpoint-interval 1s --state-backend disk \
#       --incremental-checkpoints --discard-output --state-cache-entries 300000 \
#       --state-block-cache 20MiB --state-write-buffer 20MiB
set -euo pipefail
# shellcheck source=bench-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

rounds=5
cpu=""
extra_a=""
extra_b=""
while getopts "r:cA:B:h" opt; do
    case $opt in
    r) rounds=$OPTARG ;;
    c) cpu=1 ;;
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
[ -z "$cpu" ] || need_gnu_time ab-cli.sh

events=$(events_arg "$@")
[ -n "$events" ] || { echo "ab-cli.sh: ARGS need --events N" >&2; exit 2; }

timer=()
[ -x /usr/bin/time ] && timer=(/usr/bin/time -f "%M %U %S" -o)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# side_words WORDS -> "ENV|ARGS": the leading VAR=value words of -A / -B, then the rest
side_words() {
    local w envs="" args="" in_env=1
    for w in $1; do
        if [ -n "$in_env" ] && [[ $w =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
            envs+="$w "
        else
            in_env="" args+="$w "
        fi
    done
    echo "$envs|$args"
}

# run BIN ENV ARGS... -> "events_per_s peak_kb events_per_cpu_s checkpoints median_ms max_ms"
# ("-" for what was not measured)
run() {
    local bin=$1 envs=$2 dir time_file out t0 t1 secs rss cpu_s ckpt
    shift 2
    dir=$(mktemp -d "$work/ckpt.XXXX")
    time_file="$work/time"
    out="$work/out"
    : >"$time_file"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086 # ENV is a list of assignments
    if [ ${#timer[@]} -gt 0 ]; then
        "${timer[@]}" "$time_file" env $envs "$bin" "$@" --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
            { cat "$out" "$work/err" >&2; echo "ab-cli.sh: $bin failed" >&2; exit 1; }
    else
        env $envs "$bin" "$@" --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
            { cat "$out" "$work/err" >&2; echo "ab-cli.sh: $bin failed" >&2; exit 1; }
    fi
    t1=$(date +%s.%N)
    rm -rf "$dir"
    secs=$(grep -o 'finished in [0-9.]* s' "$out" | head -n1 | awk '{print $3}')
    [ -n "$secs" ] || secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')
    rss="-" cpu_s="-"
    if [ -s "$time_file" ]; then
        rss=$(tail -n1 "$time_file" | awk '{print $1}')
        cpu_s=$(tail -n1 "$time_file" | awk '{print $2 + $3}')
    fi
    ckpt=$(checkpoint_figures "$out" | awk '{print $1, $2, $3}')
    awk -v n="$events" -v s="$secs" -v r="$rss" -v c="$cpu_s" -v k="$ckpt" \
        'BEGIN{printf "%.0f %s %s %s\n", n/s, r, c == "-" ? "-" : sprintf("%.0f", n/c), k}'
}

echo "ab-cli.sh: A = $bin_a $extra_a, B = $bin_b $extra_b, $rounds rounds; load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "ARGS: $*"
: >"$work/a"
: >"$work/b"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2 == 1)); then order="a b"; else order="b a"; fi
    for side in $order; do
        if [ "$side" = a ]; then bin=$bin_a extra=$extra_a; else bin=$bin_b extra=$extra_b; fi
        words=$(side_words "$extra")
        # shellcheck disable=SC2086 # -A / -B are lists of arguments
        res=$(run "$bin" "${words%%|*}" "$@" ${words#*|})
        echo "$res" >>"$work/$side"
        echo "round $i/$rounds $side: $(echo "$res" | awk -v cpu="$cpu" '
            function rate(x) { return x >= 1e6 ? sprintf("%.1f M", x / 1e6) : sprintf("%.1f k", x / 1e3) }
            { printf "%s events/s, peak %s kB", rate($1), $2
              if (cpu) printf ", %s events per CPU-s, %s checkpoints, median %s ms, max %s ms", rate($3), $4, $5, $6 }'), load $(cut -d' ' -f1 /proc/loadavg)"
    done
done

paste -d' ' "$work/a" "$work/b" | awk -v cpu="$cpu" "$AWK_MEDIAN"'
function rate(x) { return x >= 1e6 ? sprintf("%.1f M", x / 1e6) : sprintf("%.1f k", x / 1e3) }
{ n++; a[n] = $1; b[n] = $7; r[n] = $7 / $1; ra[n] = $2; rb[n] = $8; list = list sprintf("%s%.3f", n > 1 ? ", " : "", $7 / $1)
  ca[n] = $3; cb[n] = $9; rc[n] = $3 > 0 ? $9 / $3 : 0
  ma[n] = $5; mb[n] = $11; rm[n] = $5 > 0 ? $11 / $5 : 0; xa[n] = $6; xb[n] = $12 }
END {
    printf "\n| | A (median) | B (median) | median of per-round B ÷ A |\n|---|---:|---:|---:|\n"
    printf "| events/s | %s | %s | ×%.2f |\n", rate(median(a, n)), rate(median(b, n)), median(r, n)
    if (ra[1] != "-") printf "| peak RSS | %.0f MB | %.0f MB | |\n", median(ra, n) * 1.024 / 1000, median(rb, n) * 1.024 / 1000
    if (cpu) {
        printf "| events per CPU-s | %s | %s | ×%.2f |\n", rate(median(ca, n)), rate(median(cb, n)), median(rc, n)
        printf "| checkpoint median | %.0f ms | %.0f ms | ×%.2f |\n", median(ma, n), median(mb, n), median(rm, n)
        printf "| checkpoint max | %.0f ms | %.0f ms | |\n", median(xa, n), median(xb, n)
    }
    printf "\nper-round B ÷ A: %s\n", list
}'
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at end"
