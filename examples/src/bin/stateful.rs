//! A provider with state of its own, shared by every node of a cluster:
//! `increment` and `count` keep named counters in Redis, and `forecast`
//! asks an HTTP API.
//!
//! - Redis: the node's own (`--redis-url`, `MCP_REDIS_URL` or `[redis]`,
//!   with its password and TLS files), so the counters live where the
//!   cluster's sessions do; a node without Redis uses `STATEFUL_REDIS_URL`
//!   instead. With neither, the counter tools answer a tool error. Keys:
//!   `stateful:counter:<name>`.
//! - The API: `STATEFUL_API_URL`, the base URL of a forecast service that
//!   answers `GET <base>/forecast?city=<city>` with
//!   `{"city": "...", "temperature_c": 21.5, "summary": "..."}` (404 for a
//!   city it does not know).
//!
//! `STATEFUL_API_URL=http://127.0.0.1:9000 cargo run -p mcp-cluster-examples
//! --bin stateful -- --bind 127.0.0.1:8080 --redis-url redis://127.0.0.1:6379`;
//! every flag of `mcp-node` applies (`mcp_cluster::cli`). The test
//! `tests/tests/examples.rs` runs three of them behind nginx.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcp_cluster::cli::{self, Program};
use mcp_cluster::protocol::ErrorObject;
use mcp_cluster::protocol::types::CallToolResult;
use mcp_cluster::{McpServer, NodeConfig, RequestContext, ServerBuilder, ToolDef};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

/// Redis for a node started without one.
const REDIS_URL_VAR: &str = "STATEFUL_REDIS_URL";
/// The forecast service's base URL.
const API_URL_VAR: &str = "STATEFUL_API_URL";

type Outcome = Result<CallToolResult, ErrorObject>;

/// What every call on a node shares, made once when the node starts.
struct State {
    /// `None` when neither the node nor `STATEFUL_REDIS_URL` names a Redis.
    redis: Option<redis::Client>,
    /// Opened by the first call that needs it, then shared by all (it
    /// reconnects by itself).
    connection: OnceCell<redis::aio::ConnectionManager>,
    http: reqwest::Client,
    /// The forecast service's base URL, without a trailing `/`.
    api: Option<String>,
}

