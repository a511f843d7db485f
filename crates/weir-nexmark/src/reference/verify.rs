//! Comparing a run's result with the reference's: as multisets of rows, since the order
//! of rows in a parallel run is not part of a query's result.

use std::collections::BTreeMap;

use crate::csv::Row;

/// How far two results differ: rows missing from the actual result, rows it has in excess
/// (each with its count), so a failed check can say what went wrong.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Mismatch<T> {
    /// Rows the reference has more often than the actual result, with how many more.
    pub missing: Vec<(T, usize)>,
    /// Rows the actual result has more often than the reference, with how many more.
    pub unexpected: Vec<(T, usize)>,
}

impl<T: std::fmt::Debug> std::fmt::Display for Mismatch<T> {
    /// At most five rows of each kind, then how many more there are.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (label, rows) in [("missing", &self.missing), ("unexpected", &self.unexpected)] {
            if rows.is_empty() {
                continue;
            }
            let total: usize = rows.iter().map(|(_, n)| n).sum();
            write!(f, "{total} {label} row(s):")?;
            for (row, n) in rows.iter().take(5) {
                write!(f, " {row:?}")?;
                if *n > 1 {
                    write!(f, " x{n}")?;
                }
            }
            if rows.len() > 5 {
                write!(f, " and {} more distinct", rows.len() - 5)?;
            }
            write!(f, "; ")?;
        }
        Ok(())
    }
}

fn multiset_diff<T: Ord + Clone>(
    expected: impl IntoIterator<Item = T>,
    actual: impl IntoIterator<Item = T>,
) -> Option<Mismatch<T>> {
    let mut counts: BTreeMap<T, isize> = BTreeMap::new();
    for row in expected {
        *counts.entry(row).or_insert(0) += 1;
    }
    for row in actual {
        *counts.entry(row).or_insert(0) -= 1;
    }
    let mut mismatch = Mismatch {
        missing: Vec::new(),
        unexpected: Vec::new(),
    };
    for (row, n) in counts {
        if n > 0 {
            mismatch.missing.push((row, n as usize));
        } else if n < 0 {
            mismatch.unexpected.push((row, n.unsigned_abs()));
        }
    }
    if mismatch.missing.is_empty() && mismatch.unexpected.is_empty() {
        None
    } else {
        Some(mismatch)
    }
}

/// `None` when `actual` holds exactly the rows of `expected`, in any order.
pub fn compare_rows(expected: &[Row], actual: &[Row]) -> Option<Mismatch<Row>> {
    multiset_diff(expected.iter().cloned(), actual.iter().cloned())
}

/// Compares two CSV texts (as the reference writes them): the headers must be equal and
/// the data lines equal as multisets. `Err` says which differs and how.
pub fn compare_csv(expected: &str, actual: &str) -> Result<(), String> {
    let mut e = expected.lines();
    let mut a = actual.lines();
    let (eh, ah) = (e.next(), a.next());
    if eh != ah {
        return Err(format!(
            "the headers differ: expected {:?}, found {:?}",
            eh.unwrap_or(""),
            ah.unwrap_or("")
        ));
    }
    match multiset_diff(e.map(str::to_string), a.map(str::to_string)) {
        None => Ok(()),
        Some(m) => Err(m.to_string().trim_end_matches("; ").to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csv::Value;

    #[test]
    fn order_does_not_matter_counts_do() {
        let r = |a: i64| vec![Value::Int(a)];
        assert_eq!(compare_rows(&[r(1), r(2), r(2)], &[r(2), r(1), r(2)]), None);
        let m = compare_rows(&[r(1), r(2), r(2)], &[r(2), r(3)]).unwrap();
        assert_eq!(m.missing, vec![(r(1), 1), (r(2), 1)]);
        assert_eq!(m.unexpected, vec![(r(3), 1)]);
        assert_eq!(compare_csv("a,b\n1,2\n3,4\n", "a,b\n3,4\n1,2\n"), Ok(()));
        assert_eq!(
            compare_csv("a,b\n1,2\n", "a,c\n1,2\n"),
            Err("the headers differ: expected \"a,b\", found \"a,c\"".into())
        );
        assert_eq!(
            compare_csv("a\n1\n1\n", "a\n1\n2\n"),
            Err("1 missing row(s): \"1\"; 1 unexpected row(s): \"2\"".into())
        );
    }
}
