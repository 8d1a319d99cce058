//! Virtual sessions: each initializes, then runs `concurrency` lanes that
//! pick operations from the scenario until the run's end, then DELETEs.
//!
//! Owner and stop path: `main` spawns every session into one `JoinSet`;
//! a session stops by itself at `Plan::end` (the operation under way
//! finishes, bounded by its own timeout), and `main` aborts whatever is
//! left at the hard deadline. Per session we keep one `Client` (a clone of
//! its source address's shared `reqwest::Client`, the URL, the session
//! id), one lock and one flag: a few hundred bytes besides the futures
//! themselves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use mcp_cluster_client::{Client, ClientError, Reply, SseStream};
use serde_json::{Value, json};
use tokio::sync::RwLock;
use tokio::time::{Instant, sleep, sleep_until, timeout, timeout_at};

use crate::check::{CallCheck, Seen, Violation, has_tool_content, is_echo_of};
use crate::initialize;
use crate::pools::Pools;
use crate::scenario::{
    DISCOVER, Era, INITIALIZE, OpId, Operation, Request, STATELESS_VERSION, Scenario, Weighted,
};
use crate::stateless::{self, Outcome, TaskStatus};
use crate::stats::{ErrorKind, Stats};
use crate::template::Draw;

/// Added to an operation's nominal duration to get its timeout.
const OP_TIMEOUT_SLACK: Duration = Duration::from_secs(15);
/// Bound on `initialize` and on the final DELETE.
const SESSION_CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Pause before retrying a failed `initialize`.
const INITIALIZE_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// Longest `retry` honoured before resuming a stream the server closed.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);
/// Resumptions of one request's stream before the call counts as lost.
const MAX_RESUMES: usize = 16;
/// Pause of a lane that found the session's standalone stream taken.
const GET_STREAM_BUSY_PAUSE: Duration = Duration::from_millis(50);

/// What every session shares; read-only apart from `stats`.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) url: String,
    pub(crate) scenario: Scenario,
    pub(crate) stats: Arc<Stats>,
    /// The connection pools, one per source address.
    pub(crate) pools: Pools,
    /// No operation starts after this.
    pub(crate) end: Instant,
    /// Nothing runs after this (`main` aborts the rest).
    pub(crate) hard_deadline: Instant,
    /// Operations in flight at once per session.
    pub(crate) concurrency: usize,
    /// The templates' `seq`: operations that used it so far.
    pub(crate) seq: AtomicU64,
}

/// The `index`-th virtual session (or 2026-07-28 client), from its start
/// time to its DELETE.
pub(crate) async fn run(plan: Arc<Plan>, index: usize, start_at: Instant) {
    sleep_until(start_at).await;
    let http = plan.pools.for_session(index);
    let era = plan.scenario.era_of(index);
    let Some(client) =
        connect_until(&plan.url, &plan.scenario, era, &plan.stats, http, plan.end).await
    else {
        return;
    };
    plan.stats.active_sessions.fetch_add(1, Ordering::Relaxed);
    let client = RwLock::new(client);
    // The server allows one standalone GET stream per session.
    let standalone_taken = AtomicBool::new(false);
    join_all(
        (0..plan.concurrency).map(|_| lane(&client, &plan, index, era, http, &standalone_taken)),
    )
    .await;
    close(&plan, client.into_inner()).await;
}

/// Ends a session of the run: DELETE (a failure is counted outside any
/// operation), and one active session less.
pub(crate) async fn close(plan: &Plan, client: Client) {
    if client.session_id().is_some() {
        match timeout(SESSION_CALL_TIMEOUT, client.delete_with_headers()).await {
            Ok(Ok((status, _))) if status.is_success() => {}
            Ok(Ok((status, headers))) => plan
                .stats
                .error(&ErrorKind::answer(status.as_u16(), &headers)),
            Ok(Err(err)) => plan.stats.error(&classify(err)),
            Err(_) => plan.stats.error(&ErrorKind::Timeout),
        }
    }
    plan.stats.active_sessions.fetch_sub(1, Ordering::Relaxed);
}

/// Opens a session (checked: see [`initialize::open`]), retrying until it
/// works or the run ends; `None` if it never did.
pub(crate) async fn initialize(plan: &Plan, http: &reqwest::Client) -> Option<Client> {
    connect_until(
        &plan.url,
        &plan.scenario,
        Era::Session,
        &plan.stats,
        http,
        plan.end,
    )
    .await
}

/// A client of `era`, retrying until it works or `until`: a session opened
/// with `protocol_version` (each attempt counted under `initialize`), or a
/// 2026-07-28 client that began with `server/discover` (counted under
/// `server_discover`).
pub(crate) async fn connect_until(
    url: &str,
    scenario: &Scenario,
    era: Era,
    stats: &Stats,
    http: &reqwest::Client,
    until: Instant,
) -> Option<Client> {
    let row = match era {
        Era::Session => INITIALIZE,
        Era::Stateless => DISCOVER,
    };
    while Instant::now() < until {
        let started = Instant::now();
        let attempt = async {
            match era {
                Era::Session => {
                    let capabilities = scenario.session_capabilities();
                    initialize::open(http, url, &scenario.protocol_version, &capabilities).await
                }
                Era::Stateless => discover(http, url).await,
            }
        };
        let error = match timeout(SESSION_CALL_TIMEOUT, attempt).await {
            Ok(Ok(client)) => {
                stats.ok(row, started.elapsed());
                return Some(client);
            }
            Ok(Err(error)) => error,
            Err(_) => ErrorKind::Timeout,
        };
        stats.failed(row, &error, started);
        sleep(INITIALIZE_RETRY_PAUSE).await;
    }
    None
}

