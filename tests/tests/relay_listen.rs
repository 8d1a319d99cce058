//! A hosted server's resources on 2026-07-28 listen streams: the
//! `resourceSubscriptions` of a principal's streams on a node are watched
//! there by a child of that principal, subscribed once to each URI any of
//! them names, whose `notifications/resources/updated` reach the streams
//! naming the URI, and no other principal's. The watching child counts
//! against the upstream's limits and ends with its last stream. The
//! hosted server is `tests/relay/hostile.py watch`: notes kept in files,
//! written by its tool `act` on whichever child runs it.

mod auth_support;
mod cluster_support;
mod relay_support;
mod stateless_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mcp_cluster_testkit::TestIssuer;
use relay_support::{Scratch, config_file};
use serde_json::{Value, json};
use stateless_support::{Messages, call, request, send, tool_call};

/// The `[[upstreams]]` entry hosting `hostile.py watch` on the notes of
/// `dir`, with `extra` settings.
fn upstream(dir: &Path, extra: &str) -> String {
    upstream_in("watch", dir, extra)
}

/// The `[[upstreams]]` entry hosting `hostile.py MODE` on the notes of
/// `dir`, with `extra` settings.
fn upstream_in(mode: &str, dir: &Path, extra: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("relay/hostile.py");
    let argv = serde_json::to_string(&["python3", &script.display().to_string(), mode]).unwrap();
    format!(
        "[[upstreams]]\nname = \"notes\"\ncommand = {argv}\nenv = {{ WATCH_DIR = \"{}\" }}\n{extra}\n",
        dir.display()
    )
}

/// A configuration file hosting the notes, with its directory (removed
/// with the guard) and the notes' directory inside it.
fn hosting(extra: &str) -> (String, Scratch, PathBuf) {
    hosting_in("watch", extra)
}

/// As [`hosting`], for `hostile.py MODE`.
fn hosting_in(mode: &str, extra: &str) -> (String, Scratch, PathBuf) {
    let (config, scratch) = config_file("mcp-relay-listen", "");
    let notes = scratch.0.join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    // A stream its client left ends at its next keep-alive.
    let runtime = "[runtime]\nsse_keep_alive_secs = 1\n\n";
    std::fs::write(
        &config,
        runtime.to_owned() + &upstream_in(mode, &notes, extra),
    )
    .unwrap();
    (config, scratch, notes)
}

fn listen(id: u64, uris: &[&str]) -> Value {
    request(
        id,
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": uris}}),
        json!({}),
    )
}

/// Opens a listen stream and reads its acknowledgement: the URIs it
/// names.
async fn open(url: &str, body: &Value, headers: &[(&str, Option<&str>)]) -> (Messages, Value) {
    let answer = send(url, body, headers).await;
    assert_eq!(answer.status(), 200, "{answer:?}");
    let mut stream = Messages::new(answer);
    let ack = stream.next().await.expect("acknowledgement");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    let uris = ack["params"]["notifications"]["resourceSubscriptions"].clone();
    (stream, uris)
}

