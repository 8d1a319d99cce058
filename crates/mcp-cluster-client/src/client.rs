//! [`Client`]: one MCP session over Streamable HTTP.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::sse::SseStream;

/// `Mcp-Session-Id`.
const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// The `Mcp-Session-Id` a server's answer names, if it names one (as
/// visible ASCII).
pub fn session_id_of(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The HTTP exchange failed.
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    /// A body was not JSON.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The server answered with an unexpected status.
    #[error("unexpected status {status}: {body}")]
    Status {
        /// The status.
        status: StatusCode,
        /// The body.
        body: String,
    },
    /// The server answered but broke the protocol.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A client setting cannot work (see [`crate::HttpOptions`]).
    #[error("client configuration: {0}")]
    Config(String),
}

/// What a POST got back.
#[derive(Debug)]
pub enum Reply {
    /// 202 Accepted.
    Accepted,
    /// A JSON body (with the response headers).
    Json(Value, HeaderMap),
    /// An SSE stream.
    Sse(SseStream),
    /// Any other status, with its body and headers (a refusal's
    /// `Retry-After`, say).
    Status(StatusCode, String, HeaderMap),
}

/// A response body, read up to `max` bytes: a longer one is an error, and
/// what was read of it is dropped.
async fn bounded_body(response: reqwest::Response, max: usize) -> Result<Vec<u8>, ClientError> {
    use futures_util::StreamExt;
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        if body.len() + chunk.len() > max {
            return Err(ClientError::Protocol(format!("a body over {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// One session with a Streamable HTTP MCP server.
pub struct Client {
    http: reqwest::Client,
    url: String,
    session: Option<String>,
    protocol_version: String,
    next_id: AtomicI64,
    /// The largest JSON body or SSE event read ([`Self::set_max_message_bytes`]).
    max_message_bytes: usize,
    /// Where each request's bearer token comes from ([`Self::set_bearer`]).
    bearer: Option<BearerSource>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("url", &self.url)
            .field("session", &self.session)
            .field("protocol_version", &self.protocol_version)
            .field("bearer", &self.bearer.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

/// Gives the bearer token a request carries now (`None`: none).
pub type BearerSource = std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>;

impl Client {
    /// A client for the endpoint `url`, speaking `protocol_version`.
    pub fn new(url: &str, protocol_version: &str) -> Self {
        Self::with_http(crate::http::default_client(), url, protocol_version)
    }

    /// A client sharing a connection pool.
    pub fn with_http(http: reqwest::Client, url: &str, protocol_version: &str) -> Self {
        Self {
            http,
            url: url.to_owned(),
            session: None,
            protocol_version: protocol_version.to_owned(),
            next_id: AtomicI64::new(1),
            max_message_bytes: crate::sse::MAX_BLOCK_BYTES,
            bearer: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` with every request from now
    /// on, the token as `source` gives it at the time (a file read again
    /// when it changes, say).
    pub fn set_bearer(&mut self, source: BearerSource) {
        self.bearer = Some(source);
    }

    /// Reads no JSON body, and no SSE event, over `max` bytes: a larger one
    /// is an error ([`ClientError::Protocol`]) and is not held. Default
    /// [`crate::sse::MAX_BLOCK_BYTES`].
    pub fn set_max_message_bytes(&mut self, max: usize) {
        self.max_message_bytes = max;
    }

    /// Speaks `version` from now on (the one `initialize` negotiated).
    pub fn set_protocol_version(&mut self, version: &str) {
        version.clone_into(&mut self.protocol_version);
    }

    /// The session id, once initialized.
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Uses an existing session id.
    pub fn set_session_id(&mut self, id: Option<String>) {
        self.session = id;
    }

    /// The protocol version it speaks (sent as `MCP-Protocol-Version`).
    pub fn protocol_version(&self) -> &str {
        &self.protocol_version
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A fresh request id.
    pub fn next_id(&self) -> i64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// `initialize` then `notifications/initialized`; returns the result.
    ///
    /// # Errors
    /// Any failure of either step.
    pub async fn initialize(&mut self, capabilities: Value) -> Result<Value, ClientError> {
        let body = json!({
            "jsonrpc": "2.0", "id": self.next_id(), "method": "initialize",
            "params": {"protocolVersion": self.protocol_version, "capabilities": capabilities,
                       "clientInfo": {"name": "mcp-cluster-client", "version": env!("CARGO_PKG_VERSION")}}
        });
        let response = self
            .http
            .post(&self.url)
            .headers(self.headers(false))
            .json(&body)
            .send()
            .await?;
        let session = session_id_of(response.headers());
        // Servers may answer with a JSON body or with an SSE stream that
        // carries the response (the official SDKs do the latter).
        let value = match self.reply(response).await? {
            Reply::Json(value, _) => value,
            Reply::Sse(mut stream) => loop {
                match stream.next_message().await? {
                    Some(message) if message.get("id") == body.get("id") => break message,
                    Some(_) => {}
                    None => {
                        return Err(ClientError::Protocol(
                            "initialize stream ended without the response".into(),
                        ));
                    }
                }
            },
            Reply::Status(status, body, _) => return Err(ClientError::Status { status, body }),
            Reply::Accepted => {
                return Err(ClientError::Protocol("initialize answered with 202".into()));
            }
        };
        let result = value
            .get("result")
            .cloned()
            .ok_or_else(|| ClientError::Protocol(format!("initialize failed: {value}")))?;
        if let Some(v) = result.get("protocolVersion").and_then(Value::as_str) {
            self.protocol_version = v.to_owned();
        }
        self.session = session;
        match self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?
        {
            Reply::Accepted => Ok(result),
            other => Err(ClientError::Protocol(format!(
                "initialized notification got {other:?}"
            ))),
        }
    }

    fn headers(&self, with_session: bool) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(v) = HeaderValue::from_str(&self.protocol_version) {
            h.insert(HeaderName::from_static(PROTOCOL_VERSION), v);
        }
        if with_session
            && let Some(v) = self
                .session
                .as_deref()
                .and_then(|s| HeaderValue::from_str(s).ok())
        {
            h.insert(HeaderName::from_static(SESSION_ID), v);
        }
        if let Some(v) = self
            .bearer
            .as_ref()
            .and_then(|source| source())
            .and_then(|token| HeaderValue::from_str(&format!("Bearer {token}")).ok())
        {
            let mut v = v;
            v.set_sensitive(true);
            h.insert(reqwest::header::AUTHORIZATION, v);
        }
        h
    }

    /// POSTs one message (or batch) with the session headers.
    ///
    /// # Errors
    /// The HTTP exchange failed.
    pub async fn post(&self, body: &Value) -> Result<Reply, ClientError> {
        self.post_with(body, HeaderMap::new()).await
    }

    /// POSTs with extra headers (which replace the defaults of the same name).
    ///
    /// # Errors
    /// The HTTP exchange failed.
    pub async fn post_with(&self, body: &Value, extra: HeaderMap) -> Result<Reply, ClientError> {
        let mut headers = self.headers(true);
        for (k, v) in &extra {
            headers.insert(k.clone(), v.clone());
        }
        let response = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(body.to_string())
            .send()
            .await?;
        self.reply(response).await
    }

    async fn reply(&self, response: reqwest::Response) -> Result<Reply, ClientError> {
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if status == StatusCode::ACCEPTED {
            return Ok(Reply::Accepted);
        }
        let max = self.max_message_bytes;
        if status != StatusCode::OK {
            let headers = response.headers().clone();
            let body = bounded_body(response, max).await?;
            return Ok(Reply::Status(
                status,
                String::from_utf8_lossy(&body).into_owned(),
                headers,
            ));
        }
        if content_type.starts_with("text/event-stream") {
            return Ok(Reply::Sse(SseStream::with_max_block_bytes(response, max)));
        }
        let headers = response.headers().clone();
        let body = bounded_body(response, max).await?;
        Ok(Reply::Json(serde_json::from_slice(&body)?, headers))
    }

    /// Sends a request and returns its response message (the whole JSON-RPC
    /// response object), reading an SSE answer to its end. Notifications
    /// seen on the way are returned too.
    ///
    /// # Errors
    /// Transport failures, or a stream that ends without the response.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
    ) -> Result<(Value, Vec<Value>), ClientError> {
        let id = self.next_id();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        match self.post(&body).await? {
            Reply::Json(v, _) => Ok((v, Vec::new())),
            Reply::Sse(mut stream) => {
                let mut seen = Vec::new();
                while let Some(message) = stream.next_message().await? {
                    if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                        return Ok((message, seen));
                    }
                    seen.push(message);
                }
                Err(ClientError::Protocol(
                    "stream ended without the response".into(),
                ))
            }
            Reply::Accepted => Err(ClientError::Protocol("request answered with 202".into())),
            Reply::Status(status, body, _) => Err(ClientError::Status { status, body }),
        }
    }

    /// Opens a GET stream: the standalone stream, or with `last_event_id`
    /// the resumption of the stream it names.
    ///
    /// # Errors
    /// The HTTP exchange failed.
    pub async fn get(&self, last_event_id: Option<&str>) -> Result<Reply, ClientError> {
        let mut headers = self.headers(true);
        headers.remove(CONTENT_TYPE);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(id) = last_event_id {
            headers.insert(
                HeaderName::from_static("last-event-id"),
                HeaderValue::from_str(id).map_err(|err| ClientError::Protocol(err.to_string()))?,
            );
        }
        let response = self.http.get(&self.url).headers(headers).send().await?;
        self.reply(response).await
    }

    /// Ends the session (HTTP DELETE); returns the status.
    ///
    /// # Errors
    /// The HTTP exchange failed.
    pub async fn delete(&self) -> Result<StatusCode, ClientError> {
        Ok(self.delete_with_headers().await?.0)
    }

    /// Ends the session (HTTP DELETE); returns the status and the response
    /// headers (a refusal's `Retry-After`, say).
    ///
    /// # Errors
    /// The HTTP exchange failed.
    pub async fn delete_with_headers(&self) -> Result<(StatusCode, HeaderMap), ClientError> {
        let mut headers = self.headers(true);
        headers.remove(CONTENT_TYPE);
        let response = self
            .http
            .delete(&self.url)
            .headers(headers)
            .timeout(Duration::from_secs(30))
            .send()
            .await?;
        Ok((response.status(), response.headers().clone()))
    }
}
