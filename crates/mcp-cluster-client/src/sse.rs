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

/// Largest block a parser holds by default: its field lines and the line
/// being read, 16 MiB. A block over the limit is dropped, so memory stays
/// bounded whatever the server sends.
pub const MAX_BLOCK_BYTES: usize = 16 * 1024 * 1024;

/// Incremental SSE parser: feed bytes, take complete blocks.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes after the last line end: the line being read.
    buffer: Vec<u8>,
    current: SseEvent,
    /// Bytes of the lines of `current` so far.
    block_bytes: usize,
    max_block_bytes: usize,
    /// The line being read lost bytes to the limit (so it is not blank).
    line_cut: bool,
    /// The block being read went over the limit: its lines are skipped up
    /// to the blank line that ends it.
    skipping: bool,
    /// Comment lines seen (keep-alives), for tests.
    pub comments: usize,
    /// Blocks dropped for going over the limit.
    pub oversized: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_max_block_bytes(MAX_BLOCK_BYTES)
    }
}

impl SseParser {
    /// A parser that drops blocks over `max` bytes (field lines included).
    pub fn with_max_block_bytes(max: usize) -> Self {
        Self {
            buffer: Vec::new(),
            current: SseEvent::default(),
            block_bytes: 0,
            max_block_bytes: max,
            line_cut: false,
            skipping: false,
            comments: 0,
            oversized: 0,
        }
    }

