//! Every Redis key and pub/sub channel this crate uses, in one place.
//!
//! Layout, with the default prefix `mcp`:
//!
//! | key / channel | type | holds |
//! |---|---|---|
//! | `mcp:{<session>}:session` | string, `PX` idle TTL | the JSON [`mcp_cluster_store::SessionRecord`] (without its subscriptions) |
//! | `mcp:{<session>}:subs` | set, the session's TTL | the URIs the session subscribed to |
//! | `mcp:{<session>}:lease` | string, `PX` 3 s | the id of the node process that holds the session's lease, with a trailing `!` once another node wants it; see the `lease` module |
//! | `mcp:{<session>}:ended` | string, `PX` 60 s | present for a minute after the session was ended by DELETE |
//! | `mcp:{sessions:<b>}:expiry` | sorted set | session id → when its record expires at the earliest (ms since the epoch), to find expired sessions and delete their streams; `<b>` (`0`…`15`) is the session's bucket |
//! | `mcp:{sessions}:expiry` | sorted set | the same, written by versions before the buckets; swept, never written |
//! | `mcp:{<session>}:stream:<stream>` | stream | one entry per event, field `d` = data |
//! | `mcp:{<session>}:meta:<stream>` | hash | `closed` (`0`/`1`), `last` (newest entry id), `trimmed` (newest trimmed entry id, absent if none), `req` (JSON array of the request ids the stream answers, absent for a standalone stream) |
//! | `mcp:{<session>}:streams` | set | the session's stream ids, for `delete_session` |
//! | `mcp:{<session>}:wake:<stream>` | channel | a message per append, close and delete |
//! | `mcp:ctl` | channel | JSON [`mcp_cluster_store::ControlMessage`]s |
//! | `mcp:{nodes}:alive:<node>` | string, `PX` heartbeat TTL | present while the node lives |
//! | `mcp:{nodes}:all` | set | every node id not yet claimed or gone |
//! | `mcp:{nodes}:whole` | string | from when (ms since the epoch, Redis's clock) the set holds every live node: a heartbeat TTL after the first heartbeat on a Redis without it (new, or one that lost its data) |
//! | `mcp:{nodes}:alone` | string, `PX` heartbeat TTL | the id of the set's only member, once the set is whole: set by that member's heartbeat, deleted by a heartbeat that finds more |
//! | `mcp:{nodes:<node>:<b>}:streams` | hash | stream id → JSON [`mcp_cluster_store::OpenStream`] of the streams the node writes; `<b>` (`0`…`15`) is the stream's bucket |
//! | `mcp:{nodes}:streams:<node>` | hash | the same, written by versions before the buckets; claimed, never written |
//! | `mcp:{nodes}:state_keys` | hash | request-state key id → `<made, ms since the epoch>:<id>:<base64 secret>`, the cluster's key ring for 2026-07-28 `requestState` |
//! | `mcp:quota:<quota>:{<subject>}` | string, `PX` a window (a rate) or sorted set, `PX` its longest lease (a lease set) | see [`crate::quota`] |
//! | `mcp:task:{<task>}` | hash, `PX` the task's TTL | `status`, `record` (JSON), `cancel` (`0`/`1`); see [`crate::tasks`] |
//! | `mcp:task:{<task>}:inputs` | hash, the task key's TTL | input key → answer (JSON) |
//!
//! Session keys carry the session id as a hash tag (`{...}`), so one
//! session's keys sit in one Redis Cluster slot and a Lua script may touch
//! them all. A session id may itself contain braces (any visible ASCII is
//! valid); Redis then hashes on the text up to the first `}`, which is still
//! the same for every key of that session, unless the id starts with `}`
//! (an empty tag: Redis Cluster would hash each whole key; sessions minted
//! here are UUIDs, and standalone Redis does not care). No key of one
//! session can equal a key of another: the suffixes after the tag
//! (`session`, `subs`, `lease`, `ended`, `streams`, `stream:<hex>`, `meta:<hex>`, `wake:<hex>`)
//! contain no brace.
//!
//! A quota key is tagged by its subject (a client address, a principal's
//! key): each is used alone, by one script, so quota keys spread over the
//! slots of a Redis Cluster. The subject is any text, braces included; it
//! ends the key, after a prefix fixed per quota, so two subjects never
//! share a key.
//!
//! A task's keys carry the task id as a hash tag, so the task scripts may
//! touch both in a Redis Cluster. Task ids reach the store from the wire
//! (`tasks/get`, `tasks/update`, `tasks/cancel`) as any text, so the tag
//! is built with care: an id that is not empty and has no `}` is the tag
//! itself (`mcp:task:{<task>}`); any other id (empty, which would make an
//! empty tag, or holding a `}`, where Redis would end the tag) is written
//! as lowercase hex of its UTF-8 bytes after an `h`: `mcp:task:hex:{h<hex>}` (and
//! `mcp:task:hex:{h<hex>}:inputs`). Either way both keys of a task share
//! one non-empty tag, and no key of one task equals a key of another: the
//! two forms differ right after `task:` (`{` or `h`), each is one-to-one in
//! the id, and the tag (which holds no `}`) ends before the suffix.
//!
//! Node keys share the hash tag `{nodes}`: the node registry scripts touch
//! the node set and one node's keys together, so they must sit in one Redis
//! Cluster slot. The registry is small (a few keys per node, written at a
//! heartbeat), so one slot holds it easily.
//!
//! The two indexes written for every session or every request are split
//! into [`BUCKETS`] keys, each its own hash tag, so that on a Redis Cluster
//! their writes spread over the shards instead of all going to the one
//! holding a single key: the expiry index by session
//! (`mcp:{sessions:<b>}:expiry`) and each node's open streams by stream
//! (`mcp:{nodes:<node>:<b>}:streams`). A bucket is the FNV-1a hash of the
//! id's text modulo [`BUCKETS`], the same on every node. Node ids are ASCII
//! letters, digits and `-`, so the tag holds no brace.

