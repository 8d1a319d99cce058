//! Quotas: what one client address or one principal may take from the
//! cluster, counted in the store ([`mcp_cluster_store::QuotaStore`]) so that a
//! limit holds across every node (Redis) or on the one node (embedded).
//!
//! | quota | counted for | what | default |
//! |---|---|---|---|
//! | `initialize_per_address` | the client address of a request without a principal | new sessions (`initialize`, legacy `GET /sse`), a rate | 60 per 60 s |
//! | `requests_per_principal` | a principal | JSON-RPC requests and notifications (cancellations excepted), a rate | 1200 per 60 s |
//! | `sessions_per_principal` | a principal | open sessions, leases renewed with the session's idle TTL | 100 |
//! | `streams_per_principal` | a principal (the session's owner) | open GET streams, resumptions, legacy `/sse` streams, `subscriptions/listen` streams, leases renewed by the node that serves them | 100 |
//! | `listen_streams_per_address` | the client address of a request without a principal | open `subscriptions/listen` streams, leases as above | 100 |
//! | `tasks_per_principal` | a principal | running tasks (task-eligible `tools/call`s while their handler runs), leases renewed by the node that runs them | 100 |
//! | `tasks_per_address` | the client address of a request without a principal | running tasks, as above | 100 |
//! | `in_flight_bytes_per_client` | the request's owner: its principal, else its client address | bytes running work holds on this node (request parameters while the handler runs, the events of its open answer stream, the questions on it); per node, not cluster-wide: the bytes are held where the request runs | 16 MiB |
//!
//! The last three are each principal's (or address's) share of the node
//! bounds `runtime.max_listen_streams` and `runtime.max_running_tasks`:
//! one client cannot fill them and leave every other one a 503.
//!
//! A refusal is [`RuntimeError::QuotaExceeded`] (HTTP 429 with
//! `Retry-After`), counted in `mcp_quota_rejections_total{quota}`, and
//! happens before anything of the refused body runs. Stdio has neither
//! address nor principal: nothing is counted there.
//!
//! Owner: the runtime's `NodeContext` holds the node's `Quotas`; the
//! cluster task renews the slot leases this node holds (streams, tasks)
//! every third of `stream_lease_secs`; each `SlotLease` (held by the follow
//! of one SSE connection, by a listen stream, or by a running task) gives
//! its slot back when dropped. A node that dies renews nothing more: its
//! slots lapse within `stream_lease_secs`.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use mcp_cluster_store::{
    Principal, QuotaKey, QuotaStore, Rate, SessionId, StoreError, StreamId, Verdict,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::node::error::RuntimeError;

