//! [`HttpError`]: every transport-level failure, with its HTTP status and
//! JSON-RPC code declared once, rendered as a JSON-RPC error body.

use actix_web::http::StatusCode;
use actix_web::http::header::{ALLOW, CONTENT_TYPE, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use mcp_cluster_protocol::{DecodeError, ErrorCode, ErrorObject, Message, RequestId, Response};
use mcp_cluster_runtime::{Quota, Refusal, RuntimeError};

/// What a 503 of an unavailable store or node says of when to retry.
const UNAVAILABLE_RETRY_AFTER_SECS: u64 = 1;

/// Why the transport refused a request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// `Origin` not in the allow-list (403; DNS rebinding protection).
    #[error("origin not allowed")]
    ForbiddenOrigin,
    /// `Host` not in the allow-list (403; DNS rebinding protection).
    #[error("host not allowed")]
    ForbiddenHost,
    /// POST body is not `application/json` (415).
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// `Accept` does not list what the method needs (406).
    #[error("{0}")]
    NotAcceptable(&'static str),
    /// `MCP-Protocol-Version` names a revision this server does not serve (400).
    #[error("unsupported MCP-Protocol-Version: {0}")]
    UnsupportedVersion(String),
    /// Body over the limit (413).
    #[error("request body exceeds {0} bytes")]
    PayloadTooLarge(usize),
    /// The body could not be read (400).
    #[error("request body could not be read")]
    BodyRead,
    /// The body did not arrive in time (408; the connection is closed).
    #[error("request body not received within {0} s")]
    BodyTimeout(u64),
    /// Not a valid JSON-RPC message (400).
    #[error("{}", .0.message)]
    Decode(DecodeError),
    /// No `Mcp-Session-Id` on a request that needs one (400).
    #[error("missing Mcp-Session-Id header")]
    MissingSession,
    /// `Mcp-Session-Id` is not 1-128 visible ASCII characters (400).
    #[error("malformed Mcp-Session-Id header")]
    MalformedSession,
    /// Unknown, ended or expired session (404).
    #[error("session not found")]
    SessionNotFound,
    /// A request that is not valid here (400), e.g. a batch outside 2025-03-26.
    #[error("{message}")]
    InvalidRequest {
        /// What is wrong.
        message: String,
        /// The request id, when known.
        id: Option<RequestId>,
    },
    /// `Mcp-Method`, `Mcp-Name` or `Mcp-Param-*` disagree with the body
    /// (400, -32020).
    #[error("header mismatch: {message}")]
    HeaderMismatch {
        /// What disagrees.
        message: String,
        /// The request id, when known.
        id: Option<RequestId>,
    },
    /// Malformed `Last-Event-ID` or one not of this session (400).
    #[error("{0}")]
    BadLastEventId(&'static str),
    /// HTTP method not served at this path (405 with `Allow`).
    #[error("method not allowed")]
    MethodNotAllowed(&'static str),
    /// The node is overloaded, draining, or its store is down (503).
    #[error("{0}")]
    Unavailable(&'static str),
    /// Authorization refused the request: 401 (no or invalid token), 403
    /// (insufficient scope), 503 (the authorization server is down). 401
    /// and 403 carry `WWW-Authenticate`.
    #[error("{error}")]
    Auth {
        /// Why.
        error: mcp_cluster_auth::AuthError,
        /// The `WWW-Authenticate` value.
        challenge: String,
    },
    /// A quota refused (429 with `Retry-After`; the body's `error.data`
    /// names the quota).
    #[error("{}", .quota.client_message())]
    QuotaExceeded {
        /// Which.
        quota: Quota,
        /// Whole seconds to wait before trying again, at least 1.
        retry_after_secs: u64,
    },
    /// A hosted server's limit refused a new session: 429 (the client's
    /// limit) or 503 (the node's), with `Retry-After`.
    #[error("{message}")]
    HostedLimit {
        /// The client's limit, not the node's.
        client: bool,
        /// Which limit.
        message: String,
        /// Whole seconds to wait before trying again, at least 1.
        retry_after_secs: u64,
    },
    /// A stateless (2026-07-28) request refused with its own JSON-RPC
    /// error and the status that revision gives it (400 for a version,
    /// header, capability or `_meta` error, 404 for an unknown method).
    #[error("{}", error.message)]
    Rpc {
        /// The HTTP status.
        status: StatusCode,
        /// The JSON-RPC error, as sent.
        error: ErrorObject,
        /// The request answered.
        id: Option<RequestId>,
    },
    /// Another error, answering the request with this id (the body's error
    /// carries it, as JSON-RPC asks when the id could be read).
    #[error("{error}")]
    ForRequest {
        /// The request answered.
        id: RequestId,
        /// What went wrong.
        error: Box<HttpError>,
    },
}

impl HttpError {
    /// The JSON-RPC code of the error body.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Decode(err) => err.code,
            Self::HeaderMismatch { .. } => ErrorCode::HEADER_MISMATCH,
            Self::Unavailable(_) => ErrorCode::INTERNAL_ERROR,
            Self::QuotaExceeded { .. } | Self::HostedLimit { client: true, .. } => {
                ErrorCode::QUOTA_EXCEEDED
            }
            Self::HostedLimit { client: false, .. } => ErrorCode::INTERNAL_ERROR,
            Self::Auth {
                error:
                    mcp_cluster_auth::AuthError::Unavailable(_)
                    | mcp_cluster_auth::AuthError::Throttled { .. },
                ..
            } => ErrorCode::INTERNAL_ERROR,
            Self::ForRequest { error, .. } => error.code(),
            Self::Rpc { error, .. } => error.code,
            _ => ErrorCode::INVALID_REQUEST,
        }
    }

    /// The id the error body carries.
    pub fn id(&self) -> Option<RequestId> {
        match self {
            Self::Decode(err) => err.id.clone(),
            Self::InvalidRequest { id, .. }
            | Self::HeaderMismatch { id, .. }
            | Self::Rpc { id, .. } => id.clone(),
            Self::ForRequest { id, .. } => Some(id.clone()),
            _ => None,
        }
    }

    /// The error body's `data`, when it has any: an answer that says when
    /// to retry (`Retry-After`) says it in the body too, in seconds and in
    /// milliseconds (`retryAfterMs`, the next revision's field).
    pub fn data(&self) -> Option<serde_json::Value> {
        match self.inner() {
            Self::QuotaExceeded {
                quota,
                retry_after_secs,
            } => {
                let mut data = mcp_cluster_protocol::retry_after_data(*retry_after_secs);
                data["quota"] = quota.name().into();
                Some(data)
            }
            Self::HostedLimit {
                retry_after_secs, ..
            } => Some(mcp_cluster_protocol::retry_after_data(*retry_after_secs)),
            Self::Unavailable(_) => Some(mcp_cluster_protocol::retry_after_data(
                UNAVAILABLE_RETRY_AFTER_SECS,
            )),
            Self::Auth { error, .. } => error
                .retry_after_secs()
                .map(mcp_cluster_protocol::retry_after_data),
            Self::Rpc { error, .. } => error.data.clone(),
            _ => None,
        }
    }

    /// The error as the answer to request `id` (when known): its body then
    /// carries that id unless it names one already.
    #[must_use]
    pub fn for_request(self, id: Option<RequestId>) -> Self {
        match id {
            Some(id) if self.id().is_none() => Self::ForRequest {
                id,
                error: Box::new(self),
            },
            _ => self,
        }
    }

    /// Label of `mcp_http_rejections_total`.
    pub fn reason(&self) -> &'static str {
        match self.inner() {
            Self::ForbiddenOrigin => "forbidden_origin",
            Self::ForbiddenHost => "forbidden_host",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::NotAcceptable(_) => "not_acceptable",
            Self::UnsupportedVersion(_) => "unsupported_version",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::BodyRead => "body_read",
            Self::BodyTimeout(_) => "body_timeout",
            Self::Decode(_) => "malformed_message",
            Self::MissingSession => "missing_session",
            Self::MalformedSession => "malformed_session",
            Self::SessionNotFound => "session_not_found",
            Self::InvalidRequest { .. } => "invalid_request",
            Self::HeaderMismatch { .. } => "header_mismatch",
            Self::BadLastEventId(_) => "bad_last_event_id",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::Unavailable(_) => "unavailable",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::HostedLimit { .. } => "upstream_busy",
            Self::Auth { error, .. } => match error {
                mcp_cluster_auth::AuthError::InsufficientScope(_) => "insufficient_scope",
                mcp_cluster_auth::AuthError::Unavailable(_) => "auth_unavailable",
                mcp_cluster_auth::AuthError::Throttled { .. } => "auth_throttled",
                _ => "unauthorized",
            },
            Self::ForRequest { error, .. } => error.reason(),
            Self::Rpc { error, .. } => match error.code {
                ErrorCode::METHOD_NOT_FOUND => "method_not_found",
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION => "unsupported_version",
                ErrorCode::HEADER_MISMATCH => "header_mismatch",
                ErrorCode::MISSING_CLIENT_CAPABILITY => "missing_capability",
                _ => "invalid_request",
            },
        }
    }

    /// The error itself, without the request it answers.
    fn inner(&self) -> &Self {
        match self {
            Self::ForRequest { error, .. } => error.inner(),
            other => other,
        }
    }
}

impl From<RuntimeError> for HttpError {
    fn from(err: RuntimeError) -> Self {
        let message = err.client_message();
        if let (RuntimeError::QuotaExceeded { quota, .. }, Some(retry_after_secs)) =
            (&err, err.retry_after_secs())
        {
            return Self::QuotaExceeded {
                quota: *quota,
                retry_after_secs,
            };
        }
        let retry_after_secs = err.retry_after_secs().unwrap_or(1);
        match err {
            RuntimeError::HostedLimit {
                client, message, ..
            } => Self::HostedLimit {
                client,
                message,
                retry_after_secs,
            },
            RuntimeError::SessionNotFound => Self::SessionNotFound,
            RuntimeError::UnknownEvent | RuntimeError::EventsExpired => {
                Self::BadLastEventId(message)
            }
            RuntimeError::Store(err) => {
                tracing::warn!(error = %err, "Store failure.");
                Self::Unavailable(message)
            }
            _ => Self::Unavailable(message),
        }
    }
}

impl From<Refusal> for HttpError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Invalid { message, id } => Self::InvalidRequest { message, id },
            Refusal::Runtime { error, id, .. } => Self::from(error).for_request(id),
        }
    }
}

