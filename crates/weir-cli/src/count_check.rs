//! `--verify` of keyed-count's final counts in state, in bounded memory.
//!
//! Each subtask checks the `(key, count)` entries of its state against the exact counts of
//! the generator's events `0..n` (`key = i % keys`). The entries come from the state
//! backend one at a time (on the disk backend, decoded from the LSM as the iterator
//! advances), so the check must not collect them: with 100 M keys a map of them held
//! ~1.1 GB per subtask, more than the whole job ran in under a 2 GiB memory limit
//! (BENCHMARKS.md, issue 25's 100 M-key rows). It keeps one bit per expected key instead
//! (12.5 MB at 100 M keys), which finds a missing key, a key seen twice, a key that does
//! not belong to the subtask and a wrong count.

use weir::state::{key_group, KeyGroupRange};

use crate::jobs::expected_count;

/// How many problems a verdict spells out (the rest are only counted).
const SHOWN: usize = 3;

/// The problems found so far: how many, and the first [`SHOWN`] in words (a wrong run may
/// have millions: only the count grows).
#[derive(Default)]
struct Problems {
    count: u64,
    shown: Vec<String>,
}

impl Problems {
    fn push(&mut self, problem: impl FnOnce() -> String) {
        self.count += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(problem());
        }
    }
}

