//! The 2026-07-28 fields of `params._meta`, read while a message is decoded.
//!
//! A stateless request carries its protocol version, client info, client
//! capabilities and log level in `_meta`: about 150 bytes that the runtime
//! reads once, to check them. Decoding keeps them as the JSON text sent
//! ([`StatelessMeta`]) instead of building a value tree for each, and takes
//! them out of the `_meta` map; every other `_meta` key (`progressToken`,
//! a trace context) stays where it was. Encoding puts them back.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::methods::meta as keys;

/// The 2026-07-28 fields of a message's `params._meta`, each as the JSON
/// text the client sent (unchecked: the runtime reads and checks them).
#[derive(Debug, Clone, Default)]
pub struct StatelessMeta {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub protocol_version: Option<Box<RawValue>>,
    /// `io.modelcontextprotocol/clientInfo`.
    pub client_info: Option<Box<RawValue>>,
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub client_capabilities: Option<Box<RawValue>>,
    /// `io.modelcontextprotocol/logLevel`.
    pub log_level: Option<Box<RawValue>>,
}

impl PartialEq for StatelessMeta {
    fn eq(&self, other: &Self) -> bool {
        self.fields()
            .map(|(key, value)| (key, value.get()))
            .eq(other.fields().map(|(key, value)| (key, value.get())))
    }
}

impl StatelessMeta {
    /// The field a `_meta` key names, if it is one of these.
    fn slot(&mut self, key: &str) -> Option<&mut Option<Box<RawValue>>> {
        match key {
            keys::PROTOCOL_VERSION => Some(&mut self.protocol_version),
            keys::CLIENT_INFO => Some(&mut self.client_info),
            keys::CLIENT_CAPABILITIES => Some(&mut self.client_capabilities),
            keys::LOG_LEVEL => Some(&mut self.log_level),
            _ => None,
        }
    }

    /// The fields present, with their `_meta` keys.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&'static str, &RawValue)> {
        [
            (keys::PROTOCOL_VERSION, &self.protocol_version),
            (keys::CLIENT_INFO, &self.client_info),
            (keys::CLIENT_CAPABILITIES, &self.client_capabilities),
            (keys::LOG_LEVEL, &self.log_level),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.as_deref().map(|v| (key, v)))
    }

    fn is_empty(&self) -> bool {
        self.fields().next().is_none()
    }

    /// The same fields read from a `_meta` map (of a message built in code
    /// rather than decoded); `None` when it has none of them.
    pub fn from_params(params: Option<&Map<String, Value>>) -> Option<Self> {
        let Some(Value::Object(meta)) = params?.get("_meta") else {
            return None;
        };
        let mut found = Self::default();
        for (key, value) in meta {
            if let Some(slot) = found.slot(key) {
                *slot = serde_json::value::to_raw_value(value).ok();
            }
        }
        (!found.is_empty()).then_some(found)
    }

    /// What a message carries: the fields its decoding took out of `_meta`,
    /// else those still in its `_meta` map.
    pub(crate) fn of<'a>(
        decoded: Option<&'a Self>,
        params: Option<&Map<String, Value>>,
    ) -> Option<Cow<'a, Self>> {
        match decoded {
            Some(meta) => Some(Cow::Borrowed(meta)),
            None => Self::from_params(params).map(Cow::Owned),
        }
    }
}

/// `params` as decoded: an object (with the 2026-07-28 fields of its
/// `_meta` apart), or something else, which is an error to report.
pub(crate) enum RawParams {
    Object(Map<String, Value>, Option<Box<StatelessMeta>>),
    NotAnObject,
}

impl<'de> Deserialize<'de> for RawParams {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ParamsVisitor)
    }
}