use std::sync::Arc;

use mcp_cluster_store::{NodeId, QuotaKey, SessionId, StreamId};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "mcp";

/// Key part: the session record.
const SESSION: &str = "session";
/// Key part: the marker of a session ended by DELETE.
const ENDED: &str = "ended";
/// Key part: a session's subscriptions.
const SUBS: &str = "subs";
/// Key part: a session's lease.
const LEASE: &str = "lease";
/// Key part (hash tag): the session expiry index.
const SESSIONS: &str = "sessions";
/// Keys an index written per session or per request is split into.
pub const BUCKETS: u32 = 16;

/// The bucket of an id: FNV-1a (32 bits) of its text, modulo [`BUCKETS`].
fn bucket(id: &str) -> u32 {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash % BUCKETS
}
/// Key part: a stream's events.
const STREAM: &str = "stream";
/// Key part: a stream's state hash.
const META: &str = "meta";
/// Key part: the set of a session's streams.
const STREAMS: &str = "streams";
/// Channel part: a stream's wake-ups.
const WAKE: &str = "wake";
/// Channel part: the control bus.
const CTL: &str = "ctl";
/// Key part: a node's heartbeat.
const ALIVE: &str = "alive";
/// Key part: the set of known nodes.
const NODES: &str = "nodes";
/// Key part: quotas.
const QUOTA: &str = "quota";
/// Key part: tasks.
const TASK: &str = "task";
/// Key part: a task's answers.
const INPUTS: &str = "inputs";

/// Field of a stream entry holding the event data.
pub const ENTRY_DATA: &str = "d";
/// Meta hash field: `1` once the stream is closed, else `0`.
pub const META_CLOSED: &str = "closed";
/// Meta hash field: the newest entry id appended.
pub const META_LAST: &str = "last";
/// Meta hash field: the JSON array of the request ids the stream answers
/// (absent for a standalone stream).
pub const META_REQUESTS: &str = "req";
/// Meta hash field: the newest entry id dropped by retention.
pub const META_TRIMMED: &str = "trimmed";
/// Meta hash field: bytes of the events the stream holds.
pub const META_BYTES: &str = "bytes";
/// Task hash field: the status.
pub const TASK_STATUS: &str = "status";
/// Task hash field: the record (JSON).
pub const TASK_RECORD: &str = "record";
/// Task hash field: `1` once `tasks/cancel` was called, else `0`.
pub const TASK_CANCEL: &str = "cancel";
/// Field of a task hash: bytes of its answers (kept by `add_inputs`).
pub const TASK_ANSWER_BYTES: &str = "abytes";