/// A 2026-07-28 client's start: `server/discover`, whose result must be
/// complete and list the version among `supportedVersions`.
async fn discover(http: &reqwest::Client, url: &str) -> Result<Client, ErrorKind> {
    let client = Client::with_http(http.clone(), url, STATELESS_VERSION);
    let response = checked_request(&client, "server/discover", json!({}), None).await?;
    let result = complete_result(&client, response)?;
    let supported = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|v| v == STATELESS_VERSION));
    if !supported {
        return Err(violation(Violation::WrongResult));
    }
    Ok(client)
}

async fn open_session(plan: &Plan, http: &reqwest::Client) -> Result<Client, ErrorKind> {
    let capabilities = plan.scenario.session_capabilities();
    initialize::open(
        http,
        &plan.url,
        &plan.scenario.protocol_version,
        &capabilities,
    )
    .await
}

/// Runs operations until the run ends. Ops share the session under a read
/// lock; `delete_session` takes the write lock, so it waits for the lane's
/// siblings to finish their operation and none starts during it.
async fn lane(
    client: &RwLock<Client>,
    plan: &Plan,
    session: usize,
    era: Era,
    http: &reqwest::Client,
    standalone_taken: &AtomicBool,
) {
    while Instant::now() < plan.end {
        let think = plan.scenario.think_time();
        if !think.is_zero() {
            sleep(think.min(plan.end.saturating_duration_since(Instant::now()))).await;
            if Instant::now() >= plan.end {
                break;
            }
        }
        let entry = plan.scenario.pick(era);
        let started = Instant::now();
        let deadline =
            (started + entry.op.nominal_duration() + OP_TIMEOUT_SLACK).min(plan.hard_deadline);
        // The session this operation runs in (a 404 ends that one only).
        let ran_in = client.read().await.session_id().map(str::to_owned);
        let outcome = match &entry.op {
            Operation::DeleteSession => {
                let mut client = client.write().await;
                let outcome = timeout_at(deadline, delete_session(&mut client, plan, http)).await;
                let failed = !matches!(outcome, Ok(Ok(_)));
                record(plan, entry, outcome, started, &|| {
                    where_ran(era, ran_in.as_deref())
                });
                if failed {
                    let Some(fresh) = initialize(plan, http).await else {
                        return;
                    };
                    *client = fresh;
                }
                continue;
            }
            op if op.uses_standalone_stream() => {
                if standalone_taken.swap(true, Ordering::AcqRel) {
                    sleep(GET_STREAM_BUSY_PAUSE).await;
                    continue;
                }
                let client = client.read().await;
                let outcome = timeout_at(deadline, run_op(&client, plan, entry, session)).await;
                standalone_taken.store(false, Ordering::Release);
                outcome
            }
            _ => {
                let client = client.read().await;
                timeout_at(deadline, run_op(&client, plan, entry, session)).await
            }
        };
        let gone = era == Era::Session && session_gone(&outcome);
        record(plan, entry, outcome, started, &|| {
            where_ran(era, ran_in.as_deref())
        });
        if gone {
            // 2025-11-25 transports, session management: a client that
            // gets 404 for its session MUST start a new one. The first lane
            // to see it does; the others find the new session in place.
            let mut client = client.write().await;
            if client.session_id().map(str::to_owned) == ran_in {
                let Some(fresh) = initialize(plan, http).await else {
                    return;
                };
                *client = fresh;
            }
        }
    }
}

/// The era and session an operation ran in, for a failure's sample.
fn where_ran(era: Era, session: Option<&str>) -> String {
    match session {
        Some(id) => format!("{era:?} era, session {id}"),
        None => format!("{era:?} era"),
    }
}

/// Whether an operation's outcome says the server no longer knows the
/// session (404).
fn session_gone(
    outcome: &Result<Result<Duration, ErrorKind>, tokio::time::error::Elapsed>,
) -> bool {
    matches!(outcome, Ok(Err(ErrorKind::HttpStatus(404))))
}

/// One operation on a session nobody else uses meanwhile (the open
/// model's): counted with `late` (how far behind its intended start it
/// began) added to its latency. Returns the session, or `None` when a
/// failed `delete_session` left none and no new one could be opened.
pub(crate) async fn exclusive_op(
    plan: &Plan,
    mut client: Client,
    entry: &Weighted,
    session: usize,
    late: Duration,
) -> Option<Client> {
    let http = plan.pools.for_session(session);
    let started = Instant::now();
    let deadline =
        (started + entry.op.nominal_duration() + OP_TIMEOUT_SLACK).min(plan.hard_deadline);
    let outcome = match &entry.op {
        Operation::DeleteSession => {
            let outcome = timeout_at(deadline, delete_session(&mut client, plan, http)).await;
            let failed = !matches!(outcome, Ok(Ok(_)));
            let ran_in = client.session_id().map(str::to_owned);
            record(plan, entry, late_by(outcome, late), started, &|| {
                where_ran(plan.scenario.era_of(session), ran_in.as_deref())
            });
            if failed {
                client = initialize(plan, http).await?;
            }
            return Some(client);
        }
        _ => timeout_at(deadline, run_op(&client, plan, entry, session)).await,
    };
    let gone = client.session_id().is_some() && session_gone(&outcome);
    record(plan, entry, late_by(outcome, late), started, &|| {
        where_ran(plan.scenario.era_of(session), client.session_id())
    });
    if gone {
        // A 404 for the session: start a new one (see `lane`).
        client = initialize(plan, http).await?;
    }
    Some(client)
}