struct ParamsVisitor;

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = RawParams;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a params object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<RawParams, A::Error> {
        let mut params = Map::new();
        let mut stateless = None;
        while let Some(Key(key)) = access.next_key()? {
            if key == "_meta" {
                match access.next_value_seed(MetaSeed)? {
                    Meta::Split(rest, found) => {
                        // The last `_meta` wins, as it would in a map.
                        stateless = found;
                        match rest {
                            Some(rest) => params.insert(key.into_owned(), Value::Object(rest)),
                            None => params.remove("_meta"),
                        };
                    }
                    Meta::Other(value) => {
                        stateless = None;
                        params.insert(key.into_owned(), value);
                    }
                }
            } else {
                let value = access.next_value()?;
                params.insert(key.into_owned(), value);
            }
        }
        Ok(RawParams::Object(params, stateless))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawParams, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(RawParams::NotAnObject)
    }

    fn visit_bool<E>(self, _: bool) -> Result<RawParams, E> {
        Ok(RawParams::NotAnObject)
    }

    fn visit_i64<E>(self, _: i64) -> Result<RawParams, E> {
        Ok(RawParams::NotAnObject)
    }

    fn visit_u64<E>(self, _: u64) -> Result<RawParams, E> {
        Ok(RawParams::NotAnObject)
    }

    fn visit_f64<E>(self, _: f64) -> Result<RawParams, E> {
        Ok(RawParams::NotAnObject)
    }

    fn visit_str<E>(self, _: &str) -> Result<RawParams, E> {
        Ok(RawParams::NotAnObject)
    }

    fn visit_unit<E>(self) -> Result<RawParams, E> {
        Ok(RawParams::NotAnObject)
    }
}

/// A map key: borrowed from the body unless it has escapes, so a key that
/// is only compared costs no allocation.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(v)))
    }
}

/// `_meta` as decoded: an object split into the other keys (none left:
/// `None`) and the 2026-07-28 fields (none: `None`), or any other value as
/// it was.
enum Meta {
    Split(Option<Map<String, Value>>, Option<Box<StatelessMeta>>),
    Other(Value),
}

struct MetaSeed;

impl<'de> DeserializeSeed<'de> for MetaSeed {
    type Value = Meta;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Meta, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed {
    type Value = Meta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Meta, A::Error> {
        let mut rest = Map::new();
        let mut found = StatelessMeta::default();
        while let Some(Key(key)) = access.next_key()? {
            match found.slot(&key) {
                Some(slot) => *slot = Some(access.next_value()?),
                None => {
                    let value = access.next_value()?;
                    rest.insert(key.into_owned(), value);
                }
            }
        }
        if found.is_empty() {
            return Ok(Meta::Split(Some(rest), None));
        }
        let rest = (!rest.is_empty()).then_some(rest);
        Ok(Meta::Split(rest, Some(Box::new(found))))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Meta, A::Error> {
        Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Meta::Other)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Meta, E> {
        Ok(Meta::Other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Meta, E> {
        Ok(Meta::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Meta, E> {
        Ok(Meta::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Meta, E> {
        Ok(Meta::Other(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Meta, E> {
        Ok(Meta::Other(Value::from(v)))
    }

    fn visit_string<E>(self, v: String) -> Result<Meta, E> {
        Ok(Meta::Other(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Meta, E> {
        Ok(Meta::Other(Value::Null))
    }
}

/// `params` as sent: the map, with the 2026-07-28 fields back in `_meta`.
pub(crate) struct ParamsOut<'a> {
    pub(crate) params: Option<&'a Map<String, Value>>,
    pub(crate) stateless: &'a StatelessMeta,
}

impl Serialize for ParamsOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let mut meta_written = false;
        for (key, value) in self.params.into_iter().flatten() {
            match value {
                Value::Object(rest) if key == "_meta" => {
                    map.serialize_entry(key, &MetaOut(Some(rest), self.stateless))?;
                    meta_written = true;
                }
                // Not an object: nothing to put the fields in (decoding
                // takes them only out of an object).
                _ => {
                    meta_written |= key == "_meta";
                    map.serialize_entry(key, value)?;
                }
            }
        }
        if !meta_written {
            map.serialize_entry("_meta", &MetaOut(None, self.stateless))?;
        }
        map.end()
    }
}

struct MetaOut<'a>(Option<&'a Map<String, Value>>, &'a StatelessMeta);

impl Serialize for MetaOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for (key, value) in self.0.into_iter().flatten() {
            // A field decoding took out is not also in the map, unless code
            // put it back: the decoded one is what the message carries.
            if self.1.fields().all(|(field, _)| field != key) {
                map.serialize_entry(key, value)?;
            }
        }
        for (key, value) in self.1.fields() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}
