//! Scenario files: a weighted mix of operations, read from TOML.
//!
//! A scenario says *what* each virtual session does; how many sessions, for
//! how long, come from the command line (`main.rs`). Running an operation
//! is `session.rs`'s job.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::data::{DataSet, DataSpec, MAX_DATA_SETS};
use crate::expect::{Check, CheckSpec};
use crate::template::Template;
use crate::threshold::Threshold;

/// Protocol version offered in `initialize` unless the scenario names one.
pub(crate) const DEFAULT_PROTOCOL_VERSION: &str = "2025-11-25";
/// The stateless revision: no session, `_meta` on every request.
pub(crate) const STATELESS_VERSION: &str = "2026-07-28";

/// The built-in mix used when no `--scenario` is given: cheap requests only.
const DEFAULT_SCENARIO: &str = r#"
name = "default"
[[operation]]
kind = "tools_list"
weight = 1
[[operation]]
kind = "echo_call"
weight = 3
"#;

/// Most operation names (report rows) a scenario may have.
pub(crate) const MAX_OPERATION_NAMES: usize = 256;
/// The report row of every `initialize`.
pub(crate) const INITIALIZE: OpId = OpId(0);
/// The report row of every `server/discover` (2026-07-28 clients).
pub(crate) const DISCOVER: OpId = OpId(1);

/// The scenario file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    #[serde(default)]
    name: String,
    #[serde(default = "default_protocol_version")]
    protocol_version: String,
    #[serde(default)]
    think_time_ms: u64,
    /// Share of the virtual clients that speak 2026-07-28 (stateless);
    /// default 1 when `protocol_version` is 2026-07-28, else 0.
    stateless_share: Option<f64>,
    /// Pass/fail rules on the whole run (`threshold.rs`).
    #[serde(default)]
    thresholds: Vec<String>,
    /// Data files templates draw from.
    #[serde(default)]
    data: Vec<DataSpec>,
    #[serde(rename = "operation")]
    operations: Vec<toml::Table>,
}

/// A parsed, validated scenario.
#[derive(Debug)]
pub(crate) struct Scenario {
    /// Shown in the summary and the report.
    pub(crate) name: String,
    /// Offered in `initialize`; the server may answer with another.
    pub(crate) protocol_version: String,
    /// Pause between two operations of a lane, in milliseconds, drawn
    /// uniformly from 0..=2×this (mean this); 0 runs operations back to
    /// back. Real clients think: without a pause every session is always
    /// busy, which measures saturation rather than a population of users.
    pub(crate) think_time_ms: u64,
    /// Share of the virtual clients that are 2026-07-28 (stateless)
    /// clients, in 0..=1; the others open sessions with `protocol_version`.
    pub(crate) stateless_share: f64,
    /// The mix; each virtual session picks from it by weight, among the
    /// operations of its era.
    pub(crate) operations: Vec<Weighted>,
    /// The report's rows: `initialize`, then each operation name in the
    /// order of first appearance. [`OpId`] indexes it.
    pub(crate) names: Vec<String>,
    /// The thresholds of the scenario file (its own and its operations').
    pub(crate) thresholds: Vec<Threshold>,
    /// The data files, loaded.
    pub(crate) data: Vec<DataSet>,
    /// Sum of the weights of each era's operations: session era, then
    /// stateless.
    total_weight: [u64; 2],
}

/// Which revisions a virtual client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2024-11-05 … 2025-11-25: `initialize`, `Mcp-Session-Id`.
    Session,
    /// 2026-07-28: no session, `_meta` and routing headers on every request.
    Stateless,
}

/// A row of the report: an index into [`Scenario::names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct OpId(pub(crate) usize);

fn default_protocol_version() -> String {
    DEFAULT_PROTOCOL_VERSION.to_owned()
}

/// One entry of the mix: the operation and what is expected of it.
#[derive(Debug)]
pub(crate) struct Weighted {
    /// Relative frequency (0 disables the entry).
    pub(crate) weight: u32,
    /// What to do.
    pub(crate) op: Operation,
    /// Its report row.
    pub(crate) id: OpId,
    /// The request of a generic operation (`call_tool`, `read_resource`,
    /// ...), compiled; `None` for the built-in ones.
    pub(crate) request: Option<Request>,
    /// `[[operation.check]]`: tests on the result.
    pub(crate) checks: Vec<Check>,
    /// Slower than this is a failure (`check:latency`).
    pub(crate) max_latency: Option<Duration>,
    /// `[operation.inputs]`: answers to the server's questions (an
    /// `input_required` round of 2026-07-28), by the question's key or by
    /// its method (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`); values are templates.
    pub(crate) inputs: Option<Template>,
    /// A `subscribe`'s templated fields, `{"uri": ..., "touch_arguments":
    /// ...}` (the latter only when given), compiled; `None` for every other
    /// kind.
    pub(crate) subscription: Option<Template>,
}

