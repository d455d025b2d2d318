//! The server at the protocol level: sessions own their handles, limits hold, tokens and
//! versions are checked, leases expire. Each test starts `offload-server` on 127.0.0.1 with
//! an ephemeral port.

use omp_remote_proto::pb::offload_client::OffloadClient;
use omp_remote_proto::pb::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Code;

const TOKEN: &str = "s3cret-token";

struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_offload-server"))
            .args(["--listen", "127.0.0.1:0", "--quiet"])
            .args(args)
            .env("OFFLOAD_SERVER_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start offload-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let addr = line.trim().strip_prefix("offload-server listening on ").expect("address line").to_string();
        Server { child, url: format!("http://{addr}") }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Stub = OffloadClient<tonic::service::interceptor::InterceptedService<Channel, Token>>;

/// A client: the stub, and the secret of the session it opened last (sent on every call).
struct Client {
    stub: Stub,
    secret: Secret,
}

type Secret = Arc<Mutex<Option<String>>>;

impl std::ops::Deref for Client {
    type Target = Stub;
    fn deref(&self) -> &Stub {
        &self.stub
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Stub {
        &mut self.stub
    }
}

#[derive(Clone)]
struct Token(Option<&'static str>, Secret);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = self.0 {
            r.metadata_mut().insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        if let Some(k) = self.1.lock().unwrap().as_deref() {
            r.metadata_mut().insert(omp_remote_proto::SESSION_KEY_HEADER, k.parse().unwrap());
        }
        Ok(r)
    }
}

/// A client on `ch`.
fn client(ch: Channel, token: Option<&'static str>) -> Client {
    let secret = Secret::default();
    Client { stub: OffloadClient::with_interceptor(ch, Token(token, secret.clone())), secret }
}

/// A new connection (each has its own sessions).
async fn connect(s: &Server, token: Option<&'static str>) -> Client {
    let ch = Channel::from_shared(s.url.clone()).unwrap().connect().await.expect("connect");
    client(ch, token)
}

/// Opens a session; the returned sender keeps it alive (heartbeats are up to the caller).
async fn open(c: &mut Client) -> (u64, mpsc::Sender<SessionUp>, tonic::Streaming<SessionDown>) {
    let (tx, rx) = mpsc::channel(4);
    tx.send(SessionUp { heartbeat: 0 }).await.unwrap();
    let mut down = c.session(ReceiverStream::new(rx)).await.expect("session").into_inner();
    let first = down.message().await.unwrap().unwrap();
    assert_ne!(first.session, 0);
    assert_eq!(first.secret.len(), 32, "{first:?}");
    *c.secret.lock().unwrap() = Some(first.secret);
    (first.session, tx, down)
}

fn hello(version: u32, inside_worker: bool) -> HelloRequest {
    HelloRequest { protocol_version: version, client: "test".into(), inside_worker }
}

#[tokio::test]
async fn handles_belong_to_their_session() {
    let s = Server::start(&[]);
    let mut a = connect(&s, Some(TOKEN)).await;
    let mut b = connect(&s, Some(TOKEN)).await;
    let (sa, _ka, _) = open(&mut a).await;
    let (sb, _kb, _) = open(&mut b).await;
    let addr = a.alloc(AllocRequest { session: sa, device: 0, size: 4096, kind: 0 }).await.unwrap().into_inner().addr;

    // A's session id from B's connection.
    let e = b.alloc(AllocRequest { session: sa, device: 0, size: 16, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // A's device address inside B's session.
    let chunk = SubmitChunk { session: sb, device: 0, addr, total_size: 8, offset: 0, data: vec![1u8; 8].into() };
    let e = b.submit(tokio_stream::iter(vec![chunk])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("not device memory of this session"), "{e:?}");
    let e = b.free(FreeRequest { session: sb, device: 0, addr }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = b.retrieve(RetrieveRequest { session: sb, device: 0, addr, size: 8, chunk: 4096 }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // Kernel and image handles are per session too (and B has none).
    let e = b.launch(LaunchRequest { session: sb, device: 0, kernel: 1, ..Default::default() }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e =
        b.symbol(SymbolRequest { session: sb, device: 0, image: 1, name: "x".into(), kernel: true }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // A guessed session id.
    let e = a.alloc(AllocRequest { session: sa ^ 1, device: 0, size: 16, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // A's own memory works, in chunks, with bounds checked.
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let chunks: Vec<SubmitChunk> = data
        .chunks(1000)
        .enumerate()
        .map(|(i, d)| SubmitChunk {
            session: sa,
            device: 0,
            addr,
            total_size: 4096,
            offset: i as u64 * 1000,
            data: d.to_vec().into(),
        })
        .collect();
    a.submit(tokio_stream::iter(chunks)).await.unwrap();
    let mut back = vec![0u8; 4096];
    let mut st = a
        .retrieve(RetrieveRequest { session: sa, device: 0, addr, size: 4096, chunk: 4096 })
        .await
        .unwrap()
        .into_inner();
    while let Some(c) = st.message().await.unwrap() {
        back[c.offset as usize..c.offset as usize + c.data.len()].copy_from_slice(&c.data);
    }
    assert_eq!(back, data);
    let over =
        SubmitChunk { session: sa, device: 0, addr: addr + 4090, total_size: 8, offset: 0, data: vec![0u8; 8].into() };
    assert_eq!(a.submit(tokio_stream::iter(vec![over])).await.unwrap_err().code(), Code::InvalidArgument);
    let e = a.alloc(AllocRequest { session: sa, device: 9, size: 16, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    a.free(FreeRequest { session: sa, device: 0, addr }).await.unwrap();
    assert_eq!(a.free(FreeRequest { session: sa, device: 0, addr }).await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test]
async fn limits_on_memory_images_and_sessions() {
    let s = Server::start(&["--max-session-memory", "1M", "--max-image-size", "64K", "--max-sessions", "2"]);
    let mut c = connect(&s, Some(TOKEN)).await;
    let (id, _k, _) = open(&mut c).await;
    let e = c.alloc(AllocRequest { session: id, device: 0, size: 2 << 20, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let p = c.alloc(AllocRequest { session: id, device: 0, size: 600 << 10, kind: 0 }).await.unwrap().into_inner().addr;
    let e = c.alloc(AllocRequest { session: id, device: 0, size: 600 << 10, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "the quota counts live allocations: {e:?}");
    c.free(FreeRequest { session: id, device: 0, addr: p }).await.unwrap();
    c.alloc(AllocRequest { session: id, device: 0, size: 600 << 10, kind: 0 })
        .await
        .expect("freed memory is available again");
    let img = ImageChunk { session: id, device: 0, total_size: 100 << 10, data: vec![0u8; 1024].into() };
    let e = c.load_image(tokio_stream::iter(vec![img])).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    let img = ImageChunk { session: id, device: 0, total_size: 4, data: b"junk".to_vec().into() };
    let e = c.load_image(tokio_stream::iter(vec![img])).await.unwrap_err();
    assert!(e.message().contains("malformed"), "a bad image is an error, not a crash: {e:?}");
    let (_id2, _k2, _) = open(&mut c).await;
    let (tx, rx) = mpsc::channel(1);
    tx.send(SessionUp { heartbeat: 0 }).await.unwrap();
    let Err(e) = c.session(ReceiverStream::new(rx)).await else { panic!("a third session is refused") };
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
}

#[tokio::test]
async fn tokens_and_versions_are_checked() {
    let s = Server::start(&[]);
    let e = connect(&s, None).await.hello(hello(omp_remote_proto::PROTOCOL_VERSION, false)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = connect(&s, Some("guess")).await.hello(hello(omp_remote_proto::PROTOCOL_VERSION, false)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let mut c = connect(&s, Some(TOKEN)).await;
    let v = omp_remote_proto::PROTOCOL_VERSION;
    let h = c.hello(hello(v, false)).await.unwrap().into_inner();
    assert_eq!((h.protocol_version, h.num_devices, h.pointer_width), (v, 4, 64));
    assert!(h.triples.iter().any(|t| t == "x86_64-pc-linux-gnu"), "{h:?}");
    let e = c.hello(hello(99, false)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = c.hello(hello(v, true)).await.unwrap_err();
    assert!(e.message().contains("remote-to-remote"), "{e:?}");
    // Every call needs the token, not just Hello.
    let e = connect(&s, None).await.alloc(AllocRequest { session: 1, device: 0, size: 8, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
}

#[tokio::test]
async fn a_silent_session_expires_with_its_lease() {
    let s = Server::start(&["--lease", "0.5"]);
    let mut c = connect(&s, Some(TOKEN)).await;
    let (id, _keep_open_but_silent, mut down) = open(&mut c).await;
    c.alloc(AllocRequest { session: id, device: 0, size: 64, kind: 0 }).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), down.message()).await.expect("the server ends the session");
    let e = end.unwrap_err();
    assert!(e.message().contains("lease"), "{e:?}");
    let e = c.alloc(AllocRequest { session: id, device: 0, size: 64, kind: 0 }).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    // A session that keeps beating lives on.
    let (id, tx, _down) = open(&mut c).await;
    for n in 1..=8 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        tx.send(SessionUp { heartbeat: n }).await.unwrap();
    }
    c.alloc(AllocRequest { session: id, device: 0, size: 64, kind: 0 }).await.expect("heartbeats renew the lease");
}

#[tokio::test]
async fn max_sessions_is_exact_under_concurrent_opens() {
    let s = Server::start(&["--max-sessions", "2"]);
    let mut tries = Vec::new();
    for _ in 0..10 {
        let mut c = connect(&s, Some(TOKEN)).await;
        tries.push(tokio::spawn(async move {
            let (tx, rx) = mpsc::channel(4);
            tx.send(SessionUp { heartbeat: 0 }).await.unwrap();
            match c.session(ReceiverStream::new(rx)).await {
                Ok(r) => {
                    let mut down = r.into_inner();
                    let first = down.message().await.unwrap().unwrap();
                    Ok((first.session, tx, down, c))
                }
                Err(e) => Err(e),
            }
        }));
    }
    let mut open = Vec::new();
    for t in tries {
        match t.await.unwrap() {
            Ok(s) => open.push(s),
            Err(e) => assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}"),
        }
    }
    assert_eq!(open.len(), 2, "10 simultaneous opens against --max-sessions 2");
    // Closing one gives its place back.
    let (_, tx, mut down, _) = open.pop().unwrap();
    drop(tx);
    let _ = tokio::time::timeout(Duration::from_secs(10), down.message()).await;
    let mut c = connect(&s, Some(TOKEN)).await;
    let mut reopened = false;
    for _ in 0..100 {
        let (tx, rx) = mpsc::channel(1);
        tx.send(SessionUp { heartbeat: 0 }).await.unwrap();
        if c.session(ReceiverStream::new(rx)).await.is_ok() {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reopened, "a closed session's place is given back");
}

/// Two stubs on one HTTP/2 connection (as behind a proxy): the session id alone does not
/// give the second one the first one's session; its secret is needed on every call.
#[tokio::test]
async fn a_session_needs_its_secret_not_just_its_id() {
    let s = Server::start(&[]);
    let ch = Channel::from_shared(s.url.clone()).unwrap().connect().await.expect("connect");
    let mut owner = client(ch.clone(), Some(TOKEN));
    let mut other = client(ch, Some(TOKEN));
    let (id, _k, _) = open(&mut owner).await;
    let addr = owner.alloc(AllocRequest { session: id, device: 0, size: 64, kind: 0 }).await.unwrap().into_inner().addr;
    let tries = [None, Some("0".repeat(32)), Some("x".into())];
    for secret in tries {
        *other.secret.lock().unwrap() = secret.clone();
        let e = other.alloc(AllocRequest { session: id, device: 0, size: 64, kind: 0 }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{secret:?}: {e:?}");
        let e = other.free(FreeRequest { session: id, device: 0, addr }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let e =
            other.retrieve(RetrieveRequest { session: id, device: 0, addr, size: 8, chunk: 4096 }).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        let chunk = SubmitChunk { session: id, device: 0, addr, total_size: 8, offset: 0, data: vec![1u8; 8].into() };
        let e = other.submit(tokio_stream::iter(vec![chunk])).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    }
    owner.free(FreeRequest { session: id, device: 0, addr }).await.expect("the owner's calls carry the secret");
}

/// Bad option values are usage errors (status 2, naming the option), never panics; a lease
/// below the heartbeat floor is raised, and said.
#[test]
fn options_are_validated_with_usage_errors() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_offload-server"))
            .args(args)
            .env("OFFLOAD_SERVER_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .output()
            .expect("run offload-server")
    };
    for bad in [
        &["--lease", "0"][..],
        &["--lease", "-1"],
        &["--lease", "nan"],
        &["--lease", "1e30"],
        &["--max-sessions", "0"],
        &["--devices", "100"],
        &["--max-session-memory", "12X"],
        &["--listen", "not-an-address"],
    ] {
        let o = run(bad);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {err}");
        assert!(err.contains(bad[0]) && !err.contains("panicked"), "{bad:?}: {err}");
    }
    let o = run(&["--help"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("--max-session-memory"));
    let o = run(&["--man"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains(".TH"), "{o:?}");
}

#[test]
fn a_short_lease_is_raised_with_a_warning() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_offload-server"))
        .args(["--listen", "127.0.0.1:0", "--lease", "0.1"])
        .env("OFFLOAD_SERVER_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("offload-server listening on"), "{line}");
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning: --lease 0.100s raised to 1s"), "{err}");
}
