//! Fuzz target: the identifier parsers of `mcp-cluster-store` (`Last-Event-ID`'s
//! `EventId`, `Position`, `StreamId`, `SessionId`, `NodeId`).
//!
//! Invariants: no panic; whatever parses displays as exactly the text it was
//! parsed from (one spelling per id, so two spellings never name one event);
//! the documented shapes hold (`<32 lowercase hex>.<ms>-<seq>`, session ids
//! of 1-128 visible ASCII); and every id built from parts round-trips.
#![no_main]

use std::fmt::Display;
use std::str::FromStr;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use mcp_cluster_store::ids::MAX_EVENT_ID_BYTES;
use mcp_cluster_store::{EventId, NodeId, Position, SessionId, StreamId};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let text = text.as_ref();

    if let Some(id) = exact::<EventId>(text) {
        assert!(text.len() <= MAX_EVENT_ID_BYTES);
        let (stream, position) = text.split_once('.').expect("a dot");
        assert_eq!(id.stream.as_str(), stream);
        assert_eq!(exact::<Position>(position), Some(id.position));
    }
    if let Some(position) = exact::<Position>(text) {
        let (ms, seq) = text.split_once('-').expect("a dash");
        assert_eq!(
            (ms.parse(), seq.parse()),
            (Ok(position.ms), Ok(position.seq))
        );
    }
    let stream = exact::<StreamId>(text);
    let stream_shape =
        text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    assert_eq!(stream.is_some(), stream_shape, "stream id {text:?}");
    let session = exact::<SessionId>(text);
    let session_shape =
        (1..=128).contains(&text.len()) && text.bytes().all(|b| (0x21..=0x7e).contains(&b));
    assert_eq!(session.is_some(), session_shape, "session id {text:?}");
    if let Some(node) = exact::<NodeId>(text) {
        assert!(!node.as_str().is_empty() && node.as_str().len() <= 64);
    }

    // An id built from arbitrary parts round-trips.
    let mut u = Unstructured::new(data);
    if let Ok((stream, ms, seq)) = <([u8; 16], u64, u64)>::arbitrary(&mut u) {
        let hex: String = stream.iter().map(|b| format!("{b:02x}")).collect();
        let id = EventId {
            stream: hex.parse().expect("32 lowercase hex digits"),
            position: Position { ms, seq },
        };
        let shown = id.to_string();
        assert!(
            shown.len() <= MAX_EVENT_ID_BYTES,
            "{shown} too long to parse back"
        );
        assert_eq!(shown.parse::<EventId>().as_ref(), Ok(&id), "{shown}");
    }
});

/// Parses `text` as `T`; when it parses, checks that it displays as `text`.
fn exact<T: FromStr + Display>(text: &str) -> Option<T> {
    let parsed = text.parse::<T>().ok()?;
    assert_eq!(parsed.to_string(), text, "parsed, but displays differently");
    Some(parsed)
}
