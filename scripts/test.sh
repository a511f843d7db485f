#!/usr/bin/env bash
# Runs every test of the workspace, as CI does, after installing what the tests need and
# this machine lacks: the connector tests start their own PostgreSQL and nats-server on
# loopback, from Debian's packages; the S3 tests start moto's S3 server (`moto_server`, from
# PyPI); the dashboard's browser test drives Debian's headless `chromium`; the deployment
# test validates deploy/kubernetes/ with `kubernetes-validate` (PyPI); the container tests
# (cluster_docker) need Docker Engine's daemon running (WEIR_SKIP_DOCKER_TESTS=1 skips them). Arguments are
# passed on to `cargo test` (and then only that runs).
#
#   scripts/test.sh                      # everything
#   scripts/test.sh -p weir --test rescale
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
command -v chromium >/dev/null 2>&1 || [ -n "${WEIR_CHROMIUM:-}" ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
    echo "scripts/test.sh: installing ${need[*]} (Debian packages) for the connector and dashboard tests" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            echo "scripts/test.sh: need root (or sudo) to install: apt-get install ${need[*]}" >&2
            exit 1
        }
        SUDO="sudo"
    fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v moto_server >/dev/null 2>&1; then
    echo "scripts/test.sh: installing moto's S3 server (PyPI: moto[server]) for the S3 tests" >&2
    python3 -m pip install -q 'moto[server]' || pip3 install -q 'moto[server]' || {
        echo "scripts/test.sh: cannot install moto[server]; run: pip install 'moto[server]'" >&2
        exit 1
    }
    hash -r
fi

if ! command -v kubernetes-validate >/dev/null 2>&1; then
    echo "scripts/test.sh: installing kubernetes-validate (PyPI) for the manifests' test" >&2
    python3 -m pip install -q kubernetes-validate || pip3 install -q kubernetes-validate || {
        echo "scripts/test.sh: cannot install kubernetes-validate; run: pip install kubernetes-validate" >&2
        exit 1
    }
    hash -r
fi

if [ $# -gt 0 ]; then
    exec cargo test "$@"
fi
# Every test binary runs even when one fails (--no-fail-fast), so one run shows every
# failure; the run ends with the list of the tests that failed.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-features --no-fail-fast 2>&1 | tee "$log" || status=$?
# Then the representative recovery tests once more with every checkpoint on S3 (moto on
# loopback; about 1.5 min on 2 cores, reusing the build above). scripts/test-s3.sh with no
# argument runs the whole suite with its checkpoints on S3.
scripts/test-s3.sh --ci 2>&1 | sed -u 's/^test \(.*\) FAILED$/test \1 FAILED (checkpoints on S3)/' \
    | tee -a "$log" || status=$?
# Then the engine's state, TTL, timer, window, join, rescale, savepoint, upgrade and recovery
# suites once more with keyed state on the disk backend and incremental checkpoints (issue
# 25: every job without an explicit backend follows WEIR_STATE_BACKEND and
# WEIR_INCREMENTAL_CHECKPOINTS), reusing the build above. TTL's own tests are unit tests
# that run on both backends in the main run. corrupt.rs stays out: its test that copies a
# state file between checkpoint folders does not apply (keyed files live in shared/).
disk_suites=(state_kinds timers event_time connected interval_join window_join windows
    windows_all windows_count windows_late windows_process windows_processing_time
    windows_sessions windows_triggers rescale savepoints restart exactly_once hooks
    schema_evolution schema_evolution_maps schema_evolution_operator schema_evolution_windows
    unaligned_replay)
disk_args=()
for t in "${disk_suites[@]}"; do disk_args+=(--test "$t"); done
WEIR_STATE_BACKEND=disk WEIR_INCREMENTAL_CHECKPOINTS=true \
    cargo test --workspace --all-features --no-fail-fast "${disk_args[@]}" 2>&1 \
    | sed -u 's/^test \(.*\) FAILED$/test \1 FAILED (keyed state on disk, incremental)/' \
    | tee -a "$log" || status=$?
if [ "$status" -ne 0 ]; then
    echo
    echo "scripts/test.sh: failed tests:"
    grep -E '^test .* FAILED' "$log" | grep -v '^test result:' | sed 's/^test /  /; s/ \.\.\. FAILED//' | sort -u || true
    grep -E '^error: (test failed|[0-9]+ targets? failed)' "$log" | sort -u || true
    exit "$status"
fi
