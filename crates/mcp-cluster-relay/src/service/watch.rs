//! Resources watched for 2026-07-28 listen streams. A hosted server's
//! resources are its principals' own (its children run per principal), so
//! a listen stream's `resourceSubscriptions` are watched on the stream's
//! node by a child of the stream's principal: one per principal and node,
//! subscribed (`resources/subscribe`) to every URI that principal's
//! streams there name, for as long as one does. Its
//! `notifications/resources/updated` go to the streams naming the URI.
//!
//! A server that speaks 2026-07-28 itself (`stateless = true`) is not
//! subscribed to but listened to: its watching child holds one
//! `subscriptions/listen` request of the relay's, for every URI the
//! principal's streams name and, when one of them wants list changes, for
//! those too (its list changes then reach every stream as the pooled
//! children's do). When what the streams want changes, the child is asked
//! to listen again, and the former request is cancelled once the new one
//! is acknowledged.
//!
//! Each watcher is a task that owns its subscriptions: streams joining and
//! leaving are commands it takes one at a time, so a subscribe and an
//! unsubscribe of one URI never cross. When its last stream leaves, the
//! child ends; when the child ends (or ends its listen request), its
//! streams end (their clients listen again, and a new child watches).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::join_all;
use mcp_cluster_protocol::{ErrorObject, methods};
use mcp_cluster_runtime::{OpenError, ResourceWatch, Watching};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use super::{Children, OWN_REQUEST_TIMEOUT, Place, RelayService, lock, own_meta, subscription};
use crate::http::Who;
use crate::upstream::{Call, Event, Upstream};

/// URIs a watching child reported changed, waiting to be fanned out.
const UPDATES_QUEUE: usize = 256;

/// One principal's watching child on this node, as the relay's table of
/// children holds it.
#[derive(Debug)]
pub(super) struct Watcher {
    commands: mpsc::UnboundedSender<Command>,
    next_stream: AtomicU64,
    upstream: Arc<Upstream>,
}

impl Watcher {
    /// Its child (to end, the node stopping).
    pub(super) fn upstream(&self) -> Arc<Upstream> {
        Arc::clone(&self.upstream)
    }
}

#[derive(Debug)]
enum Command {
    /// A stream joins: subscribe what it names, answer which URIs are
    /// watched.
    Join {
        stream: u64,
        uris: BTreeSet<String>,
        lists: bool,
        updates: mpsc::Sender<String>,
        watched: oneshot::Sender<BTreeSet<String>>,
    },
    Leave(u64),
}

/// A stream's watch: it leaves when this is dropped (with the stream).
struct Joined {
    commands: mpsc::UnboundedSender<Command>,
    stream: u64,
}

impl Drop for Joined {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Leave(self.stream));
    }
}

/// One principal's turn to join its watcher: its entry in the relay's
/// table of gates is removed with the last caller waiting on it.
struct Gate<'a> {
    gates: &'a Gates,
    principal: Option<String>,
    gate: Arc<tokio::sync::Mutex<()>>,
}

/// Per principal, who joins its watcher now.
pub(super) type Gates = std::sync::Mutex<HashMap<Option<String>, Arc<tokio::sync::Mutex<()>>>>;

impl<'a> Gate<'a> {
    fn of(gates: &'a Gates, principal: Option<String>) -> Self {
        let gate = Arc::clone(lock(gates).entry(principal.clone()).or_default());
        Self {
            gates,
            principal,
            gate,
        }
    }
}

impl Drop for Gate<'_> {
    fn drop(&mut self) {
        let mut gates = lock(self.gates);
        // The table's and ours: nobody else waits.
        if Arc::strong_count(&self.gate) == 2 {
            gates.remove(&self.principal);
        }
    }
}

/// A stream the watcher sends to; `None` once it did not keep up (its
/// channel closed, which ends the stream).
struct Stream {
    uris: BTreeSet<String>,
    /// It wants list changes (a server of 2026-07-28 is listened to for
    /// them while one of its streams does).
    lists: bool,
    updates: Option<mpsc::Sender<String>>,
}