/// The next update on `stream`: its URI and subscription id.
async fn update(stream: &mut Messages) -> (String, Value) {
    let message = stream.next().await.expect("an update");
    assert_eq!(
        message["method"], "notifications/resources/updated",
        "{message}"
    );
    (
        message["params"]["uri"].as_str().unwrap().to_owned(),
        message["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone(),
    )
}

/// Writes `text` into note `note` through the tool `act`, on `url`.
async fn write(url: &str, id: u64, note: &str, text: &str, headers: &[(&str, Option<&str>)]) {
    let body = tool_call(
        id,
        "act",
        json!({"note": note, "text": text}),
        json!({}),
        json!({}),
    );
    let answer = call(url, &body, headers).await;
    assert_eq!(
        answer.response["result"]["content"][0]["text"], "wrote",
        "{answer:?}"
    );
}

/// The lines of the notes' subscriptions log, once it has `n`.
async fn log_lines(notes: &Path, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(notes.join("subscriptions.log")).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n {
            return lines;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the log has {lines:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Has the child `pid` announce that `uri` changed (a file it reads whole:
/// written beside it, then renamed).
fn poke(notes: &Path, pid: &str, uri: &str) {
    let ready = notes.join(format!("ready-{pid}"));
    std::fs::write(&ready, uri).unwrap();
    std::fs::rename(ready, notes.join(format!("poke-{pid}"))).unwrap();
}

/// Two nodes on one Redis, with the configuration file `config`.
async fn two_nodes(config: String) -> mcp_cluster_testkit::Cluster {
    tokio::task::spawn_blocking(move || cluster_support::start(2, &["--config", &config]))
        .await
        .unwrap()
}

/// `mcp_upstream_children_running` of `node_url`'s node, once it is `want`.
async fn children_become(node_url: &str, want: f64) {
    let base = node_url.trim_end_matches("/mcp").to_owned();
    let sample = "mcp_upstream_children_running{upstream=\"notes\"}";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = mcp_cluster_testkit::metric(&base, sample).await;
        if now == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{sample} is {now}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_listen_stream_hears_of_a_note_written_on_another_node() {
    let (config, _dir, notes) = hosting("");
    let cluster = two_nodes(config).await;
    let (here, there) = (cluster.node_url(0), cluster.node_url(1));

    let (mut both, uris) = open(&here, &listen(1, &["note://a", "note://b"]), &[]).await;
    assert_eq!(uris, json!(["note://a", "note://b"]));
    let (mut only_a, uris) = open(&here, &listen(2, &["note://a"]), &[]).await;
    assert_eq!(uris, json!(["note://a"]));
    // One child watches for both streams: each URI subscribed once.
    let log = log_lines(&notes, 2).await;
    let pid = log[0].split(' ').next().unwrap().to_owned();
    assert_eq!(
        log,
        [
            format!("{pid} subscribe note://a"),
            format!("{pid} subscribe note://b")
        ]
    );
    children_become(&here, 1.0).await;

    // A note written by a child on the other node: each stream naming it
    // hears, under its own subscription id.
    write(&there, 3, "a", "one", &[]).await;
    assert_eq!(update(&mut both).await, ("note://a".into(), json!(1)));
    assert_eq!(update(&mut only_a).await, ("note://a".into(), json!(2)));
    write(&there, 4, "b", "two", &[]).await;
    assert_eq!(update(&mut both).await, ("note://b".into(), json!(1)));
    write(&there, 5, "a", "three", &[]).await;
    // Not note://b before it: the stream does not name it.
    assert_eq!(update(&mut only_a).await, ("note://a".into(), json!(2)));
    assert_eq!(update(&mut both).await, ("note://a".into(), json!(1)));

    // A stream that leaves takes nothing from the other: the URI it alone
    // named is unsubscribed, the one they share is not. The last stream to
    // leave ends the child.
    drop(both);
    assert_eq!(
        log_lines(&notes, 3).await[2],
        format!("{pid} unsubscribe note://b")
    );
    write(&there, 6, "a", "four", &[]).await;
    assert_eq!(update(&mut only_a).await, ("note://a".into(), json!(2)));
    drop(only_a);
    children_become(&here, 0.0).await;
    assert_eq!(
        log_lines(&notes, 3).await.len(),
        3,
        "{:?}",
        log_lines(&notes, 3).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_s_streams_hear_its_own_child_only() {
    let issuer = TestIssuer::start().await.unwrap();
    let (_config, _dir, notes) = hosting("");
    let config = auth_support::config_file(
        "relay-listen",
        &issuer,
        auth_support::RESOURCE,
        "",
        &upstream(&notes, ""),
    );
    let node = tokio::task::block_in_place(|| auth_support::node(&config));
    let url = node.url().to_owned();
    let bearer = |who: &str| {
        format!(
            "Bearer {}",
            issuer
                .token()
                .audience(auth_support::RESOURCE)
                .subject(who)
                .sign()
        )
    };
    let (alice, bob) = (bearer("alice"), bearer("bob"));
    let as_alice = [("Authorization", Some(alice.as_str()))];
    let as_bob = [("Authorization", Some(bob.as_str()))];

    let both = ["note://a", "note://b"];
    let (mut alice_stream, _) = open(&url, &listen(1, &both), &as_alice).await;
    let alice_pid = log_lines(&notes, 2).await[0]
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    let (mut bob_stream, _) = open(&url, &listen(1, &both), &as_bob).await;
    let log = log_lines(&notes, 4).await;
    let bob_pid = log[2].split(' ').next().unwrap().to_owned();
    assert_ne!(alice_pid, bob_pid, "bob's stream has a child of its own");

    // What bob's child announces reaches bob alone: alice's first update
    // is the one her own child announces after it.
    poke(&notes, &bob_pid, "note://a");
    assert_eq!(update(&mut bob_stream).await.0, "note://a");
    poke(&notes, &alice_pid, "note://b");
    assert_eq!(update(&mut alice_stream).await.0, "note://b");

    // Either one's tool call writes the shared note: both children see
    // the file change, each tells its own principal.
    write(&url, 2, "a", "shared", &as_bob).await;
    assert_eq!(update(&mut alice_stream).await.0, "note://a");
    assert_eq!(update(&mut bob_stream).await.0, "note://a");
}

#[tokio::test]
async fn a_watching_child_takes_a_place_among_the_upstream_s_children() {
    let (config, _dir, _notes) = hosting("max_children = 1");
    let node = tokio::task::spawn_blocking(move || {
        mcp_cluster_testkit::NodeProcess::spawn(
            &mcp_cluster_testkit::node_binary(),
            &["--config", &config],
        )
        .unwrap()
    })
    .await
    .unwrap();
    let url = node.url().to_owned();
    let (stream, _) = open(&url, &listen(1, &["note://a"]), &[]).await;
    children_become(&url, 1.0).await;

    // The one place is the watcher's: a call needs a child, and waits.
    let body = tool_call(
        2,
        "act",
        json!({"note": "a", "text": "x"}),
        json!({}),
        json!({}),
    );
    let refused = call(&url, &body, &[]).await.response;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("(max_children)"), "{refused}");
    assert_eq!(
        refused["error"]["data"]["retryAfterSeconds"], 1,
        "{refused}"
    );
    // A second stream shares the watcher.
    let (second, uris) = open(&url, &listen(3, &["note://a"]), &[]).await;
    assert_eq!(uris, json!(["note://a"]));

    // Both streams gone, the place is free again.
    drop((stream, second));
    children_become(&url, 0.0).await;
    write(&url, 4, "a", "y", &[]).await;
}

#[tokio::test]
async fn a_server_of_2026_07_28_is_listened_to_for_its_principal_s_streams() {
    let (config, _dir, notes) = hosting_in("modern", "stateless = true");
    let cluster = two_nodes(config).await;
    let (here, there) = (cluster.node_url(0), cluster.node_url(1));

    // The child is asked to listen for what the stream names, and its
    // acknowledgement says what the stream's does.
    let (mut both, uris) = open(&here, &listen(1, &["note://a", "note://b"]), &[]).await;
    assert_eq!(uris, json!(["note://a", "note://b"]));
    let log = log_lines(&notes, 1).await;
    let pid = log[0].split(' ').next().unwrap().to_owned();
    assert_eq!(log, [format!("{pid} listen note://a,note://b -")]);
    children_become(&here, 1.0).await;

    // A URI the child refuses is asked for once: not again for the next
    // stream naming it, nor when those streams leave.
    let (refused, uris) = open(&here, &listen(8, &["other://x"]), &[]).await;
    assert_eq!(uris, Value::Null, "none acknowledged");
    let (refused_again, uris) = open(&here, &listen(9, &["other://x"]), &[]).await;
    assert_eq!(uris, Value::Null, "none acknowledged");
    drop((refused, refused_again));

    // A second stream wanting tools list changes too: the same child
    // listens again, for both streams, and the former listen request is
    // cancelled once the new one is acknowledged.
    let body = request(
        2,
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": ["note://a"], "toolsListChanged": true}}),
        json!({}),
    );
    let answer = send(&here, &body, &[]).await;
    assert_eq!(answer.status(), 200, "{answer:?}");
    let mut tools_and_a = Messages::new(answer);
    let ack = tools_and_a.next().await.expect("acknowledgement");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": ["note://a"], "toolsListChanged": true}),
        "{ack}"
    );
    assert_eq!(
        log_lines(&notes, 5).await[3..],
        [
            format!("{pid} listen note://a,note://b tools"),
            format!("{pid} unlisten ")
        ]
    );
    children_become(&here, 1.0).await;

    // A note written by a child on the other node: each stream naming it
    // hears, under its own subscription id, once.
    write(&there, 3, "a", "one", &[]).await;
    assert_eq!(update(&mut both).await, ("note://a".into(), json!(1)));
    assert_eq!(
        update(&mut tools_and_a).await,
        ("note://a".into(), json!(2))
    );
    write(&there, 4, "b", "two", &[]).await;
    assert_eq!(update(&mut both).await, ("note://b".into(), json!(1)));
    // The child's tools list change reaches the stream that wants it.
    poke(&notes, &pid, "tools");
    let changed = tools_and_a.next().await.expect("a list change");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    assert_eq!(
        changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 2,
        "{changed}"
    );
    write(&there, 5, "a", "three", &[]).await;
    // Not the tools list change before it: the stream does not want it.
    assert_eq!(update(&mut both).await, ("note://a".into(), json!(1)));
    assert_eq!(
        update(&mut tools_and_a).await,
        ("note://a".into(), json!(2))
    );

    // The stream wanting tools leaves: the child listens for the other
    // alone; the last stream to leave ends the child.
    drop(tools_and_a);
    assert_eq!(
        log_lines(&notes, 7).await[5..],
        [
            format!("{pid} listen note://a,note://b -"),
            format!("{pid} unlisten ")
        ]
    );
    write(&there, 6, "b", "four", &[]).await;
    assert_eq!(update(&mut both).await, ("note://b".into(), json!(1)));
    drop(both);
    children_become(&here, 0.0).await;

    // A stream wanting list changes alone has the server listened to
    // for them (it tells of them only while listened to).
    let body = request(
        7,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
        json!({}),
    );
    let answer = send(&here, &body, &[]).await;
    let mut tools = Messages::new(answer);
    let ack = tools.next().await.expect("acknowledgement");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true}),
        "{ack}"
    );
    // (The former child may log its listen's cancellation as it ends.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let listening = loop {
        let log = log_lines(&notes, 8).await;
        if let Some(line) = log[7..].iter().find(|l| l.ends_with(" listen  tools")) {
            break line.split(' ').next().unwrap().to_owned();
        }
        assert!(tokio::time::Instant::now() < deadline, "{log:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(listening, pid, "a new child");
    poke(&notes, &listening, "tools");
    let changed = tools.next().await.expect("a list change");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    drop(tools);
    children_become(&here, 0.0).await;
}