/// Quota settings; 0 turns a quota off. Defaults are generous: they stop
/// floods and runaway clients, not real use (an agent rarely sends more
/// than a few requests a second), and leave load tests alone (those run
/// without principals, from addresses a trusted proxy stands for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaConfig {
    /// New sessions (`initialize`, legacy `GET /sse`) per client address
    /// per `initialize_window_secs`, for requests without a principal
    /// (authorization off, or optional). IPv6 addresses count per /64.
    /// Default 60: a burst of 60, then one a second; enough for people
    /// behind one NAT, while a flood of sessions (each holds state for its
    /// idle TTL) from one address is cut at 60 a minute.
    pub initialize_per_address: u32,
    /// The window of `initialize_per_address`, in seconds. Default 60.
    pub initialize_window_secs: u64,
    /// JSON-RPC requests and notifications per principal per
    /// `requests_window_secs` (a batch counts each of its messages and is
    /// refused whole; cancellations and responses are not counted). Default 1200: bursts of 1200, 20 a second
    /// sustained. At least `runtime.max_batch_items` when on, so that any
    /// valid batch can pass.
    pub requests_per_principal: u32,
    /// The window of `requests_per_principal`, in seconds. Default 60.
    pub requests_window_secs: u64,
    /// Sessions a principal holds open at once, cluster-wide (until DELETE
    /// or idle expiry). Default 100: many clients and agents of one user,
    /// each with a few sessions.
    pub sessions_per_principal: u32,
    /// SSE streams a principal holds open at once, cluster-wide: standalone
    /// GET streams, `Last-Event-ID` resumptions and legacy `/sse` streams
    /// (a POST's own answer stream is bounded by the in-flight limit
    /// instead). Reconnecting to a stream the principal already reads takes
    /// that stream's slot over. Default 100: one GET stream for each of
    /// `sessions_per_principal` sessions.
    pub streams_per_principal: u32,
    /// `subscriptions/listen` streams one client address holds open at
    /// once, cluster-wide, for requests without a principal (a
    /// principal's count in `streams_per_principal`). IPv6 addresses count
    /// per /64. Default 100: a share of `runtime.max_listen_streams`
    /// (10,000), so that one address cannot take them all.
    pub listen_streams_per_address: u32,
    /// Tasks a principal runs at once, cluster-wide: a task-eligible
    /// `tools/call` (the client declared the tasks extension) holds a slot
    /// while its handler runs. Default 100: a share of
    /// `runtime.max_running_tasks` (1,000 per node), so that one principal
    /// cannot take every slot of a node.
    pub tasks_per_principal: u32,
    /// Tasks one client address runs at once, cluster-wide, for requests
    /// without a principal. IPv6 addresses count per /64. Default 100.
    pub tasks_per_address: u32,
    /// Bytes the running work of one client (its principal, else its
    /// address; IPv6 per /64) holds on this node: the parameters of its
    /// requests while their handlers run, the events of their open answer
    /// streams and the questions on them. A request that would go past it
    /// gets 429 before it runs (a client holding nothing is always
    /// admitted). Default 16 MiB: four requests at the 4 MiB body limit,
    /// a quarter of the node's `runtime.max_in_flight_bytes`, so that one
    /// client's dropped connections cannot hold the node's memory.
    pub in_flight_bytes_per_client: u64,
    /// Seconds a slot held by a node (a stream it serves, a task it runs)
    /// outlives the node's last renewal (renewed every third of it): how
    /// long the slots of a node that died stay taken. Default 30. At
    /// least 3.
    pub stream_lease_secs: u64,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        Self {
            initialize_per_address: 60,
            initialize_window_secs: 60,
            requests_per_principal: 1200,
            requests_window_secs: 60,
            sessions_per_principal: 100,
            streams_per_principal: 100,
            listen_streams_per_address: 100,
            tasks_per_principal: 100,
            tasks_per_address: 100,
            in_flight_bytes_per_client: 16 << 20,
            stream_lease_secs: 30,
        }
    }
}

impl QuotaConfig {
    /// Every quota off.
    pub fn off() -> Self {
        Self {
            initialize_per_address: 0,
            requests_per_principal: 0,
            sessions_per_principal: 0,
            streams_per_principal: 0,
            listen_streams_per_address: 0,
            tasks_per_principal: 0,
            tasks_per_address: 0,
            in_flight_bytes_per_client: 0,
            ..Self::default()
        }
    }

    /// Checks values that cannot work; `max_batch_items` is the runtime's.
    ///
    /// # Errors
    /// What is wrong, naming the setting.
    pub fn validate(&self, max_batch_items: usize) -> Result<(), String> {
        if self.initialize_window_secs == 0 || self.requests_window_secs == 0 {
            return Err(
                "quotas.initialize_window_secs and requests_window_secs must be positive".into(),
            );
        }
        if self.stream_lease_secs < 3 {
            return Err("quotas.stream_lease_secs must be at least 3".into());
        }
        if self.requests_per_principal != 0
            && (self.requests_per_principal as usize) < max_batch_items
        {
            return Err(format!(
                "quotas.requests_per_principal must be 0 (off) or at least \
                 runtime.max_batch_items ({max_batch_items}): a longer batch could never pass"
            ));
        }
        Ok(())
    }

    /// How long a stream's slot lasts without renewal.
    pub fn stream_lease(&self) -> Duration {
        Duration::from_secs(self.stream_lease_secs)
    }
}

/// One quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Quota {
    /// New sessions per client address without a principal (a rate).
    InitializePerAddress,
    /// Requests and notifications per principal (a rate).
    RequestsPerPrincipal,
    /// Open sessions per principal.
    SessionsPerPrincipal,
    /// Open SSE streams per principal.
    StreamsPerPrincipal,
    /// Open `subscriptions/listen` streams per client address without a
    /// principal.
    ListenStreamsPerAddress,
    /// Running tasks per principal.
    TasksPerPrincipal,
    /// Running tasks per client address without a principal.
    TasksPerAddress,
    /// Bytes held by one client's running work on this node.
    InFlightBytesPerClient,
}