/// The fields every operation entry may have besides its kind's own.
const COMMON_FIELDS: [&str; 6] = [
    "weight",
    "name",
    "check",
    "max_latency_ms",
    "thresholds",
    "inputs",
];

impl Weighted {
    /// Parses one `[[operation]]` table; `thresholds` collects its own
    /// rules (scoped to its name).
    fn parse(
        mut table: toml::Table,
        data: &[DataSet],
        names: &mut Vec<String>,
        thresholds: &mut Vec<Threshold>,
    ) -> anyhow::Result<Self> {
        let weight = table
            .remove("weight")
            .context("every operation needs a weight")?;
        let weight = u32::try_from(weight.as_integer().context("weight must be an integer")?)
            .context("weight must be 0 or more")?;
        let name = match table.remove("name") {
            Some(name) => Some(name.as_str().context("name must be a string")?.to_owned()),
            None => None,
        };
        let checks: Vec<CheckSpec> = match table.remove("check") {
            Some(checks) => checks
                .try_into()
                .context("check: a list of tables ([[operation.check]])")?,
            None => Vec::new(),
        };
        let max_latency = match table.remove("max_latency_ms") {
            Some(ms) => Some(Duration::from_millis(
                u64::try_from(
                    ms.as_integer()
                        .context("max_latency_ms must be an integer")?,
                )
                .context("max_latency_ms must be 0 or more")?,
            )),
            None => None,
        };
        let inputs = match table.remove("inputs") {
            Some(inputs) => {
                let inputs = Value::deserialize(inputs).context("inputs")?;
                ensure!(inputs.is_object(), "inputs must be a table");
                Some(Template::compile(&inputs, data, "inputs")?)
            }
            None => None,
        };
        let own_thresholds: Vec<String> = match table.remove("thresholds") {
            Some(list) => list.try_into().context("thresholds: a list of strings")?,
            None => Vec::new(),
        };
        let has_fields = table.len() > 1;
        let op = Operation::deserialize(table)?;
        // Serde lets a unit variant of a tagged enum ignore extra fields.
        if has_fields && matches!(op, Operation::ToolsList | Operation::DeleteSession) {
            bail!(
                "{} takes no fields besides {}",
                op.kind_name(),
                COMMON_FIELDS.join(", ")
            );
        }
        op.validate()?;
        let name = match name {
            Some(name) => {
                ensure!(
                    !name.is_empty() && name.len() <= 64 && !name.contains(char::is_whitespace),
                    "name {name:?}: 1 to 64 characters, no spaces"
                );
                name
            }
            None => op.default_name(),
        };
        ensure!(
            !["initialize", "server_discover", "all"].contains(&name.as_str()),
            "name {name:?} is taken by the report"
        );
        let id = match names.iter().position(|n| *n == name) {
            Some(index) => OpId(index),
            None => {
                ensure!(
                    names.len() <= MAX_OPERATION_NAMES,
                    "more than {MAX_OPERATION_NAMES} operation names"
                );
                names.push(name.clone());
                OpId(names.len() - 1)
            }
        };
        for text in own_thresholds {
            let threshold = Threshold::parse(&text)?;
            ensure!(
                threshold.operation.is_none(),
                "threshold {text:?} inside operation {name:?} names an operation; write it without"
            );
            thresholds.push(threshold.on(&name));
        }
        let request = op.request(data)?;
        let subscription = op.subscription(data)?;
        ensure!(
            checks.is_empty()
                || request.is_some()
                || matches!(op, Operation::EchoCall { .. } | Operation::ToolsList),
            "{}: checks are for operations with one answer",
            op.kind_name()
        );
        let checks = checks
            .iter()
            .enumerate()
            .map(|(n, spec)| Check::compile(spec, data, n + 1))
            .collect::<anyhow::Result<_>>()?;
        ensure!(
            inputs.is_none()
                || matches!(
                    op,
                    Operation::CallTool { .. }
                        | Operation::TaskCall { .. }
                        | Operation::GetPrompt { .. }
                        | Operation::ReadResource { .. }
                ),
            "inputs are for call_tool, task_call, get_prompt and read_resource (the requests a server may ask questions of)"
        );
        Ok(Self {
            weight,
            op,
            id,
            request,
            checks,
            max_latency,
            inputs,
            subscription,
        })
    }
}

