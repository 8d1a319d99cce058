//! Errors: [`ClusterError`] for startup, and the mapping of Redis failures
//! onto [`StoreError`] for every port call.

#[cfg(feature = "client")]
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "client")]
use mcp_cluster_store::StoreError;

/// Why [`crate::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// A configuration value cannot work.
    #[error("invalid redis configuration: {0}")]
    Config(String),
    #[cfg(feature = "client")]
    /// The URL does not parse.
    #[error("invalid redis url")]
    Url(#[source] redis::RedisError),
    #[cfg(feature = "client")]
    /// Redis could not be reached or refused the connection.
    #[error("cannot connect to redis")]
    Connect(#[source] redis::RedisError),
    /// Redis did not answer in time.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    #[cfg(feature = "client")]
    /// Redis was reached but the connection cannot work as configured:
    /// credentials refused, a certificate not trusted or refused, TLS on one
    /// side only. Unlike [`Self::Connect`] it lasts until the configuration,
    /// its files or Redis change.
    #[error("cannot connect to redis: {hint}")]
    Rejected {
        /// What to check, for the operator.
        hint: &'static str,
        /// The client's error.
        #[source]
        source: redis::RedisError,
    },
}

impl ClusterError {
    /// Whether Redis was reached and refused the node as configured
    /// ([`Self::Rejected`]).
    pub fn is_rejection(&self) -> bool {
        #[cfg(feature = "client")]
        if let Self::Rejected { .. } = self {
            return true;
        }
        false
    }

    /// Whether Redis could not be reached or did not answer in time
    /// ([`Self::Connect`], [`Self::Timeout`]): waiting may mend it.
    pub fn is_outage(&self) -> bool {
        #[cfg(feature = "client")]
        if let Self::Connect(_) = self {
            return true;
        }
        matches!(self, Self::Timeout(_))
    }
}

#[cfg(feature = "client")]
/// The error of a failed connection attempt: [`ClusterError::Rejected`] with
/// a hint when the cause is one an operator must fix (credentials,
/// certificates, TLS on one side only), [`ClusterError::Config`] for a
/// client configuration the Redis client refused, else
/// [`ClusterError::Connect`]. `tls`: whether the client spoke TLS.
pub(crate) fn connect_failed(err: redis::RedisError, tls: bool) -> ClusterError {
    match rejection(&err, tls) {
        Some(hint) => ClusterError::Rejected { hint, source: err },
        None if err.kind() == redis::ErrorKind::InvalidClientConfig => {
            ClusterError::Config(err.to_string())
        }
        None => ClusterError::Connect(err),
    }
}

#[cfg(feature = "client")]
/// What to check when `err` is a rejection rather than an outage.
fn rejection(err: &redis::RedisError, tls: bool) -> Option<&'static str> {
    let code = err.code().unwrap_or_default();
    if err.kind() == redis::ErrorKind::AuthenticationFailed || code == "WRONGPASS" {
        return Some("wrong user or password (check the url and password_file)");
    }
    if code == "NOAUTH" {
        return Some("redis wants a password (in the url or password_file)");
    }
    if let Some(tls) = tls_error(err) {
        use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as Tls};
        return Some(match tls {
            Tls::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
                "redis's certificate is not signed by a trusted CA (check ca_file)"
            }
            Tls::InvalidCertificate(
                Cert::NotValidForName | Cert::NotValidForNameContext { .. },
            ) => "redis's certificate does not name the url's host",
            Tls::InvalidCertificate(
                Cert::Expired
                | Cert::ExpiredContext { .. }
                | Cert::NotValidYet
                | Cert::NotValidYetContext { .. },
            ) => "redis's certificate has expired or is not valid yet",
            Tls::InvalidCertificate(_) => "redis's certificate is not acceptable",
            Tls::AlertReceived(
                Alert::CertificateRequired
                | Alert::BadCertificate
                | Alert::UnknownCA
                | Alert::CertificateUnknown
                | Alert::UnsupportedCertificate
                | Alert::AccessDenied,
            ) => {
                "redis refused this node's client certificate or wants one \
                 (check client_cert_file and client_key_file)"
            }
            Tls::InvalidMessage(_) => {
                "not a TLS server: is this redis's plain port? (redis:// for it, or its tls-port)"
            }
            _ => "the TLS handshake with redis failed",
        });
    }
    // A plain client on a TLS port: the server takes the first command for
    // a bad TLS record and resets the connection (or answers with an
    // alert, which is no RESP reply). A Redis that is merely down refuses
    // the connection instead.
    let reset = io_error(err).is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::UnexpectedEof
                | std::io::ErrorKind::BrokenPipe
        )
    });
    if !tls && (reset || err.kind() == redis::ErrorKind::Parse) {
        return Some(
            "redis dropped the connection before answering: is this a TLS port? (use rediss://)",
        );
    }
    None
}

#[cfg(feature = "client")]
/// The I/O error `err` stands for, if any.
fn io_error(err: &redis::RedisError) -> Option<&std::io::Error> {
    let source = std::error::Error::source(err)?;
    match source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
        Some(shared) => shared.downcast_ref::<std::io::Error>(),
        None => source.downcast_ref::<std::io::Error>(),
    }
}

#[cfg(feature = "client")]
/// The TLS error under `err`, if any (the client wraps it in an I/O error,
/// whose `source()` skips it).
fn tls_error(err: &redis::RedisError) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(mut current) = cause {
        // The client keeps its causes in an `Arc`, which is itself the
        // `source()`.
        if let Some(shared) = current.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
            current = shared.as_ref();
        }
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        cause = current.source();
    }
    None
}

#[cfg(feature = "client")]
/// A Redis failure, as the ports report it: the request fails fast.
pub(crate) fn unavailable(err: &redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis: {err}"))
}

#[cfg(feature = "client")]
/// A command that outlived its timeout.
pub(crate) fn timed_out(timeout: Duration) -> StoreError {
    StoreError::Unavailable(format!(
        "redis did not answer within {} ms",
        timeout.as_millis()
    ))
}

#[cfg(feature = "client")]
/// Stored data that does not decode.
pub(crate) fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

#[cfg(feature = "client")]
#[cfg(test)]
mod tests {
    use super::*;

    fn tls(err: rustls::Error) -> redis::RedisError {
        redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::InvalidData, err))
    }

    fn hint(err: redis::RedisError) -> String {
        match connect_failed(err, true) {
            ClusterError::Rejected { hint, .. } => hint.to_owned(),
            other => panic!("not a rejection: {other}"),
        }
    }

    #[test]
    fn rejections_say_what_to_check() {
        let auth = redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "nope"));
        assert!(hint(auth).contains("password"));
        let unknown_ca = tls(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        assert!(hint(unknown_ca).contains("ca_file"));
        let no_client_cert = tls(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired,
        ));
        assert!(hint(no_client_cert).contains("client_cert_file"));
        let plain_port = tls(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert!(hint(plain_port).contains("plain port"));
        // A plain client whose connection is reset at once: a TLS port.
        let reset =
            || redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        match connect_failed(reset(), false) {
            ClusterError::Rejected { hint, .. } => assert!(hint.contains("rediss://"), "{hint}"),
            other => panic!("not a rejection: {other}"),
        }
        // An outage stays an outage.
        assert!(matches!(
            connect_failed(reset(), true),
            ClusterError::Connect(_)
        ));
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(
            connect_failed(refused, false),
            ClusterError::Connect(_)
        ));
    }
}
