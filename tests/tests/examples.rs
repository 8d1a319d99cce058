//! Every program of `examples/` as its users run it: three nodes of the
//! example's own binary sharing one redis-server, nginx round robin in
//! front, called through nginx by the official TypeScript SDK clients in
//! both protocol eras (`tests/js/examples-e2e.mjs`: v1 in a session,
//! v2 pinned to 2026-07-28). The binaries are the ones
//! `cargo build --workspace --all-targets` built (`tests/run-all.sh` does);
//! the SDKs come from `npm ci --prefix tests/js`.

mod auth_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use mcp_cluster_testkit::{Cluster, NodeCommand, TestIssuer, program_binary};

/// Runs `tests/js/examples-e2e.mjs <example> <url> <extra...>` and checks
/// that every step passed; returns its output. The script bounds its own
/// run (`E2E_RUN_TIMEOUT_MS`, 120 s by default).
async fn sdk_script(example: &str, url: &str, extra: &[&str]) -> String {
    let js = Path::new(env!("CARGO_MANIFEST_DIR")).join("js");
    let node = js.join("node_modules/.bin/node");
    assert!(
        node.exists(),
        "{} missing: run `npm ci --prefix tests/js` (tests/run-all.sh does)",
        node.display()
    );
    let mut command = Command::new(node);
    command
        .arg(js.join("examples-e2e.mjs"))
        .arg(example)
        .arg(url)
        .args(extra);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    assert!(!stdout.contains("not ok"), "{stdout}");
    stdout
}

fn cluster(command: NodeCommand, args: impl FnOnce(&str) -> Vec<String>) -> Cluster {
    tokio::task::block_in_place(|| {
        Cluster::start_command(3, command, args).unwrap_or_else(|err| panic!("{err:#}"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greeter_serves_both_eras_through_the_cluster() {
    let cluster = cluster(NodeCommand::new(program_binary("greeter")), |_| Vec::new());
    let out = sdk_script("greeter", &cluster.lb_url(), &[]).await;
    assert!(out.contains("6 passed, 0 failed"), "{out}");
}

/// The forecast service the `stateful` example calls: `GET
/// /forecast?city=Paris` answers a forecast, any other city 404.
struct ForecastApi {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ForecastApi {
    fn start() -> Self {
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let system = actix_web::rt::System::new();
            let server = HttpServer::new(move || {
                let counted = Arc::clone(&counted);
                App::new().route(
                    "/forecast",
                    web::get().to(
                        move |query: web::Query<std::collections::HashMap<String, String>>| {
                            counted.fetch_add(1, Ordering::Relaxed);
                            let city = query.get("city").cloned().unwrap_or_default();
                            async move {
                                if city == "Paris" {
                                    HttpResponse::Ok().json(serde_json::json!({
                                        "city": "Paris", "temperature_c": 21.5, "summary": "Sunny"
                                    }))
                                } else {
                                    HttpResponse::NotFound()
                                        .json(serde_json::json!({"error": "unknown city"}))
                                }
                            }
                        },
                    ),
                )
            })
            .workers(1)
            .disable_signals()
            .bind(("127.0.0.1", 0))
            .unwrap();
            addr_tx.send(server.addrs()[0]).unwrap();
            let server = server.shutdown_timeout(1).run();
            let handle = server.handle();
            system.block_on(async move {
                actix_web::rt::spawn(async move {
                    let _ = stopped.await;
                    handle.stop(true).await;
                });
                let _ = server.await;
            });
        });
        let addr = addr_rx.recv_timeout(Duration::from_secs(30)).unwrap();
        Self {
            addr,
            hits,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for ForecastApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateful_counts_in_the_shared_redis_and_calls_the_http_api() {
    let api = ForecastApi::start();
    let command = NodeCommand::new(program_binary("stateful"))
        .env("STATEFUL_API_URL", format!("http://{}", api.addr))
        // Its counters, beside what the node itself may do.
        .redis_acl(&["~stateful:*", "+incrby"]);
    // The counters use the cluster's own Redis (--redis-url).
    let cluster = cluster(command, |_| Vec::new());
    let out = sdk_script("stateful", &cluster.lb_url(), &[]).await;
    assert!(out.contains("10 passed, 0 failed"), "{out}");

    // In the very Redis the nodes share, whichever node counted.
    let redis = cluster.redis();
    for era in ["session", "2026-07-28"] {
        let value = redis
            .command(&["GET", &format!("stateful:counter:visits-{era}")])
            .unwrap();
        assert_eq!(value.trim(), "6", "{era}");
    }
    // Ten increments by 5 in each era, none lost.
    let shared = redis.command(&["GET", "stateful:counter:shared"]).unwrap();
    assert_eq!(shared.trim(), "100");
    // Paris and Atlantis, in each era.
    assert_eq!(api.hits.load(Ordering::Relaxed), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_job_reports_progress_asks_the_user_and_stops_when_cancelled() {
    let command = NodeCommand::new(program_binary("long_job")).keep_log();
    let cluster = cluster(command, |_| {
        vec!["--log".into(), "warn,long_job=info".into()]
    });
    let out = sdk_script("long_job", &cluster.lb_url(), &[]).await;
    assert!(out.contains("6 passed, 0 failed"), "{out}");

    // Each cancelled batch's handler saw the cancellation and stopped
    // before its 50 items, on whichever node ran it; none finished.
    for era in ["session", "2026-07-28"] {
        let label = format!("batch=cancel-{era}");
        let line = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let found = cluster
                    .nodes()
                    .iter()
                    .flatten()
                    .flat_map(|node| node.log())
                    .find(|line| line.contains(&label) && line.contains("Batch"));
                if let Some(line) = found {
                    return line;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no node logged the end of {label}"));
        assert!(line.contains("Batch cancelled: stopped."), "{line}");
        let done: u32 = line
            .split("done=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no done= in {line}"));
        assert!((2..50).contains(&done), "{line}");
    }
    let finished: Vec<String> = cluster
        .nodes()
        .iter()
        .flatten()
        .flat_map(|node| node.log())
        .filter(|line| line.contains("Batch finished."))
        .collect();
    assert_eq!(
        finished.len(),
        2,
        "one per era, the nightly ones: {finished:?}"
    );
    assert!(
        finished.iter().all(|line| line.contains("batch=nightly-")),
        "{finished:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_refuses_a_token_without_the_scope() {
    let issuer = TestIssuer::start().await.unwrap();
    let mut resource = String::new();
    let cluster = cluster(NodeCommand::new(program_binary("guarded")), |lb| {
        resource = lb.to_owned();
        let config = auth_support::config_file("examples-guarded", &issuer, lb, "", "");
        vec!["--config".into(), config.to_str().unwrap().to_owned()]
    });
    let plain = issuer
        .token()
        .audience(&resource)
        .subject("reader")
        .scopes(["notes:read"])
        .sign();
    let audit = issuer
        .token()
        .audience(&resource)
        .subject("auditor")
        .scopes(["notes:read", "audit:read"])
        .sign();
    let out = sdk_script("guarded", &cluster.lb_url(), &[&plain, &audit]).await;
    assert!(out.contains("6 passed, 0 failed"), "{out}");
}
