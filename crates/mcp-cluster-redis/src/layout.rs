//! Following a Redis Cluster's layout: which member serves which slots.
//!
//! The cluster client learns a new layout only when a command of its own
//! is redirected (`MOVED`). After a shard's failover it is not: a command
//! for the dead primary's slots falls back to the other member of that
//! shard, which is the new primary and answers, so the client goes on
//! counting the dead member as the primary and tries to reconnect to it for
//! as long as the process lives (each try a connection attempt and, when
//! something else answers at that address, a command timeout), and its
//! pub/sub client keeps that shard's subscriptions on it.
//!
//! So a task reads the layout (`CLUSTER SLOTS`, from any member) every
//! [`LAYOUT_INTERVAL`]. When it differs from the one the connections were
//! made for, twice in a row (while a failover settles, members disagree),
//! the members it lists become the seeds
//! ([`ClusterSeeds::follow`]), a new command connection made from them
//! replaces the old one (commands already sent on the old one finish
//! there), and the pub/sub connection, told through
//! [`ClusterSeeds::layout_changes`], replaces itself. A member that left
//! the layout is never connected to again.
//!
//! The layout is read through the command connection, so a connection
//! that answers nothing cannot show that it should be made again: after a
//! failover, a client whose members still named the dead primary for a
//! moment can wedge in its own recovery, every command (the layout's read
//! too) timing out for many seconds while the cluster is fine again. A
//! connection that fails [`STUCK_READS`] reads in a row is therefore made
//! again from the seeds (the members of the last layout followed), as a
//! changed layout would make it.
//!
//! Owner and stop path: [`spawn`] starts the task with a weak reference to
//! the command connection; it ends at the first tick after the store (the
//! last [`crate::connection`] handle) is dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::Value;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use tracing::{debug, info};

use crate::replica_wait::Barrier;
use crate::target::ClusterSeeds;

/// How often the layout is read.
pub(crate) const LAYOUT_INTERVAL: Duration = Duration::from_secs(1);

/// Layout reads failed in a row after which the command connection is
/// made again.
pub(crate) const STUCK_READS: u32 = 2;

/// What the layout task does after one read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Nothing: the layout is the one followed, or a new one was read once.
    Wait,
    /// Follow this new layout (read twice in a row).
    Follow(Layout),
    /// Make the command connection again: it failed [`STUCK_READS`] reads
    /// in a row.
    Reconnect,
}

/// The layout task's memory between reads.
#[derive(Debug, Default)]
struct Watch {
    /// A new layout read once: while a failover settles, members answer
    /// with the old layout or the new one; it is followed only when read
    /// twice in a row, so the connections are not made again for each
    /// answer that disagrees.
    seen: Option<Layout>,
    /// Reads failed in a row.
    failed: u32,
}

impl Watch {
    /// The step after a read that gave `read` (`None`: it failed or timed
    /// out); `followed` tells whether a layout is the one followed.
    fn after(&mut self, read: Option<Layout>, followed: impl Fn(&Layout) -> bool) -> Step {
        let Some(layout) = read else {
            self.failed += 1;
            if self.failed >= STUCK_READS {
                self.failed = 0;
                self.seen = None;
                return Step::Reconnect;
            }
            return Step::Wait;
        };
        self.failed = 0;
        if followed(&layout) {
            self.seen = None;
            return Step::Wait;
        }
        if self.seen.as_ref() == Some(&layout) {
            self.seen = None;
            return Step::Follow(layout);
        }
        self.seen = Some(layout);
        Step::Wait
    }
}

/// One slot range and the members serving it, the primary first (as
/// `CLUSTER SLOTS` lists them).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct SlotRange {
    pub(crate) start: u16,
    pub(crate) end: u16,
    /// `host:port` of each member, the primary first.
    pub(crate) members: Vec<(String, u16)>,
}

/// A Redis Cluster's layout: its slot ranges in order. Two layouts are
/// the same when each range has the same primary: a replica that joins,
/// leaves or catches up changes where no command goes, and is no reason
/// to make the connections again.
#[derive(Debug, Clone)]
pub(crate) struct Layout(pub(crate) Vec<SlotRange>);

impl PartialEq for Layout {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(&other.0).all(|(a, b)| {
                a.start == b.start && a.end == b.end && a.members.first() == b.members.first()
            })
    }
}

impl Eq for Layout {}

