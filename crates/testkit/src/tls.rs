//! `rediss://` servers for the TLS tests: certificates made by the test (a CA, the server's, a
//! client's, and an impostor CA's) and a redis-server with the module that requires client
//! certificates signed by that CA.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::{free_port, Server};

/// A CA: its certificate and key.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("CA certificate");
        Ca { cert, key }
    }

    /// A certificate it signs for `names`, for `purpose`: (certificate PEM, key PEM).
    fn sign(&self, names: &[&str], purpose: ExtendedKeyUsagePurpose) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(DnType::CommonName, "relock test");
        params.extended_key_usages = vec![purpose];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .expect("certificate");
        (cert.pem(), key.serialize_pem())
    }
}

/// The certificates of the TLS tests, in one directory: `ca.pem` (our CA), `impostor-ca.pem`
/// (another CA), `server.pem`/`server.key` (for 127.0.0.1 and localhost), `client.pem`/`client.key`
/// (signed by our CA) and `stranger.pem`/`stranger.key` (signed by the impostor).
pub struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    pub fn new() -> Files {
        let files = Files {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        let ca = Ca::new("relock test CA");
        let impostor = Ca::new("someone else's CA");
        let (server, server_key) = ca.sign(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key) = ca.sign(&["relock-client"], ExtendedKeyUsagePurpose::ClientAuth);
        let (stranger, stranger_key) =
            impostor.sign(&["relock-client"], ExtendedKeyUsagePurpose::ClientAuth);
        for (name, pem) in [
            ("ca.pem", ca.cert.pem()),
            ("impostor-ca.pem", impostor.cert.pem()),
            ("server.pem", server),
            ("server.key", server_key),
            ("client.pem", client),
            ("client.key", client_key),
            ("stranger.pem", stranger),
            ("stranger.key", stranger_key),
        ] {
            std::fs::write(files.path(name), pem).expect("write PEM");
        }
        files
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read PEM")
    }

    pub fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Default for Files {
    fn default() -> Self {
        Files::new()
    }
}

/// A redis-server with the module, a plain port (for the harness and the test's own checks)
/// and a TLS port that requires client certificates signed by our CA.
pub struct TlsServer {
    pub server: Server,
    pub tls_port: u16,
}

impl TlsServer {
    pub fn start(files: &Files) -> TlsServer {
        let mut last = String::new();
        for _ in 0..3 {
            let tls_port = free_port();
            let port = tls_port.to_string();
            let (cert, key, ca) = (
                files.arg("server.pem"),
                files.arg("server.key"),
                files.arg("ca.pem"),
            );
            let started = std::panic::catch_unwind(|| {
                Server::with_args(&[
                    "--tls-port",
                    &port,
                    "--tls-cert-file",
                    &cert,
                    "--tls-key-file",
                    &key,
                    "--tls-ca-cert-file",
                    &ca,
                    "--tls-auth-clients",
                    "yes",
                ])
            });
            match started {
                Ok(server) => return TlsServer { server, tls_port },
                Err(e) => last = format!("{:?}", e.downcast_ref::<String>()),
            }
        }
        panic!("no TLS server: {last}");
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }
}
