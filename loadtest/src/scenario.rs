//! Scenario files: a weighted mix of operations, read from TOML.
//!
//! A scenario says *what* each virtual session does; how many sessions, for
//! how long, come from the command line (`main.rs`). Running an operation
//! is `session.rs`'s job.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use serde::Deserialize;

/// Protocol version offered in `initialize` unless the scenario names one.
pub(crate) const DEFAULT_PROTOCOL_VERSION: &str = "2025-11-25";

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

/// A parsed, validated scenario.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Scenario {
    /// Shown in the summary and the report.
    #[serde(default)]
    pub(crate) name: String,
    /// Offered in `initialize`; the server may answer with another.
    #[serde(default = "default_protocol_version")]
    pub(crate) protocol_version: String,
    /// Pause between two operations of a lane, in milliseconds, drawn
    /// uniformly from 0..=2×this (mean this); 0 runs operations back to
    /// back. Real clients think: without a pause every session is always
    /// busy, which measures saturation rather than a population of users.
    #[serde(default)]
    pub(crate) think_time_ms: u64,
    /// The mix; each virtual session picks from it by weight.
    #[serde(rename = "operation")]
    pub(crate) operations: Vec<Weighted>,
    /// Sum of the weights, set by [`Scenario::parse`].
    #[serde(skip)]
    total_weight: u64,
}

fn default_protocol_version() -> String {
    DEFAULT_PROTOCOL_VERSION.to_owned()
}

/// One entry of the mix: `weight` beside the operation's own fields.
#[derive(Debug, Deserialize)]
#[serde(try_from = "toml::Table")]
pub(crate) struct Weighted {
    /// Relative frequency (0 disables the entry).
    pub(crate) weight: u32,
    /// What to do.
    pub(crate) op: Operation,
}

impl TryFrom<toml::Table> for Weighted {
    type Error = anyhow::Error;

    // Not `#[serde(flatten)]`: it would let unknown fields (typos) pass.
    fn try_from(mut table: toml::Table) -> anyhow::Result<Self> {
        let weight = table
            .remove("weight")
            .context("every operation needs a weight")?;
        let weight = u32::try_from(weight.as_integer().context("weight must be an integer")?)
            .context("weight must be 0 or more")?;
        let has_fields = table.len() > 1;
        let op = Operation::deserialize(table)?;
        // Serde lets a unit variant of a tagged enum ignore extra fields.
        if has_fields && matches!(op, Operation::ToolsList | Operation::DeleteSession) {
            bail!("{} takes no fields besides weight", op.kind().name());
        }
        Ok(Self { weight, op })
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
}

fn default_message() -> String {
    "hello".to_owned()
}

/// The operation kinds, for statistics; `Initialize` is measured too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    Initialize,
    ToolsList,
    EchoCall,
    LongCall,
    CancelCall,
    GetStream,
    DropAndResume,
    PollResume,
    DeleteSession,
}

impl OpKind {
    /// Every kind, in report order.
    pub(crate) const ALL: [OpKind; 9] = [
        OpKind::Initialize,
        OpKind::ToolsList,
        OpKind::EchoCall,
        OpKind::LongCall,
        OpKind::CancelCall,
        OpKind::GetStream,
        OpKind::DropAndResume,
        OpKind::PollResume,
        OpKind::DeleteSession,
    ];

