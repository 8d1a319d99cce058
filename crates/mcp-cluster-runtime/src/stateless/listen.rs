//! `subscriptions/listen` (2026-07-28): long-lived streams of the change
//! notifications a client opted in to.
//!
//! Each node keeps the listen streams its clients opened (`Listeners`). A
//! server event raised on any node reaches every node through the control
//! bus (as it reaches the session-era sessions), and each node hands it to
//! its own streams whose filter wants it, tagged with the stream's
//! subscription id. A stream whose client does not keep up (its buffer of
//! [`LISTEN_BUFFER`] messages full) is closed rather than allowed to grow:
//! the client listens again and re-reads what it caches.
//!
//! A stream may also follow tasks (the tasks extension's `taskIds`): the
//! node reads each followed task from the store once per poll interval
//! (`followed.rs`) and sends `notifications/tasks`, the task as `tasks/get`
//! gives it, whenever that changed, until the task ends. Reading the
//! store, not events, works whichever node runs the task.

use mcp_cluster_protocol::methods::meta;
use mcp_cluster_protocol::{ErrorObject, Message, Notification, Request, Response, methods};
use mcp_cluster_store::StreamId;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::node::error::RuntimeError;
use crate::node::quota::{Quota, address_subject};
use crate::node::registry::{Member, Registry};
use crate::request::call::Inbound;
use crate::request::exchange::ExchangeReply;
use crate::request::service::{ResourceWatch, ServerEvent};
use crate::stateless::tasks;
use crate::stateless::{RequestMeta, Stateless, StatelessReply};

/// Messages a listen stream holds for a slow client before it is closed.
pub const LISTEN_BUFFER: usize = 64;

/// What a listen stream asked for (and the server agreed to).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListenFilter {
    /// `notifications/tools/list_changed`.
    pub tools: bool,
    /// `notifications/prompts/list_changed`.
    pub prompts: bool,
    /// `notifications/resources/list_changed`.
    pub resources: bool,
    /// `notifications/resources/updated` for these URIs.
    pub uris: BTreeSet<String>,
    /// `notifications/tasks` for these tasks (the tasks extension).
    pub task_ids: BTreeSet<String>,
}

impl ListenFilter {
    fn wants(&self, event: &ServerEvent) -> bool {
        match event {
            ServerEvent::ToolsListChanged => self.tools,
            ServerEvent::PromptsListChanged => self.prompts,
            ServerEvent::ResourcesListChanged => self.resources,
            ServerEvent::ResourceUpdated { uri } => self.uris.contains(uri),
        }
    }

    /// The filter as the acknowledgement states it.
    fn to_json(&self) -> Value {
        let mut out = Map::new();
        for (on, name) in [
            (self.tools, "toolsListChanged"),
            (self.prompts, "promptsListChanged"),
            (self.resources, "resourcesListChanged"),
        ] {
            if on {
                out.insert(name.into(), json!(true));
            }
        }
        if !self.uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        if !self.task_ids.is_empty() {
            out.insert("taskIds".into(), json!(self.task_ids));
        }
        Value::Object(out)
    }
}

/// A listen stream, as the node registry holds it.
#[derive(Debug)]
pub(crate) struct Listener {
    filter: ListenFilter,
    /// The `subscriptions/listen` request id, as JSON.
    subscription: Value,
    tx: mpsc::Sender<Arc<str>>,
}

/// The listen streams open on this node: the 2026-07-28 era's side of the
/// node registry (`node/registry.rs`), bounded by
/// `max_listen_streams`.
pub(crate) type Listeners = Registry<StreamId, Listener>;

impl Member for Listener {
    type Event = ServerEvent;

    /// Streams the event if the filter wants it; a stream whose client
    /// does not keep up (its buffer full) leaves, which closes it.
    fn hear(&self, event: &ServerEvent) -> bool {
        !self.filter.wants(event)
            || self
                .tx
                .try_send(notification(event, &self.subscription))
                .is_ok()
    }

