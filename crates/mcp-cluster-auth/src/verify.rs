//! Token signatures checked with `ring`: jsonwebtoken's verifier backend.
//!
//! jsonwebtoken's pure-Rust backend rebuilds an RSA public key for every
//! check (about 0.2 ms a token here); ring checks a 2048-bit RSA or P-256
//! signature in a few tens of microseconds. Only verification is replaced:
//! signing (test issuers) and JWK helpers stay the pure-Rust backend's. HMAC
//! algorithms have no verifier at all here, whatever the configuration
//! says: a token is never checked with a symmetric key.

use std::sync::LazyLock;

use jsonwebtoken::crypto::{CryptoProvider, JwtVerifier};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::signature;
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind};
use ring::signature::{self as sig, RsaPublicKeyComponents, UnparsedPublicKey};

/// The provider: pure-Rust signing and JWK helpers, ring verification.
static PROVIDER: LazyLock<CryptoProvider> = LazyLock::new(|| CryptoProvider {
    verifier_factory: verifier,
    ..jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.clone()
});

/// Makes ring the verifier of this process's tokens. The first call wins;
/// later ones (or a process that used jsonwebtoken before) change nothing.
pub(crate) fn install() {
    let _ = PROVIDER.install_default();
}

/// One key and algorithm, checking signatures.
struct RingVerifier {
    algorithm: Algorithm,
    key: DecodingKey,
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    if parameters(*algorithm).is_none() {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    Ok(Box::new(RingVerifier {
        algorithm: *algorithm,
        key: key.clone(),
    }))
}

/// ring's verification algorithm for a JWS one; none for HMAC.
fn parameters(algorithm: Algorithm) -> Option<&'static dyn sig::VerificationAlgorithm> {
    Some(match algorithm {
        Algorithm::RS256 => &sig::RSA_PKCS1_2048_8192_SHA256,
        Algorithm::RS384 => &sig::RSA_PKCS1_2048_8192_SHA384,
        Algorithm::RS512 => &sig::RSA_PKCS1_2048_8192_SHA512,
        Algorithm::PS256 => &sig::RSA_PSS_2048_8192_SHA256,
        Algorithm::PS384 => &sig::RSA_PSS_2048_8192_SHA384,
        Algorithm::PS512 => &sig::RSA_PSS_2048_8192_SHA512,
        Algorithm::ES256 => &sig::ECDSA_P256_SHA256_FIXED,
        Algorithm::ES384 => &sig::ECDSA_P384_SHA384_FIXED,
        Algorithm::EdDSA => &sig::ED25519,
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => return None,
    })
}

impl signature::Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, msg: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let Some(parameters) = parameters(self.algorithm) else {
            return Err(signature::Error::new());
        };
        let checked = match self.key.kind() {
            DecodingKeyKind::RsaModulusExponent { n, e } => {
                let Some(rsa) = rsa_parameters(self.algorithm) else {
                    return Err(signature::Error::new());
                };
                RsaPublicKeyComponents { n, e }.verify(rsa, msg, signature)
            }
            // RSA: a PKCS#1 RSAPublicKey; EC: the uncompressed point;
            // Ed25519: the 32-byte key (what jsonwebtoken keeps).
            DecodingKeyKind::SecretOrDer(bytes) => {
                UnparsedPublicKey::new(parameters, bytes).verify(msg, signature)
            }
        };
        checked.map_err(|_| signature::Error::new())
    }
}

/// The RSA parameters of an RSA algorithm, for keys given as components.
fn rsa_parameters(algorithm: Algorithm) -> Option<&'static sig::RsaParameters> {
    Some(match algorithm {
        Algorithm::RS256 => &sig::RSA_PKCS1_2048_8192_SHA256,
        Algorithm::RS384 => &sig::RSA_PKCS1_2048_8192_SHA384,
        Algorithm::RS512 => &sig::RSA_PKCS1_2048_8192_SHA512,
        Algorithm::PS256 => &sig::RSA_PSS_2048_8192_SHA256,
        Algorithm::PS384 => &sig::RSA_PSS_2048_8192_SHA384,
        Algorithm::PS512 => &sig::RSA_PSS_2048_8192_SHA512,
        _ => return None,
    })
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_has_no_verifier() {
        let key = DecodingKey::from_secret(b"public key bytes");
        for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            assert!(verifier(&alg, &key).is_err(), "{alg:?}");
        }
    }

    #[test]
    fn a_key_of_another_family_is_refused() {
        let ec = DecodingKey::from_ec_components(
            "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
        )
        .unwrap();
        assert!(verifier(&Algorithm::RS256, &ec).is_err());
        assert!(verifier(&Algorithm::ES256, &ec).is_ok());
    }
}
