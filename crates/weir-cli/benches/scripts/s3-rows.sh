#!/usr/bin/env bash
# Issue 11's command-line rows, checkpoints to S3 beside the local disk, run side by side
# (R rounds; in each, one run with --checkpoint-dir on local disk and one on S3, the order
# alternating) with the release `weir`:
#
#   * ckpt-10m: one checkpoint of 10 M keys (keyed-count over 10 M events and 10 M keys:
#     its final checkpoint holds every key): the checkpoint's duration and size, as the
#     run summary prints them;
#   * w1: W1 (keyed-count, 100 k keys, p=2) with checkpoints every 200 ms (-i: W1's own
#     interval is 1s, the 200 ms default puts five times its checkpoint load on S3): events/s as the
#     run summary prints them, and checkpoint durations.
#
#   crates/weir-cli/benches/scripts/s3-rows.sh [-r ROUNDS] [-e W1_EVENTS] [-i W1_INTERVAL] [-k CKPT_KEYS] WEIR_BIN
#
# ROWS="w1" (or "ckpt-10m") runs one row only. Beside the wall-clock numbers it reports each
# run's own CPU time (/usr/bin/time) and moto's: on a loaded 2-core machine moto (Python)
# takes CPU from the job, so the run's CPU time is Weir's own cost of checkpointing to S3.
#
# S3 is a server started here on loopback unless AWS_ENDPOINT_URL is set (then the bucket
# weir-bench must exist there): moto (pip install 'moto[server]'), or with S3_SERVER=s3s-fs
# the Rust server s3s-fs (`cargo install s3s-fs --version 0.14.1 --features binary`; it
# honours If-None-Match and If-Match with 412 as moto does), which takes far less CPU than
# moto's Python from the 2 cores the job runs on. The server's CPU time is reported too. The medians per
# side and the median of per-round S3 ÷ local ratios are printed as a table; the ratios are
# what to trust on a shared machine (a burst of outside load hits both runs of a round).
set -euo pipefail
# shellcheck source=bench-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"

rounds=5
w1_events=300000000
ckpt_keys=10000000
w1_interval=200ms
while getopts "r:e:i:k:h" opt; do
    case $opt in
    r) rounds=$OPTARG ;;
    e) w1_events=$OPTARG ;;
    i) w1_interval=$OPTARG ;;
    k) ckpt_keys=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
weir=$1

work=$(mktemp -d)
server_pid=""
server=${S3_SERVER:-moto}
# The run's own CPU seconds (user + system), Weir's cost apart from moto's.
timer=(/usr/bin/time -f "%U %S" -o "$work/time")
need_gnu_time s3-rows.sh
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    sign=()
    case $server in
    moto) moto_server -H 127.0.0.1 -p "$port" >"$work/server.log" 2>&1 & ;;
    s3s-fs)
        mkdir "$work/s3s-root"
        "${S3S_FS:-s3s-fs}" --host 127.0.0.1 --port "$port" --access-key bench --secret-key bench \
            "$work/s3s-root" >"$work/server.log" 2>&1 &
        sign=(--aws-sigv4 aws:amz:us-east-1:s3 --user bench:bench -H x-amz-content-sha256:UNSIGNED-PAYLOAD) ;;
    *) echo "s3-rows.sh: S3_SERVER is moto or s3s-fs, not $server" >&2; exit 2 ;;
    esac
    server_pid=$!
    for _ in $(seq 1 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/" && break
        sleep 0.1
    done
    curl -s -f "${sign[@]}" -X PUT "http://127.0.0.1:$port/weir-bench" >/dev/null
    export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true AWS_REGION=us-east-1 \
        AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench
fi

# The S3 server's CPU seconds so far (utime + stime), 0 if it is not ours.
server_cpu() {
    [ -n "$server_pid" ] || { echo 0; return; }
    awk -v t="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); split($0, f, " "); print (f[12] + f[13]) / t }' "/proc/$server_pid/stat"
}

# run ROW SIDE N -> "value1 value2 moto_cpu" for the row
run() {
    local row=$1 side=$2 n=$3 dir out m0 m1
    if [ "$side" = local ]; then dir=$(mktemp -d "$work/ck.XXXX"); else dir="s3://weir-bench/$row-$n"; fi
    out="$work/out"
    m0=$(server_cpu)
    case $row in
    ckpt-10m)
        "${timer[@]}" "$weir" run keyed-count --events "$ckpt_keys" --keys "$ckpt_keys" --parallelism 2 \
            --discard-output --checkpoint-interval 1h --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
            { cat "$out" "$work/err" >&2; exit 1; } ;;
    w1)
        "${timer[@]}" "$weir" run keyed-count --events "$w1_events" --keys 100000 --parallelism 2 \
            --emit updates --discard-output --checkpoint-interval "$w1_interval" \
            --checkpoint-dir "$dir" >"$out" 2>"$work/err" ||
            { cat "$out" "$work/err" >&2; exit 1; } ;;
    esac
    m1=$(server_cpu)
    [ "$side" = local ] && rm -rf "$dir"
    local secs max size count cpu
    cpu=$(tail -n1 "$work/time" | awk '{print $1 + $2}')
    secs=$(grep -o 'finished in [0-9.]* s' "$out" | awk '{print $3}')
    read -r count _ max size <<<"$(checkpoint_figures "$out")"
    case $row in
    ckpt-10m) echo "$max $size $(awk -v a="$m0" -v b="$m1" 'BEGIN{print b-a}') $count $cpu" ;;
    w1) echo "$(awk -v n="$w1_events" -v s="$secs" 'BEGIN{print n/s}') $max $(awk -v a="$m0" -v b="$m1" 'BEGIN{print b-a}') $count $cpu" ;;
    esac
}

