//! Slow bodies and connection floods cannot take a node down: a request's
//! body must arrive within the body timeout (408, connection closed),
//! connections per client address and in all are bounded (beyond, a
//! connection is closed at once), and with only 256 file descriptors the
//! node keeps answering probes and new clients while under attack. Before:
//! 19,985 connections that sent headers and part of a body stayed open
//! forever and used every descriptor; `/healthz` and `initialize` timed out.

mod hostile_support;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

use hostile_support::*;
use mcp_cluster_testkit::{NodeProcess, free_port, node_binary};
use socket2::{Domain, Socket, Type};

const PER_PEER: usize = 32;
const BODY_TIMEOUT_SECS: u64 = 3;
/// The node's open-file limit; its connection limit is this less 128.
const OPEN_FILES: u64 = 256;

/// Headers of a POST announcing a big body, and the first byte of it.
const SLOW_REQUEST: &[u8] = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\
Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
Content-Length: 100000\r\n\r\n{";

/// Opens `n` connections from each of `sources` to `addr`, each sending
/// the slow request; returns those still open a moment later (the node
/// admitted them) and the count it closed at once.
fn flood(sources: &[Ipv4Addr], addr: SocketAddr, n: usize) -> (Vec<TcpStream>, usize) {
    let mut sent = Vec::new();
    let mut closed = 0;
    for source in sources {
        for _ in 0..n {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            socket
                .bind(&SocketAddr::new(IpAddr::V4(*source), 0).into())
                .unwrap();
            if socket.connect(&addr.into()).is_err() {
                closed += 1;
                continue;
            }
            let mut stream: TcpStream = socket.into();
            // A refused connection may already be shut down under the write.
            let _ = stream.write_all(SLOW_REQUEST);
            sent.push(stream);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut open = Vec::new();
    for mut stream in sent {
        stream.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            // Still open, nothing said: admitted, waiting for the body.
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                stream.set_nonblocking(false).unwrap();
                open.push(stream);
            }
            // End of stream or reset: closed at once.
            _ => closed += 1,
        }
    }
    (open, closed)
}

/// What an admitted slow connection finally reads: the 408.
fn answer_of(mut stream: TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(BODY_TIMEOUT_SECS + 10)))
        .unwrap();
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let _ = stream.shutdown(Shutdown::Both);
    text
}

async fn healthz(addr: SocketAddr) -> u16 {
    match tokio::time::timeout(
        Duration::from_secs(5),
        reqwest::get(format!("http://{addr}/healthz")),
    )
    .await
    {
        Ok(Ok(response)) => response.status().as_u16(),
        _ => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_and_connection_floods_leave_the_node_serving() {
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
    let per_peer = PER_PEER.to_string();
    let timeout = BODY_TIMEOUT_SECS.to_string();
    let admin_arg = admin.to_string();
    let mut node = NodeProcess::spawn_with_open_files(
        &node_binary(),
        &[
            "--log",
            "warn",
            "--max-connections-per-peer",
            &per_peer,
            "--request-body-timeout-secs",
            &timeout,
            "--admin-bind",
            &admin_arg,
        ],
        OPEN_FILES,
    )
    .unwrap();
    let addr = node.addr();
    let url = node.url().to_owned();
    assert_serving(&url).await;
    let before = node.rss_bytes();

    // One address, 500 slow connections: 32 held, the rest closed at once.
    let (held, closed) =
        tokio::task::spawn_blocking(move || flood(&[Ipv4Addr::new(127, 0, 0, 2)], addr, 500))
            .await
            .unwrap();
    eprintln!("one address: {} held, {closed} closed at once", held.len());
    assert!(held.len() <= PER_PEER, "{} held", held.len());
    assert!(closed >= 500 - PER_PEER, "{closed} closed");
    // The node answers probes and new clients on the same listener.
    assert_eq!(healthz(addr).await, 200);
    assert_serving(&url).await;
    // The held ones get 408 once the body timeout is over.
    let answers =
        tokio::task::spawn_blocking(move || held.into_iter().map(answer_of).collect::<Vec<_>>())
            .await
            .unwrap();
    for answer in &answers {
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("-32600"), "{answer}");
    }

    // Twenty addresses, 600 connections: more than the node's 128. Beyond
    // the limit connections are closed at once; the probe listener answers
    // throughout, and the node serves again once the slow ones time out.
    let (held, closed) = tokio::task::spawn_blocking(move || {
        let sources: Vec<Ipv4Addr> = (3..23).map(|last| Ipv4Addr::new(127, 0, 0, last)).collect();
        flood(&sources, addr, 30)
    })
    .await
    .unwrap();
    let limit = usize::try_from(OPEN_FILES - 128).unwrap();
    eprintln!(
        "twenty addresses: {} held, {closed} closed at once",
        held.len()
    );
    assert!(held.len() <= limit, "{} held", held.len());
    assert!(closed >= 600 - limit, "{closed} closed");
    assert_eq!(healthz(admin).await, 200, "the probe listener answers");
    assert!(node.is_running());
    let answers =
        tokio::task::spawn_blocking(move || held.into_iter().map(answer_of).collect::<Vec<_>>())
            .await
            .unwrap();
    assert!(answers.iter().all(|a| a.starts_with("HTTP/1.1 408")));
    assert_eq!(healthz(addr).await, 200);
    assert_serving(&url).await;

    let after = node.rss_bytes();
    eprintln!(
        "slow bodies and floods: RSS {} MiB -> {} MiB",
        before / MIB,
        after / MIB
    );
    assert!(
        after < before + 64 * MIB,
        "RSS grew from {before} to {after} bytes"
    );
}