impl ResponseError for HttpError {
    fn status_code(&self) -> StatusCode {
        match self.inner() {
            Self::ForbiddenOrigin | Self::ForbiddenHost => StatusCode::FORBIDDEN,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::QuotaExceeded { .. } | Self::HostedLimit { client: true, .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::HostedLimit { client: false, .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Auth { error, .. } => match error {
                mcp_cluster_auth::AuthError::InsufficientScope(_) => StatusCode::FORBIDDEN,
                mcp_cluster_auth::AuthError::Unavailable(_)
                | mcp_cluster_auth::AuthError::Throttled { .. } => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            },
            Self::UnsupportedVersion(_)
            | Self::BodyRead
            | Self::Decode(_)
            | Self::MissingSession
            | Self::MalformedSession
            | Self::InvalidRequest { .. }
            | Self::HeaderMismatch { .. }
            | Self::BadLastEventId(_) => StatusCode::BAD_REQUEST,
            Self::ForRequest { error, .. } => error.status_code(),
            Self::Rpc { status, .. } => *status,
        }
    }

    fn error_response(&self) -> HttpResponse {
        // Client mistakes and attacks alike: never above debug, so that no
        // client can flood the log.
        tracing::debug!(status = %self.status_code(), error = %self, "Request refused.");
        mcp_cluster_telemetry::metrics::metrics()
            .http_rejections
            .with_label_values(&[self.reason()])
            .inc();
        let mut builder = HttpResponse::build(self.status_code());
        if let Self::MethodNotAllowed(allow) = self.inner() {
            builder.insert_header((ALLOW, *allow));
        }
        if matches!(self.inner(), Self::BodyTimeout(_)) {
            // The rest of the body may still trickle in: never read it.
            builder.force_close();
        }
        match self.inner() {
            Self::Unavailable(_) => {
                builder.insert_header((RETRY_AFTER, UNAVAILABLE_RETRY_AFTER_SECS.to_string()));
            }
            Self::Auth { error, .. } if error.retry_after_secs().is_some() => {
                let secs = error.retry_after_secs().unwrap_or(1);
                builder.insert_header((RETRY_AFTER, secs.to_string()));
            }
            Self::Auth { challenge, .. } => {
                builder.insert_header((
                    actix_web::http::header::WWW_AUTHENTICATE,
                    challenge.as_str(),
                ));
            }
            Self::QuotaExceeded {
                retry_after_secs, ..
            }
            | Self::HostedLimit {
                retry_after_secs, ..
            } => {
                builder.insert_header((RETRY_AFTER, retry_after_secs.to_string()));
            }
            _ => {}
        }
        let mut error = ErrorObject::new(self.code(), self.to_string());
        error.data = self.data();
        let body = Message::Response(Response::error(self.id(), error));
        builder
            .insert_header((CONTENT_TYPE, "application/json"))
            .body(body.to_json())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use actix_web::body::MessageBody;

    use super::*;

    #[test]
    fn a_quota_refusal_is_429_with_retry_after_and_names_the_quota() {
        let refusal = Refusal::Runtime {
            error: RuntimeError::QuotaExceeded {
                quota: Quota::SessionsPerPrincipal,
                retry_after: Duration::from_millis(1500),
            },
            id: Some(RequestId::Number(3)),
            batch: Vec::new(),
        };
        let err = HttpError::from(refusal);
        assert_eq!(err.status_code(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(err.reason(), "quota_exceeded");
        let response = err.error_response();
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "2");
        let body = response.into_body().try_into_bytes().unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["id"], 3);
        assert_eq!(body["error"]["code"], -32029);
        assert_eq!(body["error"]["data"]["quota"], "sessions_per_principal");
        assert_eq!(body["error"]["data"]["retryAfterSeconds"], 2);
        assert_eq!(body["error"]["data"]["retryAfterMs"], 2000);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("sessions_per_principal")
        );
    }

    #[test]
    fn an_unavailable_node_says_when_to_retry_in_the_header_and_the_body() {
        let err = HttpError::from(RuntimeError::Store(
            mcp_cluster_store::StoreError::Unavailable("redis did not answer".into()),
        ));
        assert_eq!(err.status_code(), StatusCode::SERVICE_UNAVAILABLE);
        let response = err.error_response();
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
        let body = response.into_body().try_into_bytes().unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body["error"]["data"],
            serde_json::json!({"retryAfterSeconds": 1, "retryAfterMs": 1000})
        );
    }
}