    fn is_alive(&self) -> bool {
        !self.tx.is_closed()
    }
}

fn with_subscription(params: &mut Map<String, Value>, subscription: &Value) {
    params.insert("_meta".into(), subscription_meta(subscription));
}

fn subscription_meta(subscription: &Value) -> Value {
    let mut m = Map::new();
    m.insert(meta::SUBSCRIPTION_ID.into(), subscription.clone());
    Value::Object(m)
}

/// The notification of `event` on the listen stream `subscription`.
fn notification(event: &ServerEvent, subscription: &Value) -> Arc<str> {
    let meta = subscription_meta(subscription);
    Arc::from(Message::Notification(event.notification(Some(meta))).to_json())
}

/// The next URI a watch reports; never, without a watch.
async fn next_update(updates: Option<&mut mpsc::Receiver<String>>) -> Option<String> {
    match updates {
        Some(updates) => updates.recv().await,
        None => std::future::pending().await,
    }
}

impl Stateless {
    /// Reads the filter of a `subscriptions/listen` request and keeps what
    /// this server can honour.
    fn listen_filter(
        &self,
        request: &Request,
        meta: &RequestMeta,
    ) -> Result<ListenFilter, ErrorObject> {
        let params = request.params.as_ref();
        let wanted = match params.and_then(|p| p.get("notifications")) {
            None => &Value::Object(Map::new()),
            Some(v @ Value::Object(_)) => v,
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "notifications must be an object",
                ));
            }
        };
        let flag = |name: &str| wanted.get(name).and_then(Value::as_bool) == Some(true);
        let caps = self.service().capabilities();
        let list_changed = |c: Option<&mcp_cluster_protocol::types::ListChanged>| {
            c.and_then(|c| c.list_changed) == Some(true)
        };
        let resources_list = caps.resources.as_ref().and_then(|r| r.list_changed) == Some(true);
        let subscribable = caps.resources.as_ref().and_then(|r| r.subscribe) == Some(true);
        let mut filter = ListenFilter {
            tools: flag("toolsListChanged") && list_changed(caps.tools.as_ref()),
            prompts: flag("promptsListChanged") && list_changed(caps.prompts.as_ref()),
            resources: flag("resourcesListChanged") && resources_list,
            uris: BTreeSet::new(),
            task_ids: BTreeSet::new(),
        };
        match wanted.get("resourceSubscriptions") {
            None | Some(Value::Null) => {}
            Some(Value::Array(uris)) => {
                let config = self.config();
                if uris.len() > config.max_subscriptions_per_session {
                    return Err(ErrorObject::invalid_params(format!(
                        "resourceSubscriptions lists {} URIs; this server accepts at most {}",
                        uris.len(),
                        config.max_subscriptions_per_session
                    )));
                }
                for uri in uris {
                    let Some(uri) = uri.as_str() else {
                        return Err(ErrorObject::invalid_params(
                            "resourceSubscriptions must be strings",
                        ));
                    };
                    config.check_uri_len(uri)?;
                    // Honoured only for resources the server can read.
                    if subscribable && self.service().has_resource(uri) {
                        filter.uris.insert(uri.to_owned());
                    }
                }
            }
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "resourceSubscriptions must be an array of URIs",
                ));
            }
        }
        filter.task_ids = self.listen_task_ids(wanted, meta)?;
        Ok(filter)
    }

    /// The `taskIds` a listen asks to follow (checked, not yet looked up):
    /// at most `max_subscriptions_per_session` ids of a client that
    /// declared the tasks extension (-32021 otherwise, as the extension
    /// says).
    fn listen_task_ids(
        &self,
        wanted: &Value,
        meta: &RequestMeta,
    ) -> Result<BTreeSet<String>, ErrorObject> {
        let ids = match wanted.get("taskIds") {
            None | Some(Value::Null) => return Ok(BTreeSet::new()),
            Some(Value::Array(ids)) => ids,
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "taskIds must be an array of task ids",
                ));
            }
        };
        if ids.is_empty() {
            return Ok(BTreeSet::new());
        }
        if !tasks::declares_extension(&meta.capabilities) {
            return Err(tasks::extension_required());
        }
        let max = self.config().max_subscriptions_per_session;
        if ids.len() > max {
            return Err(ErrorObject::invalid_params(format!(
                "taskIds lists {} tasks; this server follows at most {max} per stream",
                ids.len()
            )));
        }
        ids.iter()
            .map(|id| match id.as_str() {
                Some(id) if !id.is_empty() && id.len() <= tasks::MAX_TASK_ID => Ok(id.to_owned()),
                _ => Err(ErrorObject::invalid_params(
                    "taskIds must hold task ids (1-128 bytes)",
                )),
            })
            .collect()
    }

    /// The tasks of `ids` that `principal` may follow: unknown and other
    /// principals' tasks are left out.
    async fn followable_tasks(
        &self,
        ids: &BTreeSet<String>,
        principal: Option<&str>,
    ) -> BTreeSet<String> {
        let mut found = BTreeSet::new();
        for id in ids {
            let get = Request::new(
                mcp_cluster_protocol::RequestId::Number(0),
                methods::TASKS_GET,
                json!({ "taskId": id }),
            );
            if self.task_method(&get, principal).await.is_ok() {
                found.insert(id.clone());
            }
        }
        found
    }

    /// `subscriptions/listen`: acknowledges, then streams the notifications
    /// the filter wants until the client closes the stream or the node
    /// drains (then it answers the request, a graceful end).
    pub(crate) async fn listen(
        &self,
        request: Request,
        meta: &RequestMeta,
        inbound: &Inbound,
    ) -> StatelessReply {
        let id = request.id.clone();
        let filter = match self.listen_filter(&request, meta) {
            Ok(filter) => filter,
            Err(err) => return StatelessReply::Now(Response::error(Some(id), err)),
        };
        let listeners = Arc::clone(self.listeners());
        // A place among the node's listen streams, held while the quota is
        // asked: concurrent listens cannot overshoot the maximum.
        let Some(place) = listeners.reserve() else {
            return StatelessReply::Refused(
                RuntimeError::NodeFull(crate::node::error::NodeFull::ListenStreams),
                id,
            );
        };
        // A slot of the principal's streams, or without one of its
        // address's listen streams: the client's share of the node bound.
        let stream = StreamId::random();
        let quotas = &self.node().quotas;
        let slot = match (inbound.principal.as_deref(), inbound.client_ip) {
            (Some(principal), _) => quotas.acquire_stream(&principal.key(), &stream).await,
            (None, Some(ip)) => {
                quotas
                    .acquire_slot(
                        Quota::ListenStreamsPerAddress,
                        &address_subject(ip),
                        stream.as_str(),
                    )
                    .await
            }
            (None, None) => Ok(None),
        };
        let lease = match slot {
            Ok(lease) => lease,
            Err(err) => return StatelessReply::Refused(err, id),
        };
        // Resources the service watches itself (a hosted server's, per
        // principal) come from its watch, not from the node's events.
        let mut filter = filter;
        let mut watched = None;
        let lists = filter.tools || filter.prompts || filter.resources;
        if !filter.uris.is_empty() || lists {
            let (updates, updates_rx) = mpsc::channel(LISTEN_BUFFER);
            let watch = ResourceWatch::new(
                inbound.principal.as_deref().map(|p| p.key()),
                filter.uris.clone(),
                updates,
            )
            .with_lists(lists)
            .with_caller(crate::request::context::Caller::of(inbound));
            match self.service().watch_resources(watch).await {
                Ok(None) => {}
                Ok(Some(watching)) => {
                    filter.uris.clone_from(&watching.uris);
                    watched = Some((watching, updates_rx));
                }
                Err(err) => {
                    return match err.into_refusal() {
                        Ok(refused) => StatelessReply::Refused(refused, id),
                        Err(err) => StatelessReply::Now(Response::error(Some(id), err)),
                    };
                }
            }
        }
        // Only the tasks this client may read are followed, and said so.
        let principal = inbound
            .principal
            .as_deref()
            .map(mcp_cluster_store::Principal::key);
        if !filter.task_ids.is_empty() {
            filter.task_ids = self
                .followable_tasks(&filter.task_ids, principal.as_deref())
                .await;
        }
        let following = std::mem::take(&mut filter.task_ids);
        let subscription = serde_json::to_value(&id).unwrap_or(Value::Null);
        let (tx, rx) = mpsc::channel(LISTEN_BUFFER);
        let mut ack = Map::new();
        with_subscription(&mut ack, &subscription);
        let agreed = ListenFilter {
            task_ids: following.clone(),
            ..filter.clone()
        };
        ack.insert("notifications".into(), agreed.to_json());
        let ack = Notification::new(
            methods::NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED,
            Value::Object(ack),
        );
        // The acknowledgement is the first message: in the channel before
        // the stream can receive any event.
        let _ = tx.try_send(Arc::from(Message::Notification(ack).to_json()));
        // The listener holds the only sender: when it goes (closed for not
        // keeping up, or after the graceful end) the stream ends.
        let weak = tx.downgrade();
        if watched.is_some() {
            // Heard from the watch alone: the node's events would repeat it.
            filter.uris.clear();
        }
        place.fill(
            stream.clone(),
            Listener {
                filter,
                subscription: subscription.clone(),
                tx,
            },
        );
        let gauge = mcp_cluster_telemetry::metrics::metrics()
            .sse_streams_open
            .with_label_values(&["listen"]);
        gauge.inc();
        let cancel = CancellationToken::new();
        let closed = cancel.clone();
        let drain = self.drain_token();
        if !following.is_empty() {
            let follower = crate::stateless::followed::Follower {
                stream: stream.clone(),
                subscription: subscription.clone(),
                tx: weak.clone(),
                closed: cancel.clone(),
            };
            self.followed().follow(
                self,
                principal.as_deref().unwrap_or_default(),
                &following,
                &follower,
            );
        }
        let era = self.clone();
        actix::spawn(async move {
            let _lease = lease;
            let (_watching, mut updates) = watched.unzip();
            let graceful = loop {
                tokio::select! {
                    () = closed.cancelled() => break false,
                    () = drain.cancelled() => break true,
                    // The watch ended (or never was): no more updates, and
                    // the stream ends with it.
                    update = next_update(updates.as_mut()) => {
                        let Some(uri) = update else { break false };
                        let event = ServerEvent::ResourceUpdated { uri };
                        // A client that does not keep up loses the stream,
                        // as with the node's events.
                        let sent = weak
                            .upgrade()
                            .is_some_and(|tx| tx.try_send(notification(&event, &subscription)).is_ok());
                        if !sent {
                            break false;
                        }
                    }
                }
            };
            if let (true, Some(tx)) = (graceful, weak.upgrade()) {
                let mut result = Map::new();
                result.insert("resultType".into(), json!("complete"));
                with_subscription(&mut result, &subscription);
                let end = Response::result(id, Value::Object(result));
                let _ = tx.try_send(Arc::from(Message::Response(end).to_json()));
            }
            listeners.remove(&stream);
            era.followed().unfollow(&stream);
            gauge.dec();
        });
        let (reply_tx, reply) = oneshot::channel();
        let _ = reply_tx.send(ExchangeReply::Live(rx));
        StatelessReply::Running {
            reply,
            guard: crate::stateless::RequestGuard::token(cancel),
        }
    }
}
