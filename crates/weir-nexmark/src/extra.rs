//! The `extra` padding of every event, kept as the generator's seed until someone reads it.
//!
//! `extra` is the largest field of a bid (54 to 81 letters of a 100-byte average event) and
//! the Java generator spends a `nextInt()` on every six of its letters: building it was 40 %
//! of generating a bid, and most queries never read it (q0 to a discarding sink, q2, q5,
//! q8, q11 ...). Since it is the last field drawn from the event's `java.util.Random`, the
//! random state after drawing its length determines it completely: [`Extra`] keeps that
//! state and the length (16 bytes, no allocation) and produces the letters when the
//! padding is written, compared or converted. Every form of it — `Display`, serde (JSON
//! and postcard), [`Extra::as_str`], equality — is the same text as the materialized
//! string, so no written byte changes; a parsed event holds its text as before.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::java_random::JavaRandom;

/// An event's `extra` padding: either its text (a parsed or hand-built event) or the
/// generator's random state and length, turned into the same text on demand (module docs).
#[derive(Clone)]
pub struct Extra(Repr);

#[derive(Clone)]
enum Repr {
    Text(String),
    /// `StringsGenerator.nextExactString(len)` drawn from a `java.util.Random` whose state
    /// is `state`.
    Seeded {
        state: u64,
        len: u32,
    },
}

impl Extra {
    /// The padding that the Java generator's `nextExactString(len)` draws from `rng` now;
    /// `rng` is left as the Java generator leaves it (the letters' draws skipped), so the
    /// caller must not draw from it again for the same event (`extra` is drawn last).
    pub(crate) fn seeded(rng: &JavaRandom, len: usize) -> Self {
        match u32::try_from(len) {
            Ok(len) => Extra(Repr::Seeded {
                state: rng.state(),
                len,
            }),
            Err(_) => {
                let mut bytes = Vec::with_capacity(len);
                exact_letters(&mut rng.clone(), len, &mut bytes);
                Extra(Repr::Text(ascii_string(bytes)))
            }
        }
    }

    /// The length in bytes (every letter is ASCII), without producing the text.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Text(s) => s.len(),
            Repr::Seeded { len, .. } => *len as usize,
        }
    }

    /// Whether the padding is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text: borrowed when held, produced (one allocation) when seeded.
    pub fn as_str(&self) -> Cow<'_, str> {
        match &self.0 {
            Repr::Text(s) => Cow::Borrowed(s),
            Repr::Seeded { .. } => Cow::Owned(self.to_string()),
        }
    }

    /// Appends the text's bytes to `out` without an intermediate `String`: how a writer
    /// that builds its own buffer (CSV, JSON) should take it.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        match &self.0 {
            Repr::Text(s) => out.extend_from_slice(s.as_bytes()),
            Repr::Seeded { state, len } => {
                exact_letters(&mut JavaRandom::from_state(*state), *len as usize, out)
            }
        }
    }

    /// The text as an owned `String` (no copy when held).
    pub fn into_string(self) -> String {
        match self.0 {
            Repr::Text(s) => s,
            Repr::Seeded { len, .. } => {
                let mut bytes = Vec::with_capacity(len as usize);
                self.write_to(&mut bytes);
                ascii_string(bytes)
            }
        }
    }
}

/// Bytes that are ASCII letters by construction as a `String`.
fn ascii_string(bytes: Vec<u8>) -> String {
    // Every byte `exact_letters` writes is in 'H'..='z'.
    String::from_utf8(bytes).unwrap_or_default()
}

/// `StringsGenerator.nextExactString`: six characters per `nextInt()`, `'a' + rnd % 26`
/// with Java's signed remainder (so letters from `'H'` up also occur), appended to `out`.
pub(crate) fn exact_letters(rng: &mut JavaRandom, len: usize, out: &mut Vec<u8>) {
    out.reserve(len);
    // Java divides `rnd` by 26 after each character, as the loop below does.
    // On the magnitude in unsigned arithmetic, the sign applied after without a branch
    // (the sign is a coin flip): Java's remainder of a negative `rnd` is the negated
    // remainder of its magnitude, and `(d ^ m) - m` negates `d` when `m` is all ones.
    // Each chunk's six letters are assembled in one register and stored at once: byte
    // stores to a stack array read back wider stall store forwarding.
    let fill = |rng: &mut JavaRandom| -> [u8; 8] {
        let rnd = rng.next_int();
        let mut magnitude = rnd.unsigned_abs();
        let negative = (rnd >> 31) as u8;
        let mut word = 0u64;
        // Dividing by the constant 26 six times compiles to multiplications.
        for i in 0..6 {
            let digit = (magnitude % 26) as u8;
            magnitude /= 26;
            let letter = b'a'.wrapping_add((digit ^ negative).wrapping_sub(negative));
            word |= (letter as u64) << (8 * i);
        }
        word.to_le_bytes()
    };
    for _ in 0..len / 6 {
        out.extend_from_slice(&fill(rng)[..6]);
    }
    let tail = len % 6;
    if tail > 0 {
        out.extend_from_slice(&fill(rng)[..tail]);
    }
}

