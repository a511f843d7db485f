#!/usr/bin/env bash
# Runs the tests with every checkpoint on S3: WEIR_TEST_CHECKPOINT_DIR=s3 makes the tests'
# shared helper (crates/weir/tests/support/test_checkpoints.rs, used by the engine's, the
# CLI's and the connectors' tests) start moto's S3 server on loopback (`moto_server`, from
# PyPI; installed here when missing) and point each test's checkpoint and savepoint folder
# at a fresh prefix of a bucket there, so the same tests that prove exactly-once on a local
# disk prove it on object storage: injected failures, SIGKILLs and `--restore latest`,
# rescaling, savepoints, corrupt and foreign files, two-phase commit into PostgreSQL and
# NATS.
#
#   scripts/test-s3.sh              # the whole workspace suite, checkpoints on S3 (~15 min
#                                   # after the build; the connector and dashboard tests
#                                   # need scripts/test.sh's services: run that once first)
#   scripts/test-s3.sh --ci         # the representative subset CI runs (~1.5 min)
#   scripts/test-s3.sh --test rescale    # anything else: passed on to cargo test
#
# Tests that keep a local folder on purpose, and why (they run locally within the suite):
# - cli's unwritable_checkpoint_dir_is_named and the symlink/permission checks test the
#   local disk's own errors; flags and layers have no checkpoint folder to move;
# - memory_storage (mem://) and s3 (always on S3, against servers it starts itself);
# - state_larger_than_memory: its bounded restore maps local checkpoint files (one read
#   from S3 is held in memory).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v moto_server >/dev/null 2>&1; then
    echo "scripts/test-s3.sh: installing moto's S3 server (PyPI: moto[server])" >&2
    python3 -m pip install -q 'moto[server]' || pip3 install -q 'moto[server]' || {
        echo "scripts/test-s3.sh: cannot install moto[server]; run: pip install 'moto[server]'" >&2
        exit 1
    }
    hash -r
fi
export WEIR_TEST_CHECKPOINT_DIR=s3

case "${1:-}" in
    "")
        # The same features as `scripts/test.sh`, so it reuses that build; every test
        # binary runs even after one failed, so one run shows every failure.
        exec cargo test --workspace --all-features --no-fail-fast
        ;;
    --ci)
        args=()
        for t in exactly_once corrupt two_phase_commit windows_sessions kill_restore checkpoints_list; do
            args+=(--test "$t")
        done
        exec cargo test --workspace --all-features --no-fail-fast "${args[@]}"
        ;;
    *)
        exec cargo test --workspace --all-features "$@"
        ;;
esac
