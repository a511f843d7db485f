#!/usr/bin/env bash
# Proves the recovery tests can fail: breaks recovery on purpose in a throw-away copy of the
# working tree, three ways, runs the recovery tests against each break, and prints which
# tests caught which break. Nothing in this checkout changes.
#
#   a  restore nothing: the checkpoint is loaded and reported, but never given to the tasks
#   b  restore the source positions, but no other operator's state
#   c  restore the state, but not the source positions
#
#   scripts/break-recovery.sh            # every recovery test binary (about 20 minutes)
#   scripts/break-recovery.sh -p weir --test exactly_once
#   WEIR_STATE_BACKEND=disk scripts/break-recovery.sh   # the same, keyed state on disk
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Its own folder, always: the broken builds' binaries look up to date to cargo afterwards,
# so in a folder shared with normal builds they would be run as if they were the real ones.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$top/target}/break-recovery" RUST_BACKTRACE=0

if [ $# -eq 0 ]; then
    set -- --all-features \
        -p weir --test exactly_once --test state_kinds --test timers --test rescale \
        --test hooks --test file_connectors --test corrupt --test savepoints \
        --test memory_storage --test s3 --test schema_evolution --test schema_evolution_channel \
        --test schema_evolution_operator --test schema_evolution_windows --test schema_evolution_maps \
        -p weir-connectors --test postgres_job --test nats_sink --test nats_source \
        --test postgres_kill \
        -p weir-cli --test cli --test kill_restore --test control --test state_inspect \
        --test connectors_files --test connectors_postgres --test connectors_nats \
        --test runner --test examples --test example_postgres --test s3 --test kill_every_job \
        --test disk_state --test upgrade --test upgrade_kill --test incremental_checkpoints \
        --test cluster \
        --test cluster_jobs --test cluster_postgres --test state_larger_than_memory \
        --test cluster_incremental --test cluster_unaligned --test disk_state_remote \
        --test disk_state_bound
fi

# The edit each break makes: file, the line as it is, the line broken.
exe=crates/weir/src/runtime/coordinator/executor.rs
spawn=crates/weir/src/runtime/worker/spawn.rs
stream=crates/weir/src/api/stream.rs
declare -A file=([a]=$exe [b]=$spawn [c]=$stream)
declare -A from=(
    [a]='            .and_then(|()| exec.deploy(attempt_no, restore.as_ref()))'
    [b]='            Some(r) => r.state_for(&uid, subtask, p, self.cfg.max_parallelism)?,'
    [c]='                ctx.init_function(&mut s)?;'
)
declare -A to=(
    [a]='            .and_then(|()| exec.deploy(attempt_no, None))'
    [b]='            Some(r) if matches!(self.graph.nodes[node].kind, NodeKind::Source(_)) => r.state_for(\&uid, subtask, p, self.cfg.max_parallelism)?, Some(_) => Default::default(),'
    [c]='                ctx.operator_state.clear(); ctx.init_function(\&mut s)?;'
)

# "none" first: every test must pass unbroken, or the table below means nothing.
for b in none a b c; do
    rm -rf "$work/tree"
    git -C "$top" worktree add -q --detach "$work/tree" HEAD
    if [ "$b" != none ]; then
        f="$work/tree/${file[$b]}"
        if ! grep -qF -- "${from[$b]}" "$f"; then
            echo "break $b: ${file[$b]} no longer has the line it edits; update this script" >&2
            git -C "$top" worktree remove --force "$work/tree"
            exit 1
        fi
        # Escape for sed: the search text is literal.
        pattern=$(printf '%s' "${from[$b]}" | sed 's/[][\.*^$/&]/\\&/g')
        sed -i "s/$pattern/${to[$b]}/" "$f"
        grep -qF -- "$(printf '%s' "${to[$b]}" | sed 's/\\&/\&/g')" "$f" || {
            echo "break $b did not apply" >&2
            exit 1
        }
    fi
    echo "=== break $b" >&2
    (cd "$work/tree" && cargo test --no-fail-fast "$@" 2>&1 || true) |
        grep -E '^test .* \.\.\. (ok|FAILED)$' | sed 's/^test \(.*\) \.\.\. \(.*\)$/\1 \2/' |
        sort >"$work/$b.txt"
    git -C "$top" worktree remove --force "$work/tree"
done

if grep -q FAILED "$work/none.txt"; then
    echo "these tests fail without any break; fix them first:" >&2
    grep FAILED "$work/none.txt" >&2
    exit 1
fi
echo "caught by break (a b c), per test; '-' = passed despite the break"
join "$work/a.txt" "$work/b.txt" | join - "$work/c.txt" |
    awk '{ printf "%s%s%s %s\n", ($2=="FAILED"?"a":"-"), ($3=="FAILED"?"b":"-"), ($4=="FAILED"?"c":"-"), $1 }'