impl Default for Extra {
    /// No padding.
    fn default() -> Self {
        Extra(Repr::Text(String::new()))
    }
}

impl From<String> for Extra {
    fn from(s: String) -> Self {
        Extra(Repr::Text(s))
    }
}

impl From<&str> for Extra {
    fn from(s: &str) -> Self {
        Extra(Repr::Text(s.to_string()))
    }
}

impl From<Extra> for String {
    fn from(e: Extra) -> Self {
        e.into_string()
    }
}

impl fmt::Display for Extra {
    /// The text, produced a chunk at a time into a stack buffer when seeded.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Text(s) => f.write_str(s),
            Repr::Seeded { state, len } => {
                let mut rng = JavaRandom::from_state(*state);
                let mut left = *len as usize;
                let mut chunk = Vec::with_capacity(96);
                while left > 0 {
                    // A multiple of six, so only the last chunk ends mid-`nextInt()`.
                    let n = left.min(96);
                    chunk.clear();
                    exact_letters(&mut rng, n, &mut chunk);
                    f.write_str(std::str::from_utf8(&chunk).map_err(|_| fmt::Error)?)?;
                    left -= n;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for Extra {
    /// As the text's `Debug` (quoted), so a seeded and a held padding print alike.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str().as_ref(), f)
    }
}

impl PartialEq for Extra {
    /// Equal texts, however each is held.
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Repr::Seeded { state: a, len: m }, Repr::Seeded { state: b, len: n })
                if a == b && m == n =>
            {
                true
            }
            _ => self.len() == other.len() && self.as_str() == other.as_str(),
        }
    }
}

impl Eq for Extra {}

impl PartialEq<str> for Extra {
    fn eq(&self, other: &str) -> bool {
        self.len() == other.len() && self.as_str() == other
    }
}

impl PartialEq<&str> for Extra {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
}

impl Hash for Extra {
    /// As the text's hash, consistent with equality.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl Serialize for Extra {
    /// A plain string, the same bytes in JSON and postcard as the materialized text.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_str())
    }
}

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Extra::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded padding is, in every form, the text drawn eagerly from the same state.
    #[test]
    fn seeded_equals_its_text_in_every_form() {
        for (seed, len) in [
            (1i64, 0usize),
            (2, 1),
            (3, 6),
            (4, 54),
            (5, 81),
            (6, 97),
            (7, 400),
        ] {
            let rng = JavaRandom::new(seed);
            let mut eager = Vec::new();
            exact_letters(&mut rng.clone(), len, &mut eager);
            let text = String::from_utf8(eager).unwrap();
            let lazy = Extra::seeded(&rng, len);
            let held = Extra::from(text.clone());
            assert_eq!(lazy.len(), len);
            assert_eq!(lazy.to_string(), text);
            assert_eq!(lazy.as_str(), text.as_str());
            assert_eq!(lazy.clone().into_string(), text);
            assert_eq!(format!("{lazy:?}"), format!("{text:?}"));
            let mut written = b"x".to_vec();
            lazy.write_to(&mut written);
            assert_eq!(written, [b"x", text.as_bytes()].concat());
            assert_eq!(lazy, held);
            assert_eq!(held, lazy);
            assert_eq!(lazy, *text.as_str());
            assert_eq!(
                serde_json::to_string(&lazy).unwrap(),
                serde_json::to_string(&text).unwrap()
            );
            assert_eq!(
                postcard::to_allocvec(&lazy).unwrap(),
                postcard::to_allocvec(&text).unwrap()
            );
            let back: Extra = serde_json::from_str(&serde_json::to_string(&lazy).unwrap()).unwrap();
            assert_eq!(back, lazy);
        }
        assert_ne!(
            Extra::seeded(&JavaRandom::new(1), 10),
            Extra::seeded(&JavaRandom::new(2), 10)
        );
        assert_ne!(Extra::from("ab"), Extra::from("abc"));
    }
}
