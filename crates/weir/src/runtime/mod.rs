//! The runtime: tasks, the channels between them, and how a job attempt executes.
//!
//! * [`functions`] — the traits user code implements; the operators call them.
//! * [`co_process`] — two-input functions, run over the tagged union of their inputs.
//! * [`window_join`] — the window join, a keyed two-input function over window buffers.
//! * [`interval_join`] — the interval join, a keyed two-input function over two buffers.
//! * [`config`] — job-wide settings a job runs under.
//! * `graph` — the logical job graph the DataStream API builds and [`plan`] chains (internal).
//! * [`event`] — what flows on a channel (batches, watermarks, barriers, end-of-input).
//! * [`watermark`] — event time: watermark strategies, the per-task watermark, the
//!   timestamp/watermark operator.
//! * [`windows`] — window assigners and the window operator.
//! * [`output`] — the interface between chained operators.
//! * [`operators`] — the built-in operators of a chain.
//! * [`operator_metrics`] — records, busy time and watermark of each chained operator.
//! * [`network`] — writers that partition and batch records onto channels.
//! * `exchange` (feature `cluster`) — channels to subtasks on other workers: one gRPC stream
//!   per pair of workers, flow control by permits.
//! * [`alignment`] — barrier alignment decisions for multi-input tasks (pure).
//! * [`codec`] — record codecs for channel state (unaligned checkpoints), by type.
//! * [`unaligned`] — unaligned-checkpoint decisions: barriers that overtake queued records,
//!   and the aligned timeout (pure).
//! * [`task`] — the loops a task thread runs (source tasks and input tasks).
//! * [`fault`] — seeded failure injection for tests and demos.
//! * [`finishing`] — when a task may end: the final checkpoint and stop-with-savepoint (pure).
//! * [`plan`] — chains operators into tasks.
//! * `footprint` — a plan's memory before any record flows; refuses one that cannot fit.
//! * [`control`] — savepoints, checkpoints and stop on request, status.
//! * [`status`] — the status's graph, task counters, attempts and checkpoint history.
//! * [`coordinator`] — the coordinator side: [`executor`] (plans, deploys attempts,
//!   restarts), the attempt loop (the I/O edge of the checkpoint protocol), the
//!   `TaskHosts` interface and the in-memory hosts (`run` as a cluster of one),
//!   [`restart`] strategies.
//! * `worker` — the task side: a worker's share of an attempt (its subtasks, channels,
//!   snapshot writers, frozen snapshots), the same in one process and on a cluster.
//!
//! The runtime owns the contract it executes — the function traits, the configuration and
//! the job graph — so it never imports the API above it; `api` re-exports `functions` and
//! `config` under their user-facing paths.

pub mod alignment;
pub mod co_process;
pub mod codec;
pub mod config;
pub mod control;
pub mod coordinator;
pub mod debloat;
pub mod event;
#[cfg(feature = "cluster")]
pub mod exchange;
pub mod fault;
pub mod finishing;
pub(crate) mod footprint;
pub mod functions;
pub(crate) mod graph;
pub mod interval_join;
pub mod load;
pub mod network;
pub mod operator_metrics;
pub mod operators;
pub mod output;
#[cfg(feature = "cluster")]
pub(crate) mod placement;
pub mod plan;
pub mod remote;
pub mod result;
pub mod schema_check;
pub mod state_backend;
pub mod status;
pub mod task;
pub mod unaligned;
pub mod watermark;
pub mod window_join;
pub mod windows;
pub(crate) mod worker;

/// Records per batch on a channel. Batching amortises the channel's per-message cost
/// (measured: ~6–7× throughput versus one record per message). Under backpressure every
/// message also costs a cross-thread wakeup of the blocked sender, so larger batches pay
/// off further: 4096 against 1024 gave W1 +10 % at p=1 and +24 % at p=2 (8192: +17 % at
/// p=1 but only +3 % at p=2, whose batches then crowd the state out of the L2 cache;
/// BENCHMARKS.md). A partly filled batch still leaves after the buffer timeout.
pub const BATCH_SIZE: usize = 4096;
