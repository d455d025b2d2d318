//! TLS (cargo feature `tls`): a server with a certificate for 127.0.0.1 (made by the
//! `openssl` tool) answers a client that trusts it, and not a plain-text one.
#![cfg(feature = "tls")]

use omp_remote_proto::pb::offload_client::OffloadClient;
use omp_remote_proto::pb::HelloRequest;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

#[tokio::test]
async fn tls_server_answers_only_tls_clients() {
    let dir = std::env::temp_dir().join(format!("offload-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ca, cert, key) = (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n").unwrap();
    // A CA, and a certificate for 127.0.0.1 it signs (webpki refuses a CA as end entity).
    let steps: [&[&str]; 3] = [
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
        &["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "key.pem", "-out", "cert.csr"],
        &[
            "x509",
            "-req",
            "-in",
            "cert.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
            "-out",
            "cert.pem",
        ],
    ];
    for args in steps {
        let ok = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .stderr(Stdio::null())
            .status()
            .expect("the openssl tool makes the test certificates")
            .success();
        assert!(ok, "openssl {args:?} failed");
    }
    let mut server = Kill(
        Command::new(env!("CARGO_BIN_EXE_offload-server"))
            .args(["--listen", "127.0.0.1:0", "--insecure-loopback", "--quiet", "--tls-cert"])
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("offload-server listening on ").unwrap().to_string();
    let hello = HelloRequest {
        protocol_version: omp_remote_proto::PROTOCOL_VERSION,
        client: "tls test".into(),
        inside_worker: false,
    };

    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(std::fs::read(&ca).unwrap()));
    let ch = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .expect("TLS connect");
    let reply = OffloadClient::new(ch).hello(hello.clone()).await.expect("hello over TLS").into_inner();
    assert_eq!(reply.protocol_version, omp_remote_proto::PROTOCOL_VERSION);

    let plain = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await;
    let refused = match plain {
        Err(_) => true,
        Ok(ch) => OffloadClient::new(ch).hello(hello).await.is_err(),
    };
    assert!(refused, "a plain-text client must not get an answer");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kills the server however the test ends.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