/// A generic operation's request, compiled.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: &'static str,
    /// `params`, with placeholders.
    pub(crate) params: Template,
    /// Where the result's main array is (`/content`, `/tools`, ...): it
    /// must be there for the answer to count.
    pub(crate) shape: &'static str,
    /// A tool call that must answer `isError: true` (`is_error = true`).
    pub(crate) expect_tool_error: bool,
}

/// What `list` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Listed {
    Tools,
    Resources,
    ResourceTemplates,
    Prompts,
}

impl Listed {
    fn method(self) -> &'static str {
        match self {
            Listed::Tools => "tools/list",
            Listed::Resources => "resources/list",
            Listed::ResourceTemplates => "resources/templates/list",
            Listed::Prompts => "prompts/list",
        }
    }

    fn shape(self) -> &'static str {
        match self {
            Listed::Tools => "/tools",
            Listed::Resources => "/resources",
            Listed::ResourceTemplates => "/resourceTemplates",
            Listed::Prompts => "/prompts",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Listed::Tools => "tools",
            Listed::Resources => "resources",
            Listed::ResourceTemplates => "resource_templates",
            Listed::Prompts => "prompts",
        }
    }
}

/// What a virtual session does in one step. Field units are in the names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Operation {
    /// `tools/list`.
    ToolsList,
    /// `tools/call echo {message}`; the answer must carry the message back.
    EchoCall {
        #[serde(default = "default_message")]
        message: String,
    },
    /// `tools/call long_running_operation` with a progress token: progress
    /// must arrive as exactly 1..=steps, then the response.
    LongCall { duration_ms: u64, steps: u64 },
    /// A long call cancelled (`notifications/cancelled`) after its first
    /// progress; the stream must then end.
    CancelCall { duration_ms: u64, steps: u64 },
    /// The standalone GET stream, held open for `hold_ms`.
    GetStream { hold_ms: u64 },
    /// A long call whose stream is dropped after `drop_after` progress
    /// events and resumed with `Last-Event-ID`: across both connections
    /// progress must be exactly 1..=steps, then the response.
    DropAndResume {
        duration_ms: u64,
        steps: u64,
        drop_after: u64,
    },
    /// A long call whose SSE connection the *server* closes after
    /// `close_after` progress events (SEP-1699 polling: the tool argument
    /// `close_stream_after`); the client waits the announced `retry` and
    /// resumes with `Last-Event-ID`, as often as the server closes it.
    /// Across every connection progress must be exactly 1..=steps, then the
    /// response. Needs protocol 2025-11-25 or later.
    PollResume {
        duration_ms: u64,
        steps: u64,
        close_after: u64,
    },
    /// DELETE the session, then initialize a new one.
    DeleteSession,
    /// `tools/call` of any tool; `arguments` is a template. The result must
    /// carry `content`, and `isError` must be `is_error` (default false).
    CallTool {
        tool: String,
        #[serde(default = "empty_object")]
        arguments: Value,
        #[serde(default)]
        is_error: bool,
    },
    /// `resources/read`; `uri` is a template. The result must carry
    /// `contents`.
    ReadResource { uri: String },
    /// `prompts/get`; `arguments` is a template. The result must carry
    /// `messages`.
    GetPrompt {
        prompt: String,
        #[serde(default = "empty_object")]
        arguments: Value,
    },
    /// The first page of `tools/list`, `resources/list`,
    /// `resources/templates/list` or `prompts/list`.
    List { what: Listed },
    /// 2026-07-28 `subscriptions/listen`, held open `hold_ms`: the first
    /// message must acknowledge the subscription and every message carry
    /// its id. The latency is the time to the acknowledgement.
    Listen {
        hold_ms: u64,
        #[serde(default = "every_notification")]
        notifications: Value,
    },
    /// `completion/complete`: `ref` (`{type = "ref/prompt", name = ...}` or
    /// `{type = "ref/resource", uri = ...}`) and `argument` (`{name, value}`,
    /// a template). The result must carry `completion.values`.
    Complete {
        #[serde(rename = "ref")]
        reference: Value,
        argument: Value,
    },
    /// 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`,
    /// declared in the request's capabilities): `tools/call` of `tool`,
    /// which must be answered with a task (after any input rounds), then
    /// `tasks/get` at the task's `pollIntervalMs` until it ends; questions
    /// the task asks are answered with `tasks/update` from `inputs`. The
    /// task must end `completed` with a result as `call_tool`'s (`content`,
    /// `isError` as `is_error` says); the checks hold against that result.
    TaskCall {
        tool: String,
        #[serde(default = "empty_object")]
        arguments: Value,
        #[serde(default)]
        is_error: bool,
    },
    /// Session era: the session's standalone GET stream opened, then
    /// `resources/subscribe` to `uri` (a template), then `touch_tool` (if
    /// any) called with `touch_arguments` (a template; default `{uri =
    /// <the uri>}`) to change the resource; at least one
    /// `notifications/resources/updated` for `uri` must arrive on the
    /// stream within `wait_ms`; then `resources/unsubscribe`. The latency
    /// is from the subscription to the update.
    Subscribe {
        uri: String,
        touch_tool: Option<String>,
        touch_arguments: Option<Value>,
        #[serde(default = "default_update_wait_ms")]
        wait_ms: u64,
    },
}

