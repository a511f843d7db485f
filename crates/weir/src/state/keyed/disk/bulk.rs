//! An eager restore into an empty keyspace: the chain (a base and its deltas) folded key
//! group by key group in memory and written straight into table files by fjall's bulk
//! ingestion, instead of entry by entry through write batches, the journal and the
//! memtable (issue 25: a 99 MB checkpoint of 20 M keys took 90 s to load that way), and
//! in runs of key groups on as many threads as the machine has cores, since a job's
//! restores all run on the one thread that deploys it, subtask after subtask.
//!
//! Why ingestion is safe here, where h-ingest's ingested write-backs were not (`git show
//! 630f169`): the keyspace has never been written ([`DiskTier::restore_chain`] checks that it
//! is empty, that the tier has no namespace sharing its keyspace, and that nothing is
//! pending), so fjall's own pre-flush inside `Ingestion::finish` finds no memtable to
//! rotate or flush (it returns at once), no memtable bytes are counted that would never be
//! released, and Weir never calls `rotate_memtable_and_wait`, where h-ingest's pre-flush
//! hung after a task failure. The threads' ingestions cover disjoint key ranges, each
//! registered whole by its `finish` (fjall serialises those). Every guarantee of the batch
//! path holds: each entry is decoded as the declared key and value types before anything
//! is written, every key written goes into the tier's filter first, a delta's entries
//! override the base's (a delete drops the key), and on an error the state is left empty
//! ([`DiskTier::clear`]).

use std::cell::Cell;

use super::super::super::key_group::key_group;
use super::{filter, DiskTier, Key, StateValue};
use crate::error::{Error, Result};
use crate::state::keyed::entries::Entries;
use crate::storage::shared_bytes::SharedBytes;

/// Most entries per ingestion, and so per table file it writes: the tables an ingestion
/// writes do not pin their filter blocks (fjall pins only what a flush or compaction
/// writes), and a filter block larger than a block-cache shard's share is never cached
/// but read from the file on every point read (the cliff of `store.rs`). At about 1.25
/// bytes of filter per key, 1 Mi keys make a block of ~1.3 MB, which the cache holds.
const INGEST_ENTRIES: usize = 1 << 20;

/// One entry of a key group as the fold sees it: its key's postcard bytes, and its value
/// as stored (`None`: a delta's delete), both borrowed from the restored sections.
type Folded<'a> = (&'a [u8], Option<&'a [u8]>);

/// What eager restores loaded into the LSM, for the run's report ([`restore_report`]).
#[derive(Debug, Clone, Copy)]
struct Loaded {
    /// States restored.
    states: u64,
    /// Of them, restored by bulk ingestion.
    ingested: u64,
    /// Entries those ingestions wrote.
    entries: u64,
    /// The load time summed over states, and the slowest state's, in microseconds.
    micros: u64,
    slowest: u64,
}

const NOTHING_LOADED: Loaded = Loaded {
    states: 0,
    ingested: 0,
    entries: 0,
    micros: 0,
    slowest: 0,
};

thread_local! {
    /// This thread's eager restores since [`start_restore_report`]. Per thread, not per
    /// process: a job's restores all run on the thread that deploys it (the executor's, in
    /// one process, which also reads the report at the run's end), so two jobs of one
    /// process (tests) do not count each other's; and the executor starts the figures
    /// afresh at each attempt, so a run whose job restarted reports the restores of the
    /// attempt that finished, not those of every attempt summed.
    static LOADED: Cell<Loaded> = const { Cell::new(NOTHING_LOADED) };
}

/// Starts [`restore_report`]'s figures afresh on this thread: the executor calls it at the
/// start of each attempt, before deploying it, so the report is the attempt's own.
pub fn start_restore_report() {
    LOADED.set(NOTHING_LOADED);
}