impl State {
    fn from_config(config: &NodeConfig) -> Self {
        let redis = match &config.redis {
            // The node's Redis with everything its configuration says
            // (password file, CA and client certificates).
            Some(redis) => Some(redis.client().map_err(|err| err.to_string())),
            None => std::env::var(REDIS_URL_VAR)
                .ok()
                .map(|url| redis::Client::open(url).map_err(|err| err.to_string())),
        };
        let redis = redis.and_then(|client| {
            client
                .inspect_err(|err| tracing::error!(error = %err, "No Redis for the counters."))
                .ok()
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        let api = std::env::var(API_URL_VAR)
            .ok()
            .map(|url| url.trim_end_matches('/').to_owned());
        Self {
            redis,
            connection: OnceCell::new(),
            http,
            api,
        }
    }

    async fn redis(&self) -> Result<redis::aio::ConnectionManager, String> {
        let Some(client) = &self.redis else {
            return Err(format!(
                "no Redis for the counters: start the node with --redis-url or set {REDIS_URL_VAR}"
            ));
        };
        self.connection
            .get_or_try_init(|| redis::aio::ConnectionManager::new(client.clone()))
            .await
            .cloned()
            .map_err(|err| format!("the counter store is unavailable: {err}"))
    }
}

fn key(name: &str) -> String {
    format!("stateful:counter:{name}")
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Increment {
    /// The counter.
    #[schemars(length(min = 1, max = 64))]
    name: String,
    /// Added to it; 1 when absent.
    by: Option<i64>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct CounterName {
    /// The counter.
    #[schemars(length(min = 1, max = 64))]
    name: String,
}

/// A counter's value.
#[derive(Serialize, schemars::JsonSchema)]
struct Count {
    name: String,
    value: i64,
}

fn structured<T: Serialize>(value: &T) -> Outcome {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(object)) => Ok(CallToolResult::structured(object)),
        _ => Err(ErrorObject::internal("result is not an object")),
    }
}

async fn increment(state: &State, args: Increment) -> Outcome {
    let mut redis = match state.redis().await {
        Ok(redis) => redis,
        Err(why) => return Ok(CallToolResult::error(why)),
    };
    // INCRBY is atomic: concurrent calls on any node never lose a count.
    match redis
        .incr::<_, _, i64>(key(&args.name), args.by.unwrap_or(1))
        .await
    {
        Ok(value) => structured(&Count {
            name: args.name,
            value,
        }),
        Err(err) => Ok(CallToolResult::error(format!(
            "the counter store failed: {err}"
        ))),
    }
}

async fn count(state: &State, args: CounterName) -> Outcome {
    let mut redis = match state.redis().await {
        Ok(redis) => redis,
        Err(why) => return Ok(CallToolResult::error(why)),
    };
    match redis.get::<_, Option<i64>>(key(&args.name)).await {
        Ok(value) => structured(&Count {
            name: args.name,
            value: value.unwrap_or(0),
        }),
        Err(err) => Ok(CallToolResult::error(format!(
            "the counter store failed: {err}"
        ))),
    }
}

#[derive(Deserialize, schemars::JsonSchema)]
struct City {
    /// The city, as the forecast service names it.
    #[schemars(length(min = 1, max = 100))]
    city: String,
}

/// What the forecast service answers, passed on as the tool's result.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    temperature_c: f64,
    summary: String,
}

async fn forecast(state: &State, args: City) -> Outcome {
    let Some(api) = &state.api else {
        return Ok(CallToolResult::error(format!(
            "no forecast service: set {API_URL_VAR}"
        )));
    };
    let answer = state
        .http
        .get(format!("{api}/forecast"))
        .query(&[("city", args.city.as_str())])
        .send()
        .await;
    // The service's failures are the tool's: the model reads why.
    let answer = match answer {
        Ok(answer) if answer.status().is_success() => answer,
        Ok(answer) => {
            return Ok(CallToolResult::error(format!(
                "the forecast service answered {} for {}",
                answer.status(),
                args.city
            )));
        }
        Err(err) => {
            return Ok(CallToolResult::error(format!(
                "the forecast service is unreachable: {err}"
            )));
        }
    };
    match answer.json::<Forecast>().await {
        Ok(forecast) => structured(&forecast),
        Err(err) => Ok(CallToolResult::error(format!(
            "the forecast service answered something else than a forecast: {err}"
        ))),
    }
}

fn server(config: &NodeConfig) -> McpServer {
    // One state per node, each tool's handler holding it.
    let state = Arc::new(State::from_config(config));
    let (s1, s2, s3) = (Arc::clone(&state), Arc::clone(&state), state);
    ServerBuilder::new("stateful", env!("CARGO_PKG_VERSION"))
        .page_size(config.page_size)
        .tool(
            ToolDef::typed(
                "increment",
                "Adds to a named counter (1 by default) and returns its new value.",
                move |args: Increment, _: RequestContext| {
                    let state = Arc::clone(&s1);
                    async move { increment(&state, args).await }
                },
            )
            .output::<Count>(),
        )
        .tool(
            ToolDef::typed(
                "count",
                "The value of a named counter (0 if it was never incremented).",
                move |args: CounterName, _: RequestContext| {
                    let state = Arc::clone(&s2);
                    async move { count(&state, args).await }
                },
            )
            .output::<Count>(),
        )
        .tool(
            ToolDef::typed(
                "forecast",
                "Today's forecast for a city, from the forecast service.",
                move |args: City, _: RequestContext| {
                    let state = Arc::clone(&s3);
                    async move { forecast(&state, args).await }
                },
            )
            .output::<Forecast>(),
        )
        .build()
}

fn main() -> ExitCode {
    cli::run(Program::new("stateful", env!("CARGO_PKG_VERSION")), server)
}