echo "s3-rows.sh: $weir, $rounds rounds, S3 ($server) at $AWS_ENDPOINT_URL; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg) at start"
for row in ${ROWS:-ckpt-10m w1}; do
    : >"$work/$row.local"
    : >"$work/$row.s3"
    for ((i = 1; i <= rounds; i++)); do
        if ((i % 2 == 1)); then order="local s3"; else order="s3 local"; fi
        for side in $order; do
            res=$(run "$row" "$side" "$i")
            echo "$res" >>"$work/$row.$side"
            echo "$row round $i $side: $res (load $(cut -d' ' -f1 /proc/loadavg))"
        done
    done
done

summary() {
    paste -d' ' "$work/$1.local" "$work/$1.s3" | awk -v row="$1" -v keys="$ckpt_keys" -v server="$server" -v interval="$w1_interval" "$AWK_MEDIAN"'
    { n++; a1[n] = $1; a2[n] = $2; ac[n] = $5; b1[n] = $6; b2[n] = $7; m[n] = $8; bn[n] = $9; bc[n] = $10
      r1[n] = $6 / $1; r2[n] = $7 / $2; rc[n] = $10 / $5; ca[n] = ac[n]; cb[n] = bc[n] }
    END {
        if (row == "ckpt-10m") {
            printf "| checkpoint of %g M keys: duration (max) | %.0f ms | %.0f ms | ×%.2f |\n", keys / 1e6, median(a1, n), median(b1, n), median(r1, n)
            printf "| checkpoint of %g M keys: size | %.0f MB | %.0f MB | |\n", keys / 1e6, median(a2, n) / 1e6, median(b2, n) / 1e6
            printf "| %g M keys run: weir CPU time (user + sys) | %.2f s | %.2f s | ×%.3f |\n", keys / 1e6, median(ca, n), median(cb, n), median(rc, n)
            printf "| %g M keys run: %s CPU time | - | %.2f s | |\n", keys / 1e6, server, median(m, n)
        } else {
            printf "| W1, checkpoints every %s: events/s | %.1f M | %.1f M | ×%.3f |\n", interval, median(a1, n) / 1e6, median(b1, n) / 1e6, median(r1, n)
            printf "| W1: checkpoint duration (max per run) | %.0f ms | %.0f ms | ×%.2f |\n", median(a2, n), median(b2, n), median(r2, n)
            printf "| W1: weir CPU time per run (user + sys) | %.2f s | %.2f s | ×%.3f |\n", median(ca, n), median(cb, n), median(rc, n)
            printf "| W1: checkpoints per run (S3) ; %s CPU time per run | | %d ; %.2f s | |\n", server, median(bn, n), median(m, n)
        }
    }'
}
echo
echo "| row ($rounds rounds, medians) | local disk | S3 ($server, loopback) | S3 ÷ local (median of rounds) |"
echo "|---|---:|---:|---:|"
for row in ${ROWS:-ckpt-10m w1}; do summary "$row"; done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at end"
