//! The Grafana dashboard (`deploy/grafana/mcp-node-dashboard.json`) and the
//! alerting rules (`deploy/prometheus/rules/mcp-node.rules.yml`) query only
//! what live nodes export, and every query works in a real Prometheus:
//! - the dashboard is well formed: schema version, a `datasource` variable
//!   of type prometheus used by every panel and query, a `node` variable
//!   over `instance`, unique panel ids inside the 24-column grid;
//! - every metric name a dashboard query, variable or alert rule selects is
//!   a series a node exports on `/metrics` (or `up`, or a recorded rule),
//!   every label its matchers and `by`/`on` lists name is a label of those
//!   series: checked against two Redis cluster nodes and one node with tiny
//!   limits, after traffic that makes every labelled family appear
//!   (sessions, calls, errors, a cancellation and a server-to-client answer
//!   across nodes, a resumption on another node, a standalone stream, a
//!   DELETE, refused sessions and connections, a foreign control message, a
//!   Redis outage);
//! - a real Prometheus scraping those nodes (one through its admin
//!   listener) answers every dashboard query, variables substituted, with
//!   data, and evaluates every rule of the rules file without error.

mod cluster_support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cluster_support::{
    call, call_with_progress, client, expect_sse, long_running, message, next_event, notification,
    post_accepted, priming, read_to_end, readyz, resume, session,
};
use mcp_cluster_client::Reply;
use mcp_cluster_testkit::{
    Cluster, NodeProcess, PROMETHEUS_JOB, Prometheus, free_port, node_binary, within,
};
use serde_json::{Value, json};

/// Bound on waits for Prometheus and for the nodes to notice a Redis
/// outage and its end: many scrape and heartbeat intervals, for a loaded
/// CI machine.
const WAIT: Duration = Duration::from_secs(90);
/// Pause between two looks.
const POLL: Duration = Duration::from_millis(250);

/// Series Prometheus writes itself for every target, with their labels.
const SCRAPE_SERIES: &[&str] = &["up"];
/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: &[&str] = &["job", "instance"];

/// Grafana's own variables and what the test puts in their place.
const BUILTIN_VARIABLES: &[(&str, &str)] = &[
    ("__rate_interval", "5m"),
    ("__interval", "15s"),
    ("__range", "5m"),
];

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// What one PromQL expression refers to.
#[derive(Debug, Default, PartialEq)]
struct Refs {
    /// Metric names selected, each with the label names of its matchers
    /// (`""`: a selector without a name).
    selectors: Vec<(String, Vec<String>)>,
    /// Label names of `by`, `without`, `on`, `ignoring`, `group_left` and
    /// `group_right` lists.
    grouping: Vec<String>,
}

/// Words that are neither metrics nor functions.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
    "atan2",
];
/// Aggregation operators: their grouping may come before their `(`.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names and label names `expr` uses. A small scanner, not a
/// parser: strings, durations, numbers, Grafana variables and comments are
/// skipped; an identifier followed by `(` is a function or aggregation; a
/// keyword or an aggregation operator is none of these; any other identifier is a metric name, and a
/// `{…}` after it holds its matchers.
fn refs(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut refs = Refs::default();
    // The selector the next `{` belongs to.
    let mut last_metric: Option<usize> = None;
    // A grouping keyword was the last token: a `(` opens label names.
    let mut grouping_next = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            if GROUPING.contains(&lower.as_str()) {
                grouping_next = true;
                last_metric = None;
                continue;
            }
            let called = chars[i..].iter().find(|c| !c.is_whitespace()) == Some(&'(');
            let operator =
                KEYWORDS.contains(&lower.as_str()) || AGGREGATIONS.contains(&lower.as_str());
            if !operator && !called {
                refs.selectors.push((word, Vec::new()));
                last_metric = Some(refs.selectors.len() - 1);
                grouping_next = false;
                continue;
            }
        } else {
            match c {
                '"' | '\'' | '`' => i = skip_string(&chars, i),
                '#' => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                }
                '$' => i = skip_variable(&chars, i),
                '[' => {
                    while i < chars.len() && chars[i] != ']' {
                        i += 1;
                    }
                    i += 1;
                }
                '{' => {
                    let (labels, end) = matchers(&chars, i);
                    match last_metric {
                        Some(k) => refs.selectors[k].1.extend(labels),
                        None => refs.selectors.push((String::new(), labels)),
                    }
                    i = end;
                }
                '(' if grouping_next => {
                    let (labels, end) = label_list(&chars, i);
                    refs.grouping.extend(labels);
                    i = end;
                }
                c if c.is_ascii_digit()
                    || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
                {
                    // A number or a duration (5m, 1h30m, 1e3, 0x1f).
                    while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                        i += 1;
                    }
                }
                _ => i += 1,
            }
        }
        last_metric = None;
        grouping_next = false;
    }
    refs
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index after the string starting at `start` (its quote).
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        if chars[i] == '\\' && quote != '`' {
            i += 2;
            continue;
        }
        if chars[i] == quote {
            return i + 1;
        }
        i += 1;
    }
    i
}