/// What the run reports at its end about the eager restores of keyed state on disk
/// (`None`: there was none): how long loading the restored chains into the LSM took —
/// before the first record, on the thread that deploys the job — and how much went in by
/// bulk ingestion. The restores of this thread since [`start_restore_report`]: the
/// finished attempt's.
pub fn restore_report() -> Option<String> {
    let Loaded {
        states,
        ingested,
        entries,
        micros,
        slowest,
    } = LOADED.get();
    (states > 0).then(|| {
        format!(
            "eager restore: {states} keyed states loaded into the LSM in {} ms (the slowest {} \
             ms); {ingested} of them by bulk ingestion ({entries} entries)",
            micros / 1000,
            slowest / 1000
        )
    })
}

impl<K: Key, S: StateValue> DiskTier<K, S> {
    /// Loads a restored chain — the base's `sections` (one per key group, entries
    /// `postcard((k, v))`), then the deltas' `changes` (one section per key group and delta,
    /// in chain order, entries `postcard((k, Option<v>))`); with TTL the values are
    /// `(v, stamp)` — checking that every entry decodes. Into a keyspace nothing has written
    /// yet (a state just declared), by bulk ingestion ([`bulk`](self)); otherwise (a
    /// window's pane shares its keyspace) through write batches. On an error the state is
    /// left empty.
    pub(crate) fn restore_chain(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        changes: &[SharedBytes],
        ttl: bool,
    ) -> Result<()> {
        let start = std::time::Instant::now();
        self.settle()?;
        let mut ingested = None;
        if self.can_ingest()? {
            let result = if ttl {
                self.ingest_chain::<(S, u64)>(what, sections, changes)
            } else {
                self.ingest_chain::<S>(what, sections, changes)
            };
            // Not ingested (`None`): a section held keys of more than one key group, which
            // no checkpoint writes (hand-made sections do); loaded through batches below.
            if !matches!(result, Ok(Some(_))) {
                self.clear()?;
            }
            ingested = result?;
        }
        if ingested.is_none() {
            self.restore(what, sections, ttl)?;
            self.apply_changes(what, changes, ttl)?;
        }
        let micros = start.elapsed().as_micros() as u64;
        let l = LOADED.get();
        LOADED.set(Loaded {
            states: l.states + 1,
            ingested: l.ingested + u64::from(ingested.is_some()),
            entries: l.entries + ingested.unwrap_or(0),
            micros: l.micros + micros,
            slowest: l.slowest.max(micros),
        });
        Ok(())
    }

    /// Whether the chain may be ingested: the tier owns its keyspace (no namespace), and
    /// the keyspace is empty with nothing pending or dirty — so there is no memtable for
    /// the ingestion to flush and no older entry for its tables to shadow.
    fn can_ingest(&self) -> Result<bool> {
        if !self.prefix.is_empty()
            || self.remote.is_some()
            || !self.pending.is_empty()
            || !self.dirty.is_empty()
        {
            return Ok(false);
        }
        self.ks.is_empty().map_err(|e| self.err(e))
    }

