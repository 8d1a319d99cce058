//! Correctness checks on what one request gets back, kept free of I/O so
//! they are unit-tested: the response carries the request's id and arrives
//! once; progress rises strictly; a complete call (one connection or a
//! dropped one plus its resumption) saw progress exactly 1..=steps; no SSE
//! event id comes twice.

use std::collections::HashSet;

use serde_json::Value;

/// A broken protocol rule; each is counted under its [`Violation::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Violation {
    /// A response whose id is not the request's.
    WrongId,
    /// A second response for the same request.
    DuplicateResponse,
    /// Anything after the response on a request's stream.
    AfterResponse,
    /// The stream ended, or the JSON body came, without the response.
    MissingResponse,
    /// A progress value not above the previous one (a duplicate, or a replay
    /// of something already seen).
    ProgressNotIncreasing,
    /// A progress value outside 1..=steps or not an integer.
    ProgressOutOfRange,
    /// The call completed, but some progress values never arrived.
    ProgressGap,
    /// A message that is neither a response nor a notification, or not JSON.
    Malformed,
    /// A stream that should have carried event ids (for resumption) did not.
    NoEventId,
    /// The answer was well-formed but not what the tool returns (echo text).
    WrongResult,
    /// An SSE event id that an earlier message of the same request already
    /// carried: a replay of something seen, or an id given twice.
    EventIdRepeated,
}

impl Violation {
    /// The error key in the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Violation::WrongId => "protocol:wrong_id",
            Violation::DuplicateResponse => "protocol:duplicate_response",
            Violation::AfterResponse => "protocol:message_after_response",
            Violation::MissingResponse => "protocol:missing_response",
            Violation::ProgressNotIncreasing => "protocol:progress_not_increasing",
            Violation::ProgressOutOfRange => "protocol:progress_out_of_range",
            Violation::ProgressGap => "protocol:progress_gap",
            Violation::Malformed => "protocol:malformed_message",
            Violation::NoEventId => "protocol:no_event_id",
            Violation::WrongResult => "protocol:wrong_result",
            Violation::EventIdRepeated => "protocol:event_id_repeated",
        }
    }
}

/// What one message meant for the request being read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    /// A progress notification for this request, with its value.
    Progress(u64),
    /// The response (kept by the checker).
    Response,
    /// Some other notification or server request (logging, list changes).
    Other,
}

/// Checks the messages of one request, across one or more connections.
///
/// Memory: a few words for progress, whatever the number of steps
/// (strictly rising integers in 1..=steps, `steps` of them, are exactly
/// 1..=steps, so no set of seen values is needed), and the event ids of the
/// request's own messages (ids are opaque: only a set tells a repeat).
#[derive(Debug)]
pub(crate) struct CallCheck {
    id: i64,
    /// Expected progress count, when progress was requested.
    steps: Option<u64>,
    last_progress: u64,
    progress_count: u64,
    response: Option<Value>,
    event_ids: HashSet<String>,
}

impl CallCheck {
    /// For request `id`; `steps` when progress was requested.
    pub(crate) fn new(id: i64, steps: Option<u64>) -> Self {
        Self {
            id,
            steps,
            last_progress: 0,
            progress_count: 0,
            response: None,
            event_ids: HashSet::new(),
        }
    }

    /// Takes the SSE event id of a message of this request (before the
    /// message itself).
    ///
    /// # Errors
    /// [`Violation::EventIdRepeated`] when an earlier message carried it.
    pub(crate) fn event_id(&mut self, id: &str) -> Result<(), Violation> {
        if self.event_ids.insert(id.to_owned()) {
            Ok(())
        } else {
            Err(Violation::EventIdRepeated)
        }
    }

    /// Progress notifications seen so far.
    pub(crate) fn progress_count(&self) -> u64 {
        self.progress_count
    }

    /// The response, once seen.
    pub(crate) fn response(&self) -> Option<&Value> {
        self.response.as_ref()
    }