/// The index after a Grafana variable: `$name` or `${name…}`.
fn skip_variable(chars: &[char], start: usize) -> usize {
    let mut i = start + 1;
    if chars.get(i) == Some(&'{') {
        while i < chars.len() && chars[i] != '}' {
            i += 1;
        }
        return i + 1;
    }
    while i < chars.len() && is_ident_char(chars[i]) && chars[i] != ':' {
        i += 1;
    }
    i
}

/// The label names of the matchers `{…}` starting at `start`, and the
/// index after the `}`.
fn matchers(chars: &[char], start: usize) -> (Vec<String>, usize) {
    let mut labels = Vec::new();
    let mut i = start + 1;
    while i < chars.len() {
        let c = chars[i];
        if c == '}' {
            return (labels, i + 1);
        }
        if c.is_whitespace() || c == ',' || c == '=' || c == '!' || c == '~' {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            // A value (or a quoted name, which this workspace never uses).
            i = skip_string(chars, i);
        } else if is_ident_start(c) {
            let begin = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            labels.push(chars[begin..i].iter().collect());
        } else {
            i += 1;
        }
    }
    (labels, i)
}

/// The names of the label list `(…)` starting at `start`, and the index
/// after the `)`.
fn label_list(chars: &[char], start: usize) -> (Vec<String>, usize) {
    let mut labels = Vec::new();
    let mut i = start + 1;
    while i < chars.len() && chars[i] != ')' {
        if is_ident_start(chars[i]) {
            let begin = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            labels.push(chars[begin..i].iter().collect());
        } else {
            i += 1;
        }
    }
    (labels, i + 1)
}

#[test]
fn refs_finds_metrics_and_labels_and_nothing_else() {
    let r = refs(
        r#"histogram_quantile(0.99, sum by (le, mcp_method_name) (rate(a_bucket{job=~"$job", x!="rate(b)"}[$__rate_interval])))"#,
    );
    assert_eq!(
        r.selectors,
        vec![("a_bucket".into(), vec!["job".into(), "x".into()])]
    );
    assert_eq!(r.grouping, vec!["le", "mcp_method_name"]);

    let r = refs(
        "sum(rate(b_total[5m])) by (instance) / on () group_left () c \
         > 0.5 and on (job, instance) d offset 1h # e f\n unless absent(up {job=\"x\"})",
    );
    let names: Vec<&str> = r.selectors.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["b_total", "c", "d", "up"]);
    assert_eq!(r.selectors[3].1, ["job"]);
    assert_eq!(r.grouping, ["instance", "job", "instance"]);

    assert_eq!(refs("vector(10000)"), Refs::default());
    assert_eq!(refs("1e3 * 2 + .5").selectors, []);
    let r = refs(r#"label_replace(m:rec, "dst", "$1", "src", "(.*)") * ${node:regex} [[x]]"#);
    assert_eq!(r.selectors, vec![("m:rec".into(), vec![])]);
    assert_eq!(
        refs(r#"{__name__="z"}"#).selectors,
        vec![(String::new(), vec!["__name__".into()])]
    );
}

/// Series names a set of nodes exports, each with every label name seen on
/// it.
type Exported = BTreeMap<String, BTreeSet<String>>;

/// Adds the series of a Prometheus text exposition to `exported`.
fn add_exposition(text: &str, exported: &mut Exported) {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let chars: Vec<char> = line.chars().collect();
        let end = chars
            .iter()
            .position(|c| *c == '{' || c.is_whitespace())
            .unwrap_or(chars.len());
        let name: String = chars[..end].iter().collect();
        let labels = if chars.get(end) == Some(&'{') {
            matchers(&chars, end).0
        } else {
            Vec::new()
        };
        exported.entry(name).or_default().extend(labels);
    }
}

