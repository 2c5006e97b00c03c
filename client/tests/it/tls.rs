//! `rediss://` servers: relock-client against a real TLS-enabled redis-server (with the
//! module), certificates made here (a CA, the server's, a client's, and an impostor CA), client
//! certificates required (lockctl's part: lockctl/tests/it/tls.rs).
use relock_testkit as common;

use std::path::PathBuf;
use std::time::Duration;

use common::{free_port, Server};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use relock_client::{Error, Options, Relock, Tls};

const KEY: &str = "tls:deploy";

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

/// Every file the tests use, in one directory.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
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

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read PEM")
    }

    fn arg(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// The client's TLS settings: our CA, our client certificate.
    fn tls(&self) -> Tls {
        Tls {
            ca: Some(self.read("ca.pem")),
            client_cert: Some(self.read("client.pem")),
            client_key: Some(self.read("client.key")),
        }
    }
}

/// A redis-server with the module, a plain port (for the harness and the test's own checks)
/// and a TLS port that requires client certificates signed by our CA.
struct TlsServer {
    server: Server,
    tls_port: u16,
}

impl TlsServer {
    fn start(files: &Files) -> TlsServer {
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

    fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }
}

/// relock-client over TLS: acquire, a waiter handed the lock on release, renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relock_client_over_tls() {
    let files = Files::new();
    let tls = TlsServer::start(&files);
    let options = Options {
        node_timeout: Duration::from_secs(1),
        tls: files.tls(),
        ..Options::default()
    };
    let relock = Relock::with_options(&[tls.url()], options.clone()).expect("client");
    let ttl = Duration::from_secs(10);
    let lock = relock.acquire(KEY, ttl).await.expect("acquire over TLS");
    let waiter = {
        let relock = relock.clone();
        tokio::spawn(async move {
            relock
                .acquire_wait(KEY, ttl, Some(Duration::from_secs(20)))
                .await
        })
    };
    assert!(tokio::task::block_in_place(|| common::eventually(
        Duration::from_secs(10),
        || relock_testkit::info_field(&mut tls.server.conn(), "waiters") == 1
    )));
    let first = lock.token();
    lock.release().await.expect("release");
    let next = waiter.await.expect("task").expect("handed over");
    assert!(next.token() > first);
    let guard = next.keep_alive();
    let renewed = guard.renew_now().await.expect("renewed over TLS");
    assert!(renewed > tokio::time::Instant::now());
    guard.release().await.expect("release");

    // The settings are checked when the client is built.
    let half = Options {
        tls: Tls {
            client_key: None,
            ..files.tls()
        },
        ..options.clone()
    };
    assert!(matches!(
        Relock::with_options(&[tls.url()], half),
        Err(Error::InvalidOption { name: "tls", .. })
    ));
    // Without our CA the server is not trusted: a permanent error, at once.
    let untrusted = Options {
        tls: Tls {
            ca: None,
            ..files.tls()
        },
        ..options
    };
    let relock = Relock::with_options(&[tls.url()], untrusted).expect("client");
    let err = tokio::time::timeout(Duration::from_secs(10), relock.acquire_wait(KEY, ttl, None))
        .await
        .expect("an untrusted certificate must not be retried forever")
        .expect_err("untrusted");
    assert!(err.is_permanent(), "{err}");
}
