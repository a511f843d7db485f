//! Exactly-once output: the two-phase-commit sink protocol (docs/architecture.md §8, Flink's
//! `TwoPhaseCommitSinkFunction`).
//!
//! A connector implements [`TwoPhaseCommitSink`] (begin, write, pre-commit, commit, abort,
//! recover) and is added to a job wrapped in [`TwoPhaseCommit`], which drives it from the
//! checkpoint hooks:
//!
//! * records go into the open transaction, begun lazily on the first record after the last
//!   pre-commit;
//! * when barrier `n` passes the sink, the open transaction is **pre-committed** under the
//!   deterministic name for `(job, uid, subtask, n)` and its [`Committable`] handle is stored
//!   in checkpoint `n` (union list state `pending-transactions`);
//! * when checkpoint `n` completes, every pending handle of checkpoints `≤ n` is
//!   **committed**. A handle of an *aborted* checkpoint stays pending and is committed with
//!   the next completed checkpoint: its records precede that checkpoint's barrier, so
//!   dropping it would lose them;
//! * on restore, subtask 0 receives the union of every subtask's pending handles and calls
//!   [`TwoPhaseCommitSink::recover`] with them **before any task of the attempt runs**: it
//!   commits them (idempotently — some may have committed before the crash) and aborts every
//!   other lingering transaction carrying this sink's [`TransactionContext::prefix`];
//! * at the end of a bounded input the engine takes a final checkpoint (also when periodic
//!   checkpoints are off), so everything written is committed, once for the whole job,
//!   before the job reports success.
//!
//! [`Committable`]: TwoPhaseCommitSink::Committable

use std::fmt::Debug;

use crate::api::functions::{CheckpointedFunction, SinkFunction};
use crate::error::Result;
use crate::state::operator::{InitContext, SnapshotContext};
use crate::state::StateValue;

/// Name of the union list holding pre-committed transaction handles in checkpoints.
pub const PENDING_TRANSACTIONS: &str = "pending-transactions";

/// Where a two-phase-commit sink instance runs: what deterministic transaction names and
/// the recovery of lingering transactions are built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionContext {
    /// The job's name.
    pub job_name: String,
    /// The sink operator's uid.
    pub uid: String,
    /// This subtask's index.
    pub subtask: u32,
    /// The sink's parallelism in this run.
    pub parallelism: u32,
}

impl TransactionContext {
    /// The prefix every transaction of this sink (any subtask, any run of this job) carries:
    /// `<job>~<uid>~`. Recovery settles every lingering transaction with this prefix. `~`
    /// is refused in job names and uids, so no other sink's prefix can start with this one
    /// (with `-`, job `a` uid `b-c` and job `a-b` uid `c` would share one).
    pub fn prefix(&self) -> String {
        format!("{}~{}~", self.job_name, self.uid)
    }

    /// The deterministic name of the transaction this subtask pre-commits for checkpoint
    /// `checkpoint_id`: `<job>~<uid>~<subtask>-<checkpoint>`.
    pub fn transaction_name(&self, checkpoint_id: u64) -> String {
        format!("{}{}-{}", self.prefix(), self.subtask, checkpoint_id)
    }
}

/// A transactional external system behind a sink (files, a database, a log).
///
/// Every method runs on the sink's task thread, never concurrently with another method of
/// the same instance. Errors fail the task; the job then restarts from its latest completed
/// checkpoint and `recover` settles what the failure left behind.
pub trait TwoPhaseCommitSink<T>: Clone + Send + 'static {
    /// An open transaction: a connection's transaction, an in-progress file.
    type Transaction: Send;
    /// What a pre-committed transaction leaves for the commit: stored in checkpoints, so it
    /// must be self-describing (a transaction name, a pending file's path).
    type Committable: StateValue + Debug;

    /// Called once per attempt before anything else (connect, create folders).
    fn open(&mut self, _ctx: &TransactionContext) -> Result<()> {
        Ok(())
    }

    /// Called on subtask 0 only, after `open`, before any task of the attempt runs: commit
    /// every handle in `committable` (the pending transactions of the checkpoint the job
    /// restores, from all old subtasks; empty on a fresh start) — idempotently, as some may
    /// have committed before the failure — and abort every other lingering transaction whose
    /// name starts with `ctx.prefix()`.
    fn recover(
        &mut self,
        ctx: &TransactionContext,
        committable: Vec<Self::Committable>,
    ) -> Result<()>;

    /// Opens a new transaction.
    fn begin(&mut self, ctx: &TransactionContext) -> Result<Self::Transaction>;

    /// Writes a batch of records into `txn` (the vector is drained).
    fn write(&mut self, txn: &mut Self::Transaction, batch: &mut Vec<T>) -> Result<()>;

    /// Makes `txn` durable but invisible, under the name
    /// `ctx.transaction_name(checkpoint_id)`; returns the handle that commits it later, or
    /// `None` when the transaction wrote nothing and needs no commit.
    fn pre_commit(
        &mut self,
        ctx: &TransactionContext,
        txn: Self::Transaction,
        checkpoint_id: u64,
    ) -> Result<Option<Self::Committable>>;

    /// Makes a pre-committed transaction visible. Must succeed if it is already committed
    /// (recovery and retries commit again).
    fn commit(&mut self, committable: Self::Committable) -> Result<()>;

    /// Drops an open transaction's writes.
    fn abort(&mut self, txn: Self::Transaction) -> Result<()>;
}