#[test]
fn exposition_lines_give_names_and_label_names() {
    let mut exported = Exported::new();
    add_exposition(
        "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v,}\\\"\",l=\"\"} 1\n\
         b_bucket{le=\"+Inf\"} 2\nc 3\n",
        &mut exported,
    );
    assert_eq!(
        exported["a_total"],
        BTreeSet::from(["k".into(), "l".into()])
    );
    assert_eq!(exported["b_bucket"], BTreeSet::from(["le".into()]));
    assert!(exported["c"].is_empty());
}

/// The family of a series name: without the `_bucket`, `_count`, `_sum`
/// of a histogram's series or the `_total` of a counter.
fn family(name: &str) -> &str {
    ["_bucket", "_count", "_sum", "_total"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

/// Checks that every metric and label `expr` uses is exported; appends one
/// line per problem to `failures`. `recorded`: names of recording rules.
fn check_refs(
    what: &str,
    expr: &str,
    exported: &Exported,
    recorded: &BTreeSet<String>,
    failures: &mut Vec<String>,
) {
    let r = refs(expr);
    if r.selectors.is_empty() && !expr.contains("vector(") {
        failures.push(format!("{what}: no metric found in {expr}"));
    }
    // Labels the expression's series can carry, for its grouping lists.
    let mut carried: BTreeSet<String> = TARGET_LABELS.iter().map(|l| (*l).to_owned()).collect();
    for (name, labels) in &r.selectors {
        let known: BTreeSet<String> = if name.is_empty() {
            failures.push(format!(
                "{what}: a selector without a metric name in {expr}"
            ));
            continue;
        } else if recorded.contains(name) {
            continue;
        } else if SCRAPE_SERIES.contains(&name.as_str()) {
            BTreeSet::new()
        } else if let Some(seen) = exported.get(name) {
            seen.clone()
        } else {
            let near: Vec<&String> = exported
                .keys()
                .filter(|n| n.starts_with(family(name)))
                .collect();
            failures.push(format!(
                "{what}: {name} is not exported by the nodes (series of that family: {near:?})"
            ));
            continue;
        };
        for label in labels {
            if !known.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                failures.push(format!(
                    "{what}: {name} has no label {label} (it has {known:?})"
                ));
            }
        }
        carried.extend(known);
    }
    for label in &r.grouping {
        if !carried.contains(label) {
            failures.push(format!(
                "{what}: grouping label {label} is on none of its series ({carried:?}) in {expr}"
            ));
        }
    }
}

/// One query of the dashboard.
#[derive(Debug)]
struct Query {
    /// Where it is: panel or variable.
    place: String,
    /// The PromQL, Grafana variables unreplaced.
    expr: String,
    /// For a `label_values(selector, label)` variable: the label.
    label: Option<String>,
}

/// Every query of the dashboard: panel targets (rows included) and query
/// variables.
fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    fn walk(panels: &[Value], out: &mut Vec<Query>) {
        for panel in panels {
            for target in panel["targets"].as_array().into_iter().flatten() {
                out.push(Query {
                    place: format!(
                        "panel {:?} target {}",
                        panel["title"].as_str().unwrap_or(""),
                        target["refId"].as_str().unwrap_or("?")
                    ),
                    expr: target["expr"].as_str().unwrap_or("").to_owned(),
                    label: None,
                });
            }
            walk(panel["panels"].as_array().map_or(&[], Vec::as_slice), out);
        }
    }
    let mut out = Vec::new();
    walk(dashboard["panels"].as_array().unwrap(), &mut out);
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .unwrap_or("");
        let place = format!("variable {}", variable["name"]);
        let (expr, label) = match query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|args| args.rsplit_once(','))
        {
            Some((selector, label)) => (selector.trim(), Some(label.trim().to_owned())),
            None => (query, None),
        };
        out.push(Query {
            place,
            expr: expr.to_owned(),
            label,
        });
    }
    out
}

