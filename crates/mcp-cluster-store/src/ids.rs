//! Identifier newtypes with validating parsers.
//!
//! Event ID format (shared by every [`crate::EventLog`] implementation):
//! `<stream>.<ms>-<seq>`, where `<stream>` is a [`StreamId`] (32 lowercase
//! hex digits of a UUID v4, random, so unique across the cluster) and `<ms>-<seq>` is a
//! [`Position`] in that stream, the same shape as a Redis Stream entry ID.
//! `<stream>.0-0` names the start of a stream (the SSE priming event).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Why an identifier failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// Not a valid session id.
    #[error("malformed session id")]
    Session,
    /// Not a valid stream id.
    #[error("malformed stream id")]
    Stream,
    /// Not a valid event id.
    #[error("malformed event id")]
    Event,
    /// Not a valid node id.
    #[error("malformed node id")]
    Node,
}

/// Longest session id accepted from a client.
pub const MAX_SESSION_ID_BYTES: usize = 128;

/// An MCP session id (shared text: a clone is a reference count, and ids
/// are cloned into every map and message that names the session): 1 to 128
/// visible ASCII characters (0x21-0x7E), as the
/// Streamable HTTP session management rules require. Minted as a random
/// UUID v4.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// A new cryptographically random session id (UUID v4, OS randomness).
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().to_string().into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SessionId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let visible = s.bytes().all(|b| (0x21..=0x7e).contains(&b));
        if s.is_empty() || s.len() > MAX_SESSION_ID_BYTES || !visible {
            return Err(IdError::Session);
        }
        Ok(Self(s.into()))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An SSE stream id (shared text, like [`SessionId`]): a UUID v4 (122
/// random bits) as 32 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(Arc<str>);

impl StreamId {
    /// A new random stream id.
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string().into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for StreamId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s.len() == 32
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if ok {
            Ok(Self(s.into()))
        } else {
            Err(IdError::Stream)
        }
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A node of the cluster: random per process start, so a restarted node is
/// a new node and its predecessor's streams are finalized as orphans.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(String);

impl NodeId {
    /// A new random node id (32 hex digits).
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for NodeId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::Node)
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A position in a stream, `<ms>-<seq>`, ordered; `0-0` is before every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Position {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence within the millisecond.
    pub seq: u64,
}

impl Position {
    /// The start of every stream.
    pub const START: Self = Self { ms: 0, seq: 0 };

    /// The next position after `self` at wall-clock time `now_ms`: strictly
    /// greater than `self`, as Redis mints stream entry IDs.
    pub fn next(self, now_ms: u64) -> Self {
        if now_ms > self.ms {
            Self { ms: now_ms, seq: 0 }
        } else {
            Self {
                ms: self.ms,
                seq: self.seq + 1,
            }
        }
    }
}

impl FromStr for Position {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ms, seq) = s.split_once('-').ok_or(IdError::Event)?;
        // Decimal as `Display` writes it, without leading zeros: one
        // spelling per position, so an id round-trips exactly.
        let digits = |p: &str| {
            !p.is_empty()
                && p.len() <= 20
                && p.bytes().all(|b| b.is_ascii_digit())
                && (p == "0" || !p.starts_with('0'))
        };
        if !digits(ms) || !digits(seq) {
            return Err(IdError::Event);
        }
        Ok(Self {
            ms: ms.parse().map_err(|_| IdError::Event)?,
            seq: seq.parse().map_err(|_| IdError::Event)?,
        })
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// An SSE event id: a stream and a position in it (`<stream>.<ms>-<seq>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventId {
    /// The stream the event belongs to.
    pub stream: StreamId,
    /// Its position there.
    pub position: Position,
}

/// Longest `Last-Event-ID` worth parsing.
pub const MAX_EVENT_ID_BYTES: usize = 80;

impl FromStr for EventId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_EVENT_ID_BYTES {
            return Err(IdError::Event);
        }
        let (stream, position) = s.split_once('.').ok_or(IdError::Event)?;
        Ok(Self {
            stream: stream.parse().map_err(|_| IdError::Event)?,
            position: position.parse()?,
        })
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.stream, self.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_round_trip_and_reject_garbage() {
        let id = EventId {
            stream: StreamId::random(),
            position: Position { ms: 17, seq: 3 },
        };
        assert_eq!(id.to_string().parse::<EventId>().unwrap(), id);
        for bad in [
            "",
            "x",
            "abc.1-2",
            &format!("{}.1", id.stream),
            &format!("{}.-1-2", id.stream),
            &format!("{}.1-2\n", id.stream),
            &"9".repeat(200),
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn event_ids_have_one_spelling() {
        let stream = StreamId::random();
        for bad in ["01-2", "1-02", "00-0", "0-00", "007-1"] {
            assert!(bad.parse::<Position>().is_err(), "{bad:?} parsed");
            let id = format!("{stream}.{bad}");
            assert!(id.parse::<EventId>().is_err(), "{id:?} parsed");
        }
        for good in ["0-0", "10-0", "1795231145516-0", "18446744073709551615-7"] {
            let id = format!("{stream}.{good}");
            assert_eq!(id.parse::<EventId>().unwrap().to_string(), id);
        }
    }

    #[test]
    fn session_ids_are_visible_ascii() {
        assert!(SessionId::random().as_str().parse::<SessionId>().is_ok());
        assert!("a b".parse::<SessionId>().is_err());
        assert!("é".parse::<SessionId>().is_err());
        assert!("".parse::<SessionId>().is_err());
    }

    #[test]
    fn positions_increase_even_when_the_clock_goes_back() {
        let p = Position { ms: 100, seq: 4 };
        assert_eq!(p.next(50), Position { ms: 100, seq: 5 });
        assert_eq!(p.next(101), Position { ms: 101, seq: 0 });
    }
}
