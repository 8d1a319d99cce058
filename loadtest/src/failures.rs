//! When the run's errors happened, whether the server said when to retry,
//! and which requests were lost: the report's `error_window`, `retry` and
//! `lost_responses`. A run that faults are injected into (a node killed, a
//! Redis failover) is read by these: the window is matched against the
//! moments of the faults, `retry` tells refusals that asked the client to
//! come back from failures that did not, and lost requests are the ones a
//! client could not even tell failed.
//!
//! [`Stats`](crate::stats::Stats) records every counted error here, under
//! its lock; `merge.rs` combines the reports of several generators (first
//! of the firsts, last of the lasts, counts added).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::check::Violation;
use crate::stats::ErrorKind;

/// Milliseconds since the Unix epoch of `at`; 0 for a clock set before
/// 1970.
///
/// The wall clock, not tokio's `Instant` (the workspace's clock for
/// measuring): these stamps are compared with the moments an outside
/// runner injected its faults, which only the wall clock shares.
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The wall-clock time now, as [`unix_ms`].
pub(crate) fn now_unix_ms() -> u64 {
    unix_ms(SystemTime::now())
}

/// When the run's errors were counted: overall and per error key. Each
/// key's `count` equals its count in the report's `errors`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ErrorWindow {
    /// The first error of the run (Unix epoch milliseconds); `null` when
    /// there was none.
    pub(crate) first_unix_ms: Option<u64>,
    /// The last error of the run; `null` when there was none.
    pub(crate) last_unix_ms: Option<u64>,
    /// When the latest-started failed operation of the run began (an
    /// operation may fail well after it began, at its timeout): a fault's
    /// window takes the errors of what was sent during it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_started_unix_ms: Option<u64>,
    /// Per error key (`http_status:503`, `timeout`, ...).
    pub(crate) by_key: BTreeMap<String, KeyWindow>,
}

/// The errors of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KeyWindow {
    pub(crate) first_unix_ms: u64,
    pub(crate) last_unix_ms: u64,
    /// When the latest-started operation failing with this key began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_started_unix_ms: Option<u64>,
    pub(crate) count: u64,
}

impl KeyWindow {
    /// Widened to cover `other` too.
    fn absorb(&mut self, other: &KeyWindow) {
        self.first_unix_ms = self.first_unix_ms.min(other.first_unix_ms);
        self.last_unix_ms = self.last_unix_ms.max(other.last_unix_ms);
        // `None` orders first: the later stamp, or the one there is.
        self.last_started_unix_ms = self.last_started_unix_ms.max(other.last_started_unix_ms);
        self.count += other.count;
    }
}

impl ErrorWindow {
    /// One error of `key`, counted at `at_unix_ms`, of an operation begun
    /// at `started_unix_ms`. Stamps may come out of order (taken before
    /// the lock, or a clock stepped back): the window keeps the earliest
    /// and the latest.
    pub(crate) fn record(&mut self, key: &str, at_unix_ms: u64, started_unix_ms: u64) {
        let one = KeyWindow {
            first_unix_ms: at_unix_ms,
            last_unix_ms: at_unix_ms,
            last_started_unix_ms: Some(started_unix_ms.min(at_unix_ms)),
            count: 1,
        };
        self.absorb(key, &one);
    }

    /// Widened by the errors of `other` (another generator's run).
    pub(crate) fn merge(&mut self, other: &ErrorWindow) {
        for (key, window) in &other.by_key {
            self.absorb(key, window);
        }
    }

    fn absorb(&mut self, key: &str, window: &KeyWindow) {
        match self.by_key.get_mut(key) {
            Some(into) => into.absorb(window),
            None => {
                self.by_key.insert(key.to_owned(), *window);
            }
        }
        self.first_unix_ms = Some(
            self.first_unix_ms
                .map_or(window.first_unix_ms, |t| t.min(window.first_unix_ms)),
        );
        self.last_unix_ms = Some(
            self.last_unix_ms
                .map_or(window.last_unix_ms, |t| t.max(window.last_unix_ms)),
        );
        self.last_started_unix_ms = self.last_started_unix_ms.max(window.last_started_unix_ms);
    }
}

/// Whether each error told the client when to retry, per error key: `said`
/// counts HTTP 429 and 503 answers that carried a `Retry-After` header,
/// `not_said` every other error. For each key, `said` + `not_said` is its
/// count in `errors`. A JSON-RPC error counts as `not_said`: no error code
/// or `error.data` field says "retry after" in a documented way.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Retry {
    pub(crate) said: BTreeMap<String, u64>,
    pub(crate) not_said: BTreeMap<String, u64>,
}

impl Retry {
    /// One error of `key`.
    pub(crate) fn record(&mut self, key: &str, said: bool) {
        let counts = if said {
            &mut self.said
        } else {
            &mut self.not_said
        };
        match counts.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                counts.insert(key.to_owned(), 1);
            }
        }
    }

    /// The counts of `other` added.
    pub(crate) fn merge(&mut self, other: &Retry) {
        for (into, from) in [
            (&mut self.said, &other.said),
            (&mut self.not_said, &other.not_said),
        ] {
            for (key, n) in from {
                *into.entry(key.clone()).or_default() += n;
            }
        }
    }

    /// Errors that said when to retry, all keys together.
    pub(crate) fn said_total(&self) -> u64 {
        self.said.values().sum()
    }
}