/// `expr` with the dashboard's variables replaced by values that select
/// every node of the test's Prometheus.
fn substitute(expr: &str) -> String {
    let mut values: Vec<(&str, &str)> = BUILTIN_VARIABLES.to_vec();
    values.extend([("job", PROMETHEUS_JOB), ("node", ".*")]);
    let mut out = expr.to_owned();
    for (name, value) in values {
        out = out
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    out
}

/// The dashboard's shape: what Grafana needs to import it and what makes
/// it usable with any Prometheus data source.
fn check_dashboard_shape(dashboard: &Value, failures: &mut Vec<String>) {
    let mut fail = |what: String| failures.push(format!("dashboard: {what}"));
    if dashboard["schemaVersion"].as_u64().is_none_or(|v| v < 39) {
        fail(format!(
            "schemaVersion {} is below 39",
            dashboard["schemaVersion"]
        ));
    }
    for key in ["uid", "title"] {
        if dashboard[key].as_str().is_none_or(str::is_empty) {
            fail(format!("no {key}"));
        }
    }
    let variables = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let variable = |name: &str| variables.iter().find(|v| v["name"] == name);
    match variable("datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        other => fail(format!(
            "no datasource variable of Prometheus data sources: {other:?}"
        )),
    }
    match variable("node") {
        Some(v)
            if v["type"] == "query"
                && v["definition"]
                    .as_str()
                    .is_some_and(|d| d.ends_with(", instance)")) => {}
        other => fail(format!(
            "no node variable over the instance label: {other:?}"
        )),
    }
    let defined: BTreeSet<String> = variables
        .iter()
        .filter_map(|v| v["name"].as_str().map(str::to_owned))
        .chain(BUILTIN_VARIABLES.iter().map(|(n, _)| (*n).to_owned()))
        .collect();

    let mut panels = Vec::new();
    fn flatten<'a>(list: &'a [Value], out: &mut Vec<&'a Value>) {
        for panel in list {
            out.push(panel);
            flatten(panel["panels"].as_array().map_or(&[], Vec::as_slice), out);
        }
    }
    flatten(
        dashboard["panels"].as_array().map_or(&[], Vec::as_slice),
        &mut panels,
    );
    if panels.is_empty() {
        fail("no panels".into());
    }
    let mut ids = BTreeSet::new();
    for panel in &panels {
        let title = panel["title"].as_str().unwrap_or("");
        if !ids.insert(panel["id"].as_u64().unwrap_or(0)) || panel["id"].as_u64().is_none() {
            fail(format!(
                "panel {title:?}: missing or repeated id {}",
                panel["id"]
            ));
        }
        let pos = &panel["gridPos"];
        let (x, w, h) = (pos["x"].as_u64(), pos["w"].as_u64(), pos["h"].as_u64());
        if !matches!((x, w, h), (Some(x), Some(w), Some(h)) if w > 0 && h > 0 && x + w <= 24)
            || pos["y"].as_u64().is_none()
        {
            fail(format!(
                "panel {title:?}: gridPos {pos} outside the 24 columns"
            ));
        }
        if panel["type"] == "row" {
            continue;
        }
        let uses_variable = |ds: &Value| ds["type"] == "prometheus" && ds["uid"] == "${datasource}";
        if !uses_variable(&panel["datasource"]) {
            fail(format!(
                "panel {title:?}: datasource {} is not ${{datasource}}",
                panel["datasource"]
            ));
        }
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            fail(format!("panel {title:?}: no query"));
        }
        for target in &targets {
            if !uses_variable(&target["datasource"]) || target["refId"].as_str().is_none() {
                fail(format!(
                    "panel {title:?}: target without refId or ${{datasource}}: {target}"
                ));
            }
            let expr = target["expr"].as_str().unwrap_or("");
            for word in expr.split('$').skip(1) {
                let name: String = word
                    .trim_start_matches('{')
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !defined.contains(&name) {
                    fail(format!(
                        "panel {title:?}: undefined variable ${name} in {expr}"
                    ));
                }
            }
        }
    }
}