/// Adapts a [`TwoPhaseCommitSink`] into a [`SinkFunction`] driven by the checkpoint hooks;
/// see the module docs for the protocol.
pub struct TwoPhaseCommit<T, S: TwoPhaseCommitSink<T>> {
    sink: S,
    ctx: Option<TransactionContext>,
    current: Option<S::Transaction>,
    /// Pre-committed, not yet committed: `(checkpoint id, handle)`, ascending ids.
    pending: Vec<(u64, S::Committable)>,
    _records: std::marker::PhantomData<fn(T)>,
}

impl<T, S: TwoPhaseCommitSink<T>> TwoPhaseCommit<T, S> {
    /// Wraps `sink`; add the result with `DataStream::add_sink`.
    pub fn new(sink: S) -> Self {
        TwoPhaseCommit {
            sink,
            ctx: None,
            current: None,
            pending: Vec::new(),
            _records: std::marker::PhantomData,
        }
    }

    /// The wrapped connector (tests inspect it).
    pub fn sink(&self) -> &S {
        &self.sink
    }

    fn ctx(&self) -> Result<&TransactionContext> {
        self.ctx.as_ref().ok_or_else(|| {
            crate::Error::InvalidJob(
                "a two-phase-commit sink was used before initialize_state".into(),
            )
        })
    }

    fn commit_up_to(&mut self, checkpoint_id: u64) -> Result<()> {
        // `pending` is in checkpoint order. A failed commit fails the task; the restart's
        // `recover` commits what the restored checkpoint lists.
        let due = self.pending.partition_point(|(id, _)| *id <= checkpoint_id);
        for (_, c) in self.pending.drain(..due) {
            self.sink.commit(c)?;
        }
        Ok(())
    }
}

impl<T, S: TwoPhaseCommitSink<T>> Clone for TwoPhaseCommit<T, S> {
    /// A fresh instance around a clone of the connector: transactions are never shared.
    fn clone(&self) -> Self {
        TwoPhaseCommit::new(self.sink.clone())
    }
}

impl<T, S: TwoPhaseCommitSink<T>> CheckpointedFunction for TwoPhaseCommit<T, S> {
    fn initialize_state(&mut self, init: &InitContext) -> Result<()> {
        let id = init.identity();
        let ctx = TransactionContext {
            job_name: id.job_name.clone(),
            uid: id.uid.clone(),
            subtask: init.subtask_index(),
            parallelism: init.parallelism(),
        };
        self.sink.open(&ctx)?;
        if ctx.subtask == 0 {
            let committable: Vec<(u64, S::Committable)> = init.list(PENDING_TRANSACTIONS)?;
            self.sink
                .recover(&ctx, committable.into_iter().map(|(_, c)| c).collect())?;
        }
        self.ctx = Some(ctx);
        Ok(())
    }

    fn snapshot_state(&mut self, snap: &mut SnapshotContext) -> Result<()> {
        let id = snap.checkpoint_id();
        if let Some(txn) = self.current.take() {
            let ctx = self.ctx()?.clone();
            if let Some(c) = self.sink.pre_commit(&ctx, txn, id)? {
                self.pending.push((id, c));
            }
        }
        snap.set_union_list(PENDING_TRANSACTIONS, &self.pending)
    }

    fn operator_state(&self) -> Vec<crate::state::schema::OperatorListDeclaration> {
        vec![crate::state::schema::OperatorListDeclaration::of::<(
            u64,
            S::Committable,
        )>(PENDING_TRANSACTIONS)]
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<()> {
        self.commit_up_to(checkpoint_id)
    }
}

impl<T: Send + 'static, S: TwoPhaseCommitSink<T>> SinkFunction<T> for TwoPhaseCommit<T, S> {
    fn invoke(&mut self, batch: &mut Vec<T>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.current.is_none() {
            let ctx = self.ctx()?.clone();
            self.current = Some(self.sink.begin(&ctx)?);
        }
        let txn = self.current.as_mut().expect("begun above");
        self.sink.write(txn, batch)
    }

    /// Nothing to do: the final checkpoint, which the engine takes after the end of input,
    /// pre-commits what is open and commits it.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

impl<T, S: TwoPhaseCommitSink<T>> Drop for TwoPhaseCommit<T, S> {
    /// A sink torn down with a transaction open (failure, cancel) aborts it, best effort;
    /// `recover` settles whatever this cannot.
    fn drop(&mut self) {
        if let Some(txn) = self.current.take() {
            let _ = self.sink.abort(txn);
        }
    }
}

#[cfg(test)]
mod tests;