/// An outcome whose latency counts from its intended start.
fn late_by(
    outcome: Result<Result<Duration, ErrorKind>, tokio::time::error::Elapsed>,
    late: Duration,
) -> Result<Result<Duration, ErrorKind>, tokio::time::error::Elapsed> {
    outcome.map(|result| result.map(|latency| latency + late))
}

/// Counts an operation's outcome under its name; a success slower than
/// the entry's `max_latency_ms` is a failure (`check:latency`).
fn record(
    plan: &Plan,
    entry: &Weighted,
    outcome: Result<Result<Duration, ErrorKind>, tokio::time::error::Elapsed>,
    started: Instant,
    context: &dyn Fn() -> String,
) {
    let id: OpId = entry.id;
    match outcome {
        Ok(Ok(latency)) if entry.max_latency.is_some_and(|max| latency > max) => {
            plan.stats
                .failed(id, &ErrorKind::Check("check:latency"), started);
        }
        Ok(Ok(latency)) => plan.stats.ok(id, latency),
        Ok(Err(error)) => plan.stats.failed(id, &error, started),
        Err(elapsed) => {
            // Which operation went unanswered: the first one is the sample.
            plan.stats.sample(
                operation_name(plan, entry),
                &ErrorKind::Timeout,
                &Value::String(format!("no answer ({}): {elapsed}", context())),
            );
            plan.stats.failed(id, &ErrorKind::Timeout, started);
        }
    }
}

/// Runs one request-style operation; returns the latency to record.
async fn run_op(
    client: &Client,
    plan: &Plan,
    entry: &Weighted,
    session: usize,
) -> Result<Duration, ErrorKind> {
    let started = Instant::now();
    let mut draw = Draw::new(&plan.scenario.data, session, &plan.seq);
    if let Some(request) = &entry.request {
        let result = match &entry.op {
            Operation::TaskCall { .. } => {
                task_call(client, plan, entry, request, &mut draw).await?
            }
            _ => generic_request(client, plan, entry, request, &mut draw).await?,
        };
        let latency = started.elapsed();
        expectations(plan, entry, &result, &mut draw)?;
        return Ok(latency);
    }
    match &entry.op {
        Operation::ToolsList => {
            let response = simple_request(client, "tools/list", json!({})).await?;
            if response
                .pointer("/result/tools")
                .is_none_or(|t| !t.is_array())
            {
                return Err(violation(Violation::WrongResult));
            }
            let latency = started.elapsed();
            expectations(plan, entry, &response["result"], &mut draw)?;
            return Ok(latency);
        }
        Operation::EchoCall { message } => {
            let params = json!({"name": "echo", "arguments": {"message": message}});
            let response = simple_request(client, "tools/call", params).await?;
            if !is_echo_of(&response, message) {
                return Err(violation(Violation::WrongResult));
            }
            let latency = started.elapsed();
            expectations(plan, entry, &response["result"], &mut draw)?;
            return Ok(latency);
        }
        Operation::LongCall { duration_ms, steps } => {
            long_call(client, *duration_ms, *steps).await?;
        }
        Operation::CancelCall { duration_ms, steps } => {
            return cancel_call(client, *duration_ms, *steps).await;
        }
        Operation::DropAndResume {
            duration_ms,
            steps,
            drop_after,
        } => drop_and_resume(client, *duration_ms, *steps, *drop_after).await?,
        Operation::PollResume {
            duration_ms,
            steps,
            close_after,
        } => poll_resume(client, *duration_ms, *steps, *close_after).await?,
        Operation::Listen {
            hold_ms,
            notifications,
        } => {
            let hold = Duration::from_millis(*hold_ms);
            return stateless::listen(client, notifications, hold).await;
        }
        Operation::GetStream { hold_ms } => {
            return get_stream(client, Duration::from_millis(*hold_ms)).await;
        }
        Operation::Subscribe {
            touch_tool,
            wait_ms,
            ..
        } => {
            let wait = Duration::from_millis(*wait_ms);
            return subscribe(client, entry, touch_tool.as_deref(), wait, &mut draw).await;
        }
        // Handled by the lane, which needs the lock; the generic ones
        // above.
        Operation::DeleteSession
        | Operation::CallTool { .. }
        | Operation::TaskCall { .. }
        | Operation::ReadResource { .. }
        | Operation::GetPrompt { .. }
        | Operation::List { .. }
        | Operation::Complete { .. } => {}
    }
    Ok(started.elapsed())
}

