//! Certificates for one test, made with the real `openssl` command in a
//! temporary directory (removed on drop): a CA, a server certificate for
//! loopback (SAN `127.0.0.1`, `localhost`, `::1`) and a client certificate,
//! all signed by the CA, ECDSA P-256, valid for two days.
//!
//! The server certificate can be issued again in place
//! ([`TestPki::reissue_server`]) for certificate reload tests; another
//! [`TestPki`] is a CA nobody here trusts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};

/// Days the certificates are valid: longer than any test, short enough
/// that a leaked one is worthless.
const VALID_DAYS: &str = "2";

/// Extensions of the server certificate: the names a loopback test uses.
const SERVER_EXTENSIONS: &str = "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:::1\n\
    basicConstraints=critical,CA:FALSE\n\
    keyUsage=critical,digitalSignature\n\
    extendedKeyUsage=serverAuth\n";

/// Extensions of the client certificate.
const CLIENT_EXTENSIONS: &str = "basicConstraints=critical,CA:FALSE\n\
    keyUsage=critical,digitalSignature\n\
    extendedKeyUsage=clientAuth\n";

/// Directories made by this process, to keep their names apart.
static DIRS_MADE: AtomicU64 = AtomicU64::new(0);

/// A CA with a server and a client certificate, as PEM files in a
/// temporary directory that is removed on drop.
#[derive(Debug)]
pub struct TestPki {
    dir: PathBuf,
}

impl TestPki {
    /// Makes the CA, the server certificate and the client certificate.
    ///
    /// # Errors
    /// `openssl` is missing (the message says how to install it) or fails.
    pub fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "mcp-testkit-pki-{}-{}",
            std::process::id(),
            DIRS_MADE.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // A TestPki from here on: dropped on error, its directory goes.
        let pki = Self { dir };
        pki.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            VALID_DAYS,
            "-subj",
            "/CN=mcp-cluster-testkit CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ])?;
        pki.issue("server", "localhost", SERVER_EXTENSIONS)?;
        pki.issue("client", "mcp-node", CLIENT_EXTENSIONS)?;
        Ok(pki)
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM).
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The server certificate (PEM), signed by the CA.
    pub fn server_cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    /// The server certificate's private key (PEM, PKCS#8).
    pub fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The client certificate (PEM), signed by the CA.
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("client.pem")
    }

    /// The client certificate's private key (PEM, PKCS#8).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client.key")
    }

    /// `mcp-node`'s flags for serving HTTPS with the server certificate.
    pub fn node_tls_args(&self) -> Vec<String> {
        vec![
            "--tls-cert".to_owned(),
            self.server_cert().display().to_string(),
            "--tls-key".to_owned(),
            self.server_key().display().to_string(),
        ]
    }

    /// An HTTP client that trusts this CA only.
    ///
    /// # Errors
    /// The CA file cannot be read.
    pub fn https_client(&self) -> anyhow::Result<reqwest::Client> {
        let options = mcp_cluster_client::HttpOptions {
            ca_file: Some(self.ca_cert()),
            ..mcp_cluster_client::HttpOptions::default()
        };
        Ok(options.client()?)
    }

    /// Issues a new server certificate with a new key, and puts both in
    /// place of the old ones (each file replaced by a rename, the
    /// certificate first: a reader between the two renames sees a pair that
    /// does not match).
    ///
    /// # Errors
    /// `openssl` fails.
    pub fn reissue_server(&self) -> anyhow::Result<()> {
        self.issue("server-next", "localhost", SERVER_EXTENSIONS)?;
        for (from, to) in [
            ("server-next.pem", "server.pem"),
            ("server-next.key", "server.key"),
        ] {
            std::fs::rename(self.dir.join(from), self.dir.join(to))
                .with_context(|| format!("renaming {from} to {to}"))?;
        }
        Ok(())
    }

    /// A certificate's DER bytes, from a PEM file (to compare with what a
    /// TLS peer presented).
    ///
    /// # Errors
    /// The file cannot be read or holds no PEM certificate.
    pub fn der_of(pem_file: &Path) -> anyhow::Result<Vec<u8>> {
        use rustls::pki_types::CertificateDer;
        use rustls::pki_types::pem::PemObject;
        let cert = CertificateDer::from_pem_file(pem_file)
            .with_context(|| format!("no PEM certificate in {}", pem_file.display()))?;
        Ok(cert.to_vec())
    }

    /// Makes `<name>.key` and `<name>.pem` (subject `common_name`, the given
    /// extensions), signed by the CA.
    fn issue(&self, name: &str, common_name: &str, extensions: &str) -> anyhow::Result<()> {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        std::fs::write(self.dir.join(&ext), extensions)?;
        self.openssl(&[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={common_name}"),
        ])?;
        // A random serial: certificates issued again must differ.
        let serial = format!("0x{:016x}", random_u64());
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &serial,
            "-days",
            VALID_DAYS,
            "-out",
            &pem,
            "-extfile",
            &ext,
        ])
    }

    /// Runs `openssl args` in the directory.
    fn openssl(&self, args: &[&str]) -> anyhow::Result<()> {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| match err.kind() {
                std::io::ErrorKind::NotFound => anyhow::anyhow!(
                    "openssl not found: install it (apt-get install openssl) or run tests/run-all.sh"
                ),
                _ => anyhow::Error::new(err).context("running openssl"),
            })?;
        if !output.status.success() {
            bail!(
                "openssl {} failed ({}): {}",
                args.first().copied().unwrap_or_default(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// 64 random bits, from the standard library's randomly keyed hasher.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(DIRS_MADE.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_a_ca_and_certificates_and_reissues_the_server_one() {
        let pki = TestPki::new().unwrap();
        for file in [
            pki.ca_cert(),
            pki.server_cert(),
            pki.server_key(),
            pki.client_cert(),
            pki.client_key(),
        ] {
            assert!(file.exists(), "{}", file.display());
        }
        let verify = |cert: PathBuf| {
            Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(pki.ca_cert())
                .arg(cert)
                .output()
                .unwrap()
                .status
                .success()
        };
        assert!(verify(pki.server_cert()));
        assert!(verify(pki.client_cert()));
        let first = TestPki::der_of(&pki.server_cert()).unwrap();
        pki.reissue_server().unwrap();
        let second = TestPki::der_of(&pki.server_cert()).unwrap();
        assert_ne!(first, second);
        assert!(verify(pki.server_cert()));
        let other = TestPki::new().unwrap();
        assert_ne!(other.dir(), pki.dir());
        let dir = pki.dir().to_owned();
        drop(pki);
        assert!(!dir.exists());
    }
}
