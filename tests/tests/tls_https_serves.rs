//! A node serving HTTPS itself (`--tls-cert`, `--tls-key`): a client that
//! trusts the test CA gets a whole MCP session; a plain-HTTP client and a
//! client trusting another CA get nothing; the admin listener stays plain
//! HTTP; the connection gate counts and refuses TLS connections as it does
//! plain ones.

mod tls_support;

use std::time::Duration;

use mcp_cluster_client::Client;
use mcp_cluster_testkit::{GUARD, TestPki, free_port, within};
use serde_json::json;
use tls_support::*;

#[tokio::test]
async fn an_https_node_serves_a_session_only_to_clients_trusting_its_ca() {
    let pki = TestPki::new().unwrap();
    let admin = format!("127.0.0.1:{}", free_port().unwrap());
    let node = https_node(&pki, &["--admin-bind", &admin, "--log", "warn"], &[]);
    assert!(
        node.url().starts_with("https://127.0.0.1:"),
        "{}",
        node.url()
    );

    // A whole session over TLS.
    let mut client = Client::with_http(pki.https_client().unwrap(), node.url(), VERSION);
    within("initialize", client.initialize(json!({})))
        .await
        .unwrap();
    let (response, _) = within(
        "tools/call echo",
        client.request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "over tls"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        response["result"]["content"][0]["text"], "Echo: over tls",
        "{response}"
    );
    assert!(
        within("DELETE", client.delete())
            .await
            .unwrap()
            .is_success()
    );

    // Plain HTTP on the TLS port: no answer.
    let plain_url = node.url().replacen("https://", "http://", 1);
    let plain = within(
        "plain POST",
        reqwest::Client::new()
            .post(&plain_url)
            .header("content-type", "application/json")
            .body("{}")
            .send(),
    )
    .await;
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");

    // A client trusting another CA refuses the node's certificate.
    let stranger = TestPki::new().unwrap();
    let untrusted = within(
        "POST with another CA",
        stranger
            .https_client()
            .unwrap()
            .post(node.url())
            .body("{}")
            .send(),
    )
    .await;
    let err = untrusted.expect_err("a certificate of an untrusted CA was accepted");
    assert!(err.is_connect(), "{err:?}");

    // Probes and metrics stay plain HTTP on the admin listener.
    let ready = reqwest::get(format!("http://{admin}/readyz"))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(
        metric(
            admin.parse().unwrap(),
            "mcp_tls_certificate_reloads_total{outcome=\"rejected\"}"
        )
        .await,
        0.0
    );
}

#[tokio::test]
async fn the_connection_gate_limits_tls_connections_per_address() {
    let pki = TestPki::new().unwrap();
    let admin: std::net::SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let admin_arg = admin.to_string();
    // Loopback is not exempt here (the list names only a documentation
    // address): one connection per address.
    let node = https_node(
        &pki,
        &[
            "--admin-bind",
            &admin_arg,
            "--max-connections-per-peer",
            "1",
            "--connection-limit-exempt",
            "192.0.2.1",
            "--log",
            "warn",
        ],
        &[],
    );
    let addr = node.addr();
    let ca = pki.ca_cert();
    let (first_status, refused_status, later_status) = tokio::task::spawn_blocking(move || {
        let mut first = tls_connect(addr, &ca).unwrap();
        let first_status = get_status(&mut first, "/healthz");
        // The handshake completes (the gate runs after it), then the
        // connection is shut without an answer.
        let refused_status = tls_connect(addr, &ca)
            .ok()
            .and_then(|mut second| get_status(&mut second, "/healthz"));
        // The first connection still works.
        assert_eq!(
            get_status(&mut first, "/healthz").as_deref(),
            Some("HTTP/1.1 200 OK")
        );
        drop(first);
        // Its slot comes back once the node sees it closed.
        let mut waited = Duration::ZERO;
        let later_status = loop {
            let status = tls_connect(addr, &ca)
                .ok()
                .and_then(|mut again| get_status(&mut again, "/healthz"));
            if status.is_some() || waited >= GUARD {
                break status;
            }
            std::thread::sleep(POLL);
            waited += POLL;
        };
        (first_status, refused_status, later_status)
    })
    .await
    .unwrap();
    assert_eq!(first_status.as_deref(), Some("HTTP/1.1 200 OK"));
    assert_eq!(refused_status, None, "a second connection was served");
    assert_eq!(later_status.as_deref(), Some("HTTP/1.1 200 OK"));
    assert!(
        metric(
            admin,
            "mcp_connections_refused_total{reason=\"peer_connection_limit\"}"
        )
        .await
            >= 1.0
    );
}
