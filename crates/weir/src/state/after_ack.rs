//! Work a snapshot leaves for after its checkpoint acknowledgement ([`after_ack`]): the
//! state layer hands it over, the checkpoint writer's threads run it once they have sent a
//! job's outcome (`checkpoint/writer/pool.rs`). Lives here, below the checkpoint layer,
//! because the state is what leaves such work and may not name the writer.

use std::cell::RefCell;

/// Work left by [`after_ack`].
type Later = Box<dyn FnOnce()>;

thread_local! {
    /// On a thread that holds work ([`hold_on_this_thread`]: a checkpoint writer's), the
    /// work [`after_ack`] left for after the current job's outcome is sent; `None` on every
    /// other thread.
    static HELD: RefCell<Option<Vec<Later>>> = const { RefCell::new(None) };
}

/// Runs `f` once the snapshot job being written on this thread is acknowledged (its outcome
/// sent); on a thread that is not a checkpoint writer's, drops it unrun. For work a snapshot
/// leaves behind that its checkpoint does not wait for — the disk backend's commit of a
/// barrier's write-back into the LSM, after the delta was written from the same encoded
/// entries (`state/keyed/disk/views.rs`) — so it is off the checkpoint's critical path but
/// still done promptly, by the same thread, before its next job. So `f` must be work that
/// may also never run: elsewhere a snapshot is dropped only on a path that discards it (a
/// failure, a shutdown), where doing the work would only delay the restart.
#[cfg_attr(not(feature = "disk-state"), allow(dead_code))]
pub(crate) fn after_ack(f: impl FnOnce() + 'static) {
    HELD.with(|a| {
        if let Some(later) = a.borrow_mut().as_mut() {
            later.push(Box::new(f));
        }
    });
}

/// Makes this thread hold what [`after_ack`] is given until [`run_held`] (a checkpoint
/// writer's thread, at its start).
pub(crate) fn hold_on_this_thread() {
    HELD.with(|a| {
        a.borrow_mut().get_or_insert_with(Vec::new);
    });
}

/// Runs what [`after_ack`] left on this thread (and what that leaves, in turn): after a
/// job's outcome is sent.
pub(crate) fn run_held() {
    loop {
        let work = HELD.with(|a| a.borrow_mut().as_mut().map(std::mem::take));
        match work {
            Some(work) if !work.is_empty() => work.into_iter().for_each(|f| f()),
            _ => return,
        }
    }
}

/// Runs what this thread holds and stops holding (a test that played a writer thread, so
/// the next test on the same thread does not inherit the role).
#[cfg(test)]
pub(crate) fn stop_holding() {
    run_held();
    HELD.with(|a| *a.borrow_mut() = None);
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::{after_ack, hold_on_this_thread, run_held, stop_holding};

    #[test]
    fn work_after_the_ack_waits_on_a_writer_thread_and_is_dropped_elsewhere() {
        let ran = Rc::new(Cell::new(0));
        let r = ran.clone();
        after_ack(move || r.set(r.get() + 1));
        run_held();
        assert_eq!(ran.get(), 0, "not a writer thread: dropped unrun");
        // A writer thread: it waits for the acknowledgement, and work it leaves runs too.
        hold_on_this_thread();
        let r = ran.clone();
        after_ack(move || {
            let r2 = r.clone();
            after_ack(move || r2.set(r2.get() + 10));
            r.set(r.get() + 1);
        });
        assert_eq!(ran.get(), 0, "it ran before the acknowledgement");
        run_held();
        assert_eq!(ran.get(), 11);
        run_held();
        assert_eq!(ran.get(), 11, "it ran twice");
        stop_holding();
        after_ack(|| panic!("not a writer thread any more"));
    }
}