    /// [`restore_chain`](Self::restore_chain)'s ingestion, for values stored as `V`;
    /// returns the entries written, or `None` if a section holds keys of more than one key
    /// group (what it ingested is then still in the keyspace: the caller clears it).
    fn ingest_chain<V: serde::de::DeserializeOwned>(
        &mut self,
        what: &str,
        sections: &[SharedBytes],
        changes: &[SharedBytes],
    ) -> Result<Option<u64>> {
        // (key group, chain position, delta, bytes): the sections of a group together, in
        // chain order — the base's first, then each delta's.
        let mut order = Vec::with_capacity(sections.len() + changes.len());
        let all = sections.iter().map(|s| (s, false));
        for (at, (s, delta)) in all.chain(changes.iter().map(|s| (s, true))).enumerate() {
            if s.is_empty() {
                continue;
            }
            let (k, _) = postcard::take_from_bytes::<K>(s).map_err(|e| Error::StateDecode {
                what: what.to_string(),
                cause: format!("reading a key: {e}"),
            })?;
            order.push((key_group(&k, self.max_parallelism), at, delta, s));
        }
        order.sort_unstable_by_key(|&(g, at, _, _)| (g, at));
        // Contiguous runs of key groups, one per thread, of about equal bytes: the restore
        // runs on the thread that deploys the job, one subtask after another, so without
        // this one core loads every subtask's state.
        let total: usize = order.iter().map(|s| s.3.len()).sum();
        let parts = split(&order, restore_threads().min(total / PARALLEL_BYTES).max(1));
        let filter = std::sync::Mutex::new(std::mem::take(&mut self.filter));
        let part = Part {
            what,
            ks: &self.ks,
            dir: &self.store.dir,
            max_parallelism: self.max_parallelism,
            max_bytes: self.store.options.write_buffer_bytes.max(1),
            filter: &filter,
        };
        let results: Vec<Result<Option<u64>>> = match parts.as_slice() {
            [one] => vec![part.ingest::<K, V>(one)],
            _ => std::thread::scope(|scope| {
                let running: Vec<_> = (parts.iter())
                    .map(|p| {
                        let part = &part;
                        scope.spawn(move || part.ingest::<K, V>(p))
                    })
                    .collect();
                (running.into_iter())
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                    .collect()
            }),
        };
        self.filter = filter.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut written = Some(0);
        for r in results {
            written = match (written, r?) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        Ok(written)
    }
}

/// A section of the chain as a restore orders them: its key group, its position in the
/// chain, whether it is a delta's, its bytes.
pub(super) type Section<'a> = (u32, usize, bool, &'a SharedBytes);

/// Bytes of sections per restoring thread, at least: below this a state loads on one
/// (tests: 1 KiB, so their small states take the parallel path too).
const PARALLEL_BYTES: usize = if cfg!(test) { 1 << 10 } else { 4 << 20 };

/// `order` (sorted by key group) cut into `n` runs of whole key groups, of about equal
/// bytes (some may be empty).
pub(super) fn split<'s, 'a>(order: &'s [Section<'a>], n: usize) -> Vec<&'s [Section<'a>]> {
    let total: usize = order.iter().map(|s| s.3.len()).sum();
    let mut parts = Vec::with_capacity(n);
    let (mut rest, mut done) = (order, 0);
    for t in 1..=n {
        let goal = total * t / n;
        let mut end = 0;
        while end < rest.len() && (done < goal || t == n) {
            let g = rest[end].0;
            while end < rest.len() && rest[end].0 == g {
                done += rest[end].3.len();
                end += 1;
            }
        }
        let (part, after) = rest.split_at(end);
        parts.push(part);
        rest = after;
    }
    parts
}

/// Threads a restore of one state into an empty keyspace uses: the machine's cores (at most
/// 8), or `WEIR_RESTORE_THREADS` (benchmarks, tests).
pub(super) fn restore_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::env::var("WEIR_RESTORE_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .clamp(1, 8)
    })
}

/// What each restoring thread shares: the state, its keyspace and filter.
struct Part<'a> {
    what: &'a str,
    ks: &'a fjall::Keyspace,
    dir: &'a std::path::Path,
    max_parallelism: u32,
    /// A write buffer's bytes: the most one ingestion takes.
    max_bytes: u64,
    filter: &'a std::sync::Mutex<filter::KeyFilter>,
}

