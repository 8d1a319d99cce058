//! Quotas: what one client address or one principal may take from the
//! cluster, counted in the store ([`mcp_cluster_store::QuotaStore`]) so that a
//! limit holds across every node (Redis) or on the one node (embedded).
//!
//! | quota | counted for | what | default |
//! |---|---|---|---|
//! | `initialize_per_address` | the client address of a request without a principal | new sessions (`initialize`, legacy `GET /sse`), a rate | 60 per 60 s |
//! | `requests_per_principal` | a principal | JSON-RPC requests and notifications (cancellations excepted), a rate | 1200 per 60 s |
//! | `requests_per_address` | the client address of a request without a principal | the same, and every other HTTP request (GET, DELETE, and any request refused before its body reached the pipeline), a rate | 1200 per 60 s |
//! | `sessions_per_principal` | a principal | open sessions, leases renewed with the session's idle TTL | 100 |
//! | `streams_per_principal` | a principal (the session's owner) | open GET streams, resumptions, legacy `/sse` streams, `subscriptions/listen` streams, leases renewed by the node that serves them | 100 |
//! | `streams_per_address` | the client address of a reader of a session without a principal | open GET streams, resumptions, legacy `/sse` streams, leases as above | 100 |
//! | `listen_streams_per_address` | the client address of a request without a principal | open `subscriptions/listen` streams, leases as above | 100 |
//! | `tasks_per_principal` | a principal | running tasks (task-eligible `tools/call`s while their handler runs), leases renewed by the node that runs them | 100 |
//! | `tasks_per_address` | the client address of a request without a principal | running tasks, as above | 100 |
//! | `in_flight_bytes_per_client` | the request's owner: its principal, else its client address | bytes running work holds on this node (request parameters while the handler runs, the events of its open answer stream, the questions on it); per node, not cluster-wide: the bytes are held where the request runs | 8 MiB |
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
//! An address the store found over `requests_per_address` is remembered
//! on this node until one more request would fit (the store's answer
//! cannot change sooner: other nodes' requests only push it further), so
//! that a flood from it is refused without a store call each
//! (`Runtime::over_request_rate`); the transport refuses such requests
//! before reading their bodies, and does not log each.
//!
//! Owner: the runtime's `NodeContext` holds the node's `Quotas`; the
//! cluster task renews the slot leases this node holds (streams, tasks)
//! every third of `stream_lease_secs`; each `SlotLease` (held by the follow
//! of one SSE connection, by a listen stream, or by a running task) gives
//! its slot back when dropped. A node that dies renews nothing more: its
//! slots lapse within `stream_lease_secs`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dashmap::DashMap;
use mcp_cluster_store::{
    Principal, QuotaKey, QuotaStore, Rate, SessionId, StoreError, StreamId, Verdict,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::node::error::RuntimeError;
use crate::node::follow::ReaderSignal;

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
    /// The window of `requests_per_principal` and
    /// `requests_per_address`, in seconds. Default 60.
    pub requests_window_secs: u64,
    /// Requests per client address per `requests_window_secs`, for
    /// requests without a principal (authorization off, or a token that
    /// did not pass): the JSON-RPC requests and notifications of its POSTs
    /// as `requests_per_principal` counts them, and every other HTTP
    /// request from it (GET, DELETE, and any request refused before its
    /// body reached the pipeline: malformed, bad headers, unknown session,
    /// wrong path or method, no valid token). IPv6 addresses count per
    /// /64. Default 1200, as a principal's: bursts of 1200, 20 a second
    /// sustained; at least `runtime.max_batch_items` when on.
    pub requests_per_address: u32,
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
    /// SSE streams of sessions without a principal that one client
    /// address holds open at once, cluster-wide: standalone GET streams,
    /// `Last-Event-ID` resumptions and legacy `/sse` streams, counted for
    /// the address that reads them (reconnecting to a stream it already
    /// reads takes that stream's slot over). IPv6 addresses count per /64.
    /// Default 100, as a principal's: one GET stream each for many
    /// clients behind one address, while one address cannot hold a node's
    /// connections open with streams.
    pub streams_per_address: u32,
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
    /// admitted). Default 8 MiB: two requests at the 4 MiB body limit, or
    /// thousands of ordinary ones, and a sixteenth of the node's
    /// `runtime.max_in_flight_bytes`, so that one client's dropped
    /// connections cannot hold the node's memory.
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
            requests_per_address: 1200,
            sessions_per_principal: 100,
            streams_per_principal: 100,
            streams_per_address: 100,
            listen_streams_per_address: 100,
            tasks_per_principal: 100,
            tasks_per_address: 100,
            in_flight_bytes_per_client: 8 << 20,
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
            requests_per_address: 0,
            sessions_per_principal: 0,
            streams_per_principal: 0,
            streams_per_address: 0,
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
        for (name, limit) in [
            ("requests_per_principal", self.requests_per_principal),
            ("requests_per_address", self.requests_per_address),
        ] {
            if limit != 0 && (limit as usize) < max_batch_items {
                return Err(format!(
                    "quotas.{name} must be 0 (off) or at least runtime.max_batch_items \
                     ({max_batch_items}): a longer batch could never pass"
                ));
            }
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
    /// Requests per client address without a principal (a rate).
    RequestsPerAddress,
    /// Open sessions per principal.
    SessionsPerPrincipal,
    /// Open SSE streams per principal.
    StreamsPerPrincipal,
    /// Open SSE streams of sessions without a principal per client
    /// address.
    StreamsPerAddress,
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
    pub const ALL: [Self; 10] = [
        Self::InitializePerAddress,
        Self::RequestsPerPrincipal,
        Self::RequestsPerAddress,
        Self::SessionsPerPrincipal,
        Self::StreamsPerPrincipal,
        Self::StreamsPerAddress,
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
            Self::RequestsPerAddress => "requests_per_address",
            Self::SessionsPerPrincipal => "sessions_per_principal",
            Self::StreamsPerPrincipal => "streams_per_principal",
            Self::StreamsPerAddress => "streams_per_address",
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
            Self::RequestsPerAddress => {
                "too many requests from this address (quota requests_per_address)"
            }
            Self::SessionsPerPrincipal => {
                "too many open sessions: end one (DELETE) first (quota sessions_per_principal)"
            }
            Self::StreamsPerPrincipal => {
                "too many open SSE streams: close one first (quota streams_per_principal)"
            }
            Self::StreamsPerAddress => {
                "too many open SSE streams from this address: close one first \
                 (quota streams_per_address)"
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
            | Self::RequestsPerAddress
            | Self::InFlightBytesPerClient => None,
            Self::SessionsPerPrincipal => Some(config.sessions_per_principal),
            Self::StreamsPerPrincipal => Some(config.streams_per_principal),
            Self::StreamsPerAddress => Some(config.streams_per_address),
            Self::ListenStreamsPerAddress => Some(config.listen_streams_per_address),
            Self::TasksPerPrincipal => Some(config.tasks_per_principal),
            Self::TasksPerAddress => Some(config.tasks_per_address),
        }
    }
}

pub use mcp_cluster_store::quota::address_subject;

/// Renewals of stream slots in flight at once (one per principal).
const RENEW_CONCURRENCY: usize = 32;

/// Most addresses a node remembers as over `requests_per_address` at once
/// (about 100 bytes each: a few MB at most). Past it, lapsed entries are
/// swept; an address that finds no room is not remembered, and its
/// requests ask the store, as any other's.
const MAX_OVER_RATE_ADDRESSES: usize = 50_000;

/// Sweeps of lapsed entries forced by a full memory of addresses over
/// their rate wait at least this long between runs.
const OVER_RATE_SWEEP_INTERVAL: Duration = Duration::from_millis(250);

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
    /// Addresses (IPv6: their /64) the store found over
    /// `requests_per_address`, until when one more request fits: written
    /// by [`Quotas::admit_address_requests`] when the store refuses, read
    /// (and a lapsed entry removed) by [`Quotas::address_over_rate`].
    /// Bounded by [`MAX_OVER_RATE_ADDRESSES`].
    over_rate: DashMap<IpAddr, Instant>,
    /// When lapsed entries of `over_rate` were last swept.
    last_over_rate_sweep: Mutex<Instant>,
}

