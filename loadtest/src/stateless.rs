//! The 2026-07-28 era as a client speaks it: no session; every request
//! carries the client's protocol version, capabilities and identity in
//! `params._meta` and the routing headers (`MCP-Protocol-Version`,
//! `Mcp-Method`, `Mcp-Name`); a client starts with `server/discover`; a
//! server asks its questions as `input_required` results, answered by
//! retrying the request with `inputResponses` and the `requestState`; change
//! notifications come on `subscriptions/listen` streams.
//!
//! The checks of this era: every result has a `resultType`
//! (`complete`, `input_required`, `task`); an `input_required` result has
//! `inputRequests` and a `requestState`; a listen stream opens with
//! `notifications/subscriptions/acknowledged` and each of its messages
//! carries the subscription's id; a task handle has a `taskId`, and a task
//! (`tasks/get`) a known `status` with what that status carries.

use base64::Engine;
use mcp_cluster_client::{Client, Reply};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use tokio::time::{Duration, Instant, timeout};

use crate::scenario::STATELESS_VERSION;
use crate::stats::ErrorKind;
use crate::template::{Draw, Template};

/// `_meta` keys of the era.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT: &str = "io.modelcontextprotocol/clientInfo";
const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";
/// The tasks extension, declared in `clientCapabilities.extensions`.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// Bounds on the wait between two `tasks/get` of one task: the task's
/// `pollIntervalMs` is honoured within them (a server's 0 would make a
/// busy loop, a huge value would outlive the operation's bound).
const MIN_TASK_POLL: Duration = Duration::from_millis(10);
const MAX_TASK_POLL: Duration = Duration::from_secs(5);
/// The wait between two `tasks/get` when the task does not say.
const DEFAULT_TASK_POLL: Duration = Duration::from_millis(500);
/// Rounds of questions one operation answers before it counts as failed.
pub(crate) const MAX_INPUT_ROUNDS: usize = 8;

/// Whether `client` speaks the stateless era.
pub(crate) fn is_stateless(client: &Client) -> bool {
    client.protocol_version() == STATELESS_VERSION
}

/// The client capabilities a client declares (in each request's `_meta`
/// in this era, in `initialize` in a session): elicitation, sampling and
/// roots when the scenario answers questions, none otherwise (a server
/// asks only for what is declared).
pub(crate) fn capabilities(answers_questions: bool) -> Value {
    if answers_questions {
        json!({"elicitation": {}, "sampling": {}, "roots": {}})
    } else {
        json!({})
    }
}

/// The capabilities of a client that runs tools as tasks: those of
/// [`capabilities`] and the tasks extension.
pub(crate) fn task_capabilities(answers_questions: bool) -> Value {
    let mut caps = capabilities(answers_questions);
    caps["extensions"] = json!({ TASKS_EXTENSION: {} });
    caps
}

/// Puts the era's `_meta` fields into a request `body` (keeping what its
/// `_meta` holds already, such as a progress token) and returns the
/// routing headers it needs.
pub(crate) fn dress(body: &mut Value, capabilities: Value) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let Some(method) = body
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return headers;
    };
    if body.get("id").is_some() {
        let params = body
            .as_object_mut()
            .map(|b| b.entry("params").or_insert_with(|| json!({})));
        if let Some(Value::Object(params)) = params {
            let meta = params.entry("_meta").or_insert_with(|| json!({}));
            if let Value::Object(meta) = meta {
                meta.insert(META_VERSION.to_owned(), json!(STATELESS_VERSION));
                meta.entry(META_CAPABILITIES).or_insert(capabilities);
                meta.insert(
                    META_CLIENT.to_owned(),
                    json!({"name": "mcp-loadtest", "version": env!("CARGO_PKG_VERSION")}),
                );
            }
        }
    }
    insert(&mut headers, "mcp-method", &method);
    let name = match method.as_str() {
        "tools/call" | "prompts/get" => body.pointer("/params/name"),
        "resources/read" => body.pointer("/params/uri"),
        m if m.starts_with("tasks/") => body.pointer("/params/taskId"),
        _ => None,
    };
    if let Some(Value::String(name)) = name {
        insert(&mut headers, "mcp-name", name);
    }
    headers
}

/// A header value as the era writes it: plain visible ASCII as it is,
/// anything else `=?base64?…?=`.
fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    let plain = !value.is_empty()
        && value
            .bytes()
            .all(|b| (0x21..0x7f).contains(&b) || b == b' ')
        && !value.starts_with(' ')
        && !value.ends_with(' ');
    let text = if plain {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value)
        )
    };
    if let Ok(value) = HeaderValue::from_str(&text) {
        headers.insert(HeaderName::from_static(name), value);
    }
}

