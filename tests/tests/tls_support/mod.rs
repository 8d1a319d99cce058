//! Helpers shared by the TLS tests (`tls_*.rs`, `startup_tls_files.rs`,
//! `cluster_redis_tls.rs`, `loadtest_https.rs`): an HTTPS node, raw TLS
//! connections that show the certificate the node presented, and a node
//! run to its exit.
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mcp_cluster_testkit::{GUARD, NodeProcess, TestPki, node_binary};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// The revision test sessions negotiate.
pub const VERSION: &str = "2025-11-25";

/// Pause between two looks at something the node does in its own time.
pub const POLL: Duration = Duration::from_millis(50);

/// A TLS client over a blocking socket.
pub type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A node serving HTTPS with `pki`'s server certificate, with `args`
/// added, keeping its log. Blocking: call it before the first await.
pub fn https_node(pki: &TestPki, args: &[&str], env: &[(&str, &str)]) -> NodeProcess {
    let mut all: Vec<String> = pki.node_tls_args();
    all.extend(args.iter().map(|&a| a.to_owned()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    NodeProcess::spawn_logged(&node_binary(), &all, env)
        .unwrap_or_else(|err| panic!("https node did not start: {err:#}"))
}

/// A client configuration trusting `ca_file` only, without a client
/// certificate.
pub fn client_config(ca_file: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// A TLS connection to `addr` (a loopback node) with its handshake done,
/// trusting `ca_file`.
///
/// # Errors
/// The connection or the handshake failed (an untrusted certificate, a
/// peer that is not TLS).
pub fn tls_connect(addr: SocketAddr, ca_file: &Path) -> std::io::Result<TlsStream> {
    let socket = TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(GUARD))?;
    socket.set_write_timeout(Some(GUARD))?;
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    let connection = rustls::ClientConnection::new(client_config(ca_file), name)
        .map_err(std::io::Error::other)?;
    let mut stream = rustls::StreamOwned::new(connection, socket);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// The certificate (DER) `addr` presents in a new handshake.
pub fn presented_certificate(addr: SocketAddr, ca_file: &Path) -> Vec<u8> {
    let stream =
        tls_connect(addr, ca_file).unwrap_or_else(|err| panic!("TLS handshake with {addr}: {err}"));
    stream
        .conn
        .peer_certificates()
        .and_then(|chain| chain.first())
        .map(|cert| cert.to_vec())
        .expect("the node presented no certificate")
}

/// `GET path` on an open connection (keep-alive): the status line, or
/// `None` when the connection ends without an answer.
pub fn get_status<S: Read + Write>(stream: &mut S, path: &str) -> Option<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    stream.flush().ok()?;
    // The head, then exactly the body: the connection stays usable for the
    // next request (the node sends nothing unasked).
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    match reader.read_line(&mut status) {
        Ok(0) | Err(_) => return None,
        Ok(_) => {}
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().ok()?;
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(status.trim_end().to_owned())
}

/// The value of the metric line starting with `series` on the node's
/// admin listener (plain HTTP), 0 when absent.
pub async fn metric(admin: SocketAddr, series: &str) -> f64 {
    mcp_cluster_testkit::metric(&format!("http://{admin}"), series).await
}

/// Lines of the node's log that contain `text`.
pub fn log_count(node: &NodeProcess, text: &str) -> usize {
    node.log().iter().filter(|line| line.contains(text)).count()
}

/// Waits (at most [`GUARD`]) until more than `before` lines of the node's
/// log contain `text`. Blocking.
pub fn wait_for_more_logs(node: &NodeProcess, text: &str, before: usize) {
    let mut waited = Duration::ZERO;
    while log_count(node, text) <= before {
        assert!(
            waited < GUARD,
            "no new log line with {text:?}:\n{}",
            node.log().join("\n")
        );
        std::thread::sleep(POLL);
        waited += POLL;
    }
}

/// Runs `mcp-node` with `args` (and `--bind 127.0.0.1:0`) until it exits
/// (at most [`GUARD`]); its status and stderr.
pub fn run_to_exit(args: &[&str]) -> (ExitStatus, String) {
    let binary = node_binary();
    assert!(
        binary.exists(),
        "{} not found: cargo build -p mcp-node",
        binary.display()
    );
    let mut child = Command::new(&binary)
        .args(args)
        .args(["--bind", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = Duration::ZERO;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if waited >= GUARD {
            let _ = child.kill();
            panic!("mcp-node {args:?} did not exit");
        }
        std::thread::sleep(POLL);
        waited += POLL;
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status, stderr)
}
