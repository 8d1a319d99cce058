//! The HTTPS node's certificate is reloaded without a restart: re-issued
//! files are presented to the next handshake, while files that cannot be
//! served (not a certificate, a key of another certificate) are reported
//! and the current certificate stays in use. Each outcome is counted in
//! `mcp_tls_certificate_reloads_total`.

mod tls_support;

use std::net::SocketAddr;
use std::time::Duration;

use mcp_cluster_testkit::{GUARD, TestPki, free_port};
use tls_support::*;

/// Waits (at most [`GUARD`]) until `addr` presents `expected`. Blocking.
fn wait_until_presented(addr: SocketAddr, pki: &TestPki, expected: &[u8]) {
    let mut waited = Duration::ZERO;
    while presented_certificate(addr, &pki.ca_cert()) != expected {
        assert!(waited < GUARD, "the new certificate was never presented");
        std::thread::sleep(POLL);
        waited += POLL;
    }
}

#[tokio::test]
async fn reissued_files_are_served_to_new_handshakes_and_bad_ones_never() {
    let pki = TestPki::new().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port().unwrap())
        .parse()
        .unwrap();
    let admin_arg = admin.to_string();
    let node = https_node(
        &pki,
        &["--admin-bind", &admin_arg, "--log", "info,mcp_access=off"],
        &[("MCP_TLS__RELOAD_INTERVAL_SECS", "1")],
    );
    let addr = node.addr();
    let first = TestPki::der_of(&pki.server_cert()).unwrap();
    assert_eq!(presented_certificate(addr, &pki.ca_cert()), first);

    // Re-issued (new key, new certificate): the next handshakes get it.
    pki.reissue_server().unwrap();
    let second = TestPki::der_of(&pki.server_cert()).unwrap();
    assert_ne!(first, second);
    wait_until_presented(addr, &pki, &second);
    node.wait_for_log("TLS certificate reloaded").unwrap();
    let reloaded = "mcp_tls_certificate_reloads_total{outcome=\"reloaded\"}";
    let rejected = "mcp_tls_certificate_reloads_total{outcome=\"rejected\"}";
    assert!(metric(admin, reloaded).await >= 1.0);

    // Not a certificate: reported, and the current one stays.
    let cannot = "cannot be served";
    let before = log_count(&node, cannot);
    let rejected_before = metric(admin, rejected).await;
    std::fs::write(pki.server_cert(), "not a certificate\n").unwrap();
    wait_for_more_logs(&node, cannot, before);
    let line = node
        .log()
        .into_iter()
        .rev()
        .find(|line| line.contains(cannot))
        .unwrap();
    assert!(line.contains("no PEM certificate in cert_file"), "{line}");
    assert_eq!(presented_certificate(addr, &pki.ca_cert()), second);
    assert!(metric(admin, rejected).await > rejected_before);

    // A valid certificate whose key is not the one in key_file.
    let stranger = TestPki::new().unwrap();
    let before = log_count(&node, cannot);
    std::fs::copy(stranger.server_cert(), pki.server_cert()).unwrap();
    wait_for_more_logs(&node, cannot, before);
    let line = node
        .log()
        .into_iter()
        .rev()
        .find(|line| line.contains(cannot))
        .unwrap();
    assert!(line.contains("is not the key of"), "{line}");
    assert_eq!(presented_certificate(addr, &pki.ca_cert()), second);
    // Reported once per bad content, not at every interval.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(log_count(&node, cannot), before + 1);

    // A good pair again: served.
    pki.reissue_server().unwrap();
    let third = TestPki::der_of(&pki.server_cert()).unwrap();
    wait_until_presented(addr, &pki, &third);
}