/// What a stateless result asks of the client next.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The request is done: the result.
    Complete(Value),
    /// Questions (`inputRequests`, by key) to answer, and the state to send
    /// back with the answers.
    InputRequired {
        requests: Map<String, Value>,
        state: Value,
    },
    /// A task's handle (tasks extension): the request goes on as the task
    /// it names.
    Task(Task),
}

/// A task as the server describes it: its handle, or its state from
/// `tasks/get`.
#[derive(Debug)]
pub(crate) struct Task {
    pub(crate) id: String,
    pub(crate) status: TaskStatus,
    /// How long to wait before the next `tasks/get`: the task's
    /// `pollIntervalMs`, within bounds.
    pub(crate) poll: Duration,
}

/// Where a task is.
#[derive(Debug, PartialEq)]
pub(crate) enum TaskStatus {
    Working,
    /// Questions the task waits on (`inputRequests`, by key), answered
    /// with `tasks/update`.
    InputRequired(Map<String, Value>),
    /// Ended with this result (a tool error is `completed` too, with
    /// `isError`).
    Completed(Value),
    /// Ended with this JSON-RPC error.
    Failed(Value),
    Cancelled,
}

impl Task {
    /// Reads a task handle (`resultType: "task"`) or a `tasks/get` result.
    ///
    /// # Errors
    /// No `taskId`, an unknown `status`, or a status without what it
    /// carries (`completed` without `result`, `failed` without `error`,
    /// `input_required` without `inputRequests`): `protocol:*` violations.
    pub(crate) fn of(view: &Value) -> Result<Self, ErrorKind> {
        let id = view
            .get("taskId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or(ErrorKind::Protocol("protocol:task_without_id"))?
            .to_owned();
        let carried = |field: &str| {
            view.get(field)
                .filter(|v| v.is_object())
                .cloned()
                .ok_or(ErrorKind::Protocol("protocol:task_status_incomplete"))
        };
        let status = match view.get("status").and_then(Value::as_str) {
            Some("working") => TaskStatus::Working,
            Some("input_required") => match carried("inputRequests")? {
                Value::Object(requests) if !requests.is_empty() => {
                    TaskStatus::InputRequired(requests)
                }
                _ => return Err(ErrorKind::Protocol("protocol:task_status_incomplete")),
            },
            Some("completed") => TaskStatus::Completed(carried("result")?),
            Some("failed") => TaskStatus::Failed(carried("error")?),
            Some("cancelled") => TaskStatus::Cancelled,
            _ => return Err(ErrorKind::Protocol("protocol:unknown_task_status")),
        };
        let poll = view
            .get("pollIntervalMs")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_TASK_POLL, Duration::from_millis)
            .clamp(MIN_TASK_POLL, MAX_TASK_POLL);
        Ok(Self { id, status, poll })
    }
}

/// Reads a stateless result's `resultType`.
///
/// # Errors
/// No `resultType`, an unknown one, an `input_required` result without its
/// questions or state, or a task handle without its id: `protocol:*`
/// violations.
pub(crate) fn outcome(result: Value) -> Result<Outcome, ErrorKind> {
    match result.get("resultType").and_then(Value::as_str) {
        Some("complete") => Ok(Outcome::Complete(result)),
        Some("input_required") => {
            let requests = result
                .get("inputRequests")
                .and_then(Value::as_object)
                .filter(|r| !r.is_empty())
                .cloned()
                .ok_or(ErrorKind::Protocol(
                    "protocol:input_required_without_requests",
                ))?;
            let state = result
                .get("requestState")
                .cloned()
                .ok_or(ErrorKind::Protocol("protocol:input_required_without_state"))?;
            Ok(Outcome::InputRequired { requests, state })
        }
        Some("task") => Task::of(&result).map(Outcome::Task),
        Some(_) => Err(ErrorKind::Protocol("protocol:unknown_result_type")),
        None => Err(ErrorKind::Protocol("protocol:no_result_type")),
    }
}