/// A generic operation's request, its params drawn; returns the result,
/// which has the shape its method promises and the `isError` asked for.
async fn generic_request(
    client: &Client,
    plan: &Plan,
    entry: &Weighted,
    request: &Request,
    draw: &mut Draw<'_>,
) -> Result<Value, ErrorKind> {
    let mut params = request.params.render(draw);
    // Session era: questions come on the call's stream, answered by method.
    let answers = entry.inputs.as_ref().map(|inputs| inputs.render(draw));
    let mut rounds = 0;
    let result = loop {
        let response =
            checked_request(client, request.method, params.clone(), answers.as_ref()).await?;
        let result = response
            .get("result")
            .cloned()
            .ok_or(violation(Violation::WrongResult))?;
        if !stateless::is_stateless(client) {
            break result;
        }
        match stateless::outcome(result)? {
            Outcome::Complete(result) => break result,
            // Tasks were not declared: the server must answer at once.
            Outcome::Task(_) => return Err(ErrorKind::Protocol("protocol:unexpected_task")),
            Outcome::InputRequired { requests, state } => {
                rounds += 1;
                if rounds > stateless::MAX_INPUT_ROUNDS {
                    return Err(ErrorKind::Check("input:too_many_rounds"));
                }
                let answers = stateless::answers(entry.inputs.as_ref(), &requests, draw)
                    .inspect_err(|error| {
                        plan.stats.sample(
                            operation_name(plan, entry),
                            error,
                            &Value::Object(requests.clone()),
                        );
                    })?;
                // The same request again (a new id), with the answers.
                params["inputResponses"] = answers;
                params["requestState"] = state;
            }
        }
    };
    as_asked(plan, entry, request, result)
}

/// A generic operation's `result` if it has the shape its method promises
/// and the `isError` asked for.
fn as_asked(
    plan: &Plan,
    entry: &Weighted,
    request: &Request,
    mut result: Value,
) -> Result<Value, ErrorKind> {
    if result
        .pointer(request.shape)
        .is_none_or(|found| !found.is_array())
    {
        return Err(violation(Violation::WrongResult));
    }
    let tool_error = result.get("isError") == Some(&Value::Bool(true));
    let error = match (tool_error, request.expect_tool_error) {
        (true, false) => ErrorKind::ToolError,
        (false, true) => ErrorKind::Check("check:is_error"),
        _ => return Ok(result.take()),
    };
    plan.stats
        .sample(operation_name(plan, entry), &error, &result);
    Err(error)
}

/// A tool called as a task (2026-07-28 tasks extension) and polled with
/// `tasks/get` until it ends; the task's questions are answered with
/// `tasks/update` from the entry's `inputs`. Returns the task's result (or
/// the call's, when the server answered at once), checked as a
/// `call_tool`'s.
///
/// # Errors
/// A task that ended `failed` or `cancelled` (`task:failed`,
/// `task:cancelled`; the first such answer is kept as the sample), more than
/// [`stateless::MAX_INPUT_ROUNDS`] rounds of questions, or any failure of
/// its requests.
async fn task_call(
    client: &Client,
    plan: &Plan,
    entry: &Weighted,
    request: &Request,
    draw: &mut Draw<'_>,
) -> Result<Value, ErrorKind> {
    let capabilities = stateless::task_capabilities(entry.inputs.is_some());
    let request_as = |method: &'static str, params: Value| {
        checked_request_as(client, method, params, None, capabilities.clone())
    };
    let failed = |error: ErrorKind, answer: &Value| {
        plan.stats
            .sample(operation_name(plan, entry), &error, answer);
        error
    };
    let mut params = request.params.render(draw);
    let mut rounds = 0;
    let mut task = loop {
        let response = request_as(request.method, params.clone()).await?;
        let result = response
            .get("result")
            .cloned()
            .ok_or(violation(Violation::WrongResult))?;
        match stateless::outcome(result)? {
            Outcome::Task(task) => break task,
            // Whether to make a task is the server's choice (tasks
            // extension): an answer given at once is judged as the call's.
            Outcome::Complete(result) => {
                plan.stats
                    .tasks_answered_at_once
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return as_asked(plan, entry, request, result);
            }
            Outcome::InputRequired { requests, state } => {
                rounds += 1;
                if rounds > stateless::MAX_INPUT_ROUNDS {
                    return Err(ErrorKind::Check("input:too_many_rounds"));
                }
                let answers = stateless::answers(entry.inputs.as_ref(), &requests, draw)
                    .map_err(|error| failed(error, &Value::Object(requests.clone())))?;
                params["inputResponses"] = answers;
                params["requestState"] = state;
            }
        }
    };
    let id = task.id.clone();
    // The keys answered so far: a question shown again before the task
    // picked up its answer is not answered twice.
    let mut answered: Vec<String> = Vec::new();
    loop {
        match task.status {
            TaskStatus::Working => {}
            TaskStatus::InputRequired(mut requests) => {
                requests.retain(|key, _| !answered.contains(key));
                if !requests.is_empty() {
                    rounds += 1;
                    if rounds > stateless::MAX_INPUT_ROUNDS {
                        return Err(ErrorKind::Check("input:too_many_rounds"));
                    }
                    let answers = stateless::answers(entry.inputs.as_ref(), &requests, draw)
                        .map_err(|error| failed(error, &Value::Object(requests.clone())))?;
                    answered.extend(requests.keys().cloned());
                    let update = json!({"taskId": id, "inputResponses": answers});
                    complete_result(client, request_as("tasks/update", update).await?)?;
                }
            }
            TaskStatus::Completed(result) => return as_asked(plan, entry, request, result),
            TaskStatus::Failed(error) => {
                return Err(failed(ErrorKind::NotDone("task:failed"), &error));
            }
            TaskStatus::Cancelled => return Err(ErrorKind::NotDone("task:cancelled")),
        }
        sleep(task.poll).await;
        let view = complete_result(
            client,
            request_as("tasks/get", json!({"taskId": id})).await?,
        )?;
        task = stateless::Task::of(&view)?;
        if task.id != id {
            return Err(ErrorKind::Protocol("protocol:wrong_task"));
        }
    }
}

