//! A Mooncake row's `messages` read without being kept ([`Prompts::Skip`]): checked as the
//! JSON tree a kept one is built into would be (numbers in range, nesting within serde_json's
//! limit), and refused with the same error when it is not an array, but nothing of an array
//! is built or held.
//!
//! [`Prompts::Skip`]: super::Prompts::Skip

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A row's `messages`, kept or not.
pub(super) enum Messages {
    /// An array: built when kept, `None` when only checked.
    Array(Option<Value>),
    /// Not an array: the value, for the error.
    Other(Value),
}

impl From<Value> for Messages {
    fn from(v: Value) -> Self {
        match v {
            Value::Array(_) => Messages::Array(Some(v)),
            other => Messages::Other(other),
        }
    }
}

/// `messages` when prompts are skipped: an array is only checked; any other value (refused)
/// is built, for its error to quote it as when kept.
pub(super) struct SkippedMessages(Messages);

impl From<SkippedMessages> for Messages {
    fn from(m: SkippedMessages) -> Self {
        m.0
    }
}

impl<'de> Deserialize<'de> for SkippedMessages {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(SkippedVisitor)
    }
}

struct SkippedVisitor;

impl<'de> Visitor<'de> for SkippedVisitor {
    type Value = SkippedMessages;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(SkippedMessages(Messages::Array(None)))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        Value::deserialize(MapAccessDeserializer::new(map)).map(other)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(other(Value::from(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(other(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(other(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(other(Value::from(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(other(Value::from(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(other(Value::Null))
    }
}

fn other(v: Value) -> SkippedMessages {
    SkippedMessages(Messages::Other(v))
}

/// Any JSON value, read the way [`Value`] reads one (`deserialize_any`: numbers parsed and
/// range-checked, nesting counted) and dropped as it is read.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Checked, D::Error> {
        Checked::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_none<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
}