impl RelayService {
    /// [`mcp_cluster_runtime::McpService::watch_resources`] for the relay.
    pub(super) async fn watch(&self, watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        // A session-era server's list changes need no watcher: its pooled
        // children announce them outside any request.
        if watch.uris.is_empty() && !(self.config.stateless && watch.lists) {
            return Ok(None);
        }
        let gate = Gate::of(&self.watch_gates, watch.principal.clone());
        let _turn = gate.gate.lock().await;
        self.join(watch).await
    }

    /// Joins the principal's watcher, started if it has none (or its
    /// last one just ended); one caller per principal at a time.
    async fn join(&self, watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        let who = Who {
            principal: watch.principal.clone(),
            ..Who::of(&watch.caller)
        };
        for _ in 0..2 {
            let running = lock(&self.children).watchers.get(&who.principal).cloned();
            let watcher = match running {
                Some(watcher) => watcher,
                None => self.start_watcher(&who).await?,
            };
            // The newest token of the principal's, for the watcher's next
            // exchange.
            watcher.upstream.offer(&who);
            let stream = watcher.next_stream.fetch_add(1, Ordering::Relaxed);
            let (watched_tx, watched) = oneshot::channel();
            let join = Command::Join {
                stream,
                uris: watch.uris.clone(),
                lists: watch.lists,
                updates: watch.updates.clone(),
                watched: watched_tx,
            };
            if watcher.commands.send(join).is_err() {
                continue;
            }
            // An answer dropped: the watcher ended meanwhile; the next
            // turn starts another.
            if let Ok(uris) = watched.await {
                let joined = Joined {
                    commands: watcher.commands.clone(),
                    stream,
                };
                return Ok(Some(Watching::new(uris, Box::new(joined))));
            }
        }
        Err(OpenError::Failed(
            mcp_cluster_protocol::ErrorObject::internal(format!(
                "upstream {} ended while it was asked to watch resources",
                self.config.name
            )),
        ))
    }

    /// Starts the principal's watching child, counted against the same
    /// limits as every child.
    async fn start_watcher(&self, who: &Who) -> Result<Arc<Watcher>, OpenError> {
        let principal = who.principal.clone();
        self.admit(principal.as_deref())?;
        let mut place = Place {
            relay: self,
            principal: principal.clone(),
            taken: false,
        };
        let (upstream, result) = self
            .start_own(json!({}), true, who)
            .await
            .map_err(OpenError::Failed)?;
        self.remember(&result);
        let (updates_tx, updates) = mpsc::channel(UPDATES_QUEUE);
        upstream.watch_to(updates_tx);
        let (commands_tx, commands) = mpsc::unbounded_channel();
        let watcher = Arc::new(Watcher {
            commands: commands_tx,
            next_stream: AtomicU64::new(0),
            upstream: Arc::clone(&upstream),
        });
        {
            let mut children = lock(&self.children);
            children.starting = children.starting.saturating_sub(1);
            children
                .watchers
                .insert(principal.clone(), Arc::clone(&watcher));
            place.taken = true;
        }
        let feed = Feed {
            upstream,
            stateless: self.config.stateless,
            subscribed: HashMap::new(),
            listening: None,
        };
        self.runtime.handle().spawn(run(
            Arc::clone(&watcher),
            principal,
            commands,
            updates,
            feed,
            Arc::clone(&self.children),
        ));
        Ok(watcher)
    }
}

/// What a watching child is asked for: per URI, how many of its streams
/// name it; for a server of 2026-07-28, the listen request that asks.
struct Feed {
    upstream: Arc<Upstream>,
    stateless: bool,
    subscribed: HashMap<String, usize>,
    listening: Option<Listening>,
}

/// The relay's `subscriptions/listen` request to a child of 2026-07-28:
/// cancelled when dropped.
struct Listening {
    call: Call,
    /// The URIs it named.
    asked: BTreeSet<String>,
    /// Those of them the child accepted.
    uris: BTreeSet<String>,
    lists: bool,
}

impl Listening {
    /// Whether asking for `uris` (and `lists`) instead would change
    /// nothing: the child would accept what it accepted of them before,
    /// which is what it listens for now. A URI it refused, named again,
    /// is not asked for again.
    fn covers(&self, uris: &BTreeSet<String>, lists: bool) -> bool {
        self.lists == lists && uris.is_subset(&self.asked) && self.uris.is_subset(uris)
    }
}