/// Builds keys and channel names under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: Arc<str>,
}

impl Default for Keys {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

impl Keys {
    /// Keys under `prefix` (see [`crate::RedisConfig::key_prefix`]).
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: Arc::from(prefix),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `<prefix>:{<session>}:`, the start of every key of a session.
    fn session_base(&self, session: &SessionId) -> String {
        format!("{}:{{{}}}:", self.prefix, session)
    }

    /// The session record.
    pub fn session(&self, session: &SessionId) -> String {
        format!("{}{SESSION}", self.session_base(session))
    }

    /// The marker of a session ended by DELETE.
    pub fn ended(&self, session: &SessionId) -> String {
        format!("{}{ENDED}", self.session_base(session))
    }

    /// The session's lease: the id of the node that may trust its copy of
    /// the session (see the `lease` module).
    pub fn lease(&self, session: &SessionId) -> String {
        format!("{}{LEASE}", self.session_base(session))
    }

    /// The session's subscriptions.
    pub fn subs(&self, session: &SessionId) -> String {
        format!("{}{SUBS}", self.session_base(session))
    }

    /// The bucket of the index of sessions by earliest expiry that holds
    /// `session`.
    pub fn session_expiry(&self, session: &SessionId) -> String {
        self.expiry_bucket(bucket(session.as_str()))
    }

    fn expiry_bucket(&self, bucket: u32) -> String {
        format!("{}:{{{SESSIONS}:{bucket}}}:expiry", self.prefix)
    }

    /// Every key of the expiry index: the buckets, then the one key of
    /// versions before them.
    pub fn session_expiry_all(&self) -> Vec<String> {
        let mut all: Vec<String> = (0..BUCKETS).map(|b| self.expiry_bucket(b)).collect();
        all.push(format!("{}:{{{SESSIONS}}}:expiry", self.prefix));
        all
    }

    /// `<prefix>:{<session>}:stream:`; a stream id completes it.
    pub fn stream_prefix(&self, session: &SessionId) -> String {
        format!("{}{STREAM}:", self.session_base(session))
    }

    /// A stream's events.
    pub fn stream(&self, session: &SessionId, stream: &StreamId) -> String {
        format!("{}{stream}", self.stream_prefix(session))
    }

    /// `<prefix>:{<session>}:meta:`; a stream id completes it.
    pub fn meta_prefix(&self, session: &SessionId) -> String {
        format!("{}{META}:", self.session_base(session))
    }

    /// A stream's state hash.
    pub fn meta(&self, session: &SessionId, stream: &StreamId) -> String {
        format!("{}{stream}", self.meta_prefix(session))
    }

    /// The set of a session's stream ids.
    pub fn streams(&self, session: &SessionId) -> String {
        format!("{}{STREAMS}", self.session_base(session))
    }

    /// `<prefix>:{<session>}:wake:`; a stream id completes it.
    pub fn wake_prefix(&self, session: &SessionId) -> String {
        format!("{}{WAKE}:", self.session_base(session))
    }

    /// A stream's wake-up channel.
    pub fn wake(&self, session: &SessionId, stream: &StreamId) -> String {
        format!("{}{stream}", self.wake_prefix(session))
    }

    /// The control bus channel.
    pub fn ctl(&self) -> String {
        format!("{}:{CTL}", self.prefix)
    }

    /// The control bus's recent messages (a stream), replayed by a node
    /// whose pub/sub connection was down.
    pub fn ctl_log(&self) -> String {
        format!("{}:{{{CTL}}}:log", self.prefix)
    }

    /// `<prefix>:{nodes}:alive:`; a node id and [`Keys::node_alive_suffix`]
    /// complete it (the scripts build heartbeat keys from it).
    pub fn node_prefix(&self) -> String {
        format!("{}:{{{NODES}}}:{ALIVE}:", self.prefix)
    }

