//! Baselines for scripts/bench-remote.sh, measured in the same run as the server:
//! `remote_bench raw-tcp MiB` copies MiB mebibytes over a raw loopback TCP socket (1 MiB
//! writes, read into a preallocated buffer); `remote_bench ping http://ADDR N [TOKEN]`
//! times N unary gRPC pings to an offload-server.

use omp_remote_proto::pb::offload_client::OffloadClient;
use omp_remote_proto::pb::Empty;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn raw_tcp(mib: usize) {
    let bytes = mib << 20;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let addr = listener.local_addr().unwrap();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut dst = vec![1u8; bytes]; // touched, like device memory that exists already
        ready_tx.send(()).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let mut got = 0;
        while got < bytes {
            let n = s.read(&mut dst[got..]).unwrap();
            assert!(n > 0, "sender closed early");
            got += n;
        }
        dst[bytes - 1]
    });
    let src = vec![7u8; bytes];
    ready.recv().unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let t = Instant::now();
    for c in src.chunks(1 << 20) {
        s.write_all(c).unwrap();
    }
    let last = reader.join().unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!("raw_tcp_MBps={:.1} check={last}", bytes as f64 / secs / 1e6);
}

async fn ping(url: String, n: usize, token: Option<String>) {
    let ch = tonic::transport::Endpoint::from_shared(url).unwrap().tcp_nodelay(true).connect().await.expect("connect");
    let mut c = OffloadClient::new(ch);
    let req = || {
        let mut r = tonic::Request::new(Empty {});
        if let Some(t) = &token {
            r.metadata_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        r
    };
    for _ in 0..100 {
        c.ping(req()).await.expect("ping");
    }
    let t = Instant::now();
    for _ in 0..n {
        c.ping(req()).await.expect("ping");
    }
    println!("grpc_ping_us={:.2}", t.elapsed().as_secs_f64() / n as f64 * 1e6);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("raw-tcp") => raw_tcp(args.get(1).and_then(|m| m.parse().ok()).unwrap_or(1024)),
        Some("ping") => {
            // Same shape as the plugin: a blocking caller and a one-thread runtime.
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            let n = args.get(2).and_then(|m| m.parse().ok()).unwrap_or(2000);
            rt.block_on(ping(args[1].clone(), n, args.get(3).cloned()));
        }
        _ => eprintln!("usage: remote_bench raw-tcp MiB | remote_bench ping http://ADDR N [TOKEN]"),
    }
}