impl Quota {
    /// Every quota, in the order of [`mcp_cluster_telemetry::metrics::QUOTAS`].
    pub const ALL: [Self; 8] = [
        Self::InitializePerAddress,
        Self::RequestsPerPrincipal,
        Self::SessionsPerPrincipal,
        Self::StreamsPerPrincipal,
        Self::ListenStreamsPerAddress,
        Self::TasksPerPrincipal,
        Self::TasksPerAddress,
        Self::InFlightBytesPerClient,
    ];

    /// Its name: the setting, the label of `mcp_quota_rejections_total`,
    /// part of its store key, and what a refused client reads in
    /// `error.data.quota`.
    pub fn name(self) -> &'static str {
        match self {
            Self::InitializePerAddress => "initialize_per_address",
            Self::RequestsPerPrincipal => "requests_per_principal",
            Self::SessionsPerPrincipal => "sessions_per_principal",
            Self::StreamsPerPrincipal => "streams_per_principal",
            Self::ListenStreamsPerAddress => "listen_streams_per_address",
            Self::TasksPerPrincipal => "tasks_per_principal",
            Self::TasksPerAddress => "tasks_per_address",
            Self::InFlightBytesPerClient => "in_flight_bytes_per_client",
        }
    }

    /// What a refused client is told.
    pub fn client_message(self) -> &'static str {
        match self {
            Self::InitializePerAddress => {
                "too many new sessions from this address (quota initialize_per_address)"
            }
            Self::RequestsPerPrincipal => "too many requests (quota requests_per_principal)",
            Self::SessionsPerPrincipal => {
                "too many open sessions: end one (DELETE) first (quota sessions_per_principal)"
            }
            Self::StreamsPerPrincipal => {
                "too many open SSE streams: close one first (quota streams_per_principal)"
            }
            Self::ListenStreamsPerAddress => {
                "too many open listen streams from this address: close one first \
                 (quota listen_streams_per_address)"
            }
            Self::TasksPerPrincipal => {
                "too many running tasks: wait for one to end or cancel one (quota tasks_per_principal)"
            }
            Self::TasksPerAddress => {
                "too many running tasks from this address: wait for one to end or cancel one \
                 (quota tasks_per_address)"
            }
            Self::InFlightBytesPerClient => {
                "your running requests hold too many bytes on this server: wait for one to end \
                 (quota in_flight_bytes_per_client)"
            }
        }
    }

    /// The most slots of this quota a subject holds, for the quotas that
    /// are lease sets (0: off); `None` for the rates.
    fn slots(self, config: &QuotaConfig) -> Option<u32> {
        match self {
            Self::InitializePerAddress
            | Self::RequestsPerPrincipal
            | Self::InFlightBytesPerClient => None,
            Self::SessionsPerPrincipal => Some(config.sessions_per_principal),
            Self::StreamsPerPrincipal => Some(config.streams_per_principal),
            Self::ListenStreamsPerAddress => Some(config.listen_streams_per_address),
            Self::TasksPerPrincipal => Some(config.tasks_per_principal),
            Self::TasksPerAddress => Some(config.tasks_per_address),
        }
    }
}

pub use mcp_cluster_store::quota::address_subject;

/// Renewals of stream slots in flight at once (one per principal).
const RENEW_CONCURRENCY: usize = 32;

/// A slot held by this node (a stream, a task), renewed by
/// [`Quotas::renew_streams`].
#[derive(Debug)]
struct Held {
    key: QuotaKey,
    member: Arc<str>,
}

/// The node's quota checks over the shared store.
#[derive(Debug)]
pub(crate) struct Quotas {
    config: QuotaConfig,
    store: Arc<dyn QuotaStore>,
    /// Slots held by this node's connections and tasks, by ticket:
    /// inserted by [`Quotas::acquire_slot`], removed by the [`SlotLease`]'s
    /// drop, read by the renewal. Bounded by the SSE connections and the
    /// tasks the node holds.
    held: DashMap<u64, Held>,
    next_ticket: AtomicU64,
}

impl Quotas {
    pub(crate) fn new(config: QuotaConfig, store: Arc<dyn QuotaStore>) -> Self {
        Self {
            config,
            store,
            held: DashMap::new(),
            next_ticket: AtomicU64::new(0),
        }
    }

    /// How often the node renews the stream slots it holds.
    pub(crate) fn renew_interval(&self) -> Duration {
        self.config.stream_lease() / 3
    }