    /// What follows the node id in a heartbeat key (nothing).
    pub fn node_alive_suffix(&self) -> String {
        String::new()
    }

    /// A node's heartbeat.
    pub fn node_alive(&self, node: &NodeId) -> String {
        format!("{}{node}{}", self.node_prefix(), self.node_alive_suffix())
    }

    /// The set of known nodes.
    pub fn nodes(&self) -> String {
        format!("{}:{{{NODES}}}:all", self.prefix)
    }

    /// When the node set (as this Redis holds it) is whole: a heartbeat TTL
    /// after the first heartbeat that found this key missing.
    pub fn nodes_whole(&self) -> String {
        format!("{}:{{{NODES}}}:whole", self.prefix)
    }

    /// The id of the node set's only member, once the set is whole: set by
    /// that member's heartbeat, deleted by any heartbeat that finds
    /// another member.
    pub fn nodes_alone(&self) -> String {
        format!("{}:{{{NODES}}}:alone", self.prefix)
    }

    /// The request-state key ring (2026-07-28 input-required round trips).
    pub fn state_keys(&self) -> String {
        format!("{}:{{{NODES}}}:state_keys", self.prefix)
    }

    /// The bucket of the streams `node` writes that holds `stream`.
    pub fn node_streams(&self, node: &NodeId, stream: &StreamId) -> String {
        self.node_streams_bucket(node, bucket(stream.as_str()))
    }

    fn node_streams_bucket(&self, node: &NodeId, bucket: u32) -> String {
        format!("{}:{{{NODES}:{node}:{bucket}}}:{STREAMS}", self.prefix)
    }

    /// Every bucket of the streams `node` writes.
    pub fn node_streams_all(&self, node: &NodeId) -> Vec<String> {
        (0..BUCKETS)
            .map(|b| self.node_streams_bucket(node, b))
            .collect()
    }

    /// The streams `node` wrote, as versions before the buckets kept them
    /// (in the `{nodes}` slot).
    pub fn node_streams_unbucketed(&self, node: &NodeId) -> String {
        format!("{}:{{{NODES}}}:{STREAMS}:{node}", self.prefix)
    }

    /// A quota's rate or lease set for one subject.
    pub fn quota(&self, key: &QuotaKey) -> String {
        format!("{}:{QUOTA}:{}:{{{}}}", self.prefix, key.quota, key.subject)
    }

    /// `<prefix>:task:{<task>}` (or `<prefix>:task:hex:{h<hex>}` for an id
    /// that is empty or has a `}`): the task hash, and the start of every
    /// key of the task.
    pub fn task(&self, task: &str) -> String {
        use std::fmt::Write;
        if !task.is_empty() && !task.contains('}') {
            return format!("{}:{TASK}:{{{task}}}", self.prefix);
        }
        let mut key = format!("{}:{TASK}:hex:{{h", self.prefix);
        for byte in task.bytes() {
            // Writing to a String cannot fail.
            let _ = write!(key, "{byte:02x}");
        }
        key.push('}');
        key
    }

