//! Making values of a state type that hold every variant of every enum in it, so that
//! tracing their serialization records the enums serde-reflection's own passes leave
//! incomplete (an enum nested in a struct, an `Option`, a sequence or a map: its docs ask
//! to trace each such enum by its Rust type, which a generic state type does not name).
//!
//! [`Explorer`] is a `Deserializer` that invents input: zeros, empty strings, `Some`, one
//! element per sequence and map, and for every enum the variant its [`Route`] chooses (the
//! first otherwise). Driving `T::deserialize` with it yields a value of `T`, and tells the
//! enums met on the way with their variant counts; [`values_with_every_variant`] makes one
//! value per variant of every enum reached, choosing the variants that lead to an enum
//! found only inside another enum's later variant.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};

/// Deeper than this, the explorer stops: `None`, empty sequences and maps, first variants
/// (which serde-reflection, too, requires to end a recursive type).
const MAX_DEPTH: usize = 16;

/// At most this many values per type (one per enum variant reached).
const MAX_VALUES: usize = 4096;

/// Which variant each enum takes (by its serde name); the first when not named.
pub(crate) type Route = BTreeMap<&'static str, u32>;

/// The error an explored type may raise (a validating `Deserialize`).
#[derive(Debug)]
pub(crate) struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

impl de::Error for Refused {
    fn custom<M: std::fmt::Display>(msg: M) -> Self {
        Refused(msg.to_string())
    }
}

/// The enums met while making one value: name -> variant count.
type Met = RefCell<BTreeMap<&'static str, u32>>;

/// Values of `T` that together hold every variant of every enum reachable in `T`, or an
/// error when `T` cannot be made this way.
pub(crate) fn values_with_every_variant<T: DeserializeOwned>() -> Result<Vec<T>, Refused> {
    let mut values = Vec::new();
    // Routes still to explore, those explored, and the enums already given a route per
    // variant (an enum's variants are recorded by name, wherever it sits, so once is enough).
    let mut pending: Vec<Route> = vec![Route::new()];
    let mut explored: BTreeSet<Route> = BTreeSet::new();
    let mut routed: BTreeSet<&'static str> = BTreeSet::new();
    while let Some(route) = pending.pop() {
        if !explored.insert(route.clone()) {
            continue;
        }
        if values.len() >= MAX_VALUES {
            return Err(Refused("too many enum variants to explore".into()));
        }
        let met = Met::default();
        values.push(T::deserialize(Explorer {
            route: &route,
            met: &met,
            depth: 0,
        })?);
        for (name, count) in met.into_inner() {
            // An enum first met under this route: each of its variants, on the same route
            // (which leads to it).
            if !routed.insert(name) {
                continue;
            }
            for variant in 0..count {
                let mut next = route.clone();
                next.insert(name, variant);
                pending.push(next);
            }
        }
    }
    Ok(values)
}

/// A `Deserializer` inventing a value of whatever type asks, along its route.
#[derive(Clone, Copy)]
struct Explorer<'a> {
    route: &'a Route,
    met: &'a Met,
    depth: usize,
}

impl<'a> Explorer<'a> {
    fn deeper(self) -> Self {
        Explorer {
            depth: self.depth + 1,
            ..self
        }
    }

    fn at_end(&self) -> bool {
        self.depth >= MAX_DEPTH
    }

    /// `n` elements, each invented one level deeper.
    fn elements(self, n: usize) -> Elements<'a> {
        Elements {
            explorer: self.deeper(),
            left: n,
        }
    }
}

macro_rules! zero {
    ($($method:ident => $visit:ident($($value:expr)?)),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
            visitor.$visit($($value)?)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Explorer<'_> {
    type Error = Refused;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Refused> {
        Err(Refused(
            "the type asks for self-describing input (deserialize_any)".into(),
        ))
    }

    zero! {
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i8(0),
        deserialize_i16 => visit_i16(0),
        deserialize_i32 => visit_i32(0),
        deserialize_i64 => visit_i64(0),
        deserialize_i128 => visit_i128(0),
        deserialize_u8 => visit_u8(0),
        deserialize_u16 => visit_u16(0),
        deserialize_u32 => visit_u32(0),
        deserialize_u64 => visit_u64(0),
        deserialize_u128 => visit_u128(0),
        deserialize_f32 => visit_f32(0.0),
        deserialize_f64 => visit_f64(0.0),
        deserialize_char => visit_char('a'),
        deserialize_str => visit_str(""),
        deserialize_string => visit_str(""),
        deserialize_bytes => visit_bytes(&[]),
        deserialize_byte_buf => visit_bytes(&[]),
        deserialize_unit => visit_unit(),
        deserialize_identifier => visit_str(""),
        deserialize_ignored_any => visit_unit(),
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        if self.at_end() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self.deeper())
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        visitor.visit_newtype_struct(self.deeper())
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        let n = usize::from(!self.at_end());
        visitor.visit_seq(self.elements(n))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        visitor.visit_seq(self.elements(len))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Refused> {
        visitor.visit_seq(self.elements(len))
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Refused> {
        let n = usize::from(!self.at_end());
        visitor.visit_map(self.elements(n))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        visitor.visit_seq(self.elements(fields.len()))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        let count =
            u32::try_from(variants.len()).map_err(|_| Refused("too many variants".into()))?;
        if count == 0 {
            return Err(Refused(format!("the enum {name} has no variants")));
        }
        self.met.borrow_mut().entry(name).or_insert(count);
        let chosen = if self.at_end() {
            0
        } else {
            self.route.get(name).copied().unwrap_or(0).min(count - 1)
        };
        visitor.visit_enum(Variant {
            explorer: self.deeper(),
            index: chosen,
        })
    }

    fn is_human_readable(&self) -> bool {
        false
    }
}

/// The elements of a sequence, tuple, struct or map the explorer invents.
struct Elements<'a> {
    explorer: Explorer<'a>,
    left: usize,
}

impl Elements<'_> {
    /// The next invented element (a sequence's element or a map's key), until `left` run
    /// out: one body for both accessors.
    fn next<'de, S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Refused> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(self.explorer).map(Some)
    }
}

impl<'de> de::SeqAccess<'de> for Elements<'_> {
    type Error = Refused;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Refused> {
        self.next(seed)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_> {
    type Error = Refused;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Refused> {
        self.next(seed)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Refused> {
        seed.deserialize(self.explorer)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// The variant the route chose, by index.
struct Variant<'a> {
    explorer: Explorer<'a>,
    index: u32,
}

impl<'de, 'a> de::EnumAccess<'de> for Variant<'a> {
    type Error = Refused;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Refused> {
        let variant = seed.deserialize(self.index.into_deserializer())?;
        Ok((variant, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_> {
    type Error = Refused;

    fn unit_variant(self) -> Result<(), Refused> {
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Refused> {
        seed.deserialize(self.explorer)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Refused> {
        visitor.visit_seq(Elements {
            explorer: self.explorer,
            left: len,
        })
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Refused> {
        visitor.visit_seq(Elements {
            explorer: self.explorer,
            left: fields.len(),
        })
    }
}
