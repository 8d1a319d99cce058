//! The node's own HTTPS: its certificate and key (PEM files), served through
//! a [`ReloadingCert`] that a task refreshes when the files change, so a
//! renewed certificate is used without a restart.
//!
//! Each new TLS handshake asks the resolver for the current pair; a
//! connection keeps the certificate it was opened with. Every
//! `reload_interval_secs` the task reads both files and, when either
//! changed, loads the pair: one that parses and whose key matches the
//! certificate replaces the current one; anything else (a missing file, a
//! half-written pair, a key of another certificate) is logged once and the
//! current pair stays. Both outcomes are counted in
//! `mcp_tls_certificate_reloads_total`.
//!
//! Contents, not modification times, decide what changed: a Kubernetes
//! Secret volume swaps a symlink (the files' own times may not move), and
//! `cp -p` keeps old times. Two small files per interval are cheap.
//!
//! What this module leaves to others: binding the listener with the
//! configuration it makes (`node`), the connection gate (`mcp-cluster-http`), and
//! the admin listener, which stays plain HTTP.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::config::TlsConfig;

/// Why a certificate and key pair cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("tls: cannot read {what} {}: {source}", path.display())]
    Read {
        /// `cert_file` or `key_file`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("tls: no PEM certificate in cert_file {}", .0.display())]
    NoCertificate(PathBuf),
    /// The key file holds no PEM private key.
    #[error("tls: no PEM private key in key_file {}", .0.display())]
    NoKey(PathBuf),
    /// The key is of a kind the TLS library does not sign with.
    #[error("tls: key_file {}: {source}", path.display())]
    UnsupportedKey {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// The key is not the certificate's.
    #[error("tls: key_file {} is not the key of cert_file {}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The TLS configuration could not be built.
    #[error("tls: {0}")]
    Config(#[source] rustls::Error),
}

/// The two files' bytes, as last read.
#[derive(Clone, PartialEq, Eq)]
struct Files {
    cert: Vec<u8>,
    key: Vec<u8>,
}

/// The certificate served to new handshakes, and what the reload task
/// compares the files with. Shared by the TLS configuration of every HTTP
/// worker (main listener and, while the node waits for Redis, the
/// placeholder) and, weakly, by the reload task.
pub struct ReloadingCert {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    /// Written by the reload task, read by every handshake; held for a
    /// pointer copy only.
    current: RwLock<Arc<CertifiedKey>>,
    /// The files as last read (served, or refused and already reported).
    /// Only the reload task touches it.
    seen: Mutex<Files>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

/// What one look at the files found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// Same contents as last time: nothing to do.
    Unchanged,
    /// A new pair is served from now on.
    Reloaded,
    /// The new contents cannot be served; the current pair stays.
    Rejected,
}

impl ReloadingCert {
    /// Loads the pair named by `config`.
    ///
    /// # Errors
    /// A file cannot be read, holds no certificate or key, or the key is not
    /// the certificate's: the one line says which.
    pub fn load(config: &TlsConfig) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let files = read_files(&config.cert_file, &config.key_file)?;
        let key = certified_key(&files, &config.cert_file, &config.key_file, &provider)?;
        Ok(Arc::new(Self {
            cert_file: config.cert_file.clone(),
            key_file: config.key_file.clone(),
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new(files),
        }))
    }

    /// The certificate chain served now (DER, the node's own first).
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .cert
            .clone()
    }

    /// The server configuration for the main listener: TLS 1.2 and 1.3,
    /// no client certificates, the certificate from this resolver (actix
    /// adds the `http/1.1` ALPN protocol).
    ///
    /// # Errors
    /// [`TlsError::Config`] when the protocol versions are refused (never
    /// with the built-in provider).
    pub fn server_config(self: &Arc<Self>) -> Result<rustls::ServerConfig, TlsError> {
        let resolver: Arc<dyn ResolvesServerCert> = Arc::clone(self) as _;
        Ok(
            rustls::ServerConfig::builder_with_provider(Arc::clone(&self.provider))
                .with_safe_default_protocol_versions()
                .map_err(TlsError::Config)?
                .with_no_client_auth()
                .with_cert_resolver(resolver),
        )
    }

    /// Reads both files and serves the pair they hold if it changed and
    /// loads; records the outcome (log and metric) when not unchanged.
    /// Blocking: reads two files.
    pub fn reload(&self) -> Reload {
        let read = read_files(&self.cert_file, &self.key_file);
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let loaded = match read {
            // A file that cannot be read now (mid-replacement, say) is
            // looked at again next time; reported when it stays so.
            Err(err) => Err((err, None)),
            Ok(files) if files == *seen => return Reload::Unchanged,
            Ok(files) => {
                match certified_key(&files, &self.cert_file, &self.key_file, &self.provider) {
                    Ok(key) => Ok((key, files)),
                    Err(err) => Err((err, Some(files))),
                }
            }
        };
        let metrics = mcp_cluster_telemetry::metrics::metrics();
        match loaded {
            Ok((key, files)) => {
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(key);
                *seen = files;
                metrics.tls_reloads.with_label_values(&[RELOADED]).inc();
                tracing::info!(
                    cert_file = %self.cert_file.display(),
                    "TLS certificate reloaded; new connections get it."
                );
                Reload::Reloaded
            }
            Err((err, files)) => {
                if let Some(files) = files {
                    // Reported once per bad content, not every interval.
                    *seen = files;
                }
                metrics.tls_reloads.with_label_values(&[REJECTED]).inc();
                tracing::warn!(
                    error = %err,
                    "TLS certificate files changed but cannot be served; keeping the current certificate."
                );
                Reload::Rejected
            }
        }
    }
}

/// Outcome label of a reload that took effect.
const RELOADED: &str = "reloaded";
/// Outcome label of changed files that could not be served.
const REJECTED: &str = "rejected";

/// Starts the task that calls [`ReloadingCert::reload`] every `interval`
/// on the current actix system. Owner: that system; stop path: the task
/// ends at its first tick after the last strong reference to `cert` (the
/// listeners' TLS configurations) is dropped, or with the system.
pub(crate) fn spawn_reload(cert: &Arc<ReloadingCert>, interval: Duration) {
    let cert: Weak<ReloadingCert> = Arc::downgrade(cert);
    actix_web::rt::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: the pair was just loaded.
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(strong) = cert.upgrade() else {
                break;
            };
            // Blocking file reads off the system's thread.
            let Ok(outcome) = tokio::task::spawn_blocking(move || strong.reload()).await else {
                break;
            };
            tracing::debug!(?outcome, "TLS certificate files checked.");
        }
    });
}

/// Reads both files.
fn read_files(cert_file: &Path, key_file: &Path) -> Result<Files, TlsError> {
    let read = |what, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            what,
            path: path.to_owned(),
            source,
        })
    };
    Ok(Files {
        cert: read("cert_file", cert_file)?,
        key: read("key_file", key_file)?,
    })
}

/// Parses the pair and checks that the key is the certificate's.
fn certified_key(
    files: &Files,
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&files.cert)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCertificate(cert_file.to_owned()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_file.to_owned()));
    }
    let key = PrivateKeyDer::from_pem_slice(&files.key)
        .map_err(|_| TlsError::NoKey(key_file.to_owned()))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|source| TlsError::UnsupportedKey {
            path: key_file.to_owned(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) => Ok(certified),
        // A key whose public half the provider cannot tell is served as
        // is: the handshake fails if it is wrong.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(certified),
        Err(_) => Err(TlsError::Mismatch {
            cert: cert_file.to_owned(),
            key: key_file.to_owned(),
        }),
    }
}
