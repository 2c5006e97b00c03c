//! TLS for `rediss://` servers (rustls, through redis-rs): which certificates are trusted, and
//! the client certificate for servers that ask for one.

use std::fmt;

use redis::{Client, ConnectionAddr, ConnectionInfo};
#[cfg(feature = "tls")]
use redis::{ClientTlsConfig, TlsCertificates};

use crate::error::{Error, ServerError};

/// How `rediss://` servers are trusted, and how the client proves itself to those that ask
/// (`tls-auth-clients yes`). Everything is PEM. It applies to every `rediss://` URL of a
/// client, to every node of a TLS cluster, and to the masters a Sentinel names for a
/// `rediss+sentinel://` URL; `redis://` URLs ignore it.
///
/// Certificate verification cannot be turned off (a `rediss://...#insecure` URL is refused):
/// a client that accepts any server could be granted locks by an impostor. Give the CA that
/// signed a private server's certificate in [`Tls::ca`] instead.
#[derive(Clone, Default)]
pub struct Tls {
    /// CA certificates to trust instead of the system's (one or more, PEM).
    /// Default: `None`, the system's certificate store.
    pub ca: Option<Vec<u8>>,
    /// The client's certificate (PEM, the chain up to its CA), for servers that require one.
    /// Needs [`Tls::client_key`]. Default: `None`.
    pub client_cert: Option<Vec<u8>>,
    /// The client certificate's private key (PEM). Default: `None`.
    pub client_key: Option<Vec<u8>>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("Tls")
            .field(
                "ca",
                &self.ca.as_ref().map(|c| format!("{} bytes", c.len())),
            )
            .field("client_cert", &self.client_cert.is_some())
            .field("client_key", &self.client_key.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

impl Tls {
    #[cfg(feature = "tls")]
    /// How many certificates a PEM file of CA certificates (for [`Tls::ca`]) holds: at least
    /// one, every one readable, else why not. The client checks `ca` this way when it connects;
    /// a program can check a file it read first, to name it in its message.
    pub fn count_ca_certificates(pem: &[u8]) -> Result<usize, String> {
        pem_certificates(pem)
    }

    #[cfg(feature = "tls")]
    /// What redis-rs is given, or `None` for the defaults.
    fn certificates(&self) -> Result<Option<TlsCertificates>, Error> {
        let client_tls = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(Error::InvalidOption {
                    name: "tls",
                    reason: "a client certificate needs its key, and a key its certificate".into(),
                })
            }
        };
        if client_tls.is_none() && self.ca.is_none() {
            return Ok(None);
        }
        if let Some(ca) = &self.ca {
            // redis-rs skips what is not a certificate: junk, or an empty file, would be an
            // empty trust store, and every server's certificate then "untrusted".
            if let Err(why) = pem_certificates(ca) {
                return Err(Error::InvalidOption {
                    name: "tls",
                    reason: format!("the CA certificates (Tls::ca): {why}"),
                });
            }
        }
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert: self.ca.clone(),
        }))
    }

    /// A redis-rs client for `info` (from `url`): with these certificates for a TLS address
    /// (read and checked here, so that a bad PEM fails when the client is built), as it is
    /// otherwise.
    pub(crate) fn client(&self, info: ConnectionInfo, url: &str) -> Result<Client, Error> {
        let invalid = |reason: String| Error::InvalidUrl {
            url: url.to_string(),
            source: ServerError(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "TLS",
                reason,
            ))),
        };
        match &info.addr {
            ConnectionAddr::TcpTls { insecure: true, .. } => Err(invalid(
                "certificate verification cannot be turned off (#insecure); give the CA that \
                 signed the server's certificate instead (lockctl --tls-ca, Tls::ca)"
                    .into(),
            )),
            #[cfg(not(feature = "tls"))]
            ConnectionAddr::TcpTls { .. } => Err(invalid(
                "rediss:// needs relock-client's tls feature, which this build does not have"
                    .into(),
            )),
            #[cfg(feature = "tls")]
            ConnectionAddr::TcpTls { .. } => match self.certificates()? {
                Some(certificates) => {
                    Client::build_with_tls(info, certificates).map_err(|e| Error::InvalidOption {
                        name: "tls",
                        reason: format!("the certificates or key do not read as PEM: {e}"),
                    })
                }
                None => Client::open(info).map_err(|source| Error::InvalidUrl {
                    url: url.to_string(),
                    source: ServerError(source),
                }),
            },
            _ => Client::open(info).map_err(|source| Error::InvalidUrl {
                url: url.to_string(),
                source: ServerError(source),
            }),
        }
    }
}

/// `url` refused when it asks for TLS (`rediss://`) and this build has no tls feature.
pub(crate) fn check_scheme(url: &str) -> Result<(), Error> {
    let tls = url
        .split_once("://")
        .is_some_and(|(scheme, _)| scheme.to_ascii_lowercase().starts_with("rediss"));
    if tls && cfg!(not(feature = "tls")) {
        return Err(Error::InvalidUrl {
            url: url.to_string(),
            source: ServerError(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "rediss:// needs relock-client's tls feature, which this build does not have",
            ))),
        });
    }
    Ok(())
}

#[cfg(feature = "tls")]
/// How many certificates `pem` holds: at least one, every one of them readable PEM, else why
/// not.
pub(crate) fn pem_certificates(pem: &[u8]) -> Result<usize, String> {
    let mut count = 0;
    for cert in rustls_pemfile::certs(&mut &pem[..]) {
        cert.map_err(|e| format!("not PEM: {e}"))?;
        count += 1;
    }
    if count == 0 {
        return Err("no PEM certificate in it (-----BEGIN CERTIFICATE----- ...)".into());
    }
    Ok(count)
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    #[test]
    fn a_ca_must_hold_a_pem_certificate() {
        assert!(pem_certificates(b"").is_err());
        assert!(pem_certificates(b"\x8f\x03 no certificate\x00\xff").is_err());
        assert!(
            pem_certificates(b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n")
                .is_err()
        );
        let one = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(one), Ok(1));
        let no_ca = Tls {
            ca: Some(b"junk".to_vec()),
            ..Tls::default()
        };
        assert!(matches!(
            no_ca.certificates(),
            Err(Error::InvalidOption { .. })
        ));
    }
}