/// `subscribe`: the standalone stream opened (2025-11-25 transports: what
/// is not about a request, resource updates included, comes on it, and a
/// session without it gets none), `resources/subscribe`, the touch tool
/// called, an update for the URI awaited on the stream, then
/// `resources/unsubscribe` whatever happened (so that no subscription
/// outlives the operation). Returns the time from the subscription to the
/// update.
///
/// # Errors
/// No update within `wait` (`subscribe:no_update`), a standalone stream
/// that ended and could not be resumed (`subscribe:stream_ended`), a
/// response on the standalone stream, or any failure of the requests.
async fn subscribe(
    client: &Client,
    entry: &Weighted,
    touch_tool: Option<&str>,
    wait: Duration,
    draw: &mut Draw<'_>,
) -> Result<Duration, ErrorKind> {
    let fields = entry
        .subscription
        .as_ref()
        .map(|t| t.render(draw))
        .unwrap_or_default();
    let uri = match fields.get("uri") {
        Some(Value::String(uri)) => uri.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let mut stream = open_standalone(client, None).await?;
    let started = Instant::now();
    simple_request(client, "resources/subscribe", json!({"uri": uri})).await?;
    let updated = async {
        if let Some(tool) = touch_tool {
            let arguments = fields
                .get("touch_arguments")
                .cloned()
                .unwrap_or_else(|| json!({"uri": uri}));
            let call = json!({"name": tool, "arguments": arguments});
            simple_request(client, "tools/call", call).await?;
        }
        match timeout(wait, resource_updated(client, &mut stream, &uri)).await {
            Ok(seen) => seen.map(|()| started.elapsed()),
            Err(_) => Err(ErrorKind::NotDone("subscribe:no_update")),
        }
    }
    .await;
    let unsubscribed = simple_request(client, "resources/unsubscribe", json!({"uri": uri})).await;
    drop(stream);
    let latency = updated?;
    unsubscribed?;
    Ok(latency)
}

/// Reads the standalone `stream` until a `notifications/resources/updated`
/// for `uri`, resuming it with `Last-Event-ID` when the server ends it.
///
/// Cancel safety: not cancel safe (a message read but not yet looked at is
/// lost); the caller drops the stream with it when it stops waiting.
async fn resource_updated(
    client: &Client,
    stream: &mut SseStream,
    uri: &str,
) -> Result<(), ErrorKind> {
    loop {
        match stream.next_message().await.map_err(classify)? {
            Some(message) if message.get("method").is_none() => {
                // No request was sent on this stream.
                return Err(ErrorKind::Protocol(
                    "protocol:response_on_standalone_stream",
                ));
            }
            Some(message) => {
                if message.get("method").and_then(Value::as_str)
                    == Some("notifications/resources/updated")
                    && message.pointer("/params/uri").and_then(Value::as_str) == Some(uri)
                {
                    return Ok(());
                }
            }
            None => {
                // The server may end the standalone stream (a drain, a
                // reader taken over): resumed after its `retry`, as a
                // client would, so that what was written meanwhile comes.
                let Some(last_event_id) = stream.last_event_id.take() else {
                    return Err(ErrorKind::NotDone("subscribe:stream_ended"));
                };
                sleep(retry_wait(stream)).await;
                *stream = open_standalone(client, Some(&last_event_id)).await?;
            }
        }
    }
}

/// The standalone GET stream, or with `last_event_id` its resumption.
async fn open_standalone(
    client: &Client,
    last_event_id: Option<&str>,
) -> Result<SseStream, ErrorKind> {
    match client.get(last_event_id).await.map_err(classify)? {
        Reply::Sse(stream) => Ok(stream),
        Reply::Status(status, _, headers) => Err(ErrorKind::answer(status.as_u16(), &headers)),
        _ => Err(ErrorKind::Protocol("protocol:standalone_not_sse")),
    }
}

/// The entry's checks on an operation's `result`; the first answer that
/// fails each kind of check is kept for the report.
fn expectations(
    plan: &Plan,
    entry: &Weighted,
    result: &Value,
    draw: &mut Draw<'_>,
) -> Result<(), ErrorKind> {
    for check in &entry.checks {
        if let Err(key) = check.holds(result, draw) {
            let error = ErrorKind::Check(key);
            plan.stats
                .sample(operation_name(plan, entry), &error, result);
            return Err(error);
        }
    }
    Ok(())
}

fn operation_name<'a>(plan: &'a Plan, entry: &Weighted) -> &'a str {
    &plan.scenario.names[entry.id.0]
}

/// A request without progress; returns its response, neither a JSON-RPC
/// error nor a tool error.
async fn simple_request(client: &Client, method: &str, params: Value) -> Result<Value, ErrorKind> {
    let mut response = checked_request(client, method, params, None).await?;
    if is_tool_error(&response) {
        return Err(ErrorKind::ToolError);
    }
    if stateless::is_stateless(client) {
        // The era's own rule: a result says what it is, and this request
        // asked no question.
        let result = complete_result(client, response.clone())?;
        response["result"] = result;
    }
    Ok(response)
}

