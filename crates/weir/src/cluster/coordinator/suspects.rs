//! Workers a peer reported lost (issue 24): no deploy onto them until they answer.
//!
//! A frozen worker (SIGSTOP, `docker pause`) keeps its control stream open, so the
//! coordinator counts it lost only after `--heartbeat-timeout`; its peers' exchange streams
//! with it break within the keep-alive's 3 s, and the attempt fails naming it. Had the next
//! deploy gone to it again, each attempt would fail at once the same way until the timeout,
//! and the identical-failure limit would give the job up first. Flink does not offer the
//! slots of a TaskManager reported unreachable until it heartbeats or registers again; here
//! a worker a peer reported lost is *suspect*: the deploy waits until a message of it (a
//! heartbeat is enough) arrives after the report — it proved alive and takes part — or its
//! heartbeat timeout counts it lost and it is dropped, to be replaced.
//!
//! Each worker's first report fails one attempt that the restart strategy does not count as
//! an identical failure (the cluster changed, not the job); a worker reported again after
//! it proved alive counts as usual, so two live workers that cannot reach each other still
//! give the job up under the identical-failure limit instead of restarting forever.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::runtime::exchange::WorkerId;

/// The workers named as lost in a worker's report of a failure: the exchange's errors name
/// a peer as `lost the exchange stream with worker N …` (its stream broke or never opened)
/// or `cannot reach worker N …` (dialling it failed). A refusal (a wrong token) is no loss.
pub(crate) fn named_as_lost(cause: &str) -> Vec<WorkerId> {
    let mut ids = Vec::new();
    for prefix in [
        "lost the exchange stream with worker ",
        "cannot reach worker ",
    ] {
        for (at, _) in cause.match_indices(prefix) {
            let digits: String = cause[at + prefix.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(id) = digits.parse::<WorkerId>() {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
    }
    ids
}

/// What a suspect's state is when the deploy looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Not reported lost, or it answered since.
    Trusted,
    /// Reported lost, and nothing arrived from it since.
    Suspect,
}

#[derive(Default)]
struct State {
    /// Each member's count of messages heard (see `RegisteredWorker::heard`).
    heard: HashMap<WorkerId, Arc<AtomicU64>>,
    /// Open reports: the worker and its count of messages when it was reported.
    open: HashMap<WorkerId, u64>,
    /// Every worker ever reported: a second report counts as a usual failure.
    ever: HashSet<WorkerId>,
    /// Attempts that failed through a worker's first report.
    uncounted: HashSet<u32>,
}

/// The workers peers reported lost; shared by every member's reader and the deploy.
#[derive(Clone, Default)]
pub(crate) struct Suspects(Arc<Mutex<State>>);

impl Suspects {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A member joined: `heard` counts its messages.
    pub(crate) fn member(&self, id: WorkerId, heard: Arc<AtomicU64>) {
        self.state().heard.insert(id, heard);
    }

    /// `reporter` said in `attempt` that `cause` happened: every other member the cause
    /// names as lost becomes suspect. Returns the workers newly suspect.
    pub(crate) fn report(&self, reporter: WorkerId, attempt: u32, cause: &str) -> Vec<WorkerId> {
        let mut s = self.state();
        let mut new = Vec::new();
        for id in named_as_lost(cause) {
            if id == reporter || s.open.contains_key(&id) {
                continue;
            }
            let Some(heard) = s.heard.get(&id).map(|h| h.load(Relaxed)) else {
                continue; // not a member (any more): nothing will be deployed onto it
            };
            s.open.insert(id, heard);
            if s.ever.insert(id) {
                s.uncounted.insert(attempt);
            }
            new.push(id);
        }
        new
    }

    /// Whether `id` is still suspect; a message heard since its report clears it.
    pub(crate) fn standing(&self, id: WorkerId) -> Standing {
        let mut s = self.state();
        let Some(&at) = s.open.get(&id) else {
            return Standing::Trusted;
        };
        let now = s.heard.get(&id).map_or(at, |h| h.load(Relaxed));
        if now > at {
            s.open.remove(&id);
            Standing::Trusted
        } else {
            Standing::Suspect
        }
    }

    /// `id` was dropped (counted lost): it is nobody's suspect any more.
    pub(crate) fn dropped(&self, id: WorkerId) {
        let mut s = self.state();
        s.open.remove(&id);
        s.heard.remove(&id);
    }

    /// Whether `attempt` failed through a worker's first report (see the module docs).
    pub(crate) fn uncounted(&self, attempt: u32) -> bool {
        self.state().uncounted.contains(&attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchanges_errors_name_the_lost_peer() {
        let broken = "task count (1/2) failed: lost the exchange stream with worker 2 at \
                      127.0.0.1:4000: keep-alive timed out (the worker died, …) (on worker 1 \
                      (w1) at 127.0.0.1:5000)";
        assert_eq!(named_as_lost(broken), vec![2]);
        let unopened = "lost the exchange stream with worker 12: it never opened its stream";
        assert_eq!(named_as_lost(unopened), vec![12]);
        let dial = "worker 1 (w1) at 127.0.0.1:1 could not start attempt 3: cannot reach \
                    worker 3 at 127.0.0.1:2: connection refused";
        assert_eq!(named_as_lost(dial), vec![3]);
        // A refusal or another failure names no lost peer.
        assert!(named_as_lost("exchange stream with worker 2 refused: wrong token").is_empty());
        assert!(named_as_lost("task map failed: cannot decode record at offset 9").is_empty());
    }

    #[test]
    fn a_reported_worker_is_suspect_until_a_message_of_it_arrives() {
        let s = Suspects::default();
        let (one, two) = (Arc::new(AtomicU64::new(5)), Arc::new(AtomicU64::new(7)));
        s.member(1, one.clone());
        s.member(2, two.clone());
        let cause = "lost the exchange stream with worker 2 at 127.0.0.1:9: broken";
        assert_eq!(s.report(1, 4, cause), vec![2]);
        assert_eq!(s.standing(2), Standing::Suspect);
        assert_eq!(
            s.standing(1),
            Standing::Trusted,
            "the reporter is not suspect"
        );
        // Its reporter's own messages prove nothing about it.
        one.fetch_add(3, Relaxed);
        assert_eq!(s.standing(2), Standing::Suspect);
        // A second report while it is suspect changes nothing.
        assert!(s.report(1, 4, cause).is_empty());
        two.fetch_add(1, Relaxed);
        assert_eq!(s.standing(2), Standing::Trusted);
        assert_eq!(s.standing(2), Standing::Trusted, "answered stays answered");
    }

    #[test]
    fn only_a_workers_first_report_goes_uncounted() {
        let s = Suspects::default();
        let two = Arc::new(AtomicU64::new(0));
        s.member(1, Arc::default());
        s.member(2, two.clone());
        let cause = "cannot reach worker 2 at 127.0.0.1:9: timed out";
        s.report(1, 3, cause);
        assert!(s.uncounted(3));
        two.fetch_add(1, Relaxed);
        assert_eq!(s.standing(2), Standing::Trusted);
        // Alive, and reported again: two live workers that cannot reach each other.
        assert_eq!(s.report(1, 4, cause), vec![2]);
        assert!(!s.uncounted(4));
        // A dropped worker, or one never a member, is not suspect.
        s.dropped(2);
        assert_eq!(s.standing(2), Standing::Trusted);
        assert!(s
            .report(1, 5, "lost the exchange stream with worker 9: gone")
            .is_empty());
        assert!(!s.uncounted(5));
    }
}