fn default_update_wait_ms() -> u64 {
    5_000
}

fn every_notification() -> Value {
    json!({"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true})
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn default_message() -> String {
    "hello".to_owned()
}

impl Operation {
    /// The `kind` as written in scenario files.
    pub(crate) fn kind_name(&self) -> &'static str {
        match self {
            Operation::ToolsList => "tools_list",
            Operation::EchoCall { .. } => "echo_call",
            Operation::LongCall { .. } => "long_call",
            Operation::CancelCall { .. } => "cancel_call",
            Operation::GetStream { .. } => "get_stream",
            Operation::DropAndResume { .. } => "drop_and_resume",
            Operation::PollResume { .. } => "poll_resume",
            Operation::DeleteSession => "delete_session",
            Operation::CallTool { .. } => "call_tool",
            Operation::ReadResource { .. } => "read_resource",
            Operation::GetPrompt { .. } => "get_prompt",
            Operation::List { .. } => "list",
            Operation::Complete { .. } => "complete",
            Operation::Listen { .. } => "listen",
            Operation::TaskCall { .. } => "task_call",
            Operation::Subscribe { .. } => "subscribe",
        }
    }

    /// Whether a client of `era` can run it: resumption, the GET stream,
    /// `resources/subscribe` and DELETE are the session era's,
    /// `subscriptions/listen` and tasks the stateless era's.
    pub(crate) fn runs_in(&self, era: Era) -> bool {
        match self {
            Operation::GetStream { .. }
            | Operation::DropAndResume { .. }
            | Operation::PollResume { .. }
            | Operation::Subscribe { .. }
            | Operation::DeleteSession => era == Era::Session,
            Operation::Listen { .. } | Operation::TaskCall { .. } => era == Era::Stateless,
            _ => true,
        }
    }

    /// Whether it holds the session's standalone GET stream, of which the
    /// server allows one per session.
    pub(crate) fn uses_standalone_stream(&self) -> bool {
        matches!(
            self,
            Operation::GetStream { .. } | Operation::Subscribe { .. }
        )
    }

    /// The report row of an operation without a `name`: its kind, and the
    /// tool's or prompt's name or what it lists.
    fn default_name(&self) -> String {
        let name = match self {
            Operation::CallTool { tool, .. } => format!("call_tool:{tool}"),
            Operation::TaskCall { tool, .. } => format!("task_call:{tool}"),
            Operation::GetPrompt { prompt, .. } => format!("get_prompt:{prompt}"),
            Operation::List { what } => format!("list:{}", what.name()),
            other => other.kind_name().to_owned(),
        };
        // A row name has no spaces (thresholds name rows before a space).
        name.replace(char::is_whitespace, "_")
    }

    /// The request of a generic operation, its templates compiled.
    fn request(&self, data: &[DataSet]) -> anyhow::Result<Option<Request>> {
        let (method, params, shape, expect_tool_error) = match self {
            Operation::CallTool {
                tool,
                arguments,
                is_error,
            }
            | Operation::TaskCall {
                tool,
                arguments,
                is_error,
            } => {
                ensure!(
                    arguments.is_object(),
                    "{}: arguments must be a table",
                    self.kind_name()
                );
                (
                    "tools/call",
                    json!({"name": tool, "arguments": arguments}),
                    "/content",
                    *is_error,
                )
            }
            Operation::ReadResource { uri } => {
                ("resources/read", json!({"uri": uri}), "/contents", false)
            }
            Operation::GetPrompt { prompt, arguments } => {
                ensure!(
                    arguments.is_object(),
                    "get_prompt: arguments must be a table"
                );
                (
                    "prompts/get",
                    json!({"name": prompt, "arguments": arguments}),
                    "/messages",
                    false,
                )
            }
            Operation::List { what } => (what.method(), json!({}), what.shape(), false),
            Operation::Complete {
                reference,
                argument,
            } => {
                ensure!(
                    reference.get("type").and_then(Value::as_str).is_some()
                        && argument.get("name").and_then(Value::as_str).is_some()
                        && argument.get("value").is_some(),
                    "complete: ref needs a type, argument a name and a value"
                );
                (
                    "completion/complete",
                    json!({"ref": reference, "argument": argument}),
                    "/completion/values",
                    false,
                )
            }
            _ => return Ok(None),
        };
        let params = Template::compile(&params, data, self.kind_name())?;
        Ok(Some(Request {
            method,
            params,
            shape,
            expect_tool_error,
        }))
    }

    /// A `subscribe`'s templated fields, compiled (see
    /// [`Weighted::subscription`]).
    fn subscription(&self, data: &[DataSet]) -> anyhow::Result<Option<Template>> {
        let Operation::Subscribe {
            uri,
            touch_arguments,
            ..
        } = self
        else {
            return Ok(None);
        };
        let mut fields = json!({"uri": uri});
        if let Some(arguments) = touch_arguments {
            ensure!(
                arguments.is_object(),
                "subscribe: touch_arguments must be a table"
            );
            fields["touch_arguments"] = arguments.clone();
        }
        Ok(Some(Template::compile(&fields, data, "subscribe")?))
    }

    /// How long the operation takes on a healthy server (its timeout adds slack).
    pub(crate) fn nominal_duration(&self) -> Duration {
        match self {
            Operation::LongCall { duration_ms, .. }
            | Operation::CancelCall { duration_ms, .. }
            | Operation::DropAndResume { duration_ms, .. }
            | Operation::PollResume { duration_ms, .. }
            | Operation::GetStream {
                hold_ms: duration_ms,
            }
            | Operation::Listen {
                hold_ms: duration_ms,
                ..
            }
            | Operation::Subscribe {
                wait_ms: duration_ms,
                ..
            } => Duration::from_millis(*duration_ms),
            _ => Duration::ZERO,
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        match self {
            Operation::LongCall { steps, .. } => ensure!(*steps >= 1, "long_call: steps >= 1"),
            Operation::CancelCall { steps, .. } => {
                ensure!(
                    *steps >= 2,
                    "cancel_call: steps >= 2 (cancel after the first)"
                );
            }
            Operation::DropAndResume {
                steps, drop_after, ..
            } => ensure!(
                *drop_after >= 1 && drop_after < steps,
                "drop_and_resume: 1 <= drop_after < steps"
            ),
            Operation::PollResume {
                steps, close_after, ..
            } => ensure!(
                *close_after >= 1 && close_after < steps,
                "poll_resume: 1 <= close_after < steps"
            ),
            Operation::Subscribe {
                touch_tool,
                touch_arguments,
                wait_ms,
                ..
            } => {
                ensure!(*wait_ms >= 1, "subscribe: wait_ms >= 1");
                ensure!(
                    touch_arguments.is_none() || touch_tool.is_some(),
                    "subscribe: touch_arguments without a touch_tool"
                );
            }
            _ => {}
        }
        if let Some(steps) = self.steps() {
            // The node's long_running_operation clamps to this; more would
            // make the exact 1..=steps check fail for the wrong reason.
            ensure!(steps <= 10_000, "{}: steps <= 10000", self.kind_name());
        }
        Ok(())
    }

    fn steps(&self) -> Option<u64> {
        match self {
            Operation::LongCall { steps, .. }
            | Operation::CancelCall { steps, .. }
            | Operation::DropAndResume { steps, .. }
            | Operation::PollResume { steps, .. } => Some(*steps),
            _ => None,
        }
    }
}

impl Scenario {
    /// Parses and validates TOML text; data files are read relative to
    /// `dir`.
    ///
    /// # Errors
    /// Bad TOML, an unknown operation or field, values out of range, a data
    /// file that cannot be read, a template or threshold that does not
    /// compile.
    pub(crate) fn parse(text: &str, dir: &Path) -> anyhow::Result<Self> {
        let file: ScenarioFile = toml::from_str(text)?;
        ensure!(
            file.data.len() <= MAX_DATA_SETS,
            "more than {MAX_DATA_SETS} [[data]] files"
        );
        let mut data: Vec<DataSet> = Vec::with_capacity(file.data.len());
        for spec in &file.data {
            ensure!(
                data.iter().all(|d| d.name != spec.name),
                "two [[data]] named {:?}",
                spec.name
            );
            data.push(DataSet::load(spec, dir)?);
        }
        let mut names = vec!["initialize".to_owned(), "server_discover".to_owned()];
        let mut thresholds = Vec::new();
        let mut operations = Vec::with_capacity(file.operations.len());
        for (n, table) in file.operations.into_iter().enumerate() {
            let kind = table
                .get("kind")
                .and_then(toml::Value::as_str)
                .unwrap_or("?")
                .to_owned();
            operations.push(
                Weighted::parse(table, &data, &mut names, &mut thresholds)
                    .with_context(|| format!("operation {} ({kind})", n + 1))?,
            );
        }
        for text in &file.thresholds {
            thresholds.push(Threshold::parse(text)?);
        }
        let all_stateless = file.protocol_version == STATELESS_VERSION;
        let stateless_share = file
            .stateless_share
            .unwrap_or(if all_stateless { 1.0 } else { 0.0 });
        ensure!(
            (0.0..=1.0).contains(&stateless_share),
            "stateless_share must be in 0..=1"
        );
        ensure!(
            !all_stateless || stateless_share == 1.0,
            "protocol_version {STATELESS_VERSION} makes every client stateless; name a session-era version to mix eras with stateless_share"
        );
        let weight_in = |era: Era| -> u64 {
            operations
                .iter()
                .filter(|entry| entry.op.runs_in(era))
                .map(|entry| u64::from(entry.weight))
                .sum()
        };
        let total_weight = [weight_in(Era::Session), weight_in(Era::Stateless)];
        if stateless_share < 1.0 && total_weight[0] == 0 {
            bail!("the scenario needs at least one session-era operation with a weight above 0");
        }
        if stateless_share > 0.0 && total_weight[1] == 0 {
            bail!(
                "the scenario needs at least one operation with a weight above 0 that 2026-07-28 clients can run (not get_stream, drop_and_resume, poll_resume, subscribe, delete_session)"
            );
        }
        let scenario = Self {
            name: file.name,
            protocol_version: file.protocol_version,
            think_time_ms: file.think_time_ms,
            stateless_share,
            operations,
            names,
            thresholds,
            data,
            total_weight,
        };
        for threshold in &scenario.thresholds {
            scenario.check_names(threshold)?;
        }
        Ok(scenario)
    }

    /// A threshold names an operation of this scenario, if any.
    ///
    /// # Errors
    /// It names one the scenario does not have (the names are listed).
    pub(crate) fn check_names(&self, threshold: &Threshold) -> anyhow::Result<()> {
        match &threshold.operation {
            Some(name) if !self.names.contains(name) => bail!(
                "threshold {:?}: no operation named {name:?} (there are: {})",
                threshold.text,
                self.names.join(", ")
            ),
            _ => Ok(()),
        }
    }

    /// Reads a scenario file, or the built-in default mix.
    ///
    /// # Errors
    /// The file cannot be read or does not parse.
    pub(crate) fn load(path: Option<&Path>) -> anyhow::Result<Self> {
        match path {
            None => Self::parse(DEFAULT_SCENARIO, Path::new(".")),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let dir = path.parent().unwrap_or(Path::new("."));
                Self::parse(&text, dir).with_context(|| format!("scenario {}", path.display()))
            }
        }
    }

    /// The entry of `era` for a roll in `0..total_weight`.
    pub(crate) fn pick_with(&self, era: Era, roll: u64) -> &Weighted {
        let mut left = roll % self.total_weight[era as usize].max(1);
        for entry in self.operations.iter().filter(|e| e.op.runs_in(era)) {
            let weight = u64::from(entry.weight);
            if left < weight {
                return entry;
            }
            left -= weight;
        }
        // unreachable: roll < total_weight, the sum of the weights.
        &self.operations[self.operations.len() - 1]
    }

    /// A random pause before the next operation (see `think_time_ms`).
    pub(crate) fn think_time(&self) -> Duration {
        Duration::from_millis(fastrand::u64(0..=self.think_time_ms.saturating_mul(2)))
    }

    /// The capabilities a session declares in `initialize`: elicitation,
    /// sampling and roots when some operation answers questions
    /// (`inputs`), none otherwise.
    pub(crate) fn session_capabilities(&self) -> Value {
        crate::stateless::capabilities(self.operations.iter().any(|e| e.inputs.is_some()))
    }

    /// A random entry of `era`, by weight.
    pub(crate) fn pick(&self, era: Era) -> &Weighted {
        self.pick_with(
            era,
            fastrand::u64(0..self.total_weight[era as usize].max(1)),
        )
    }

    /// The era of virtual client `index`, spread evenly: of the first n
    /// clients, `stateless_share * n` (rounded down) are stateless.
    pub(crate) fn era_of(&self, index: usize) -> Era {
        let share = self.stateless_share;
        if ((index + 1) as f64 * share).floor() > (index as f64 * share).floor() {
            Era::Stateless
        } else {
            Era::Session
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Scenario> {
        Scenario::parse(text, Path::new("."))
    }

    #[test]
    fn checked_in_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Scenario::load(Some(&path)).unwrap();
            }
        }
        Scenario::load(None).unwrap();
    }

    #[test]
    fn picks_follow_the_weights() {
        let s = parse(
            r#"
            [[operation]]
            kind = "tools_list"
            weight = 1
            [[operation]]
            kind = "delete_session"
            weight = 0
            [[operation]]
            kind = "long_call"
            weight = 2
            duration_ms = 100
            steps = 4
            "#,
        )
        .unwrap();
        assert_eq!(s.protocol_version, DEFAULT_PROTOCOL_VERSION);
        assert_eq!(s.pick_with(Era::Session, 0).op, Operation::ToolsList);
        let long = Operation::LongCall {
            duration_ms: 100,
            steps: 4,
        };
        assert_eq!(s.pick_with(Era::Session, 1).op, long);
        assert_eq!(s.pick_with(Era::Session, 2).op, long);
        assert_eq!(s.pick_with(Era::Session, 3).op, Operation::ToolsList);
        assert_eq!(
            s.names,
            [
                "initialize",
                "server_discover",
                "tools_list",
                "delete_session",
                "long_call"
            ]
        );
    }

    #[test]
    fn generic_operations_get_names_requests_and_thresholds() {
        let s = parse(
            r#"
            thresholds = ["p99<1s", "call_tool:get_forecast errors<1%"]
            [[operation]]
            kind = "call_tool"
            weight = 3
            tool = "get_forecast"
            arguments = { city = "Paris", days = "{{random_int 1 7}}" }
            max_latency_ms = 250
            thresholds = ["p95<200ms"]
            [[operation.check]]
            pointer = "/content/0/text"
            contains = "Paris"
            [[operation]]
            kind = "call_tool"
            name = "forecast_again"
            weight = 1
            tool = "get_forecast"
            [[operation]]
            kind = "list"
            weight = 1
            what = "resource_templates"
            [[operation]]
            kind = "read_resource"
            weight = 1
            uri = "file:///{{seq}}.txt"
            [[operation]]
            kind = "get_prompt"
            weight = 1
            prompt = "summary"
            [[operation]]
            kind = "complete"
            weight = 1
            ref = { type = "ref/prompt", name = "summary" }
            argument = { name = "topic", value = "ra" }
            "#,
        )
        .unwrap();
        assert_eq!(
            s.names,
            [
                "initialize",
                "server_discover",
                "call_tool:get_forecast",
                "forecast_again",
                "list:resource_templates",
                "read_resource",
                "get_prompt:summary",
                "complete"
            ]
        );
        let forecast = &s.operations[0];
        let request = forecast.request.as_ref().unwrap();
        assert_eq!((request.method, request.shape), ("tools/call", "/content"));
        assert_eq!(forecast.checks.len(), 1);
        assert_eq!(forecast.max_latency, Some(Duration::from_millis(250)));
        let list = s.operations[2].request.as_ref().unwrap();
        assert_eq!(
            (list.method, list.shape),
            ("resources/templates/list", "/resourceTemplates")
        );
        let scoped: Vec<Option<&str>> = s
            .thresholds
            .iter()
            .map(|t| t.operation.as_deref())
            .collect();
        assert_eq!(
            scoped,
            [
                Some("call_tool:get_forecast"),
                None,
                Some("call_tool:get_forecast")
            ]
        );
    }

    #[test]
    fn tasks_are_the_stateless_eras_and_subscriptions_the_sessions() {
        let s = parse(
            r#"
            stateless_share = 0.5
            [[operation]]
            kind = "task_call"
            weight = 1
            tool = "slow_compute"
            arguments = { seconds = 0.1, label = "t{{seq}}" }
            [[operation.check]]
            pointer = "/content/0/text"
            equals = "Computed t{{seq}} in 0.1 s."
            [[operation]]
            kind = "subscribe"
            weight = 1
            uri = "test://template/{{session}}/data"
            touch_tool = "touch_resource"
            "#,
        )
        .unwrap();
        assert_eq!(
            s.names,
            [
                "initialize",
                "server_discover",
                "task_call:slow_compute",
                "subscribe"
            ]
        );
        let (task, subscribe) = (&s.operations[0], &s.operations[1]);
        assert!(task.op.runs_in(Era::Stateless) && !task.op.runs_in(Era::Session));
        assert!(subscribe.op.runs_in(Era::Session) && !subscribe.op.runs_in(Era::Stateless));
        assert_eq!(s.pick_with(Era::Stateless, 0).id, task.id);
        assert_eq!(s.pick_with(Era::Session, 0).id, subscribe.id);
        // The task's call is a tool call; its checks hold on the task's
        // result.
        let request = task.request.as_ref().unwrap();
        assert_eq!((request.method, request.shape), ("tools/call", "/content"));
        assert_eq!(task.checks.len(), 1);
        // The subscription waits for its update 5 s unless told, and holds
        // the standalone stream.
        assert!(subscribe.request.is_none() && subscribe.subscription.is_some());
        assert_eq!(subscribe.op.nominal_duration(), Duration::from_secs(5));
        assert!(subscribe.op.uses_standalone_stream());
        assert!(!task.op.uses_standalone_stream());

        // A scenario of tasks alone has nothing for sessions, and one of
        // subscriptions alone nothing for stateless clients.
        let only_tasks = "stateless_share = 0.5\n[[operation]]\nkind = \"task_call\"\nweight = 1\ntool = \"t\"\n";
        let err = parse(only_tasks).err().unwrap();
        assert!(format!("{err:#}").contains("session-era"), "{err:#}");
        let only_subscriptions =
            "stateless_share = 0.5\n[[operation]]\nkind = \"subscribe\"\nweight = 1\nuri = \"u\"\n";
        let err = parse(only_subscriptions).err().unwrap();
        assert!(format!("{err:#}").contains("subscribe"), "{err:#}");
    }

    #[test]
    fn rejects_bad_scenarios() {
        for (bad, says) in [
            ("", "missing field `operation`"),
            (
                "[[operation]]\nkind = \"tools_list\"\nweight = 0\n",
                "weight above 0",
            ),
            (
                "[[operation]]\nkind = \"teleport\"\nweight = 1\n",
                "teleport",
            ),
            (
                "[[operation]]\nkind = \"tools_list\"\nweight = 1\nsteps = 3\n",
                "no fields",
            ),
            (
                "[[operation]]\nkind = \"drop_and_resume\"\nweight = 1\nduration_ms = 1\nsteps = 3\ndrop_after = 3\n",
                "drop_after",
            ),
            (
                "[[operation]]\nkind = \"cancel_call\"\nweight = 1\nduration_ms = 1\nsteps = 1\n",
                "steps >= 2",
            ),
            (
                "[[operation]]\nkind = \"poll_resume\"\nweight = 1\nduration_ms = 1\nsteps = 2\nclose_after = 0\n",
                "close_after",
            ),
            (
                "[[operation]]\nkind = \"call_tool\"\nweight = 1\ntool = \"t\"\narguments = { a = \"{{nope}}\" }\n",
                "unknown placeholder",
            ),
            (
                "[[operation]]\nkind = \"call_tool\"\nweight = 1\ntool = \"t\"\nname = \"initialize\"\n",
                "taken by the report",
            ),
            (
                "thresholds = [\"call_tool:x p99<1s\"]\n[[operation]]\nkind = \"call_tool\"\nweight = 1\ntool = \"t\"\n",
                "no operation named \"call_tool:x\"",
            ),
            (
                "[[operation]]\nkind = \"get_stream\"\nweight = 1\nhold_ms = 5\n[[operation.check]]\nexists = true\n",
                "checks are for operations with one answer",
            ),
            (
                "[[data]]\nname = \"d\"\nfile = \"missing.csv\"\n[[operation]]\nkind = \"tools_list\"\nweight = 1\n",
                "missing.csv",
            ),
            (
                "[[operation]]\nkind = \"subscribe\"\nweight = 1\nuri = \"u\"\n[[operation.check]]\nexists = true\n",
                "checks are for operations with one answer",
            ),
            (
                "[[operation]]\nkind = \"subscribe\"\nweight = 1\nuri = \"u\"\ntouch_arguments = { uri = \"u\" }\n",
                "touch_arguments without a touch_tool",
            ),
            (
                "[[operation]]\nkind = \"subscribe\"\nweight = 1\nuri = \"u\"\nwait_ms = 0\n",
                "wait_ms >= 1",
            ),
            (
                "protocol_version = \"2026-07-28\"\n[[operation]]\nkind = \"task_call\"\nweight = 1\ntool = \"t\"\narguments = [1]\n",
                "task_call: arguments must be a table",
            ),
        ] {
            let err = parse(bad).err().unwrap_or_else(|| panic!("{bad} parsed"));
            let text = format!("{err:#}");
            assert!(text.contains(says), "{bad}: {text}");
        }
    }
}
