//! Files named by the TLS settings are read at start: a missing or bad
//! certificate, a key of another certificate, an unreadable Redis CA or
//! password file each stop the node with exit code 64 and one line naming
//! the file, before it listens.

mod tls_support;

use mcp_cluster_testkit::TestPki;
use tls_support::*;

/// The one line a node started with `args` printed before exiting with 64.
fn refused(args: &[&str]) -> String {
    let (status, stderr) = run_to_exit(args);
    assert_eq!(status.code(), Some(64), "{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("mcp-node:"))
        .collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    lines[0].to_owned()
}

#[test]
fn bad_certificate_or_key_files_exit_with_the_config_code() {
    let pki = TestPki::new().unwrap();
    let (cert, key) = (pki.server_cert(), pki.server_key());
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());

    let line = refused(&["--tls-cert", "/nonexistent/tls.crt", "--tls-key", key]);
    assert!(
        line.contains("cannot read cert_file /nonexistent/tls.crt"),
        "{line}"
    );

    let line = refused(&["--tls-cert", key, "--tls-key", key]);
    assert!(line.contains("no PEM certificate in cert_file"), "{line}");

    let line = refused(&["--tls-cert", cert, "--tls-key", cert]);
    assert!(line.contains("no PEM private key in key_file"), "{line}");

    let stranger = TestPki::new().unwrap();
    let other_key = stranger.server_key();
    let line = refused(&["--tls-cert", cert, "--tls-key", other_key.to_str().unwrap()]);
    assert!(line.contains("is not the key of cert_file"), "{line}");
}

#[test]
fn bad_redis_tls_or_password_files_exit_with_the_config_code() {
    let pki = TestPki::new().unwrap();
    let url = "rediss://mcp@127.0.0.1:1/";
    let line = refused(&["--redis-url", url, "--redis-ca-file", "/nonexistent/ca.pem"]);
    assert!(line.contains("ca_file /nonexistent/ca.pem"), "{line}");

    let key = pki.client_key();
    let line = refused(&["--redis-url", url, "--redis-ca-file", key.to_str().unwrap()]);
    assert!(
        line.contains("ca_file") && line.contains("no PEM certificate"),
        "{line}"
    );

    let line = refused(&[
        "--redis-url",
        url,
        "--redis-password-file",
        "/nonexistent/pw",
    ]);
    assert!(line.contains("password_file /nonexistent/pw"), "{line}");

    // TLS files with a plain redis:// URL cannot work.
    let ca = pki.ca_cert();
    let line = refused(&[
        "--redis-url",
        "redis://127.0.0.1:1/",
        "--redis-ca-file",
        ca.to_str().unwrap(),
    ]);
    assert!(line.contains("rediss://"), "{line}");
}