    /// A task's answers, by input key.
    pub fn task_inputs(&self, task: &str) -> String {
        format!("{}:{INPUTS}", self.task(task))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text Redis Cluster hashes: between the first `{` and the next `}`.
    fn hash_tag(key: &str) -> &str {
        let Some(open) = key.find('{') else {
            return key;
        };
        match key[open + 1..].find('}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        }
    }

    #[test]
    fn layout_matches_the_documented_table() {
        let k = Keys::default();
        let s: SessionId = "sess".parse().unwrap();
        let st: StreamId = "0123456789abcdef0123456789abcdef".parse().unwrap();
        let n: NodeId = "node-1".parse().unwrap();
        assert_eq!(k.session(&s), "mcp:{sess}:session");
        assert_eq!(
            k.stream(&s, &st),
            "mcp:{sess}:stream:0123456789abcdef0123456789abcdef"
        );
        assert_eq!(
            k.meta(&s, &st),
            "mcp:{sess}:meta:0123456789abcdef0123456789abcdef"
        );
        assert_eq!(k.streams(&s), "mcp:{sess}:streams");
        assert_eq!(k.subs(&s), "mcp:{sess}:subs");
        assert_eq!(k.ended(&s), "mcp:{sess}:ended");
        assert_eq!(k.session_expiry(&s), "mcp:{sessions:3}:expiry");
        let all = k.session_expiry_all();
        assert_eq!(all.len(), 17);
        assert_eq!(all[0], "mcp:{sessions:0}:expiry");
        assert_eq!(all[16], "mcp:{sessions}:expiry");
        assert_eq!(
            k.wake(&s, &st),
            "mcp:{sess}:wake:0123456789abcdef0123456789abcdef"
        );
        assert_eq!(k.ctl(), "mcp:ctl");
        assert_eq!(k.node_alive(&n), "mcp:{nodes}:alive:node-1");
        assert_eq!(k.nodes(), "mcp:{nodes}:all");
        assert_eq!(k.nodes_whole(), "mcp:{nodes}:whole");
        assert_eq!(k.nodes_alone(), "mcp:{nodes}:alone");
        assert_eq!(
            k.node_streams(&n, &st),
            format!("mcp:{{nodes:node-1:{}}}:streams", bucket(st.as_str()))
        );
        assert_eq!(k.node_streams_all(&n)[15], "mcp:{nodes:node-1:15}:streams");
        assert_eq!(k.node_streams_unbucketed(&n), "mcp:{nodes}:streams:node-1");
        assert_eq!(
            k.quota(&QuotaKey::new(
                "sessions_per_principal",
                "https://idp#alice"
            )),
            "mcp:quota:sessions_per_principal:{https://idp#alice}"
        );
        assert_eq!(k.task("t-1"), "mcp:task:{t-1}");
        assert_eq!(k.task_inputs("t-1"), "mcp:task:{t-1}:inputs");
        assert_eq!(k.task("a}b"), "mcp:task:hex:{h617d62}");
        assert_eq!(k.task_inputs("a}b"), "mcp:task:hex:{h617d62}:inputs");
        assert_eq!(k.task(""), "mcp:task:hex:{h}");
        assert_eq!(Keys::new("blue").ctl(), "blue:ctl");
    }

    #[test]
    fn ids_spread_over_every_bucket() {
        let mut seen = [0_u32; BUCKETS as usize];
        for _ in 0..1600 {
            seen[bucket(SessionId::random().as_str()) as usize] += 1;
        }
        // 100 expected per bucket; a fair hash stays well inside 40..200.
        assert!(seen.iter().all(|n| (40..200).contains(n)), "{seen:?}");
        assert_eq!(bucket("sess"), bucket("sess"));
    }

    #[test]
    fn a_sessions_keys_share_one_hash_tag_even_with_braces_in_its_id() {
        let k = Keys::default();
        let st = StreamId::random();
        for id in ["plain", "a}b", "{x}", "{}", "a{b}c"] {
            let s: SessionId = id.parse().unwrap();
            let keys = [
                k.session(&s),
                k.subs(&s),
                k.ended(&s),
                k.stream(&s, &st),
                k.meta(&s, &st),
                k.streams(&s),
                k.wake(&s, &st),
            ];
            let tag = hash_tag(&keys[0]);
            assert!(keys.iter().all(|key| hash_tag(key) == tag), "{keys:?}");
        }
    }

    #[test]
    fn task_keys_share_a_non_empty_tag_and_never_collide() {
        let k = Keys::default();
        let ids = [
            "plain",
            "",
            "}",
            "{",
            "{}",
            "a}b",
            "a{b}c",
            "{x}",
            "x}:inputs",
            "x",
            "h78",
            "hex:{h78}",
            "617d62",
            "a:b",
            "é}",
        ];
        let mut all = std::collections::HashSet::new();
        for id in ids {
            let (task, inputs) = (k.task(id), k.task_inputs(id));
            let tag = hash_tag(&task);
            assert!(tag != task && !tag.is_empty(), "{task}");
            assert_eq!(hash_tag(&inputs), tag, "{inputs}");
            assert!(all.insert(task), "{id:?}");
            assert!(all.insert(inputs), "{id:?}");
        }
    }
}