impl Layout {
    /// Parses a `CLUSTER SLOTS` reply. `None` for a reply of another shape,
    /// or one naming a member without an address (a member that announces
    /// none is reached at the address the client used; the layout is then
    /// not followed).
    pub(crate) fn parse(reply: &Value) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut layout = Vec::with_capacity(ranges.len());
        for range in ranges {
            let Value::Array(fields) = range else {
                return None;
            };
            let mut fields = fields.iter();
            let start = int(fields.next()?)?;
            let end = int(fields.next()?)?;
            let mut members = Vec::new();
            for member in fields {
                let Value::Array(parts) = member else {
                    return None;
                };
                let host = text(parts.first()?)?;
                let port = int(parts.get(1)?)?;
                if host.is_empty() || host == "?" {
                    return None;
                }
                members.push((host, port));
            }
            if members.is_empty() {
                return None;
            }
            // Members list the replicas in no fixed order: two members'
            // answers about one layout must compare equal.
            members[1..].sort();
            layout.push(SlotRange {
                start,
                end,
                members,
            });
        }
        layout.sort();
        Some(Self(layout))
    }

    /// Every member, each once, in order.
    pub(crate) fn members(&self) -> Vec<(String, u16)> {
        let mut members: Vec<(String, u16)> = self
            .0
            .iter()
            .flat_map(|range| range.members.iter().cloned())
            .collect();
        members.sort();
        members.dedup();
        members
    }
}

fn int(value: &Value) -> Option<u16> {
    match value {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// The command connection on a Redis Cluster: replaced when the layout
/// changes.
pub(crate) struct ClusterCommands {
    /// Read (a clone, no await under the lock) for each command; written
    /// by the layout task. With the group commit of the kept writes sent
    /// on it ([`crate::replica_wait`]), replaced with it.
    current: RwLock<(ClusterConnection, Arc<Barrier>)>,
}

impl ClusterCommands {
    pub(crate) fn new(connection: ClusterConnection) -> Self {
        Self {
            current: RwLock::new((connection, Arc::default())),
        }
    }

    /// The connection to send a command on (cheap: a handle).
    pub(crate) fn get(&self) -> ClusterConnection {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .clone()
    }

    /// The connection to send a kept write on, and its group commit.
    pub(crate) fn get_kept(&self) -> (ClusterConnection, Arc<Barrier>) {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        (current.0.clone(), Arc::clone(&current.1))
    }

    fn replace(&self, connection: ClusterConnection) {
        *self.current.write().unwrap_or_else(PoisonError::into_inner) =
            (connection, Arc::default());
    }
}

/// Reads the layout through `commands`, bounded by `timeout`.
pub(crate) async fn read(commands: &ClusterCommands, timeout: Duration) -> Option<Layout> {
    let mut connection = commands.get();
    let slots = connection.route_command(
        redis::cmd("CLUSTER").arg("SLOTS").clone(),
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
    );
    match tokio::time::timeout(timeout, slots).await {
        Ok(Ok(reply)) => Layout::parse(&reply),
        Ok(Err(err)) => {
            debug!(%err, "The Redis Cluster layout could not be read.");
            None
        }
        Err(_) => None,
    }
}

/// Starts the task that follows the layout (see the module doc); `trouble`
/// is bumped when it changed (session leases granted before are not
/// trusted then).
pub(crate) fn spawn(
    commands: Weak<ClusterCommands>,
    seeds: Arc<ClusterSeeds>,
    timeout: Duration,
    trouble: Arc<AtomicU64>,
) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(LAYOUT_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut watch = Watch::default();
        loop {
            tick.tick().await;
            let Some(commands) = commands.upgrade() else {
                return;
            };
            let read = read(&commands, timeout).await;
            let reason = match watch.after(read, |layout| seeds.is_followed(layout)) {
                Step::Wait => continue,
                Step::Follow(layout) => {
                    if !seeds.follow(&layout) {
                        continue;
                    }
                    trouble.fetch_add(1, Ordering::AcqRel);
                    "layout"
                }
                Step::Reconnect => "stuck",
            };
            reconnect(&commands, &seeds, timeout, reason).await;
        }
    });
}