/// The result of a response that must be complete: in the stateless era
/// its `resultType` says so (a question here is a wrong answer).
fn complete_result(client: &Client, mut response: Value) -> Result<Value, ErrorKind> {
    let result = response
        .get_mut("result")
        .map(Value::take)
        .ok_or(violation(Violation::WrongResult))?;
    if !stateless::is_stateless(client) {
        return Ok(result);
    }
    match stateless::outcome(result)? {
        Outcome::Complete(result) => Ok(result),
        Outcome::InputRequired { .. } => Err(ErrorKind::Check("input:unanswered")),
        // Tasks were not declared (or, for `tasks/*`, a task is no answer).
        Outcome::Task(_) => Err(ErrorKind::Protocol("protocol:unexpected_task")),
    }
}

/// A request without progress, every protocol rule checked; returns its
/// response, which is not a JSON-RPC error (but may be a tool error).
async fn checked_request(
    client: &Client,
    method: &str,
    params: Value,
    answers: Option<&Value>,
) -> Result<Value, ErrorKind> {
    let capabilities = stateless::capabilities(answers.is_some());
    checked_request_as(client, method, params, answers, capabilities).await
}

/// [`checked_request`], a 2026-07-28 client declaring `capabilities`.
async fn checked_request_as(
    client: &Client,
    method: &str,
    params: Value,
    answers: Option<&Value>,
    capabilities: Value,
) -> Result<Value, ErrorKind> {
    let id = client.next_id();
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut check = CallCheck::new(id, None);
    let reply = post_as(client, &body, capabilities).await?;
    read_reply(client, reply, &mut check, answers).await?;
    check.finish(false).map_err(violation)?;
    let response = check
        .response()
        .ok_or(violation(Violation::MissingResponse))?;
    not_an_error(response)?;
    Ok(response.clone())
}

/// A long call with progress requested, read to its end.
async fn long_call(client: &Client, duration_ms: u64, steps: u64) -> Result<(), ErrorKind> {
    let id = client.next_id();
    let mut check = CallCheck::new(id, Some(steps));
    read_reply(
        client,
        post(client, &long_call_body(id, duration_ms, steps)).await?,
        &mut check,
        None,
    )
    .await?;
    complete(client, &check)
}