impl Feed {
    /// A stream naming `uris` joins (`lists`: whether any stream now wants
    /// list changes): what is new is subscribed to. The URIs watched for
    /// it (those the child refused are not).
    async fn add(&mut self, uris: &BTreeSet<String>, lists: bool) -> BTreeSet<String> {
        let accepted: BTreeSet<String> = if self.stateless {
            let mut wanted: BTreeSet<String> = self.subscribed.keys().cloned().collect();
            wanted.extend(uris.iter().cloned());
            self.listen(wanted, lists).await;
            let listened = self.listening.as_ref().map(|l| &l.uris);
            uris.iter()
                .filter(|u| listened.is_some_and(|l| l.contains(*u)))
                .cloned()
                .collect()
        } else {
            let new: Vec<&String> = uris
                .iter()
                .filter(|u| !self.subscribed.contains_key(*u))
                .collect();
            let outcomes = join_all(
                new.iter()
                    .map(|uri| subscription(&self.upstream, uri, true)),
            )
            .await;
            let refused: BTreeSet<&String> = outcomes
                .iter()
                .zip(new)
                .filter(|(outcome, _)| outcome.is_err())
                .map(|(_, uri)| uri)
                .collect();
            uris.iter()
                .filter(|u| !refused.contains(u))
                .cloned()
                .collect()
        };
        for uri in &accepted {
            *self.subscribed.entry(uri.clone()).or_default() += 1;
        }
        accepted
    }

    /// A stream that named `uris` left (`lists`: whether any stream still
    /// wants list changes): the URIs no other stream names are
    /// unsubscribed from.
    async fn remove(&mut self, uris: BTreeSet<String>, lists: bool) {
        let mut gone = Vec::new();
        for uri in uris {
            if let Some(count) = self.subscribed.get_mut(&uri) {
                *count -= 1;
                if *count == 0 {
                    self.subscribed.remove(&uri);
                    gone.push(uri);
                }
            }
        }
        if self.stateless {
            let wanted = self.subscribed.keys().cloned().collect();
            self.listen(wanted, lists).await;
        } else {
            for uri in gone {
                let _ = subscription(&self.upstream, &uri, false).await;
            }
        }
    }

    /// Has a child of 2026-07-28 listen for `uris` (and list changes, with
    /// `lists`), unless it does already: a new listen request, which
    /// replaces the former once acknowledged. One the child refuses
    /// leaves the former in place.
    async fn listen(&mut self, uris: BTreeSet<String>, lists: bool) {
        if self
            .listening
            .as_ref()
            .is_some_and(|l| l.covers(&uris, lists))
        {
            return;
        }
        match listen(&self.upstream, &uris, lists).await {
            Ok(listening) => self.listening = Some(listening),
            Err(err) => tracing::warn!(
                upstream = %self.upstream.name(),
                error = %err.message,
                "The hosted server did not take the relay's subscriptions/listen request; its streams hear what it listened for before, if anything."
            ),
        }
    }

    /// Resolves when the child answers its listen request (it ends it),
    /// never while none runs.
    async fn listen_ended(&mut self) {
        match &mut self.listening {
            Some(listening) => {
                let _ = (&mut listening.call.answer).await;
                listening.call.answered();
            }
            None => std::future::pending().await,
        }
    }
}