impl Quotas {
    pub(crate) fn new(config: QuotaConfig, store: Arc<dyn QuotaStore>) -> Self {
        Self {
            config,
            store,
            held: DashMap::new(),
            next_ticket: AtomicU64::new(0),
            over_rate: DashMap::new(),
            last_over_rate_sweep: Mutex::new(Instant::now()),
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

    /// Counts `count` requests and notifications of the request's client:
    /// its principal (`requests_per_principal`), else its address
    /// (`requests_per_address`); nothing when neither is known.
    pub(crate) async fn admit_requests(
        &self,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
        count: usize,
    ) -> Result<(), RuntimeError> {
        match (principal, client) {
            (Some(principal), _) => self.admit_principal_requests(principal, count).await,
            (None, Some(ip)) => self.admit_address_requests(ip, count).await,
            (None, None) => Ok(()),
        }
    }

    /// Whether `requests_per_address` is on.
    pub(crate) fn counts_address_requests(&self) -> bool {
        self.config.requests_per_address != 0
    }

    /// Counts `count` requests of `client`, a request without a principal,
    /// against `requests_per_address`. While the address is known to be
    /// over it ([`Self::address_over_rate`]) the refusal costs no store
    /// call; a refusal of one request by the store is remembered until one
    /// more would fit.
    pub(crate) async fn admit_address_requests(
        &self,
        client: IpAddr,
        count: usize,
    ) -> Result<(), RuntimeError> {
        let limit = self.config.requests_per_address;
        if limit == 0 || count == 0 {
            return Ok(());
        }
        if let Some(refusal) = self.address_over_rate(client) {
            return Err(refusal);
        }
        let rate = Rate {
            limit,
            window: Duration::from_secs(self.config.requests_window_secs),
        };
        let quota = Quota::RequestsPerAddress;
        let key = QuotaKey::new(quota.name(), address_subject(client));
        let cost = u32::try_from(count).unwrap_or(u32::MAX);
        let verdict = self.store.hit(&key, cost, rate).await;
        // Only a single request's wait tells when the next one fits (a
        // batch's is longer).
        if let (1, Ok(Verdict::Limited { retry_after })) = (cost, &verdict) {
            self.remember_over_rate(client, *retry_after);
        }
        refused(quota, verdict)
    }

    /// The refusal of a request of `client` while the store is known to
    /// refuse it `requests_per_address` (it said so, and the wait it named
    /// has not passed), counted as any refusal; `None` when not known, or
    /// the quota is off: then the store is asked.
    pub(crate) fn address_over_rate(&self, client: IpAddr) -> Option<RuntimeError> {
        let retry_after = self.address_wait(client)?;
        let quota = Quota::RequestsPerAddress;
        count_refusal(quota);
        Some(RuntimeError::QuotaExceeded { quota, retry_after })
    }

    /// How long `client` is still known to be over `requests_per_address`
    /// ([`Self::address_over_rate`], without refusing anything); `None`
    /// when it is not known to be.
    pub(crate) fn address_wait(&self, client: IpAddr) -> Option<Duration> {
        if self.over_rate.is_empty() {
            return None;
        }
        let key = rate_key(client);
        let until = self.over_rate.get(&key).map(|until| *until)?;
        let now = Instant::now();
        if until <= now {
            self.over_rate.remove_if(&key, |_, until| *until <= now);
            return None;
        }
        Some(until - now)
    }

    fn remember_over_rate(&self, client: IpAddr, retry_after: Duration) {
        let key = rate_key(client);
        let now = Instant::now();
        if self.over_rate.len() >= MAX_OVER_RATE_ADDRESSES && !self.over_rate.contains_key(&key) {
            {
                let mut last = self
                    .last_over_rate_sweep
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if now.duration_since(*last) < OVER_RATE_SWEEP_INTERVAL {
                    return;
                }
                *last = now;
            }
            self.over_rate.retain(|_, until| *until > now);
            if self.over_rate.len() >= MAX_OVER_RATE_ADDRESSES {
                return;
            }
        }
        self.over_rate.insert(key, now + retry_after);
    }

    /// Counts `count` requests and notifications of `principal`.
    async fn admit_principal_requests(
        &self,
        principal: &Principal,
        count: usize,
    ) -> Result<(), RuntimeError> {
        let limit = self.config.requests_per_principal;
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

    /// Takes a stream slot of the address `client` (IPv6: its /64) for
    /// `stream`, a stream of a session without a principal, while the
    /// returned lease lives (`None` when the quota is off). Reading a
    /// stream the address already reads takes that stream's slot over.
    pub(crate) async fn acquire_address_stream(
        self: &Arc<Self>,
        client: IpAddr,
        stream: &StreamId,
    ) -> Result<Option<SlotLease>, RuntimeError> {
        self.acquire_slot(
            Quota::StreamsPerAddress,
            &address_subject(client),
            stream.as_str(),
        )
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
            count_refusal(quota);
            tracing::debug!(quota = quota.name(), ?retry_after, "Quota exceeded.");
            Err(RuntimeError::QuotaExceeded { quota, retry_after })
        }
    }
}

/// Counts a refusal by `quota` in `mcp_quota_rejections_total`.
pub(crate) fn count_refusal(quota: Quota) {
    mcp_cluster_telemetry::metrics::metrics()
        .quota_rejections
        .with_label_values(&[quota.name()])
        .inc();
}

/// The key of an address in the node's memory of addresses over their
/// rate: the address (IPv4, or IPv4 mapped into IPv6), or its /64, as
/// [`address_subject`] counts it.
fn rate_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
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
    /// The reader's signal (its `Attachment`'s): kicked when another
    /// reader took the stream over, here or on another node.
    takeover: Option<Arc<ReaderSignal>>,
}

impl SlotLease {
    /// Keeps the slot when dropped after `takeover` was kicked.
    pub(crate) fn yield_to_takeover(&mut self, takeover: Arc<ReaderSignal>) {
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
            .is_some_and(|signal| signal.is_kicked())
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
        let small = QuotaConfig {
            requests_per_address: 10,
            ..QuotaConfig::default()
        };
        assert!(small.validate(64).is_err());
    }