/// The error keys of requests that got neither an answer nor an error: the
/// operation outlived its bound (`timeout`), or its stream ended without
/// the response (`protocol:missing_response`).
pub(crate) fn lost_keys() -> [String; 2] {
    [
        ErrorKind::Timeout.key(),
        ErrorKind::Protocol(Violation::MissingResponse.name()).key(),
    ]
}

/// How many of `errors` were lost requests (see [`lost_keys`]).
pub(crate) fn lost_responses(errors: &BTreeMap<String, u64>) -> u64 {
    lost_keys().iter().filter_map(|key| errors.get(key)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_spans_the_first_and_last_error_overall_and_per_key() {
        let mut window = ErrorWindow::default();
        assert_eq!((window.first_unix_ms, window.last_unix_ms), (None, None));
        window.record("http_status:503", 1_000, 990);
        // A timeout: counted long after it was sent.
        window.record("timeout", 1_500, 500);
        // Out of order: stamped before another thread's, counted after.
        window.record("http_status:503", 900, 890);
        window.record("http_status:503", 2_000, 1_990);
        assert_eq!(window.first_unix_ms, Some(900));
        assert_eq!(window.last_unix_ms, Some(2_000));
        assert_eq!(window.last_started_unix_ms, Some(1_990));
        assert_eq!(
            window.by_key["http_status:503"],
            KeyWindow {
                first_unix_ms: 900,
                last_unix_ms: 2_000,
                last_started_unix_ms: Some(1_990),
                count: 3
            }
        );
        assert_eq!(
            window.by_key["timeout"],
            KeyWindow {
                first_unix_ms: 1_500,
                last_unix_ms: 1_500,
                last_started_unix_ms: Some(500),
                count: 1
            }
        );
        let json = serde_json::to_value(&window).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "first_unix_ms": 900,
                "last_unix_ms": 2000,
                "last_started_unix_ms": 1990,
                "by_key": {
                    "http_status:503": {"first_unix_ms": 900, "last_unix_ms": 2000, "last_started_unix_ms": 1990, "count": 3},
                    "timeout": {"first_unix_ms": 1500, "last_unix_ms": 1500, "last_started_unix_ms": 500, "count": 1}
                }
            })
        );
        let none = serde_json::to_value(ErrorWindow::default()).unwrap();
        assert_eq!(
            none,
            serde_json::json!({"first_unix_ms": null, "last_unix_ms": null, "by_key": {}})
        );
    }

    #[test]
    fn merged_windows_take_the_first_of_the_firsts_and_the_last_of_the_lasts() {
        let mut a = ErrorWindow::default();
        a.record("http_status:503", 5_000, 5_000);
        a.record("http_status:503", 6_000, 5_200);
        let mut b = ErrorWindow::default();
        b.record("http_status:503", 4_000, 4_000);
        b.record("http_status:503", 5_500, 5_400);
        b.record("transport", 7_000, 7_000);
        let empty = ErrorWindow::default();

        let mut merged = ErrorWindow::default();
        for window in [&a, &empty, &b] {
            merged.merge(window);
        }
        assert_eq!(merged.first_unix_ms, Some(4_000));
        assert_eq!(merged.last_unix_ms, Some(7_000));
        assert_eq!(
            merged.by_key["http_status:503"],
            KeyWindow {
                first_unix_ms: 4_000,
                last_unix_ms: 6_000,
                last_started_unix_ms: Some(5_400),
                count: 4
            }
        );
        assert_eq!(merged.by_key["transport"].count, 1);
        // Merging nothing into nothing stays empty.
        let mut none = ErrorWindow::default();
        none.merge(&empty);
        assert_eq!(none, ErrorWindow::default());
    }

    #[test]
    fn retry_counts_said_and_not_said_per_key_and_merges() {
        let mut retry = Retry::default();
        retry.record("http_status:503", true);
        retry.record("http_status:503", true);
        retry.record("http_status:503", false);
        retry.record("jsonrpc:-32603", false);
        assert_eq!(
            serde_json::to_value(&retry).unwrap(),
            serde_json::json!({
                "said": {"http_status:503": 2},
                "not_said": {"http_status:503": 1, "jsonrpc:-32603": 1}
            })
        );
        let mut other = Retry::default();
        other.record("refused:429_too_many_requests", true);
        other.record("jsonrpc:-32603", false);
        retry.merge(&other);
        assert_eq!(retry.said["refused:429_too_many_requests"], 1);
        assert_eq!(retry.not_said["jsonrpc:-32603"], 2);
        assert_eq!(retry.said_total(), 3);
    }

    #[test]
    fn lost_responses_are_timeouts_and_streams_without_their_response() {
        let errors = BTreeMap::from([
            ("timeout".to_owned(), 2),
            ("protocol:missing_response".to_owned(), 3),
            ("http_status:503".to_owned(), 7),
            ("transport".to_owned(), 1),
        ]);
        assert_eq!(lost_responses(&errors), 5);
        assert_eq!(lost_responses(&BTreeMap::new()), 0);
    }

    #[test]
    fn unix_ms_of_the_epoch_and_after() {
        assert_eq!(unix_ms(UNIX_EPOCH), 0);
        assert_eq!(
            unix_ms(UNIX_EPOCH + std::time::Duration::from_millis(1_764_000_000_123)),
            1_764_000_000_123
        );
    }
}
