#!/usr/bin/env bash
# Runs the recovery tests with every checkpoint on S3: WEIR_TEST_CHECKPOINT_DIR=s3 makes the
# tests' shared helpers (crates/weir/tests/common.rs, crates/weir-cli/tests/common) start
# moto's S3 server on loopback (`moto_server`, from PyPI; installed here when missing) and
# point each test's checkpoint folder at a fresh prefix of a bucket there, so the same
# tests that prove exactly-once on a local disk prove it on object storage: injected
# failures, SIGKILLs and `--restore latest`, rescaling, savepoints, corrupt and foreign
# files, two-phase commit.
#
#   scripts/test-s3.sh              # every test whose checkpoints can be on S3 (~7 min after the build)
#   scripts/test-s3.sh --ci         # the representative subset CI runs (~1 min)
#   scripts/test-s3.sh --test rescale    # anything else: passed on to cargo test
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

engine=(exactly_once restart rescale savepoints corrupt hooks timers windows two_phase_commit
    windows_sessions windows_all windows_count windows_late windows_process interval_join
    window_join connected state_kinds event_time partitioning file_connectors)
cli=(kill_restore connectors_files cli nexmark_job checkpoints_list state_inspect)
# Not in the list, and why:
# - cli's unwritable_checkpoint_dir_is_named and the symlink/permission checks keep local
#   paths on purpose (they test the local disk's errors); they run locally within `cli`.
# - examples, example_postgres: the example binaries keep their checkpoints in the default
#   folder of their working directory; not routed yet.
# - connectors_nats, connectors_postgres: need their servers (scripts/test.sh's services).
# - s3 (always on S3), layers, memory_storage, flags, control, dashboard*, runner, nexmark:
#   no checkpoint folder, or one that is not what the test is about.
case "${1:-}" in
    "") ;;
    --ci)
        engine=(exactly_once corrupt two_phase_commit windows_sessions)
        cli=(kill_restore checkpoints_list)
        ;;
    *)
        # The same features as `scripts/test.sh`, so CI reuses its build.
        exec cargo test --workspace --all-features "$@"
        ;;
esac
args=()
for t in "${engine[@]}" "${cli[@]}"; do
    args+=(--test "$t")
done
exec cargo test --workspace --all-features "${args[@]}"