impl Part<'_> {
    /// Folds and ingests `part` (sections sorted by key group, each group's in chain
    /// order) as ingestions of their own: disjoint key ranges, each registered whole when
    /// it finishes. Returns the entries written, `None` for a section of mixed key groups.
    fn ingest<K: Key, V: serde::de::DeserializeOwned>(
        &self,
        part: &[Section<'_>],
    ) -> Result<Option<u64>> {
        let err = |e| super::lsm_error(self.dir, e);
        // The ingestion in progress (fjall does not name its type) and what it holds.
        let mut open = None;
        let (mut entries, mut bytes, mut written) = (0usize, 0u64, 0u64);
        let mut folded: Vec<Folded<'_>> = Vec::new();
        let (mut keys, mut hashes, mut values) = (Vec::new(), Vec::new(), Vec::new());
        let mut rest = part;
        while let Some(&(g, ..)) = rest.first() {
            let n = rest.iter().take_while(|s| s.0 == g).count();
            let (group, after) = rest.split_at(n);
            rest = after;
            folded.clear();
            for &(_, _, delta, section) in group {
                let mp = self.max_parallelism;
                if !fold_section::<K, V>(self.what, g, section, delta, mp, &mut folded)? {
                    return Ok(None);
                }
            }
            // Stable: of one key's entries the last in chain order is the one that counts.
            folded.sort_by(|a, b| a.0.cmp(b.0));
            // The group's LSM keys (`key_group ‖ postcard(key)`) end to end, and each value.
            keys.clear();
            hashes.clear();
            values.clear();
            for (i, &(k, value)) in folded.iter().enumerate() {
                let overridden = folded.get(i + 1).is_some_and(|next| next.0 == k);
                let Some(value) = value.filter(|_| !overridden) else {
                    continue;
                };
                let at = keys.len();
                keys.extend_from_slice(&(g as u16).to_be_bytes());
                keys.extend_from_slice(k);
                hashes.push(filter::KeyFilter::hash(&keys[at..]));
                values.push((keys.len() - at, value));
            }
            // Before the LSM can hold them. Without asking the filter first (its every
            // layer, a CPU cache miss each: 7 % of a restore's CPU): the keys are distinct,
            // and one the filter held already would only count twice.
            {
                let mut f = self.filter.lock().unwrap_or_else(|p| p.into_inner());
                for &h in &hashes {
                    f.insert_new(h);
                }
            }
            let mut at = 0;
            for &(len, value) in &values {
                let key = &keys[at..at + len];
                at += len;
                if open.is_none() {
                    open = Some(self.ks.start_ingestion().map_err(err)?);
                }
                if let Some(ingestion) = &mut open {
                    ingestion.write(key, value).map_err(err)?;
                }
                entries += 1;
                written += 1;
                bytes += (key.len() + value.len()) as u64;
                // The open ingestion is finished once it holds a write buffer's bytes (a
                // table file is dirty page cache until it is synced whole, which counts
                // under a memory limit) or `INGEST_ENTRIES`; the next one's keys all follow.
                if entries >= INGEST_ENTRIES || bytes >= self.max_bytes {
                    if let Some(done) = open.take() {
                        done.finish().map_err(err)?;
                    }
                    (entries, bytes) = (0, 0);
                }
            }
        }
        if let Some(done) = open {
            done.finish().map_err(err)?;
        }
        Ok(Some(written))
    }
}

/// Decodes every entry of one section of key group `g` (a base's, or a delta's if `delta`)
/// as `K` and `V` and appends it to `folded`; an entry that does not decode is an error
/// naming the state. `false` if a key belongs to another key group.
fn fold_section<'a, K: Key, V: serde::de::DeserializeOwned>(
    what: &str,
    g: u32,
    section: &'a [u8],
    delta: bool,
    max_parallelism: u32,
    folded: &mut Vec<Folded<'a>>,
) -> Result<bool> {
    let entries = match delta {
        true => Entries::<K, V>::delta(section),
        false => Entries::<K, V>::full(section),
    };
    let kind = if delta { "a delta's" } else { "a base's" };
    for entry in entries {
        let entry = entry.map_err(|e| Error::StateDecode {
            what: what.to_string(),
            cause: format!("byte {} of {kind} section: {}", e.at, e.cause),
        })?;
        if key_group(&entry.key, max_parallelism) != g {
            return Ok(false);
        }
        folded.push((entry.key_bytes, entry.value.map(|(_, bytes)| bytes)));
    }
    Ok(true)
}