    /// Feeds bytes; returns the blocks they complete (comment-only blocks
    /// and blocks over the limit are not returned).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        // Only the new bytes are searched (and a CR left waiting), and the
        // buffer shifts once per call: linear however the input is split.
        let waiting_cr = self.buffer.last() == Some(&b'\r');
        let mut scanned = self.buffer.len() - usize::from(waiting_cr);
        self.buffer.extend_from_slice(bytes);
        let buffer = std::mem::take(&mut self.buffer);
        let mut out = Vec::new();
        let mut start = 0;
        // Lines end with CRLF, LF or CR; a CR that is the last byte so far
        // waits for the next one, which may be its LF.
        while let Some(offset) = buffer[scanned..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = scanned + offset;
            let next = match (buffer[end], buffer.get(end + 1)) {
                (b'\r', None) => break,
                (b'\r', Some(b'\n')) => end + 2,
                _ => end + 1,
            };
            self.line(&buffer[start..end], &mut out);
            start = next;
            scanned = next;
        }
        self.buffer = buffer;
        self.buffer.drain(..start);
        // What the line being read will add at least (as `line` counts).
        let pending = match self.buffer.strip_suffix(b"\r").unwrap_or(&self.buffer) {
            [] => 0,
            line => line.len() + 1,
        };
        if self.block_bytes + pending > self.max_block_bytes {
            self.drop_block();
            // Keep a waiting CR: it may end the line or stand for a blank one.
            let cr = self.buffer.last() == Some(&b'\r');
            self.buffer.clear();
            if cr {
                self.buffer.push(b'\r');
            }
            self.line_cut = true;
        }
        out
    }

    /// Takes one line (without its line end).
    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        let cut = std::mem::take(&mut self.line_cut);
        let blank = line.is_empty() && !cut;
        if self.skipping {
            self.skipping = !blank;
            return;
        }
        if blank {
            let block = std::mem::take(&mut self.current);
            self.block_bytes = 0;
            if block.has_data
                || block.id.is_some()
                || block.retry.is_some()
                || block.event.is_some()
            {
                out.push(block);
            }
            return;
        }
        self.block_bytes += line.len() + 1;
        if self.block_bytes > self.max_block_bytes {
            self.drop_block();
            return;
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.current.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.current.has_data = true;
            }
            "id" => self.current.id = Some(value.to_owned()),
            "event" => self.current.event = Some(value.to_owned()),
            "retry" => self.current.retry = value.parse().ok(),
            _ => {}
        }
    }

    /// Drops the block being read and skips the rest of it.
    fn drop_block(&mut self) {
        if !self.skipping {
            self.oversized += 1;
            self.skipping = true;
        }
        self.current = SseEvent::default();
        self.block_bytes = 0;
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
    /// The response's headers (boxed: a stream is moved around).
    headers: Box<reqwest::header::HeaderMap>,
    max_block_bytes: usize,
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
        Self::with_max_block_bytes(response, MAX_BLOCK_BYTES)
    }

    /// As [`Self::new`], an event over `max` bytes an error.
    pub fn with_max_block_bytes(response: reqwest::Response, max: usize) -> Self {
        Self {
            headers: Box::new(response.headers().clone()),
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::with_max_block_bytes(max),
            pending: Default::default(),
            last_event_id: None,
            retry: None,
            max_block_bytes: max,
        }
    }

    /// The response's headers (its `Mcp-Session-Id`, say).
    pub fn headers(&self) -> &reqwest::header::HeaderMap {
        &self.headers
    }

    /// The next block (events, priming events, bare `retry` blocks); `None`
    /// when the server closed the stream.
    ///
    /// # Errors
    /// The connection failed mid-stream, or the server sent a block over
    /// [`MAX_BLOCK_BYTES`] (a protocol error; the block is dropped).
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, crate::ClientError> {
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
                    let oversized = self.parser.oversized;
                    self.pending.extend(self.parser.feed(&chunk));
                    if self.parser.oversized > oversized {
                        return Err(crate::ClientError::Protocol(format!(
                            "an SSE event over {} bytes",
                            self.max_block_bytes
                        )));
                    }
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

    #[test]
    fn memory_stays_bounded_whatever_the_server_sends() {
        // A line that never ends, then data lines in a block that never
        // ends: each is dropped at the limit instead of buffered.
        let mut p = SseParser::default();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..20 {
            assert!(p.feed(&chunk).is_empty());
        }
        assert!(p.buffer.capacity() <= MAX_BLOCK_BYTES + 2 * chunk.len());
        assert!(
            p.feed(b"\n\n").is_empty(),
            "the rest of the cut block is skipped"
        );
        let line: Vec<u8> = [b"data: ".as_slice(), &chunk, b"\n"].concat();
        for _ in 0..20 {
            assert!(p.feed(&line).is_empty());
        }
        assert!(p.current.data.capacity() <= MAX_BLOCK_BYTES);
        assert_eq!(p.oversized, 2);
        // Blocks after a dropped one parse again.
        let events = p.feed(b"\ndata: after\n\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "after");
    }

    #[test]
    fn a_lone_cr_ends_a_line_however_split() {
        let stream = b"id: 7\rdata: a\r\rdata: b\r\n\r\n: x\r\r";
        let whole = SseParser::default().feed(stream);
        assert_eq!(whole.len(), 2, "{whole:?}");
        assert_eq!(
            (whole[0].id.as_deref(), whole[0].data.as_str()),
            (Some("7"), "a")
        );
        assert_eq!(
            (whole[1].id.as_deref(), whole[1].data.as_str()),
            (None, "b")
        );
        for at in 0..=stream.len() {
            let mut p = SseParser::default();
            let mut split = p.feed(&stream[..at]);
            split.extend(p.feed(&stream[at..]));
            assert_eq!(split, whole, "split at {at}");
            assert_eq!(p.comments, 1);
        }
    }

    #[test]
    fn blocks_at_the_limit_pass_however_split() {
        let block = b"id: 1\r\ndata: 12345\r\n\r\n";
        // "id: 1" and "data: 12345" and their line ends: 6 + 12 bytes.
        for max in [18, 17] {
            let whole = SseParser::with_max_block_bytes(max).feed(block);
            let mut p = SseParser::with_max_block_bytes(max);
            let split: Vec<_> = block.iter().flat_map(|b| p.feed(&[*b])).collect();
            assert_eq!(split, whole, "max {max}");
            assert_eq!(whole.len(), usize::from(max == 18), "max {max}");
        }
    }
}
