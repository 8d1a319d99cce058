//! Every counter that `proto-docs/operations.md` lists with its label
//! values exists on a fresh node for each of them (at 0 until counted), as the page says
//! ("every label value known in advance exists from the start at 0"), so
//! that the first event shows as an increase.

use std::path::Path;

use mcp_cluster_testkit::{NodeProcess, node_binary, within};

/// (metric, label, values) of each documented counter row with one label
/// whose values are listed: `| \`name\` | counter | \`label\` (\`a\`, \`b\`) | …`.
fn documented_counters() -> Vec<(String, String, Vec<String>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto-docs/operations.md");
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        if cells.len() < 4 || cells[1] != "counter" {
            continue;
        }
        let name = cells[0].trim_start_matches("| ").trim_matches('`');
        let Some((label, values)) = cells[2].split_once(" (") else {
            continue;
        };
        let label = label.trim_matches('`');
        if label.contains('`') || values.contains('(') || !name.starts_with("mcp_") {
            continue; // several labels
        }
        let values = values
            .trim_end_matches(')')
            .split(", ")
            .map(|v| v.trim_matches('`').to_owned())
            .collect();
        rows.push((name.to_owned(), label.to_owned(), values));
    }
    rows
}

#[tokio::test]
async fn every_documented_label_value_exists_at_zero_from_the_start() {
    let rows = documented_counters();
    let names: Vec<&str> = rows.iter().map(|(n, _, _)| n.as_str()).collect();
    for expected in [
        "mcp_sessions_rejected_total",
        "mcp_bus_messages_published_total",
        "mcp_bus_messages_received_total",
        "mcp_auth_failures_total",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} not parsed: {names:?}"
        );
    }
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"]).unwrap();
    let metrics_url = node.url().replace("/mcp", "/metrics");
    let body = within("GET /metrics", async {
        reqwest::get(&metrics_url).await?.text().await
    })
    .await
    .unwrap();
    let mut missing = Vec::new();
    for (name, label, values) in &rows {
        for value in values {
            // Present (a fresh embedded node has counted next to nothing;
            // its heartbeats already).
            let series = format!("{name}{{{label}=\"{value}\"}} ");
            if !body.lines().any(|l| l.starts_with(&series)) {
                missing.push(series);
            }
        }
    }
    assert!(missing.is_empty(), "not at 0 from the start: {missing:#?}");
}
