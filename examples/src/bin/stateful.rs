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
use std::time::Duration;

use mcp_cluster::NodeConfig;
use mcp_cluster::cli::{self, Program};
use mcp_cluster::prelude::*;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

/// Redis for a node started without one.
const REDIS_URL_VAR: &str = "STATEFUL_REDIS_URL";
/// The forecast service's base URL.
const API_URL_VAR: &str = "STATEFUL_API_URL";

/// What every call on a node shares, made once when the node starts: the
/// provider whose methods are the tools.
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

    async fn redis(&self) -> Result<redis::aio::ConnectionManager, HandlerError> {
        let Some(client) = &self.redis else {
            return Err(HandlerError::tool(format!(
                "no Redis for the counters: start the node with --redis-url or set {REDIS_URL_VAR}"
            )));
        };
        self.connection
            .get_or_try_init(|| redis::aio::ConnectionManager::new(client.clone()))
            .await
            .cloned()
            .map_err(|err| HandlerError::tool(format!("the counter store is unavailable: {err}")))
    }
}

fn key(name: &str) -> String {
    format!("stateful:counter:{name}")
}

fn store_failed(err: redis::RedisError) -> HandlerError {
    HandlerError::tool(format!("the counter store failed: {err}"))
}

/// A counter's value.
#[derive(Serialize, schemars::JsonSchema)]
struct Count {
    name: String,
    value: i64,
}

/// What the forecast service answers, passed on as the tool's result.
#[derive(Serialize, Deserialize, schemars::JsonSchema)]
struct Forecast {
    city: String,
    temperature_c: f64,
    summary: String,
}

// The failures of Redis and of the service are the tools': the model reads
// why (`isError`).
#[server(name = "stateful")]
impl State {
    /// Adds to a named counter (1 by default) and returns its new value.
    #[tool]
    async fn increment(
        &self,
        /// The counter.
        #[schemars(length(min = 1, max = 64))]
        name: String,
        /// Added to it; 1 when absent.
        by: Option<i64>,
    ) -> Result<Json<Count>, HandlerError> {
        let mut redis = self.redis().await?;
        // INCRBY is atomic: concurrent calls on any node never lose a count.
        let value = redis
            .incr::<_, _, i64>(key(&name), by.unwrap_or(1))
            .await
            .map_err(store_failed)?;
        Ok(Json(Count { name, value }))
    }

    /// The value of a named counter (0 if it was never incremented).
    #[tool]
    async fn count(
        &self,
        /// The counter.
        #[schemars(length(min = 1, max = 64))]
        name: String,
    ) -> Result<Json<Count>, HandlerError> {
        let mut redis = self.redis().await?;
        let value = redis
            .get::<_, Option<i64>>(key(&name))
            .await
            .map_err(store_failed)?;
        Ok(Json(Count {
            name,
            value: value.unwrap_or(0),
        }))
    }

    /// Today's forecast for a city, from the forecast service.
    #[tool]
    async fn forecast(
        &self,
        /// The city, as the forecast service names it.
        #[schemars(length(min = 1, max = 100))]
        city: String,
    ) -> Result<Json<Forecast>, HandlerError> {
        let Some(api) = &self.api else {
            return Err(HandlerError::tool(format!(
                "no forecast service: set {API_URL_VAR}"
            )));
        };
        let answer = self
            .http
            .get(format!("{api}/forecast"))
            .query(&[("city", city.as_str())])
            .send()
            .await
            .map_err(|err| {
                HandlerError::tool(format!("the forecast service is unreachable: {err}"))
            })?;
        if !answer.status().is_success() {
            return Err(HandlerError::tool(format!(
                "the forecast service answered {} for {city}",
                answer.status()
            )));
        }
        let forecast = answer.json::<Forecast>().await.map_err(|err| {
            HandlerError::tool(format!(
                "the forecast service answered something else than a forecast: {err}"
            ))
        })?;
        Ok(Json(forecast))
    }
}

fn main() -> ExitCode {
    cli::run(
        Program::new("stateful", env!("CARGO_PKG_VERSION")),
        |config| {
            // One state per node, shared by every call.
            State::from_config(config)
                .into_builder()
                .page_size(config.page_size)
                .build()
        },
    )
}