/// A long call cancelled after its first progress. The latency recorded is
/// from the cancellation to the end of the stream.
async fn cancel_call(client: &Client, duration_ms: u64, steps: u64) -> Result<Duration, ErrorKind> {
    let started = Instant::now();
    let id = client.next_id();
    let mut check = CallCheck::new(id, Some(steps));
    let body = long_call_body(id, duration_ms, steps);
    let Some(mut stream) = call_stream(client, &body, &mut check).await? else {
        // Progress was requested and the call is long: it must stream.
        check.finish(false).map_err(violation)?;
        return Err(violation(Violation::ProgressGap));
    };
    if read_stream(client, &mut stream, &mut check, Some(1), None).await? == StreamEnd::Closed {
        // Closed before its first progress: over (its response came), or
        // closed early by the server (a draining node ends its streams with
        // `retry`; the client resumes on another node, as for any early
        // close). Either way it must complete properly, uncancelled.
        if check.response().is_none()
            && let Some(last_event_id) = stream.last_event_id.take()
        {
            resume_until_response(client, &mut check, last_event_id, retry_wait(&stream), None)
                .await?;
        }
        check.finish(false).map_err(violation)?;
        return Ok(Duration::ZERO);
    }
    if stateless::is_stateless(client) {
        // 2026-07-28: closing the response stream is the cancellation; the
        // latency recorded is the time to the first progress.
        drop(stream);
        return Ok(started.elapsed());
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": "load test"}});
    let cancelled_at = Instant::now();
    expect_accepted(post(client, &cancel).await?)?;
    // 2025-11-25 cancellation: the server should not answer a cancelled
    // request, but may have sent the result already (a race); either way
    // the stream ends, and progress stays in order until it does.
    read_stream(client, &mut stream, &mut check, None, None).await?;
    check.finish(true).map_err(violation)?;
    Ok(cancelled_at.elapsed())
}

/// A long call dropped after `drop_after` progress events and resumed with
/// `Last-Event-ID`; the check spans both connections.
async fn drop_and_resume(
    client: &Client,
    duration_ms: u64,
    steps: u64,
    drop_after: u64,
) -> Result<(), ErrorKind> {
    let id = client.next_id();
    let mut check = CallCheck::new(id, Some(steps));
    let body = long_call_body(id, duration_ms, steps);
    let Some(mut stream) = call_stream(client, &body, &mut check).await? else {
        return complete(client, &check);
    };
    if read_stream(client, &mut stream, &mut check, Some(drop_after), None).await?
        == StreamEnd::Closed
    {
        // Closed by the server first (a draining node, say): resume as on
        // any early close.
        if check.response().is_none()
            && let Some(last_event_id) = stream.last_event_id.take()
        {
            resume_until_response(client, &mut check, last_event_id, retry_wait(&stream), None)
                .await?;
        }
        return complete(client, &check);
    }
    let last_event_id = stream
        .last_event_id
        .take()
        .ok_or(violation(Violation::NoEventId))?;
    drop(stream);
    // Stay away for about one step so that events pile up in the log.
    let away = Duration::from_millis(duration_ms / steps.max(1));
    resume_until_response(client, &mut check, last_event_id, away, None).await?;
    complete(client, &check)
}

/// A long call whose connection the server closes after `close_after`
/// progress events (SEP-1699); resumed after the announced `retry`.
async fn poll_resume(
    client: &Client,
    duration_ms: u64,
    steps: u64,
    close_after: u64,
) -> Result<(), ErrorKind> {
    let id = client.next_id();
    let mut check = CallCheck::new(id, Some(steps));
    let mut body = long_call_body(id, duration_ms, steps);
    body["params"]["arguments"]["close_stream_after"] = json!(close_after);
    let Some(mut stream) = call_stream(client, &body, &mut check).await? else {
        return complete(client, &check);
    };
    read_stream(client, &mut stream, &mut check, None, None).await?;
    if check.response().is_none() {
        // Closed before the response: the server must have announced where
        // to resume from (priming event id) and when (retry).
        if stream.last_event_id.is_none() {
            return Err(violation(Violation::NoEventId));
        }
        read_until_response(client, stream, &mut check, None).await?;
    }
    complete(client, &check)
}

/// POSTs a request and returns its SSE stream, or `None` when the server
/// answered without one (that whole answer is then in `check`).
async fn call_stream(
    client: &Client,
    body: &Value,
    check: &mut CallCheck,
) -> Result<Option<SseStream>, ErrorKind> {
    match post(client, body).await? {
        Reply::Sse(stream) => Ok(Some(stream)),
        other => read_reply(client, other, check, None).await.map(|()| None),
    }
}

/// Reads a request's stream to its end and, when the server closed it
/// before the response (SEP-1699 polling, a draining node), resumes it with
/// `Last-Event-ID` after its `retry`, as the official clients do.
async fn read_until_response(
    client: &Client,
    mut stream: SseStream,
    check: &mut CallCheck,
    answers: Option<&Value>,
) -> Result<(), ErrorKind> {
    read_stream(client, &mut stream, check, None, answers).await?;
    if check.response().is_some() {
        return Ok(());
    }
    let Some(last_event_id) = stream.last_event_id.take() else {
        // Nothing to resume from: the check reports the missing response.
        return Ok(());
    };
    resume_until_response(client, check, last_event_id, retry_wait(&stream), answers).await
}

/// The wait a closed stream asked for (its last `retry`), bounded.
fn retry_wait(stream: &SseStream) -> Duration {
    Duration::from_millis(stream.retry.unwrap_or(0)).min(MAX_RETRY_WAIT)
}

/// Resumes a request's stream with `Last-Event-ID` (2025-11-25 transports,
/// resumability: the events after it, then live) until its response has
/// arrived, waiting `pause` first and each closed stream's `retry` after.
async fn resume_until_response(
    client: &Client,
    check: &mut CallCheck,
    mut last_event_id: String,
    mut pause: Duration,
    answers: Option<&Value>,
) -> Result<(), ErrorKind> {
    for _ in 0..MAX_RESUMES {
        sleep(pause).await;
        let mut resumed = match client.get(Some(&last_event_id)).await.map_err(classify)? {
            Reply::Sse(stream) => stream,
            Reply::Status(status, _, headers) => {
                return Err(ErrorKind::answer(status.as_u16(), &headers));
            }
            _ => return Err(ErrorKind::Protocol("protocol:resume_not_sse")),
        };
        read_stream(client, &mut resumed, check, None, answers).await?;
        if check.response().is_some() {
            return Ok(());
        }
        if let Some(id) = resumed.last_event_id.take() {
            last_event_id = id;
        }
        pause = retry_wait(&resumed);
    }
    Err(violation(Violation::MissingResponse))
}

/// Opens the standalone GET stream and holds it; the latency recorded is
/// the time to open it.
async fn get_stream(client: &Client, hold: Duration) -> Result<Duration, ErrorKind> {
    let started = Instant::now();
    let mut stream = open_standalone(client, None).await?;
    let opened = started.elapsed();
    let held = timeout(hold, async {
        loop {
            match stream.next_message().await {
                Ok(Some(message)) if message.get("method").is_none() => {
                    // No request was sent on this stream.
                    return Err(ErrorKind::Protocol(
                        "protocol:response_on_standalone_stream",
                    ));
                }
                Ok(Some(_)) => {}
                // The server may end the standalone stream when it likes.
                Ok(None) => return Ok(()),
                Err(err) => return Err(classify(err)),
            }
        }
    })
    .await;
    match held {
        Ok(Err(error)) => Err(error),
        _ => Ok(opened),
    }
}

/// DELETE the session, then initialize a new one.
async fn delete_session(
    client: &mut Client,
    plan: &Plan,
    http: &reqwest::Client,
) -> Result<Duration, ErrorKind> {
    let started = Instant::now();
    let (status, headers) = client.delete_with_headers().await.map_err(classify)?;
    if !status.is_success() {
        return Err(ErrorKind::answer(status.as_u16(), &headers));
    }
    client.set_session_id(None);
    *client = open_session(plan, http).await?;
    Ok(started.elapsed())
}

fn long_call_body(id: i64, duration_ms: u64, steps: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "long_running_operation",
        "arguments": {"duration_ms": duration_ms, "steps": steps},
        "_meta": {"progressToken": id}}})
}

async fn post(client: &Client, body: &Value) -> Result<Reply, ErrorKind> {
    post_as(client, body, stateless::capabilities(false)).await
}

/// POSTs `body`; a 2026-07-28 client dresses it with the era's `_meta`
/// and headers, declaring `capabilities` (see [`stateless::capabilities`]).
async fn post_as(client: &Client, body: &Value, capabilities: Value) -> Result<Reply, ErrorKind> {
    let reply = if stateless::is_stateless(client) {
        let mut body = body.clone();
        let headers = stateless::dress(&mut body, capabilities);
        client.post_with(&body, headers).await
    } else {
        client.post(body).await
    };
    match reply.map_err(classify)? {
        Reply::Status(status, _, headers) => Err(ErrorKind::answer(status.as_u16(), &headers)),
        reply => Ok(reply),
    }
}

