//! Resources watched for 2026-07-28 listen streams. A hosted server's
//! resources are its principals' own (its children run per principal), so
//! a listen stream's `resourceSubscriptions` are watched on the stream's
//! node by a child of the stream's principal: one per principal and node,
//! subscribed (`resources/subscribe`) to every URI that principal's
//! streams there name, for as long as one does. Its
//! `notifications/resources/updated` go to the streams naming the URI.
//!
//! Each watcher is a task that owns its subscriptions: streams joining and
//! leaving are commands it takes one at a time, so a subscribe and an
//! unsubscribe of one URI never cross. When its last stream leaves, the
//! child ends; when the child ends, its streams end (their clients listen
//! again, and a new child watches).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::join_all;
use mcp_cluster_runtime::{OpenError, ResourceWatch, Watching};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::{Children, Place, RelayService, lock, subscription};
use crate::upstream::Upstream;

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
    updates: Option<mpsc::Sender<String>>,
}

impl RelayService {
    /// [`mcp_cluster_runtime::McpService::watch_resources`] for the relay.
    pub(super) async fn watch(&self, watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        // A server of 2026-07-28 is not subscribed to: it would be told
        // through its own listen streams, which the relay does not open.
        // The acknowledgement then names no resource.
        if self.config.stateless {
            return Ok(Some(Watching::new(BTreeSet::new(), Box::new(()))));
        }
        let gate = Gate::of(&self.watch_gates, watch.principal.clone());
        let _turn = gate.gate.lock().await;
        self.join(watch).await
    }

    /// Joins the principal's watcher, started if it has none (or its
    /// last one just ended); one caller per principal at a time.
    async fn join(&self, watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        let principal = watch.principal.clone();
        for _ in 0..2 {
            let running = lock(&self.children).watchers.get(&principal).cloned();
            let watcher = match running {
                Some(watcher) => watcher,
                None => self.start_watcher(principal.clone()).await?,
            };
            let stream = watcher.next_stream.fetch_add(1, Ordering::Relaxed);
            let (watched_tx, watched) = oneshot::channel();
            let join = Command::Join {
                stream,
                uris: watch.uris.clone(),
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
    async fn start_watcher(&self, principal: Option<String>) -> Result<Arc<Watcher>, OpenError> {
        self.admit(principal.as_deref())?;
        let mut place = Place {
            relay: self,
            principal: principal.clone(),
            taken: false,
        };
        let (upstream, result) = self
            .start_own(json!({}), true)
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
        self.runtime.handle().spawn(run(
            Arc::clone(&watcher),
            principal,
            commands,
            updates,
            Arc::clone(&self.children),
        ));
        Ok(watcher)
    }
}

/// The watcher's task: takes streams joining and leaving, fans out the
/// child's updates, and ends with the child or its last stream.
async fn run(
    watcher: Arc<Watcher>,
    principal: Option<String>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    mut updates: mpsc::Receiver<String>,
    children: Arc<std::sync::Mutex<Children>>,
) {
    let upstream = Arc::clone(&watcher.upstream);
    let mut subscribed: HashMap<String, usize> = HashMap::new();
    let mut streams: HashMap<u64, Stream> = HashMap::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Join { stream, uris, updates, watched }) => {
                    let new: Vec<&String> = uris.iter().filter(|u| !subscribed.contains_key(*u)).collect();
                    let refused: BTreeSet<String> = join_all(new.iter().map(|uri| subscription(&upstream, uri, true)))
                        .await
                        .into_iter()
                        .zip(new)
                        .filter(|(outcome, _)| outcome.is_err())
                        .map(|(_, uri)| uri.clone())
                        .collect();
                    let uris: BTreeSet<String> = uris.difference(&refused).cloned().collect();
                    for uri in &uris {
                        *subscribed.entry(uri.clone()).or_default() += 1;
                    }
                    streams.insert(stream, Stream { uris: uris.clone(), updates: Some(updates) });
                    // Its listen request gone meanwhile: it leaves at once.
                    if watched.send(uris).is_err() && leave(&upstream, &mut streams, &mut subscribed, stream).await {
                        break;
                    }
                }
                Some(Command::Leave(stream)) => {
                    if leave(&upstream, &mut streams, &mut subscribed, stream).await {
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

/// A stream leaves: the URIs no other stream names are unsubscribed.
/// Whether it was the last one (the child then ends, unsubscribing
/// nothing).
async fn leave(
    upstream: &Arc<Upstream>,
    streams: &mut HashMap<u64, Stream>,
    subscribed: &mut HashMap<String, usize>,
    stream: u64,
) -> bool {
    if let Some(left) = streams.remove(&stream)
        && !streams.is_empty()
    {
        for uri in left.uris {
            if let Some(count) = subscribed.get_mut(&uri) {
                *count -= 1;
                if *count == 0 {
                    subscribed.remove(&uri);
                    let _ = subscription(upstream, &uri, false).await;
                }
            }
        }
    }
    streams.is_empty()
}