/// The scenario's answers to `requests`: each question's key, else its
/// method, looked up in `inputs`.
///
/// # Errors
/// A question the scenario has no answer for (`input:unanswered`).
pub(crate) fn answers(
    inputs: Option<&Template>,
    requests: &Map<String, Value>,
    draw: &mut Draw<'_>,
) -> Result<Value, ErrorKind> {
    let table = inputs.map(|t| t.render(draw)).unwrap_or_default();
    let mut out = Map::new();
    for (key, request) in requests {
        let method = request.get("method").and_then(Value::as_str).unwrap_or("");
        let answer = table
            .get(key)
            .or_else(|| table.get(method))
            .ok_or(ErrorKind::Check("input:unanswered"))?;
        out.insert(key.clone(), answer.clone());
    }
    Ok(Value::Object(out))
}

/// `subscriptions/listen` with `filter`, held open `hold`: returns the
/// time to the acknowledgement.
///
/// # Errors
/// No stream, a first message that is not the acknowledgement, a message
/// without the subscription's id, or an error response.
pub(crate) async fn listen(
    client: &Client,
    filter: &Value,
    hold: Duration,
) -> Result<Duration, ErrorKind> {
    let id = client.next_id();
    let mut body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                          "params": {"notifications": filter}});
    let headers = dress(&mut body, capabilities(false));
    let started = Instant::now();
    let mut stream = match client.post_with(&body, headers).await {
        Ok(Reply::Sse(stream)) => stream,
        Ok(Reply::Status(status, _, headers)) => {
            return Err(ErrorKind::answer(status.as_u16(), &headers));
        }
        Ok(Reply::Json(message, _)) => {
            return Err(
                match message.pointer("/error/code").and_then(Value::as_i64) {
                    Some(code) => ErrorKind::JsonRpc(code),
                    None => ErrorKind::Protocol("protocol:listen_not_sse"),
                },
            );
        }
        Ok(Reply::Accepted) => return Err(ErrorKind::Protocol("protocol:request_answered_202")),
        Err(err) => return Err(ErrorKind::transport(&err)),
    };
    let of_this = |message: &Value| {
        message.pointer(&format!(
            "/params/_meta/{}",
            META_SUBSCRIPTION.replace('/', "~1")
        )) == Some(&json!(id))
    };
    let first = stream
        .next_message()
        .await
        .map_err(|err| ErrorKind::transport(&err))?
        .ok_or(ErrorKind::Protocol("protocol:listen_ended_unacknowledged"))?;
    if first.get("method").and_then(Value::as_str)
        != Some("notifications/subscriptions/acknowledged")
        || !of_this(&first)
    {
        return Err(ErrorKind::Protocol("protocol:listen_not_acknowledged"));
    }
    let acknowledged = started.elapsed();
    let held = timeout(hold, async {
        while let Some(message) = stream
            .next_message()
            .await
            .map_err(|err| ErrorKind::transport(&err))?
        {
            if message.get("method").is_some() {
                if !of_this(&message) {
                    return Err(ErrorKind::Protocol(
                        "protocol:listen_message_without_subscription",
                    ));
                }
            } else if message.get("id") != Some(&json!(id)) {
                return Err(ErrorKind::Protocol("protocol:wrong_id"));
            } else {
                // The server ended the subscription (a draining node): a
                // result, never an error, and the stream ends.
                return match message.get("error") {
                    Some(_) => Err(ErrorKind::Protocol("protocol:listen_ended_with_error")),
                    None => Ok(()),
                };
            }
        }
        Ok(())
    })
    .await;
    match held {
        Ok(Err(error)) => Err(error),
        _ => Ok(acknowledged),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    #[test]
    fn requests_get_the_meta_and_the_routing_headers() {
        let mut body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                              "params": {"name": "echo", "_meta": {"progressToken": 3}}});
        let headers = dress(&mut body, capabilities(true));
        let meta = &body["params"]["_meta"];
        assert_eq!(meta[META_VERSION], STATELESS_VERSION);
        assert_eq!(meta["progressToken"], 3);
        assert!(meta[META_CAPABILITIES]["elicitation"].is_object());
        assert_eq!(headers["mcp-method"], "tools/call");
        assert_eq!(headers["mcp-name"], "echo");

        let mut read = json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read",
                              "params": {"uri": "file:///é"}});
        let headers = dress(&mut read, capabilities(false));
        assert_eq!(headers["mcp-name"], "=?base64?ZmlsZTovLy/DqQ==?=");
        assert_eq!(read["params"]["_meta"][META_CAPABILITIES], json!({}));
        // A notification gets no _meta, only its method header.
        let mut note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}});
        let headers = dress(&mut note, capabilities(false));
        assert!(note["params"].get("_meta").is_none());
        assert_eq!(headers["mcp-method"], "notifications/cancelled");
    }

    #[test]
    fn task_handles_and_states_say_what_their_status_carries() {
        let caps = task_capabilities(false);
        assert!(caps["extensions"][TASKS_EXTENSION].is_object(), "{caps}");
        assert!(caps.get("elicitation").is_none());
        assert!(task_capabilities(true)["elicitation"].is_object());

        let Ok(Outcome::Task(handle)) = outcome(json!({
            "resultType": "task", "taskId": "t1", "status": "working",
            "createdAt": "x", "lastUpdatedAt": "x", "ttlMs": 1000, "pollIntervalMs": 250
        })) else {
            panic!("not a task");
        };
        assert_eq!(handle.id, "t1");
        assert_eq!(handle.status, TaskStatus::Working);
        assert_eq!(handle.poll, Duration::from_millis(250));
        assert_eq!(
            outcome(json!({"resultType": "task", "status": "working"})).unwrap_err(),
            ErrorKind::Protocol("protocol:task_without_id")
        );

        let view = |status: Value, extra: Value| {
            let mut view = json!({"resultType": "complete", "taskId": "t1", "status": status});
            view.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            Task::of(&view)
        };
        let done = view(json!("completed"), json!({"result": {"content": []}})).unwrap();
        assert_eq!(done.status, TaskStatus::Completed(json!({"content": []})));
        // Without a poll interval the default; out of bounds, the bound.
        assert_eq!(done.poll, DEFAULT_TASK_POLL);
        let eager = view(json!("working"), json!({"pollIntervalMs": 0})).unwrap();
        assert_eq!(eager.poll, MIN_TASK_POLL);
        let asking = view(
            json!("input_required"),
            json!({"inputRequests": {"confirm": {"method": "elicitation/create"}}}),
        )
        .unwrap();
        assert!(
            matches!(asking.status, TaskStatus::InputRequired(ref r) if r.contains_key("confirm"))
        );
        let failed = view(json!("failed"), json!({"error": {"code": -32603}})).unwrap();
        assert_eq!(failed.status, TaskStatus::Failed(json!({"code": -32603})));
        assert_eq!(
            view(json!("cancelled"), json!({})).unwrap().status,
            TaskStatus::Cancelled
        );
        for (status, extra) in [
            (json!("completed"), json!({})),
            (json!("failed"), json!({})),
            (json!("input_required"), json!({"inputRequests": {}})),
        ] {
            assert_eq!(
                view(status.clone(), extra).unwrap_err(),
                ErrorKind::Protocol("protocol:task_status_incomplete"),
                "{status}"
            );
        }
        assert_eq!(
            view(json!("sleeping"), json!({})).unwrap_err(),
            ErrorKind::Protocol("protocol:unknown_task_status")
        );
    }

    #[test]
    fn result_types_and_answers() {
        assert!(matches!(
            outcome(json!({"resultType": "complete", "content": []})),
            Ok(Outcome::Complete(_))
        ));
        assert_eq!(
            outcome(json!({"content": []})).unwrap_err(),
            ErrorKind::Protocol("protocol:no_result_type")
        );
        assert_eq!(
            outcome(json!({"resultType": "input_required", "requestState": "s"})).unwrap_err(),
            ErrorKind::Protocol("protocol:input_required_without_requests")
        );
        let Ok(Outcome::InputRequired { requests, state }) = outcome(json!({
            "resultType": "input_required", "requestState": "s",
            "inputRequests": {"user": {"method": "elicitation/create", "params": {}},
                              "sampling-1": {"method": "sampling/createMessage", "params": {}}}
        })) else {
            panic!("not input_required");
        };
        assert_eq!(state, "s");
        let inputs = Template::compile(
            &json!({"user": {"action": "accept", "content": {"n": "{{seq}}"}},
                    "sampling/createMessage": {"role": "assistant"}}),
            &[],
            "inputs",
        )
        .unwrap();
        let counter = AtomicU64::new(0);
        let mut draw = Draw::new(&[], 0, &counter);
        let answers = answers(Some(&inputs), &requests, &mut draw).unwrap();
        assert_eq!(answers["user"]["content"]["n"], 1);
        assert_eq!(answers["sampling-1"]["role"], "assistant");
        let unanswerable = Template::compile(&json!({"user": {}}), &[], "inputs").unwrap();
        assert_eq!(
            super::answers(Some(&unanswerable), &requests, &mut draw).unwrap_err(),
            ErrorKind::Check("input:unanswered")
        );
    }
}
