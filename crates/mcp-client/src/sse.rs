//! Server-Sent Events: an incremental parser (WHATWG event-stream
//! interpretation) and a stream of events over an HTTP body.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

/// One dispatched event, or a block that carried only fields like `retry`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// `id` of the event, if the block set one.
    pub id: Option<String>,
    /// `event` name (default `message`).
    pub event: Option<String>,
    /// `data` lines joined with `\n`.
    pub data: String,
    /// `retry` milliseconds, if the block set one.
    pub retry: Option<u64>,
    /// The block had at least one `data` field.
    pub has_data: bool,
}

/// Incremental SSE parser: feed bytes, take complete blocks.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    current: SseEvent,
    /// Comment lines seen (keep-alives), for tests.
    pub comments: usize,
}

impl SseParser {
    /// Feeds bytes; returns the blocks they complete (comment-only blocks
    /// are not returned).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(pos) = self.buffer.iter().position(|&b| b == b'\n') {
            let mut line: Vec<u8> = self.buffer.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8_lossy(&line).into_owned();
            if line.is_empty() {
                let block = std::mem::take(&mut self.current);
                if block.has_data
                    || block.id.is_some()
                    || block.retry.is_some()
                    || block.event.is_some()
                {
                    out.push(block);
                }
                continue;
            }
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f.to_owned(), v.strip_prefix(' ').unwrap_or(v).to_owned()),
                None => (line.clone(), String::new()),
            };
            match field.as_str() {
                "data" => {
                    if self.current.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(&value);
                    self.current.has_data = true;
                }
                "id" => self.current.id = Some(value),
                "event" => self.current.event = Some(value),
                "retry" => self.current.retry = value.parse().ok(),
                _ => {}
            }
        }
        out
    }
}

/// Events of an SSE response body.
pub struct SseStream {
    body: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>,
    parser: SseParser,
    pending: std::collections::VecDeque<SseEvent>,
    /// The last event id seen, for resumption.
    pub last_event_id: Option<String>,
    /// The last `retry` seen.
    pub retry: Option<u64>,
}

impl std::fmt::Debug for SseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseStream")
            .field("last_event_id", &self.last_event_id)
            .finish()
    }
}

impl SseStream {
    /// Wraps a response whose body is an event stream.
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::default(),
            pending: Default::default(),
            last_event_id: None,
            retry: None,
        }
    }

    /// The next block (events, priming events, bare `retry` blocks); `None`
    /// when the server closed the stream.
    ///
    /// # Errors
    /// The connection failed mid-stream.
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, reqwest::Error> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if let Some(id) = &event.id {
                    self.last_event_id = Some(id.clone());
                }
                if let Some(retry) = event.retry {
                    self.retry = Some(retry);
                }
                return Ok(Some(event));
            }
            match self.body.next().await {
                Some(chunk) => {
                    let chunk = chunk?;
                    self.pending.extend(self.parser.feed(&chunk));
                }
                None => return Ok(None),
            }
        }
    }

    /// The next block carrying a JSON-RPC message (skips priming events and
    /// bare `retry` blocks).
    ///
    /// # Errors
    /// The connection failed, or the data is not JSON.
    pub async fn next_message(&mut self) -> Result<Option<serde_json::Value>, crate::ClientError> {
        while let Some(event) = self.next_event().await? {
            if event.has_data && !event.data.is_empty() {
                return Ok(Some(serde_json::from_str(&event.data)?));
            }
        }
        Ok(None)
    }

    /// Keep-alive comments seen so far.
    pub fn comments(&self) -> usize {
        self.parser.comments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_blocks_multiline_data_comments_and_retry() {
        let mut p = SseParser::default();
        assert!(p.feed(b"id: a\nretry: 500\nda").is_empty());
        let events =
            p.feed(b"ta: \n\n: keep-alive\n\nevent: message\ndata: x\ndata: y\r\n\nretry: 9\n\n");
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].id.as_deref(), Some("a"));
        assert_eq!(events[0].retry, Some(500));
        assert!(events[0].has_data && events[0].data.is_empty());
        assert_eq!(events[1].data, "x\ny");
        assert_eq!(events[2].retry, Some(9));
        assert!(!events[2].has_data);
        assert_eq!(p.comments, 1);
    }
}