    /// Takes one message of the request's stream (or its JSON body).
    ///
    /// # Errors
    /// The first rule the message breaks.
    pub(crate) fn observe(&mut self, message: Value) -> Result<Seen, Violation> {
        if self.response.is_some() {
            return Err(if message.get("method").is_none() {
                Violation::DuplicateResponse
            } else {
                Violation::AfterResponse
            });
        }
        match message.get("method").and_then(Value::as_str) {
            Some("notifications/progress") => {
                let value = message
                    .pointer("/params/progress")
                    .and_then(Value::as_f64)
                    .ok_or(Violation::Malformed)?;
                self.progress(value).map(Seen::Progress)
            }
            Some(_) => Ok(Seen::Other),
            None => {
                if message.get("result").is_none() && message.get("error").is_none() {
                    return Err(Violation::Malformed);
                }
                if message.get("id").and_then(Value::as_i64) != Some(self.id) {
                    return Err(Violation::WrongId);
                }
                self.response = Some(message);
                Ok(Seen::Response)
            }
        }
    }

    fn progress(&mut self, value: f64) -> Result<u64, Violation> {
        let max = self.steps.unwrap_or(u64::MAX);
        if value.fract() != 0.0 || value < 1.0 || value > max as f64 {
            return Err(Violation::ProgressOutOfRange);
        }
        // In range and integral, so the cast is exact.
        let value = value as u64;
        if value <= self.last_progress {
            return Err(Violation::ProgressNotIncreasing);
        }
        self.last_progress = value;
        self.progress_count += 1;
        Ok(value)
    }

    /// The request's messages are over (the stream, or the last of its
    /// streams, ended). `cancelled`: a missing response and missing
    /// progress are expected.
    ///
    /// # Errors
    /// The response or some progress never came.
    pub(crate) fn finish(&self, cancelled: bool) -> Result<(), Violation> {
        if cancelled {
            return Ok(());
        }
        if self.response.is_none() {
            return Err(Violation::MissingResponse);
        }
        // A tool error (isError, or a JSON-RPC error) need not report
        // every step; only a successful call must.
        let succeeded = self.response.as_ref().is_some_and(|r| {
            r.get("result").is_some() && r.pointer("/result/isError") != Some(&Value::Bool(true))
        });
        match self.steps {
            Some(steps) if succeeded && self.progress_count != steps => Err(Violation::ProgressGap),
            _ => Ok(()),
        }
    }
}

/// The text an echo tool may answer `message` with: the message itself (the
/// SDK examples, the peers in `loadtest/peers/`) or `Echo: ` and the message
/// (`mcp-node` and the reference "everything" server).
const ECHO_PREFIX: &str = "Echo: ";