    /// Counts a new session from `client` when the request has no
    /// principal (a principal's sessions are counted as such instead).
    pub(crate) async fn admit_new_session(
        &self,
        client: Option<IpAddr>,
        principal: Option<&Principal>,
    ) -> Result<(), RuntimeError> {
        let (Some(ip), None) = (client, principal) else {
            return Ok(());
        };
        let limit = self.config.initialize_per_address;
        if limit == 0 {
            return Ok(());
        }
        let rate = Rate {
            limit,
            window: Duration::from_secs(self.config.initialize_window_secs),
        };
        let quota = Quota::InitializePerAddress;
        let key = QuotaKey::new(quota.name(), address_subject(ip));
        refused(quota, self.store.hit(&key, 1, rate).await)
    }

    /// Counts `count` requests and notifications of `principal`.
    pub(crate) async fn admit_requests(
        &self,
        principal: Option<&Principal>,
        count: usize,
    ) -> Result<(), RuntimeError> {
        let limit = self.config.requests_per_principal;
        let Some(principal) = principal else {
            return Ok(());
        };
        if limit == 0 || count == 0 {
            return Ok(());
        }
        let rate = Rate {
            limit,
            window: Duration::from_secs(self.config.requests_window_secs),
        };
        let quota = Quota::RequestsPerPrincipal;
        let key = QuotaKey::new(quota.name(), principal.key());
        let cost = u32::try_from(count).unwrap_or(u32::MAX);
        refused(quota, self.store.hit(&key, cost, rate).await)
    }

    fn session_key(owner: &str) -> QuotaKey {
        QuotaKey::new(Quota::SessionsPerPrincipal.name(), owner)
    }

    /// Takes a session slot of `owner` (a principal's key) for `session`,
    /// for the session's idle TTL.
    pub(crate) async fn acquire_session(
        &self,
        owner: &str,
        session: &SessionId,
        idle_ttl: Duration,
    ) -> Result<(), RuntimeError> {
        let max = self.config.sessions_per_principal;
        if max == 0 {
            return Ok(());
        }
        let verdict = self
            .store
            .acquire(&Self::session_key(owner), session.as_str(), max, idle_ttl)
            .await;
        refused(Quota::SessionsPerPrincipal, verdict)
    }

    /// Renews a session's slot with its idle TTL (when the session's record
    /// is renewed): a session keeps its slot exactly as long as it lives.
    pub(crate) async fn renew_session(&self, owner: &str, session: &SessionId, idle_ttl: Duration) {
        if self.config.sessions_per_principal == 0 {
            return;
        }
        let member: Arc<str> = session.as_str().into();
        if let Err(err) = self
            .store
            .renew(&Self::session_key(owner), &[member], idle_ttl)
            .await
        {
            tracing::warn!(session_id = %session, error = %err, "Session quota slot not renewed; it lapses with the session's TTL.");
        }
    }

    /// Gives a session's slot back (the session ended).
    pub(crate) async fn release_session(&self, owner: &str, session: &SessionId) {
        if self.config.sessions_per_principal == 0 {
            return;
        }
        if let Err(err) = self
            .store
            .release(&Self::session_key(owner), session.as_str())
            .await
        {
            tracing::warn!(session_id = %session, error = %err, "Session quota slot not released; it lapses with the session's TTL.");
        }
    }

    /// Takes a stream slot of `owner` for `stream` while the returned lease
    /// lives (`None` when the quota is off). Reading a stream the owner
    /// already reads (a reconnection) takes that stream's slot over.
    pub(crate) async fn acquire_stream(
        self: &Arc<Self>,
        owner: &str,
        stream: &StreamId,
    ) -> Result<Option<SlotLease>, RuntimeError> {
        self.acquire_slot(Quota::StreamsPerPrincipal, owner, stream.as_str())
            .await
    }

    /// Takes a slot of `quota` (a lease set) for `subject`, held by
    /// `member`, while the returned lease lives: renewed with the node's
    /// other slots, given back when dropped. `None` when the quota is off.
    pub(crate) async fn acquire_slot(
        self: &Arc<Self>,
        quota: Quota,
        subject: &str,
        member: &str,
    ) -> Result<Option<SlotLease>, RuntimeError> {
        let max = quota.slots(&self.config).unwrap_or(0);
        if max == 0 {
            return Ok(None);
        }
        let key = QuotaKey::new(quota.name(), subject);
        let member: Arc<str> = member.into();
        let verdict = self
            .store
            .acquire(&key, &member, max, self.config.stream_lease())
            .await;
        refused(quota, verdict)?;
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        self.held.insert(
            ticket,
            Held {
                key,
                member: Arc::clone(&member),
            },
        );
        Ok(Some(SlotLease {
            quotas: Arc::clone(self),
            ticket,
            takeover: None,
        }))
    }