fn expect_accepted(reply: Reply) -> Result<(), ErrorKind> {
    match reply {
        Reply::Accepted => Ok(()),
        Reply::Status(status, _, headers) => Err(ErrorKind::answer(status.as_u16(), &headers)),
        _ => Err(ErrorKind::Protocol("protocol:notification_answered")),
    }
}

/// Feeds a request's whole reply (JSON body or SSE stream, resumed until
/// the response) to `check`.
async fn read_reply(
    client: &Client,
    reply: Reply,
    check: &mut CallCheck,
    answers: Option<&Value>,
) -> Result<(), ErrorKind> {
    match reply {
        Reply::Json(message, _) => check.observe(message).map(drop).map_err(violation),
        Reply::Sse(stream) => read_until_response(client, stream, check, answers).await,
        Reply::Accepted => Err(ErrorKind::Protocol("protocol:request_answered_202")),
        Reply::Status(status, _, headers) => Err(ErrorKind::answer(status.as_u16(), &headers)),
    }
}

#[derive(Debug, PartialEq, Eq)]
enum StreamEnd {
    /// The server closed the stream.
    Closed,
    /// We stopped reading after the requested number of progress events.
    Stopped,
}

/// Reads messages into `check` until the stream ends or, with
/// `stop_after`, that many progress events have been seen.
///
/// A request the server sends on the stream (session era: elicitation,
/// sampling, roots) is answered from `answers` (the scenario's `inputs`,
/// by method); without one for its method the operation fails
/// (`input:unanswered`).
async fn read_stream(
    client: &Client,
    stream: &mut SseStream,
    check: &mut CallCheck,
    stop_after: Option<u64>,
    answers: Option<&Value>,
) -> Result<StreamEnd, ErrorKind> {
    loop {
        let Some(event) = stream.next_event().await.map_err(classify)? else {
            return Ok(StreamEnd::Closed);
        };
        // Priming events and bare `retry` blocks carry no message.
        if !event.has_data || event.data.is_empty() {
            continue;
        }
        if let Some(id) = &event.id {
            check.event_id(id).map_err(violation)?;
        }
        let message: Value =
            serde_json::from_str(&event.data).map_err(|_| violation(Violation::Malformed))?;
        if let (Some(answers), Some(id), Some(method)) = (
            answers,
            message.get("id"),
            message.get("method").and_then(Value::as_str),
        ) {
            answer_server_request(client, id, method, answers).await?;
            continue;
        }
        let seen = check.observe(message).map_err(violation)?;
        if seen != Seen::Other && stop_after.is_some_and(|n| check.progress_count() >= n) {
            return Ok(StreamEnd::Stopped);
        }
    }
}

/// Answers a server's request `id` of `method` with the scenario's answer
/// for that method (POSTed; the server must accept it with 202).
async fn answer_server_request(
    client: &Client,
    id: &Value,
    method: &str,
    answers: &Value,
) -> Result<(), ErrorKind> {
    let Some(answer) = answers.get(method) else {
        let refusal = json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": "the load test scenario has no answer for this"}});
        let _ = post(client, &refusal).await;
        return Err(ErrorKind::Check("input:unanswered"));
    };
    let response = json!({"jsonrpc": "2.0", "id": id, "result": answer});
    expect_accepted(post(client, &response).await?)
}

/// A call read to its end: every rule checked, and its response a success
/// that carries a tool result.
fn complete(client: &Client, check: &CallCheck) -> Result<(), ErrorKind> {
    check.finish(false).map_err(violation)?;
    let response = response_ok(check)?;
    let result = complete_result(client, response)?;
    if has_tool_content(&result) {
        Ok(())
    } else {
        Err(violation(Violation::WrongResult))
    }
}

/// The response of a checked request, or its error as an [`ErrorKind`].
pub(crate) fn response_ok(check: &CallCheck) -> Result<Value, ErrorKind> {
    let response = check
        .response()
        .ok_or(violation(Violation::MissingResponse))?;
    not_an_error(response)?;
    if is_tool_error(response) {
        return Err(ErrorKind::ToolError);
    }
    Ok(response.clone())
}

/// A JSON-RPC error response as an [`ErrorKind`].
fn not_an_error(response: &Value) -> Result<(), ErrorKind> {
    match response.get("error") {
        Some(error) => Err(ErrorKind::JsonRpc(
            error.get("code").and_then(Value::as_i64).unwrap_or(0),
        )),
        None => Ok(()),
    }
}

fn is_tool_error(response: &Value) -> bool {
    response.pointer("/result/isError") == Some(&Value::Bool(true))
}

pub(crate) fn violation(v: Violation) -> ErrorKind {
    ErrorKind::Protocol(v.name())
}

fn classify(err: ClientError) -> ErrorKind {
    match err {
        ClientError::Http(err) if err.is_timeout() => ErrorKind::Timeout,
        ClientError::Http(err) => ErrorKind::transport(&err),
        ClientError::Json(_) => violation(Violation::Malformed),
        ClientError::Status { status, .. } => ErrorKind::status(status.as_u16()),
        // From `initialize`: an error response or a refused `initialized`.
        ClientError::Protocol(_) => ErrorKind::Protocol("protocol:initialize_failed"),
        err => ErrorKind::transport(&err),
    }
}