    /// The name used in scenario files and reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            OpKind::Initialize => "initialize",
            OpKind::ToolsList => "tools_list",
            OpKind::EchoCall => "echo_call",
            OpKind::LongCall => "long_call",
            OpKind::CancelCall => "cancel_call",
            OpKind::GetStream => "get_stream",
            OpKind::DropAndResume => "drop_and_resume",
            OpKind::PollResume => "poll_resume",
            OpKind::DeleteSession => "delete_session",
        }
    }

    /// Index into per-kind tables.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl Operation {
    /// Its statistics bucket.
    pub(crate) fn kind(&self) -> OpKind {
        match self {
            Operation::ToolsList => OpKind::ToolsList,
            Operation::EchoCall { .. } => OpKind::EchoCall,
            Operation::LongCall { .. } => OpKind::LongCall,
            Operation::CancelCall { .. } => OpKind::CancelCall,
            Operation::GetStream { .. } => OpKind::GetStream,
            Operation::DropAndResume { .. } => OpKind::DropAndResume,
            Operation::PollResume { .. } => OpKind::PollResume,
            Operation::DeleteSession => OpKind::DeleteSession,
        }
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
            _ => {}
        }
        if let Some(steps) = self.steps() {
            // The node's long_running_operation clamps to this; more would
            // make the exact 1..=steps check fail for the wrong reason.
            ensure!(steps <= 10_000, "{}: steps <= 10000", self.kind().name());
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
    /// Parses and validates TOML text.
    ///
    /// # Errors
    /// Bad TOML, an unknown operation or field, or values out of range.
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        let mut scenario: Scenario = toml::from_str(text)?;
        for entry in &scenario.operations {
            entry.op.validate()?;
        }
        scenario.total_weight = scenario
            .operations
            .iter()
            .map(|entry| u64::from(entry.weight))
            .sum();
        if scenario.total_weight == 0 {
            bail!("the scenario needs at least one operation with a weight above 0");
        }
        Ok(scenario)
    }

    /// Reads a scenario file, or the built-in default mix.
    ///
    /// # Errors
    /// The file cannot be read or does not parse.
    pub(crate) fn load(path: Option<&std::path::Path>) -> anyhow::Result<Self> {
        match path {
            None => Self::parse(DEFAULT_SCENARIO),
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Self::parse(&text).with_context(|| format!("scenario {}", path.display()))
            }
        }
    }

    /// The operation for a roll in `0..total_weight`.
    pub(crate) fn pick_with(&self, roll: u64) -> &Operation {
        let mut left = roll % self.total_weight;
        for entry in &self.operations {
            let weight = u64::from(entry.weight);
            if left < weight {
                return &entry.op;
            }
            left -= weight;
        }
        // unreachable: roll < total_weight, the sum of the weights.
        &self.operations[self.operations.len() - 1].op
    }

    /// A random pause before the next operation (see `think_time_ms`).
    pub(crate) fn think_time(&self) -> Duration {
        Duration::from_millis(fastrand::u64(0..=self.think_time_ms.saturating_mul(2)))
    }

    /// A random operation, by weight.
    pub(crate) fn pick(&self) -> &Operation {
        self.pick_with(fastrand::u64(0..self.total_weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_scenarios_parse() {
        for file in ["smoke.toml", "mixed.toml", "sessions-10k.toml"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("scenarios")
                .join(file);
            Scenario::load(Some(&path)).unwrap();
        }
        Scenario::load(None).unwrap();
    }

    #[test]
    fn picks_follow_the_weights() {
        let s = Scenario::parse(
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
        assert_eq!(s.pick_with(0), &Operation::ToolsList);
        let long = Operation::LongCall {
            duration_ms: 100,
            steps: 4,
        };
        assert_eq!(s.pick_with(1), &long);
        assert_eq!(s.pick_with(2), &long);
        assert_eq!(s.pick_with(3), &Operation::ToolsList);
    }

    #[test]
    fn rejects_bad_scenarios() {
        for bad in [
            "",
            "[[operation]]\nkind = \"tools_list\"\nweight = 0\n",
            "[[operation]]\nkind = \"teleport\"\nweight = 1\n",
            "[[operation]]\nkind = \"tools_list\"\nweight = 1\nsteps = 3\n",
            "[[operation]]\nkind = \"drop_and_resume\"\nweight = 1\nduration_ms = 1\nsteps = 3\ndrop_after = 3\n",
            "[[operation]]\nkind = \"cancel_call\"\nweight = 1\nduration_ms = 1\nsteps = 1\n",
            "[[operation]]\nkind = \"poll_resume\"\nweight = 1\nduration_ms = 1\nsteps = 2\nclose_after = 0\n",
        ] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
    }
}
