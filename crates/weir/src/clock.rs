//! The wall clock: a leaf that imports nothing from the crate.
//!
//! It lives below every layer because state (TTL, timers), the runtime (processing time)
//! and the checkpoint coordinator's timestamps all read it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before it), the time base of
/// barriers' timestamps, processing-time timers and state TTL.
pub(crate) fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