/// Makes the command connection again from the seeds; `reason`: `layout`
/// (a new layout is followed) or `stuck` (the connection answered no read
/// of the layout [`STUCK_READS`] times in a row).
async fn reconnect(
    commands: &ClusterCommands,
    seeds: &ClusterSeeds,
    timeout: Duration,
    reason: &'static str,
) {
    let client = match seeds.client(None) {
        Ok(client) => client,
        Err(err) => {
            debug!(%err, "No client for the Redis Cluster's members.");
            seeds.unfollow();
            return;
        }
    };
    match tokio::time::timeout(timeout, client.get_async_connection()).await {
        Ok(Ok(connection)) => {
            commands.replace(connection);
            if reason == "layout" {
                info!("The Redis Cluster's layout changed; the connections follow it.");
            } else {
                info!("The Redis Cluster connection answered nothing; it was made again.");
            }
            mcp_cluster_telemetry::metrics::metrics()
                .redis_reconnects
                .with_label_values(&[reason])
                .inc();
        }
        Ok(Err(err)) => {
            debug!(%err, "A connection to the Redis Cluster's members failed; trying again.");
            seeds.unfollow();
        }
        Err(_) => seeds.unfollow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn range(start: i64, end: i64, members: Vec<Value>) -> Value {
        let mut fields = vec![Value::Int(start), Value::Int(end)];
        fields.extend(members);
        Value::Array(fields)
    }

    #[test]
    fn parses_ranges_in_order_and_lists_each_member_once() {
        let reply = Value::Array(vec![
            range(
                8192,
                16383,
                vec![member("127.0.0.1", 7002), member("127.0.0.1", 7003)],
            ),
            range(
                0,
                8191,
                vec![member("127.0.0.1", 7000), member("127.0.0.1", 7002)],
            ),
        ]);
        let layout = Layout::parse(&reply).unwrap();
        assert_eq!(layout.0[0].start, 0);
        assert_eq!(layout.0[1].members[0], ("127.0.0.1".to_owned(), 7002));
        assert_eq!(
            layout.members(),
            vec![
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7002),
                ("127.0.0.1".to_owned(), 7003)
            ]
        );
        // The replicas in another order: the same layout.
        let reordered = Value::Array(vec![
            range(
                0,
                8191,
                vec![
                    member("127.0.0.1", 7000),
                    member("127.0.0.1", 7004),
                    member("127.0.0.1", 7002),
                ],
            ),
            range(
                8192,
                16383,
                vec![member("127.0.0.1", 7002), member("127.0.0.1", 7003)],
            ),
        ]);
        let with_two = Value::Array(vec![
            range(
                0,
                8191,
                vec![
                    member("127.0.0.1", 7000),
                    member("127.0.0.1", 7002),
                    member("127.0.0.1", 7004),
                ],
            ),
            range(
                8192,
                16383,
                vec![member("127.0.0.1", 7002), member("127.0.0.1", 7003)],
            ),
        ]);
        assert_eq!(Layout::parse(&reordered), Layout::parse(&with_two));
        // A replica more or less: the same layout.
        assert_eq!(Layout::parse(&with_two).unwrap(), layout);
        // A promoted replica is another layout.
        let promoted = Value::Array(vec![
            range(0, 8191, vec![member("127.0.0.1", 7002)]),
            range(
                8192,
                16383,
                vec![member("127.0.0.1", 7002), member("127.0.0.1", 7003)],
            ),
        ]);
        assert_ne!(Layout::parse(&promoted).unwrap(), layout);
    }

    fn one_range(primary: i64) -> Layout {
        Layout::parse(&Value::Array(vec![range(
            0,
            16383,
            vec![member("127.0.0.1", primary)],
        )]))
        .unwrap()
    }

    #[test]
    fn a_new_layout_is_followed_once_read_twice_in_a_row() {
        let old = one_range(7000);
        let new = one_range(7001);
        let followed = |l: &Layout| *l == old;
        let mut watch = Watch::default();
        assert_eq!(watch.after(Some(old.clone()), followed), Step::Wait);
        assert_eq!(watch.after(Some(new.clone()), followed), Step::Wait);
        // Members still disagree: the old one again, then the new once.
        assert_eq!(watch.after(Some(old.clone()), followed), Step::Wait);
        assert_eq!(watch.after(Some(new.clone()), followed), Step::Wait);
        assert_eq!(watch.after(Some(new.clone()), followed), Step::Follow(new));
    }

    #[test]
    fn a_connection_that_answers_no_read_twice_is_made_again() {
        let old = one_range(7000);
        let followed = |l: &Layout| *l == old;
        let mut watch = Watch::default();
        // One failed read is a moment's trouble (a failover under way).
        assert_eq!(watch.after(None, followed), Step::Wait);
        assert_eq!(watch.after(Some(old.clone()), followed), Step::Wait);
        assert_eq!(watch.after(None, followed), Step::Wait);
        // Two in a row: the connection is wedged; made again, and again
        // after two more if it still answers nothing.
        assert_eq!(watch.after(None, followed), Step::Reconnect);
        assert_eq!(watch.after(None, followed), Step::Wait);
        assert_eq!(watch.after(None, followed), Step::Reconnect);
        // A new layout read once before the trouble is read twice again.
        let new = one_range(7001);
        assert_eq!(watch.after(Some(new.clone()), followed), Step::Wait);
        assert_eq!(watch.after(None, followed), Step::Wait);
        assert_eq!(watch.after(None, followed), Step::Reconnect);
        assert_eq!(watch.after(Some(new.clone()), followed), Step::Wait);
        assert_eq!(watch.after(Some(new.clone()), followed), Step::Follow(new));
    }

    #[test]
    fn refuses_replies_it_cannot_follow() {
        assert_eq!(Layout::parse(&Value::Nil), None);
        let no_host = Value::Array(vec![range(0, 16383, vec![member("", 7000)])]);
        assert_eq!(Layout::parse(&no_host), None);
        let no_member = Value::Array(vec![range(0, 16383, vec![])]);
        assert_eq!(Layout::parse(&no_member), None);
    }
}