/// GET `/metrics` of a node at `addr`.
async fn scrape(addr: SocketAddr) -> String {
    let response = within(
        "GET /metrics",
        reqwest::get(format!("http://{addr}/metrics")),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200, "/metrics of {addr}");
    within("/metrics body", response.text()).await.unwrap()
}

/// Polls the `/metrics` of `addr` until a line starts with `prefix` and
/// has a value above zero.
async fn wait_for_series(addr: SocketAddr, prefix: &str) {
    let mut waited = Duration::ZERO;
    loop {
        let text = scrape(addr).await;
        let found = text.lines().any(|line| {
            line.starts_with(prefix)
                && line
                    .rsplit(' ')
                    .next()
                    .and_then(|v| v.parse::<f64>().ok())
                    .is_some_and(|v| v > 0.0)
        });
        if found {
            return;
        }
        assert!(waited < WAIT, "{addr}: no {prefix} above 0:\n{text}");
        tokio::time::sleep(POLL).await;
        waited += POLL;
    }
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits until Prometheus has scraped every target after `after` (Unix
/// seconds).
fn wait_for_scrape_after(prometheus: &Prometheus, targets: usize, after: f64) {
    let query = format!("timestamp(up{{job=\"{PROMETHEUS_JOB}\"}})");
    let mut waited = Duration::ZERO;
    loop {
        let scrapes = prometheus.query(&query).unwrap();
        if scrapes.len() == targets && scrapes.iter().all(|(_, at)| *at > after) {
            return;
        }
        assert!(
            waited < WAIT,
            "no scrape after {after}: {scrapes:?}\n{}",
            prometheus.log()
        );
        std::thread::sleep(POLL);
        waited += POLL;
    }
}

/// Traffic on the two cluster nodes that makes every labelled family of a
/// Redis node appear.
async fn drive_cluster(cluster: &Cluster) {
    let (a, b) = (cluster.node_url(0), cluster.node_url(1));
    let on_a = session(&a, json!({"roots": {"listChanged": true}})).await;
    let sid = on_a.session_id().unwrap().to_owned();
    let on_b = client(&b, &sid);

    // Plain requests on both nodes (b rebuilds the session from Redis),
    // a tool error, an unknown method and an unknown tool.
    for (node, body) in [
        (
            &on_b,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        (&on_a, call(2, "echo", json!({"message": "hi"}))),
        (&on_a, call(3, "test_error_handling", json!({}))),
        (
            &on_b,
            json!({"jsonrpc": "2.0", "id": 4, "method": "no/such/method"}),
        ),
        (&on_b, call(5, "no_such_tool", json!({}))),
    ] {
        let reply = within("POST", node.post(&body)).await.unwrap();
        assert!(matches!(reply, Reply::Json(..)), "{body}: {reply:?}");
    }

    // A call with progress on a, dropped after its first progress and
    // resumed on b.
    let mut stream = expect_sse(
        within("POST", on_a.post(&long_running(6, 600, 3, "p6")))
            .await
            .unwrap(),
    );
    priming(&mut stream).await;
    let first = next_event(&mut stream).await.expect("a progress event");
    drop(stream);
    let mut resumed = resume(&on_b, &first.id.unwrap()).await;
    let seen = read_to_end(&mut resumed).await;
    assert_eq!(seen.responses.len(), 1, "{seen:?}");

    // roots/list asked on a's stream, answered through b (control bus).
    let mut stream = expect_sse(
        within("POST", on_a.post(&call(7, "list_roots", json!({}))))
            .await
            .unwrap(),
    );
    let ask = loop {
        let event = next_event(&mut stream)
            .await
            .expect("the roots/list request");
        if event.has_data && !event.data.is_empty() {
            break message(&event);
        }
    };
    assert_eq!(ask["method"], "roots/list", "{ask}");
    post_accepted(
        &on_b,
        &json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": []}}),
    )
    .await;
    let seen = read_to_end(&mut stream).await;
    assert_eq!(seen.responses.len(), 1, "{seen:?}");

    // A call on a cancelled through b.
    let mut stream = expect_sse(
        within(
            "POST",
            on_a.post(&call_with_progress(
                8,
                "long_running_operation",
                json!({"duration_ms": 5000, "steps": 50}),
                "p8",
            )),
        )
        .await
        .unwrap(),
    );
    priming(&mut stream).await;
    next_event(&mut stream).await.expect("a progress event");
    post_accepted(
        &on_b,
        &notification("notifications/cancelled", json!({"requestId": 8})),
    )
    .await;
    read_to_end(&mut stream).await;

    // The standalone stream on b, opened and dropped.
    let mut standalone = expect_sse(within("GET", on_b.get(None)).await.unwrap());
    priming(&mut standalone).await;
    drop(standalone);

    // DELETE through b.
    let status = within("DELETE", on_b.delete()).await.unwrap();
    assert!(status.is_success(), "{status}");

    // Refused at the HTTP layer: a foreign Origin.
    let refused = within(
        "POST with a foreign Origin",
        reqwest::Client::new()
            .post(&a)
            .header("Origin", "http://attacker.example")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(refused.status(), 403);

    // Something else on the control channel: every node drops it.
    cluster
        .redis()
        .command(&["PUBLISH", "mcp:ctl", "not a control message"])
        .unwrap();
    for i in 0..cluster.len() {
        wait_for_series(
            cluster.node_addr(i),
            "mcp_bus_messages_dropped_total{reason=\"malformed\"}",
        )
        .await;
    }
}

/// A Redis outage: requests and heartbeats fail, both connections come
/// back after Redis does.
async fn redis_outage(cluster: &Cluster) {
    let kept = session(&cluster.node_url(0), json!({})).await;
    cluster.redis().stop().unwrap();
    // Until the node has noticed (its pub/sub connection lost, /readyz
    // 503), its lease on the session still holds, and it serves the
    // session from memory as it should.
    let mut waited = Duration::ZERO;
    while readyz(cluster, 0).await == 200 {
        assert!(waited < WAIT, "node 0 still ready with Redis stopped");
        tokio::time::sleep(POLL).await;
        waited += POLL;
    }
    let reply = within(
        "POST during the outage",
        kept.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
    )
    .await;
    assert!(
        matches!(&reply, Ok(Reply::Status(status, _, _)) if status.as_u16() == 503),
        "{reply:?}"
    );
    let mut fresh = mcp_cluster_client::Client::new(&cluster.node_url(1), cluster_support::VERSION);
    assert!(
        within("initialize during the outage", fresh.initialize(json!({})))
            .await
            .is_err()
    );
    for i in 0..cluster.len() {
        wait_for_series(
            cluster.node_addr(i),
            "mcp_heartbeats_total{outcome=\"failed\"}",
        )
        .await;
    }
    cluster.redis().restart().unwrap();
    for i in 0..cluster.len() {
        wait_for_series(
            cluster.node_addr(i),
            "mcp_redis_reconnects_total{connection=\"pubsub\"}",
        )
        .await;
        let mut waited = Duration::ZERO;
        while readyz(cluster, i).await != 200 {
            assert!(waited < WAIT, "node {i} not ready after Redis came back");
            tokio::time::sleep(POLL).await;
            waited += POLL;
        }
    }
}

/// A node that holds one session and two connections: the second session
/// and the extra connections are refused.
async fn drive_limits(node: &NodeProcess, admin: SocketAddr) {
    let first = session(node.url(), json!({})).await;
    let mut second = mcp_cluster_client::Client::new(node.url(), cluster_support::VERSION);
    assert!(
        within(
            "initialize beyond --max-sessions",
            second.initialize(json!({}))
        )
        .await
        .is_err()
    );
    drop((first, second));
    let held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(node.addr()).unwrap())
        .collect();
    wait_for_series(
        admin,
        "mcp_connections_refused_total{reason=\"node_connection_limit\"}",
    )
    .await;
    drop(held);
}

#[tokio::test]
async fn dashboard_and_alert_rules_query_only_what_live_nodes_export() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_file("deploy/grafana/mcp-node-dashboard.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let mut failures = Vec::new();
    check_dashboard_shape(&dashboard, &mut failures);

    let cluster = cluster_support::start(2, &[]);
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
    let admin_arg = admin.to_string();
    let limits = NodeProcess::spawn(
        &node_binary(),
        &[
            "--log",
            "error",
            "--max-sessions",
            "1",
            "--max-connections",
            "2",
            "--admin-bind",
            &admin_arg,
        ],
    )
    .unwrap();
    // The limited node is scraped on its admin listener, outside its
    // connection limit.
    let targets = [cluster.node_addr(0), cluster.node_addr(1), admin];
    let rules = repo_file("deploy/prometheus/rules/mcp-node.rules.yml");
    let prometheus = Prometheus::start_with_rules(&targets, &[rules.as_path()]).unwrap();

    drive_cluster(&cluster).await;
    drive_limits(&limits, admin).await;
    redis_outage(&cluster).await;

    let mut exported = Exported::new();
    for addr in targets {
        add_exposition(&scrape(addr).await, &mut exported);
    }

    // Rules as Prometheus loaded them, once each has been evaluated.
    let mut waited = Duration::ZERO;
    let loaded: Vec<Value> = loop {
        let answer = prometheus.api("/api/v1/rules").unwrap();
        let rules: Vec<Value> = answer["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect();
        let evaluated = rules.iter().all(|r| {
            r["lastEvaluation"]
                .as_str()
                .is_some_and(|t| !t.starts_with("0001-"))
        });
        if !rules.is_empty() && evaluated {
            break rules;
        }
        assert!(
            waited < WAIT,
            "rules never evaluated: {answer}\n{}",
            prometheus.log()
        );
        std::thread::sleep(POLL);
        waited += POLL;
    };
    let recorded: BTreeSet<String> = loaded
        .iter()
        .filter(|r| r["type"] == "recording")
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    for rule in &loaded {
        let what = format!("rule {}", rule["name"]);
        if rule["health"] != "ok" {
            failures.push(format!(
                "{what}: health {} {}",
                rule["health"], rule["lastError"]
            ));
        }
        check_refs(
            &what,
            rule["query"].as_str().unwrap_or(""),
            &exported,
            &recorded,
            &mut failures,
        );
    }
    assert!(
        loaded.iter().filter(|r| r["type"] == "alerting").count() >= 10,
        "{loaded:?}"
    );

    // Every dashboard query: its names exported, and answered with data.
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 40, "{} queries", queries.len());
    // And the other way round: every mcp_ family a node exports is on the
    // dashboard (a new metric needs a panel).
    let shown: BTreeSet<String> = queries
        .iter()
        .flat_map(|q| refs(&q.expr).selectors)
        .map(|(name, _)| family(&name).to_owned())
        .collect();
    for name in exported.keys().filter(|n| n.starts_with("mcp_")) {
        if !shown.contains(family(name)) {
            failures.push(format!("dashboard: no panel shows {}", family(name)));
        }
    }
    for query in &queries {
        check_refs(
            &query.place,
            &query.expr,
            &exported,
            &BTreeSet::new(),
            &mut failures,
        );
    }
    wait_for_scrape_after(&prometheus, targets.len(), now_secs());
    let mut pending: Vec<&Query> = queries.iter().collect();
    let mut waited = Duration::ZERO;
    loop {
        let mut still = Vec::new();
        for query in pending {
            let expr = substitute(&query.expr);
            let answer = prometheus.query_answer(&expr).unwrap();
            if answer["status"] != "success" {
                failures.push(format!(
                    "{}: Prometheus refuses {expr}: {}",
                    query.place, answer["error"]
                ));
                continue;
            }
            let result = answer["data"]["result"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if result.is_empty() {
                still.push(query);
                continue;
            }
            if let Some(label) = &query.label
                && !result.iter().all(|s| s["metric"].get(label).is_some())
            {
                failures.push(format!(
                    "{}: series of {expr} lack label {label}",
                    query.place
                ));
            }
        }
        pending = still;
        if pending.is_empty() || waited >= WAIT {
            break;
        }
        std::thread::sleep(POLL);
        waited += POLL;
    }
    for query in pending {
        failures.push(format!(
            "{}: no data for {}",
            query.place,
            substitute(&query.expr)
        ));
    }

    assert!(
        failures.is_empty(),
        "{} problems:\n{}\nexported: {:?}",
        failures.len(),
        failures.join("\n"),
        exported.keys().collect::<Vec<_>>()
    );
}