    #[test]
    fn addresses_over_their_rate_are_remembered_per_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(rate_key(a), rate_key(b));
        assert_ne!(rate_key(a), rate_key("2001:db8:1:3::1".parse().unwrap()));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(rate_key(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_the_store_refused_is_refused_here_until_its_wait_ends() {
        let config = QuotaConfig {
            requests_per_address: 64,
            requests_window_secs: 64,
            ..QuotaConfig::off()
        };
        let store = Arc::new(mcp_cluster_store::memory::MemoryQuotas::new());
        let quotas = Quotas::new(config, store);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        quotas.admit_address_requests(ip, 64).await.unwrap();
        assert!(quotas.address_over_rate(ip).is_none(), "not refused yet");
        let err = quotas.admit_address_requests(ip, 1).await.unwrap_err();
        assert!(matches!(
            err,
            RuntimeError::QuotaExceeded {
                quota: Quota::RequestsPerAddress,
                ..
            }
        ));
        // Remembered: refused with the store's wait, less what passed.
        tokio::time::advance(Duration::from_millis(400)).await;
        let Some(RuntimeError::QuotaExceeded { retry_after, .. }) = quotas.address_over_rate(ip)
        else {
            panic!("remembered")
        };
        assert_eq!(retry_after, Duration::from_millis(600));
        assert!(quotas.address_over_rate(other).is_none());
        // Once one more fits, the store is asked again, and admits it.
        tokio::time::advance(Duration::from_millis(600)).await;
        assert!(quotas.address_over_rate(ip).is_none());
        quotas.admit_address_requests(ip, 1).await.unwrap();
        assert!(quotas.admit_address_requests(ip, 1).await.is_err());
        // With no address or a principal, the address is not counted.
        let off = Quotas::new(
            QuotaConfig::off(),
            Arc::new(mcp_cluster_store::memory::MemoryQuotas::new()),
        );
        assert!(off.admit_address_requests(ip, 1000).await.is_ok());
    }
}