/// Checks one subtask's final counts, `entries` (each key once, in any order; `None` for a
/// key that is not a `u64`, which keyed-count's generator never makes), against the exact
/// counts of events `0..n` with `keys` keys, for the key groups of `range` out of `maxp`.
/// `Ok(keys checked)`, or a description of what is wrong (how many problems, the first
/// few named).
pub fn check_counts(
    entries: impl IntoIterator<Item = Option<(u64, u64)>>,
    n: u64,
    keys: u64,
    maxp: u32,
    range: KeyGroupRange,
) -> Result<u64, String> {
    let expected_keys = keys.min(n);
    let mine = |k: u64| k < expected_keys && range.contains(key_group(&k, maxp));
    let words = usize::try_from(expected_keys.div_ceil(64)).expect("a bitset that fits");
    let mut seen = vec![0u64; words];
    let mut problems = Problems::default();
    let mut in_state = 0u64;
    for entry in entries {
        in_state += 1;
        let Some((k, got)) = entry else {
            problems.push(|| "a key that is not a u64 in state".to_string());
            continue;
        };
        if !mine(k) {
            problems.push(|| format!("key {k}: in state, not expected on this subtask"));
            continue;
        }
        let (word, bit) = ((k / 64) as usize, 1u64 << (k % 64));
        if seen[word] & bit != 0 {
            problems.push(|| format!("key {k}: in state twice"));
            continue;
        }
        seen[word] |= bit;
        let want = expected_count(n, keys, k);
        if got != want {
            problems.push(|| format!("key {k}: expected {want}, counted {got}"));
        }
    }
    let mut checked = 0u64;
    for k in (0..expected_keys).filter(|&k| mine(k)) {
        checked += 1;
        if seen[(k / 64) as usize] & (1u64 << (k % 64)) == 0 {
            let want = expected_count(n, keys, k);
            problems.push(|| format!("key {k}: expected {want}, counted 0"));
        }
    }
    if in_state != checked {
        problems.push(|| format!("{in_state} keys in state, {checked} expected"));
    }
    if problems.count == 0 {
        Ok(checked)
    } else {
        Err(format!(
            "{} wrong: {}",
            problems.count,
            problems.shown.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_alloc::peak_growth_on_this_thread;

    const MAXP: u32 = 128;

    /// The exact entries of the subtask with `range`, in key order.
    fn exact(n: u64, keys: u64, range: KeyGroupRange) -> Vec<Option<(u64, u64)>> {
        (0..keys.min(n))
            .filter(|k| range.contains(key_group(k, MAXP)))
            .map(|k| Some((k, expected_count(n, keys, k))))
            .collect()
    }

    #[test]
    fn exact_counts_pass_in_any_order() {
        let range = KeyGroupRange::for_subtask(1, 2, MAXP);
        let mut e = exact(1003, 100, range);
        assert_eq!(
            check_counts(e.clone(), 1003, 100, MAXP, range).map(|_| ()),
            Ok(())
        );
        e.reverse();
        let checked = check_counts(e.clone(), 1003, 100, MAXP, range).unwrap();
        assert_eq!(checked, e.len() as u64);
        // Fewer events than keys: only keys 0..n are expected.
        let all = KeyGroupRange::for_subtask(0, 1, MAXP);
        assert_eq!(check_counts(exact(7, 100, all), 7, 100, MAXP, all), Ok(7));
    }

    #[test]
    fn every_kind_of_wrong_is_named() {
        let range = KeyGroupRange::for_subtask(0, 2, MAXP);
        let other = KeyGroupRange::for_subtask(1, 2, MAXP);
        let (n, keys) = (1003, 100);
        let good = exact(n, keys, range);
        let check = |e: Vec<Option<(u64, u64)>>| check_counts(e, n, keys, MAXP, range);

        let mut wrong_count = good.clone();
        let (k, c) = wrong_count[3].unwrap();
        wrong_count[3] = Some((k, c + 1));
        let e = check(wrong_count).unwrap_err();
        assert!(
            e.contains(&format!("key {k}: expected {c}, counted {}", c + 1)),
            "{e}"
        );

        let mut missing = good.clone();
        let (k, c) = missing.remove(5).unwrap();
        let e = check(missing).unwrap_err();
        assert!(
            e.contains(&format!("key {k}: expected {c}, counted 0")),
            "{e}"
        );

        let mut twice = good.clone();
        let dup = twice[0];
        twice.pop();
        twice.push(dup);
        let e = check(twice).unwrap_err();
        assert!(
            e.contains(&format!("key {}: in state twice", dup.unwrap().0)),
            "{e}"
        );
        assert!(
            e.starts_with("2 wrong"),
            "the key twice and the one missing: {e}"
        );

        let mut foreign = good.clone();
        let theirs = exact(n, keys, other)[0];
        foreign.push(theirs);
        let e = check(foreign).unwrap_err();
        let k = theirs.unwrap().0;
        assert!(
            e.contains(&format!("key {k}: in state, not expected")),
            "{e}"
        );

        let mut past = good.clone();
        past.push(Some((keys + 1, 1)));
        assert!(check(past).unwrap_err().contains("not expected"));

        let mut not_u64 = good.clone();
        not_u64.push(None);
        assert!(check(not_u64).unwrap_err().contains("not a u64"));
    }

    #[test]
    fn many_problems_are_counted_and_only_a_few_named() {
        let all = KeyGroupRange::for_subtask(0, 1, MAXP);
        let e = check_counts(Vec::new(), 10_000, 1000, MAXP, all).unwrap_err();
        assert!(e.starts_with("1001 wrong: "), "{e}");
        assert_eq!(e.matches("; ").count(), SHOWN - 1, "{e}");
    }

    /// The check keeps a bit per key, not the entries: 4 M keys streamed through it grow
    /// this thread's heap by ~0.5 MB (a map of them would take over 100 MB).
    #[test]
    fn memory_is_a_bit_per_key() {
        let keys = 4_000_000u64;
        let n = 2 * keys;
        let all = KeyGroupRange::for_subtask(0, 1, MAXP);
        let entries = (0..keys).map(|k| Some((k, expected_count(n, keys, k))));
        let (verdict, peak) =
            peak_growth_on_this_thread(|| check_counts(entries, n, keys, MAXP, all));
        assert_eq!(verdict, Ok(keys));
        assert!(
            peak < 2 * keys as usize / 8 + (64 << 10),
            "the check grew the heap by {peak} bytes for {keys} keys"
        );
    }
}
