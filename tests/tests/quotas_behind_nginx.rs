//! The per-address quota behind a real nginx that the node trusts
//! (`127.0.0.1`, the default `trusted_proxies`) and that appends each
//! client's address to its `X-Forwarded-For`, as the README's proxy
//! block does. Clients connect to nginx from their own loopback addresses
//! (127.0.0.20, 127.0.0.21, …) over raw TCP, so that their header can
//! hold bytes no HTTP library sends: whatever a client writes in
//! `X-Forwarded-For` (a byte 0x80, garbage, commas, several lines,
//! trusted addresses, another address per request, IPv6 with ports), the
//! node counts the address nginx appended: 60 `initialize` answered, the
//! rest 429.

use std::net::{IpAddr, SocketAddr};

use mcp_cluster_testkit::{Nginx, NodeProcess, node_binary, raw_http_from};

/// The default `initialize_per_address`.
const LIMIT: usize = 60;
/// Requests per client: ten past the limit.
const SENT: usize = LIMIT + 10;

fn initialize_body() -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "xff-e2e", "version": "0"}}})
    .to_string()
}

/// POSTs one `initialize` through nginx from `client`, with the raw
/// `X-Forwarded-For` lines `forwarded` (each sent as its own header line);
/// returns the status.
fn initialize(nginx: SocketAddr, client: IpAddr, forwarded: &[Vec<u8>]) -> u16 {
    let body = initialize_body();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}",
        body.len()
    )
    .into_bytes();
    for line in forwarded {
        head.extend_from_slice(b"\r\nX-Forwarded-For: ");
        head.extend_from_slice(line);
    }
    let (status, text) = raw_http_from(client, nginx, &head, &body)
        .unwrap_or_else(|err| panic!("{client}: {err:#}"));
    assert!(status == 200 || status == 429, "{client}: {status} {text}");
    status
}

/// The `X-Forwarded-For` lines a client sends with its `n`th request.
type Forwarded = Box<dyn Fn(usize) -> Vec<Vec<u8>>>;

/// Sends [`SENT`] `initialize` from `client`, the `n`th with the header
/// lines `forwarded(n)`; returns how many were answered 200 and 429.
fn flood(
    nginx: SocketAddr,
    client: IpAddr,
    forwarded: impl Fn(usize) -> Vec<Vec<u8>>,
) -> (usize, usize) {
    let mut answered = (0, 0);
    for n in 0..SENT {
        match initialize(nginx, client, &forwarded(n)) {
            200 => answered.0 += 1,
            _ => answered.1 += 1,
        }
    }
    answered
}

#[test]
fn what_a_client_puts_in_x_forwarded_for_never_turns_its_quota_off() {
    let node = NodeProcess::spawn(&node_binary(), &["--log", "warn"])
        .unwrap_or_else(|err| panic!("{err:#}"));
    let nginx = Nginx::start_forwarding_for(&[node.addr()]).unwrap_or_else(|err| panic!("{err:#}"));
    let lines = |list: &[&[u8]]| list.iter().map(|l| l.to_vec()).collect::<Vec<_>>();
    // One client address per case: each has its own quota.
    let cases: Vec<(&str, Forwarded)> = vec![
        ("no header", Box::new(move |_| Vec::new())),
        ("a byte 0x80", Box::new(move |_| lines(&[b"\x80"]))),
        (
            "bytes 0x80-0xff among addresses",
            Box::new(move |_| lines(&[b"203.0.113.9, \xff\xfe, 198.51.100.4 \x80"])),
        ),
        (
            "several lines, garbage and empty entries",
            Box::new(move |_| lines(&[b"198.51.100.1", b"unknown, , \x80,", b""])),
        ),
        (
            "trusted addresses",
            Box::new(move |_| lines(&[b"127.0.0.1, ::1", b"[::1]:443"])),
        ),
        (
            "another address on every request",
            Box::new(move |n| vec![format!("203.0.113.{n}").into_bytes()]),
        ),
        (
            "IPv6 and ports",
            Box::new(move |n| {
                vec![
                    format!("[2001:db8::{n:x}]:443, 192.0.2.{n}:8080, 2001:db8:1::{n:x}")
                        .into_bytes(),
                ]
            }),
        ),
    ];
    for (i, (case, forwarded)) in cases.iter().enumerate() {
        let client: IpAddr = format!("127.0.0.{}", 20 + i).parse().unwrap();
        let (ok, refused) = flood(nginx.addr(), client, forwarded);
        assert_eq!(
            (ok, refused),
            (LIMIT, SENT - LIMIT),
            "{case} from {client}: {ok} answered, {refused} refused\n{}",
            nginx.error_log()
        );
    }
    // Every client above is at its limit; a new one is not.
    assert_eq!(
        initialize(
            nginx.addr(),
            "127.0.0.90".parse().unwrap(),
            &[b"\x80".to_vec()]
        ),
        200
    );
}