/// Sends a child of 2026-07-28 a `subscriptions/listen` request for `uris`
/// (and every list change, with `lists`) and waits for its
/// acknowledgement: the request, and the URIs it accepted.
async fn listen(
    upstream: &Arc<Upstream>,
    uris: &BTreeSet<String>,
    lists: bool,
) -> Result<Listening, ErrorObject> {
    let mut wanted = serde_json::Map::new();
    if !uris.is_empty() {
        wanted.insert("resourceSubscriptions".into(), json!(uris));
    }
    if lists {
        for name in [
            "toolsListChanged",
            "promptsListChanged",
            "resourcesListChanged",
        ] {
            wanted.insert(name.into(), json!(true));
        }
    }
    let mut params = own_meta(json!({})).as_object().cloned().unwrap_or_default();
    params.insert("notifications".into(), Value::Object(wanted));
    let mut call = upstream
        .call(
            methods::SUBSCRIPTIONS_LISTEN,
            Some(params),
            true,
            false,
            None,
        )
        .await?;
    let name = upstream.name();
    let acknowledged = async {
        loop {
            tokio::select! {
                event = call.events.recv() => match event {
                    Some(Event::Notify(n)) if n.method == methods::NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED => {
                        return Ok(n.params.unwrap_or_default());
                    }
                    Some(_) => {}
                    None => return Err(ErrorObject::internal(format!("upstream {name} ended"))),
                },
                answer = &mut call.answer => {
                    return Err(match answer {
                        Ok(Err(err)) => err,
                        _ => ErrorObject::internal(format!(
                            "upstream {name} ended its subscriptions/listen request at once"
                        )),
                    });
                }
            }
        }
    };
    let ack = tokio::time::timeout(OWN_REQUEST_TIMEOUT, acknowledged)
        .await
        .map_err(|_| {
            ErrorObject::internal(format!(
                "upstream {name} did not acknowledge subscriptions/listen"
            ))
        })??;
    // What else the child sends within the request concerns every
    // listener: it takes the way of its other notifications.
    call.events.close();
    let accepted = ack
        .get("notifications")
        .and_then(|n| n.get("resourceSubscriptions"))
        .and_then(Value::as_array)
        .map(|listed| {
            listed
                .iter()
                .filter_map(Value::as_str)
                .filter(|u| uris.contains(*u))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok(Listening {
        call,
        asked: uris.clone(),
        uris: accepted,
        lists,
    })
}

/// The watcher's task: takes streams joining and leaving, fans out the
/// child's updates, and ends with the child, its listen request, or its
/// last stream.
async fn run(
    watcher: Arc<Watcher>,
    principal: Option<String>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut updates: mpsc::Receiver<String>,
    mut feed: Feed,
    children: Arc<std::sync::Mutex<Children>>,
) {
    let upstream = Arc::clone(&watcher.upstream);
    let mut streams: HashMap<u64, Stream> = HashMap::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Join { stream, uris, lists, updates, watched }) => {
                    let any_lists = lists || streams.values().any(|s| s.lists);
                    let uris = feed.add(&uris, any_lists).await;
                    streams.insert(stream, Stream { uris: uris.clone(), lists, updates: Some(updates) });
                    // Its listen request gone meanwhile: it leaves at once.
                    if watched.send(uris).is_err() && leave(&mut feed, &mut streams, stream).await {
                        break;
                    }
                }
                Some(Command::Leave(stream)) => {
                    if leave(&mut feed, &mut streams, stream).await {
                        break;
                    }
                }
                None => break,
            },
            Some(uri) = updates.recv() => {
                for stream in streams.values_mut() {
                    if stream.uris.contains(&uri)
                        && let Some(updates) = &stream.updates
                        && updates.try_send(uri.clone()).is_err()
                    {
                        // A stream that does not keep up ends.
                        stream.updates = None;
                    }
                }
            }
            () = feed.listen_ended() => break,
            () = upstream.gone_wait() => break,
        }
    }
    {
        let mut children = lock(&children);
        if children
            .watchers
            .get(&principal)
            .is_some_and(|w| Arc::ptr_eq(w, &watcher))
        {
            children.watchers.remove(&principal);
        }
        RelayService::release(&mut children, principal.as_deref());
    }
    upstream.end();
    // Streams still joined (the child ended under them) end as their
    // channels close here; a stream joining now hears no answer.
    drop(streams);
    commands.close();
}

/// A stream leaves: what no other stream wants is unsubscribed from.
/// Whether it was the last one (the child then ends, unsubscribing
/// nothing).
async fn leave(feed: &mut Feed, streams: &mut HashMap<u64, Stream>, stream: u64) -> bool {
    if let Some(left) = streams.remove(&stream)
        && !streams.is_empty()
    {
        let lists = streams.values().any(|s| s.lists);
        feed.remove(left.uris, lists).await;
    }
    streams.is_empty()
}