/// Whether a `tools/call echo` response's result is the echo of `message`:
/// exactly one content item, of type text, whose text is `message` or
/// `Echo: ` followed by `message`. Anything else (another message, extra or
/// missing content) is a wrong answer even with the right id.
pub(crate) fn is_echo_of(response: &Value, message: &str) -> bool {
    let Some([item]) = response
        .pointer("/result/content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
    else {
        return false;
    };
    let text = item.get("text").and_then(Value::as_str);
    item.get("type").and_then(Value::as_str) == Some("text")
        && text.is_some_and(|t| t == message || t.strip_prefix(ECHO_PREFIX) == Some(message))
}

/// Whether a tool call's result carries content: `content` is an array
/// with at least one item.
pub(crate) fn has_tool_content(result: &Value) -> bool {
    result
        .pointer("/content")
        .and_then(Value::as_array)
        .is_some_and(|content| !content.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn progress(p: f64) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/progress",
               "params": {"progressToken": 1, "progress": p, "total": 4.0}})
    }

    fn response(id: i64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}})
    }

    #[test]
    fn an_event_id_seen_before_is_caught() {
        let mut check = CallCheck::new(7, None);
        assert_eq!(check.event_id("s.1-0"), Ok(()));
        assert_eq!(check.event_id("s.2-0"), Ok(()));
        assert_eq!(check.event_id("s.1-0"), Err(Violation::EventIdRepeated));
    }

    #[test]
    fn a_complete_call_across_a_resumption_passes() {
        let mut check = CallCheck::new(7, Some(4));
        // First connection: 1, 2; dropped. Resumed: 3, 4, response.
        for p in [1.0, 2.0, 3.0, 4.0] {
            assert!(matches!(check.observe(progress(p)), Ok(Seen::Progress(_))));
        }
        assert_eq!(check.observe(response(7)), Ok(Seen::Response));
        assert_eq!(check.finish(false), Ok(()));
    }

    #[test]
    fn a_replayed_duplicate_is_caught() {
        let mut check = CallCheck::new(1, Some(4));
        check.observe(progress(1.0)).unwrap();
        check.observe(progress(2.0)).unwrap();
        assert_eq!(
            check.observe(progress(2.0)),
            Err(Violation::ProgressNotIncreasing)
        );
    }

    #[test]
    fn a_gap_is_caught_at_the_end() {
        let mut check = CallCheck::new(1, Some(4));
        for p in [1.0, 2.0, 4.0] {
            check.observe(progress(p)).unwrap();
        }
        check.observe(response(1)).unwrap();
        assert_eq!(check.finish(false), Err(Violation::ProgressGap));
    }

    #[test]
    fn ids_responses_and_ranges_are_checked() {
        let mut check = CallCheck::new(1, Some(3));
        assert_eq!(
            check.observe(progress(0.5)),
            Err(Violation::ProgressOutOfRange)
        );
        assert_eq!(
            check.observe(progress(4.0)),
            Err(Violation::ProgressOutOfRange)
        );
        assert_eq!(check.observe(response(2)), Err(Violation::WrongId));
        assert_eq!(check.finish(false), Err(Violation::MissingResponse));
        assert_eq!(check.finish(true), Ok(()));
        check.observe(response(1)).unwrap();
        assert_eq!(
            check.observe(response(1)),
            Err(Violation::DuplicateResponse)
        );
        assert_eq!(check.observe(progress(1.0)), Err(Violation::AfterResponse));
    }

    #[test]
    fn a_tool_error_need_not_report_every_step() {
        let mut check = CallCheck::new(1, Some(3));
        check.observe(progress(1.0)).unwrap();
        check
            .observe(json!({"jsonrpc": "2.0", "id": 1, "result": {"isError": true, "content": []}}))
            .unwrap();
        assert_eq!(check.finish(false), Ok(()));
    }

    fn echoed(content: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "result": {"content": content}})
    }

    #[test]
    fn only_the_exact_echo_of_the_message_is_a_correct_echo() {
        let text = |t: &str| echoed(json!([{"type": "text", "text": t}]));
        assert!(is_echo_of(&text("hello"), "hello"));
        assert!(is_echo_of(&text("Echo: hello"), "hello"));
        // Containing the message is not enough: that let wrong answers count.
        assert!(!is_echo_of(&text("hello hello"), "hello"));
        assert!(!is_echo_of(&text("Echo: hello!"), "hello"));
        assert!(!is_echo_of(&text("hell"), "hello"));
        assert!(!is_echo_of(&echoed(json!([])), "hello"));
        assert!(!is_echo_of(
            &echoed(json!([{"type": "text", "text": "hello"}, {"type": "text", "text": "x"}])),
            "hello"
        ));
        assert!(!is_echo_of(
            &echoed(json!([{"type": "image", "text": "hello"}])),
            "hello"
        ));
        assert!(!is_echo_of(
            &json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "hello"}}),
            "hello"
        ));
    }

    #[test]
    fn a_tool_result_needs_content() {
        assert!(has_tool_content(
            &echoed(json!([{"type": "text", "text": "done"}]))["result"]
        ));
        assert!(!has_tool_content(&echoed(json!([]))["result"]));
        assert!(!has_tool_content(&json!({})));
    }
}