    /// Takes a running-task slot of the request's client: its principal
    /// (`tasks_per_principal`), else its address (`tasks_per_address`);
    /// `None` when neither is known or the quota is off.
    pub(crate) async fn acquire_task(
        self: &Arc<Self>,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
    ) -> Result<Option<SlotLease>, RuntimeError> {
        let member = uuid::Uuid::new_v4().to_string();
        match (principal, client) {
            (Some(principal), _) => {
                self.acquire_slot(Quota::TasksPerPrincipal, &principal.key(), &member)
                    .await
            }
            (None, Some(ip)) => {
                self.acquire_slot(Quota::TasksPerAddress, &address_subject(ip), &member)
                    .await
            }
            (None, None) => Ok(None),
        }
    }

    /// Renews every slot this node holds (streams, tasks), one store call
    /// per quota and subject, [`RENEW_CONCURRENCY`] at a time. A failure is logged: the
    /// slots lapse if it lasts longer than the lease, and come back with
    /// the next renewal that succeeds.
    pub(crate) async fn renew_streams(&self) {
        use futures_util::StreamExt;
        let mut by_key: HashMap<QuotaKey, Vec<Arc<str>>> = HashMap::new();
        for entry in &self.held {
            by_key
                .entry(entry.key.clone())
                .or_default()
                .push(Arc::clone(&entry.member));
        }
        let lease = self.config.stream_lease();
        futures_util::stream::iter(by_key)
            .for_each_concurrent(RENEW_CONCURRENCY, |(key, members)| async move {
                if let Err(err) = self.store.renew(&key, &members, lease).await {
                    tracing::warn!(error = %err, "Stream quota slots not renewed.");
                }
            })
            .await;
    }
}

/// The store's verdict as the runtime's answer, counted when it refuses.
fn refused(quota: Quota, verdict: Result<Verdict, StoreError>) -> Result<(), RuntimeError> {
    match verdict? {
        Verdict::Admitted => Ok(()),
        Verdict::Limited { retry_after } => {
            mcp_cluster_telemetry::metrics::metrics()
                .quota_rejections
                .with_label_values(&[quota.name()])
                .inc();
            tracing::debug!(quota = quota.name(), ?retry_after, "Quota exceeded.");
            Err(RuntimeError::QuotaExceeded { quota, retry_after })
        }
    }
}

/// A slot held by this node for one SSE connection or one running task:
/// renewed with the node's others while it lives, given back when
/// dropped, unless another reader took the stream over (the slot, same
/// stream, is then theirs).
#[derive(Debug)]
pub(crate) struct SlotLease {
    quotas: Arc<Quotas>,
    ticket: u64,
    /// The reader's takeover token (its `Attachment`'s): cancelled when
    /// another reader took the stream over, here or on another node.
    takeover: Option<CancellationToken>,
}

impl SlotLease {
    /// Keeps the slot when dropped after `takeover` was cancelled.
    pub(crate) fn yield_to_takeover(&mut self, takeover: CancellationToken) {
        self.takeover = Some(takeover);
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        let Some((_, held)) = self.quotas.held.remove(&self.ticket) else {
            return;
        };
        if self
            .takeover
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            // Renewed by the new reader's node from now on.
            return;
        }
        // Dropped with its connection, on a runtime thread; without one (a
        // runtime shutting down) the slot lapses with its lease.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = Arc::clone(&self.quotas.store);
            runtime.spawn(async move {
                if let Err(err) = store.release(&held.key, &held.member).await {
                    tracing::debug!(error = %err, "Stream quota slot not released; it lapses with its lease.");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_names_are_the_metric_labels() {
        let names: Vec<&str> = Quota::ALL.iter().map(|q| q.name()).collect();
        assert_eq!(names, mcp_cluster_telemetry::metrics::QUOTAS);
    }

    #[test]
    fn defaults_validate_and_a_rate_below_a_batch_does_not() {
        QuotaConfig::default().validate(64).unwrap();
        QuotaConfig::off().validate(64).unwrap();
        let small = QuotaConfig {
            requests_per_principal: 10,
            ..QuotaConfig::default()
        };
        assert!(small.validate(64).is_err());
        let short = QuotaConfig {
            stream_lease_secs: 2,
            ..QuotaConfig::default()
        };
        assert!(short.validate(64).is_err());
    }
}
