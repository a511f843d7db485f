//! The values a record maps to, checked against the table's column types before anything
//! is sent, so a record that does not fit fails with a message naming the column.

use std::error::Error as StdError;

use postgres::types::{to_sql_checked, IsNull, ToSql, Type};

/// One column value of a row, as the record-to-row mapping produces it.
///
/// A value is accepted by every column type it converts into without loss: `Int`/`BigInt`
/// into `smallint`/`integer`/`bigint` when in range (and into `real`/`double precision`),
/// `Double` into `real`/`double precision`, `Text` into `text`/`varchar`/`char`/`name`,
/// `json`/`jsonb`, `Bool` into `boolean`, `Null` into any (the server enforces `NOT NULL`).
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// SQL `NULL`.
    Null,
    /// A `boolean`.
    Bool(bool),
    /// A 32-bit integer (`integer`).
    Int(i32),
    /// A 64-bit integer (`bigint`).
    BigInt(i64),
    /// A double-precision float.
    Double(f64),
    /// A string.
    Text(String),
}

macro_rules! from_impls {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for SqlValue {
            /// The obvious conversion, so mappings can write `x.into()`.
            fn from(x: $t) -> Self {
                SqlValue::$v(x.into())
            }
        }
    )*};
}
from_impls!(bool => Bool, i32 => Int, i16 => Int, i64 => BigInt, u32 => BigInt,
    f64 => Double, f32 => Double, String => Text, &str => Text);

impl<V: Into<SqlValue>> From<Option<V>> for SqlValue {
    /// `None` is `NULL`.
    fn from(x: Option<V>) -> Self {
        x.map_or(SqlValue::Null, Into::into)
    }
}

impl SqlValue {
    /// Why this value cannot go into a column of type `ty`, if it cannot.
    pub(crate) fn check(&self, ty: &Type) -> Result<(), String> {
        let int_fits = |v: i64| -> Result<(), String> {
            let ok = match *ty {
                Type::INT2 => i16::try_from(v).is_ok(),
                Type::INT4 => i32::try_from(v).is_ok(),
                Type::INT8 | Type::FLOAT4 | Type::FLOAT8 => true,
                _ => return Err(format!("an integer cannot go into a {ty} column")),
            };
            if ok {
                Ok(())
            } else {
                Err(format!("{v} is out of range for {ty}"))
            }
        };
        match self {
            SqlValue::Null => Ok(()),
            SqlValue::Bool(_) if *ty == Type::BOOL => Ok(()),
            SqlValue::Int(v) => int_fits(i64::from(*v)),
            SqlValue::BigInt(v) => int_fits(*v),
            SqlValue::Double(_) if matches!(*ty, Type::FLOAT4 | Type::FLOAT8) => Ok(()),
            SqlValue::Text(_) if is_text(ty) => Ok(()),
            other => Err(format!("{} cannot go into a {ty} column", other.kind())),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            SqlValue::Null => "NULL",
            SqlValue::Bool(_) => "a boolean",
            SqlValue::Int(_) | SqlValue::BigInt(_) => "an integer",
            SqlValue::Double(_) => "a float",
            SqlValue::Text(_) => "text",
        }
    }

    /// Appends a byte encoding that is equal for equal values (an upsert batch keeps the
    /// last row per key).
    pub(crate) fn key_bytes(&self, out: &mut Vec<u8>) {
        match self {
            SqlValue::Null => out.push(0),
            SqlValue::Bool(b) => out.extend([1, u8::from(*b)]),
            SqlValue::Int(v) => {
                out.push(2);
                out.extend(i64::from(*v).to_le_bytes())
            }
            SqlValue::BigInt(v) => {
                out.push(2);
                out.extend(v.to_le_bytes())
            }
            SqlValue::Double(v) => {
                out.push(3);
                out.extend(v.to_bits().to_le_bytes())
            }
            SqlValue::Text(s) => {
                out.push(4);
                out.extend((s.len() as u64).to_le_bytes());
                out.extend(s.as_bytes())
            }
        }
    }
}

fn is_text(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::JSON | Type::JSONB
    )
}

impl ToSql for SqlValue {
    /// Encodes in the binary format of `ty`; `SqlValue::check` has accepted the pair
    /// before, so the errors here are a second line of defence.
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        self.check(ty)?;
        let int = |v: i64, out: &mut postgres::types::private::BytesMut| match *ty {
            Type::INT2 => (v as i16).to_sql(ty, out),
            Type::INT4 => (v as i32).to_sql(ty, out),
            Type::FLOAT4 => (v as f32).to_sql(ty, out),
            Type::FLOAT8 => (v as f64).to_sql(ty, out),
            _ => v.to_sql(ty, out),
        };
        match self {
            SqlValue::Null => Ok(IsNull::Yes),
            SqlValue::Bool(b) => b.to_sql(ty, out),
            SqlValue::Int(v) => int(i64::from(*v), out),
            SqlValue::BigInt(v) => int(*v, out),
            SqlValue::Double(v) if *ty == Type::FLOAT4 => (*v as f32).to_sql(ty, out),
            SqlValue::Double(v) => v.to_sql(ty, out),
            SqlValue::Text(s) if *ty == Type::JSONB => {
                // jsonb's binary format: a version byte, then the JSON text.
                out.extend_from_slice(&[1]);
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
            SqlValue::Text(s) => {
                out.extend_from_slice(s.as_bytes());
                Ok(IsNull::No)
            }
        }
    }

    fn accepts(_ty: &Type) -> bool {
        // Checked per value in `to_sql` (a `SqlValue` is dynamically typed).
        true
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_against_column_types() {
        assert!(SqlValue::BigInt(7).check(&Type::INT4).is_ok());
        let e = SqlValue::BigInt(3_000_000_000)
            .check(&Type::INT4)
            .unwrap_err();
        assert!(e.contains("out of range for int4"), "{e}");
        let e = SqlValue::Text("x".into()).check(&Type::INT8).unwrap_err();
        assert!(e.contains("text cannot go into a int8 column"), "{e}");
        assert!(SqlValue::Null.check(&Type::BOOL).is_ok());
        assert!(SqlValue::from(Some(1.5f64)).check(&Type::FLOAT4).is_ok());
        assert_eq!(SqlValue::from(None::<i32>), SqlValue::Null);
    }
}
