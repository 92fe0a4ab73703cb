//! `google.protobuf.Struct`, `Value` and `ListValue` for the `lf.a2a.v1`
//! messages (A2A's metadata and data parts): the same wire form as
//! `prost_types`'s, with the proto3 JSON mapping (any JSON value), and with
//! a `Struct`'s fields in a `BTreeMap`, so that the same struct is always
//! encoded to the same bytes (a `HashMap` would write its fields in a
//! different order in every instance, and two streams of the same task
//! would differ on the wire).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A JSON object (`google.protobuf.Struct`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Struct {
    /// Its fields, by name.
    #[prost(btree_map = "string, message", tag = "1")]
    pub fields: BTreeMap<String, Value>,
}

/// A JSON value (`google.protobuf.Value`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Value {
    /// Which kind of value; none is `null`.
    #[prost(oneof = "value::Kind", tags = "1, 2, 3, 4, 5, 6")]
    pub kind: Option<value::Kind>,
}

/// The kinds of a [`Value`].
pub mod value {
    /// A value's kind.
    #[derive(Clone, PartialEq, ::prost::Oneof)]
    pub enum Kind {
        /// `null`.
        #[prost(enumeration = "super::NullValue", tag = "1")]
        NullValue(i32),
        /// A number.
        #[prost(double, tag = "2")]
        NumberValue(f64),
        /// A string.
        #[prost(string, tag = "3")]
        StringValue(String),
        /// A boolean.
        #[prost(bool, tag = "4")]
        BoolValue(bool),
        /// An object.
        #[prost(message, tag = "5")]
        StructValue(super::Struct),
        /// An array.
        #[prost(message, tag = "6")]
        ListValue(super::ListValue),
    }
}

/// `null` (`google.protobuf.NullValue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum NullValue {
    /// The one value.
    NullValue = 0,
}

/// A JSON array (`google.protobuf.ListValue`).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListValue {
    /// Its values.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<Value>,
}

impl From<serde_json::Value> for Value {
    fn from(v: serde_json::Value) -> Self {
        use value::Kind;
        let kind = match v {
            serde_json::Value::Null => Kind::NullValue(0),
            serde_json::Value::Bool(b) => Kind::BoolValue(b),
            serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
            serde_json::Value::String(s) => Kind::StringValue(s),
            serde_json::Value::Array(a) => Kind::ListValue(ListValue {
                values: a.into_iter().map(Value::from).collect(),
            }),
            serde_json::Value::Object(o) => Kind::StructValue(Struct::from(o)),
        };
        Value { kind: Some(kind) }
    }
}

impl From<serde_json::Map<String, serde_json::Value>> for Struct {
    fn from(o: serde_json::Map<String, serde_json::Value>) -> Self {
        Struct {
            fields: o.into_iter().map(|(k, v)| (k, Value::from(v))).collect(),
        }
    }
}

impl From<&Value> for serde_json::Value {
    fn from(v: &Value) -> Self {
        use value::Kind;
        match &v.kind {
            None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
            Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
            Some(Kind::NumberValue(n)) => number(*n),
            Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
            Some(Kind::ListValue(l)) => {
                serde_json::Value::Array(l.values.iter().map(serde_json::Value::from).collect())
            }
            Some(Kind::StructValue(s)) => serde_json::Value::from(s),
        }
    }
}

impl From<&Struct> for serde_json::Value {
    fn from(s: &Struct) -> Self {
        serde_json::Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::from(v)))
                .collect(),
        )
    }
}

/// A number as JSON: whole numbers without a fraction (`42`, not `42.0`).
fn number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        serde_json::Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::Value::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Value::from)
    }
}

impl Serialize for Struct {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde_json::Value::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Struct {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Object(o) => Ok(Struct::from(o)),
            other => Err(serde::de::Error::custom(format!(
                "expected a JSON object, got {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    #[test]
    fn a_struct_encodes_the_same_whatever_the_order_it_was_built_in() {
        let a: Struct =
            serde_json::from_str(r#"{"b": 1, "a": "x", "c": [true, null]}"#).expect("parses");
        let b: Struct =
            serde_json::from_str(r#"{"c": [true, null], "a": "x", "b": 1}"#).expect("parses");
        assert_eq!(a.encode_to_vec(), b.encode_to_vec());
        assert_eq!(
            serde_json::to_string(&a).expect("json"),
            r#"{"a":"x","b":1,"c":[true,null]}"#
        );
        let back = Struct::decode(a.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(back, a);
    }
}
