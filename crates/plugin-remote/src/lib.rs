//! Remote offload devices: the devices of an `offload-server`, reached over gRPC.
//!
//! One [`RemotePlugin`] per configured server (`LIBOMPTARGET_RPC_ADDRESS`). The plugin runs
//! inside the user's synchronous program, so it owns a small tokio runtime and blocks on
//! each call. Control calls have a deadline of `LIBOMPTARGET_RPC_LATENCY`; transfers fail
//! when a chunk makes no progress for that long; HTTP/2 keepalive pings with the same
//! timeout end a launch whose server died or stalled. Device addresses are the server's:
//! this process never dereferences them, and the server checks them against the session.

pub mod check;
pub mod config;

use config::ClientConfig;
use omp_format::elf;
use omp_plugin::{
    host_memory, AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, Plugin, PluginError, Result,
};
use omp_remote_proto::pb::offload_client::OffloadClient;
use omp_remote_proto::pb::*;
use omp_sync::Mutex;
use std::collections::HashMap;
use std::ffi::CStr;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// The plugin's private runtime: one worker thread drives the connections (keepalives,
/// heartbeats) while the program's threads block on calls.
fn runtime() -> std::result::Result<&'static tokio::runtime::Runtime, PluginError> {
    static RT: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("omp-remote")
            .on_thread_start(block_sigpipe)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| PluginError::failed(format!("remote plugin: cannot start its runtime: {e}")))
}

/// Runs `fut` to completion on the plugin runtime, failing after `limit`.
fn block<T>(limit: Option<Duration>, what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
    let rt = runtime()?;
    match limit {
        None => rt.block_on(fut),
        Some(d) => rt.block_on(async {
            tokio::time::timeout(d, fut).await.unwrap_or_else(|_| {
                Err(PluginError::failed(format!(
                    "{what}: no answer within {:.1}s (LIBOMPTARGET_RPC_LATENCY)",
                    d.as_secs_f64()
                )))
            })
        }),
    }
}

/// Adds the token to every call.
#[derive(Clone)]
struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert(omp_remote_proto::AUTH_HEADER, t.clone());
        }
        Ok(req)
    }
}

type Client = OffloadClient<InterceptedService<Channel, Auth>>;

/// The server's reply to Hello, and the connection.
struct Conn {
    addr: String,
    client: Client,
    hello: HelloReply,
    cfg: Arc<ClientConfig>,
    session: Mutex<Option<Arc<SessionState>>>,
    /// Set when the program exits: no new session is opened.
    closed: std::sync::atomic::AtomicBool,
}

/// A live session: its id, and why it ended if it did.
struct SessionState {
    id: u64,
    /// Carried by every call (`omp-session-secret`).
    secret: MetadataValue<Ascii>,
    ended: Arc<Mutex<Option<String>>>,
    /// Dropping the sender closes the session stream: the server frees everything.
    /// Taking it ends the session stream normally (the server logs a normal close).
    heartbeat: Mutex<Option<mpsc::Sender<SessionUp>>>,
    /// Bytes of the device code's output written to the program's streams so far.
    output: Arc<std::sync::atomic::AtomicU64>,
}

impl SessionState {
    /// `m` as a call of this session: with its secret.
    fn req<T>(&self, m: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(m);
        r.metadata_mut().insert(omp_remote_proto::SESSION_KEY_HEADER, self.secret.clone());
        r
    }
}

fn uri(addr: &str, tls: bool) -> String {
    if addr.starts_with("http://") || addr.starts_with("https://") {
        addr.to_string()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    }
}

/// Adds TLS to `endpoint` when the address or `LIBOMPTARGET_RPC_TLS_CA` asks for it.
fn with_tls(endpoint: Endpoint, uri: &str, cfg: &ClientConfig) -> Result<Endpoint> {
    if !uri.starts_with("https://") {
        return Ok(endpoint);
    }
    #[cfg(feature = "tls")]
    {
        let mut tls = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &cfg.tls_ca {
            let pem = std::fs::read(ca)
                .map_err(|e| PluginError::failed(format!("LIBOMPTARGET_RPC_TLS_CA={}: {e}", ca.display())))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        endpoint.tls_config(tls).map_err(|e| PluginError::failed(format!("TLS configuration: {e}")))
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (endpoint, cfg);
        Err(PluginError::failed(format!(
            "{uri}: this runtime was built without TLS support (omp-plugin-remote feature `tls`)"
        )))
    }
}

impl Conn {
    fn connect(addr: &str, cfg: Arc<ClientConfig>) -> Result<Conn> {
        let what = format!("connecting to offload-server at {addr}");
        let token = match &cfg.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| PluginError::failed("the RPC token has characters a header cannot carry"))?,
            ),
            None => None,
        };
        let uri = uri(addr, cfg.tls_ca.is_some());
        let endpoint = Endpoint::from_shared(uri.clone())
            .map_err(|e| PluginError::failed(format!("LIBOMPTARGET_RPC_ADDRESS entry '{addr}': {e}")))?
            .connect_timeout(cfg.latency)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(cfg.latency)
            .keep_alive_timeout(cfg.latency)
            .keep_alive_while_idle(true)
            .initial_stream_window_size(8u32 << 20)
            .initial_connection_window_size(32u32 << 20)
            .max_frame_size(1u32 << 20);
        let endpoint = with_tls(endpoint, &uri, &cfg)?;
        let latency = cfg.latency;
        let inside_worker = cfg.inside_worker;
        block(Some(latency * 2), &what.clone(), async move {
            let channel =
                endpoint.connect().await.map_err(|e| PluginError::failed(format!("{what}: {}", source_chain(&e))))?;
            let mut client = OffloadClient::with_interceptor(channel, Auth(token))
                .max_decoding_message_size(omp_remote_proto::MAX_MESSAGE_BYTES)
                .max_encoding_message_size(omp_remote_proto::MAX_MESSAGE_BYTES);
            let hello = HelloRequest {
                protocol_version: omp_remote_proto::PROTOCOL_VERSION,
                client: format!("omp-plugin-remote {} (pid {})", env!("CARGO_PKG_VERSION"), std::process::id()),
                inside_worker,
            };
            let hello = client
                .hello(hello)
                .await
                .map_err(|s| PluginError::failed(format!("{what}: {}", s.message())))?
                .into_inner();
            check::hello(&hello).map_err(|e| PluginError::failed(format!("{what}: {e}")))?;
            Ok(Conn {
                addr: addr.to_string(),
                client,
                hello,
                cfg,
                session: Mutex::new(None),
                closed: std::sync::atomic::AtomicBool::new(false),
            })
        })
    }

    /// The session, opened at the first device call.
    fn session(&self) -> Result<Arc<SessionState>> {
        let mut slot = self.session.lock();
        if let Some(s) = &*slot {
            if let Some(why) = s.ended.lock().clone() {
                return Err(self.err(&why));
            }
            return Ok(s.clone());
        }
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(self.err("the program is exiting"));
        }
        let mut client = self.client.clone();
        let what = format!("opening a session on offload-server at {}", self.addr);
        let s = block(Some(self.cfg.latency), &what.clone(), async move {
            let (tx, rx) = mpsc::channel(2);
            tx.send(SessionUp { heartbeat: 0 }).await.map_err(|_| PluginError::failed("session stream closed"))?;
            let mut down = client
                .session(ReceiverStream::new(rx))
                .await
                .map_err(|s| PluginError::failed(format!("{what}: {}", s.message())))?
                .into_inner();
            let first = down
                .message()
                .await
                .map_err(|s| PluginError::failed(format!("{what}: {}", s.message())))?
                .ok_or_else(|| PluginError::failed(format!("{what}: the server closed the session at once")))?;
            let ended = Arc::new(Mutex::new(None));
            let lease = Duration::from_millis(u64::from(first.lease_ms.max(300)));
            let beat = tx.downgrade();
            tokio::spawn(async move {
                for n in 1u64.. {
                    tokio::time::sleep(lease / 3).await;
                    let Some(tx) = beat.upgrade() else { return };
                    if tx.send(SessionUp { heartbeat: n }).await.is_err() {
                        return;
                    }
                }
            });
            let e = ended.clone();
            let output = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let seen = output.clone();
            tokio::spawn(async move {
                let why = loop {
                    match down.message().await {
                        Ok(Some(m)) if !m.ended.is_empty() => break m.ended,
                        Ok(Some(m)) => {
                            for (is_err, bytes) in [(false, &m.stdout), (true, &m.stderr)] {
                                if !bytes.is_empty() {
                                    write_program_output(is_err, bytes);
                                    seen.fetch_add(bytes.len() as u64, std::sync::atomic::Ordering::AcqRel);
                                }
                            }
                        }
                        Ok(None) => break "the server closed the session".to_string(),
                        Err(s) => break format!("session lost: {}", s.message()),
                    }
                };
                e.lock().get_or_insert(why);
            });
            let secret = first
                .secret
                .parse()
                .map_err(|_| PluginError::failed(format!("{what}: the server sent a malformed secret")))?;
            Ok(Arc::new(SessionState { id: first.session, secret, ended, heartbeat: Mutex::new(Some(tx)), output }))
        })?;
        if self.cfg.verbose {
            eprintln!("omptarget remote info: session {:#x} opened on offload-server {}", s.id, self.addr);
        }
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Ends the session normally and waits (briefly) for the server to see the end, so that
    /// it logs a normal close rather than a lost connection.
    fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        let Some(s) = self.session.lock().take() else { return };
        s.heartbeat.lock().take();
        let deadline = std::time::Instant::now() + self.cfg.latency.min(Duration::from_secs(2));
        while s.ended.lock().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn err(&self, msg: &str) -> PluginError {
        PluginError::failed(format!("remote device on {}: {msg}", self.addr))
    }

    /// Turns a failed call into an error naming the server, preferring the session's end reason.
    fn status(&self, s: &SessionState, st: tonic::Status) -> PluginError {
        let ended = s.ended.lock().clone();
        let lost = matches!(st.code(), tonic::Code::Aborted | tonic::Code::Unavailable) || ended.is_some();
        let e = match ended {
            Some(why) if st.code() != tonic::Code::Aborted => {
                self.err(&format!("{} (session ended: {why})", st.message()))
            }
            _ => self.err(st.message()),
        };
        if lost {
            PluginError::lost(e.reason)
        } else {
            e
        }
    }
}

/// An error and its sources, each said once (transport errors repeat their source's text:
/// "tcp connect error: tcp connect error").
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !t.is_empty() && !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

extern "C" {
    static mut stdout: *mut libc::FILE;
    static mut stderr: *mut libc::FILE;
}

/// Writes device output into the program's own C streams, so it takes the program's
/// buffering (line-buffered on a terminal) and its place among the program's own output.
fn write_program_output(is_err: bool, bytes: &[u8]) {
    // SAFETY: `stdout`/`stderr` are the C library's stream pointers, valid for the life of
    // the program; fwrite locks the stream and reads `bytes.len()` bytes from our slice.
    unsafe {
        let f = if is_err { stderr } else { stdout };
        if !f.is_null() {
            libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), f);
            if is_err {
                libc::fflush(f);
            }
        }
    }
}

/// Connections whose sessions are closed when the program exits.
static LIVE: Mutex<Vec<std::sync::Weak<Conn>>> = Mutex::new(Vec::new());

/// Closes every open session at exit, so the servers log a normal end.
extern "C" fn close_sessions_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let conns: Vec<_> = LIVE.lock().drain(..).collect();
        for c in conns.iter().filter_map(std::sync::Weak::upgrade) {
            c.close();
        }
    });
}

/// The plugin for one server.
pub struct RemotePlugin {
    addr: String,
    name: String,
    cfg: Arc<ClientConfig>,
    conn: OnceLock<Option<Arc<Conn>>>,
    /// Why the server's devices are missing (connection, Hello or token refused).
    failure: OnceLock<String>,
}

/// One plugin per server in `LIBOMPTARGET_RPC_ADDRESS`, in order; none when it is unset.
///
/// `get` reads a variable from the runtime's configuration, which read the environment once.
pub fn plugins(get: impl Fn(&str) -> Option<String>) -> Vec<RemotePlugin> {
    if get("LIBOMPTARGET_RPC_ADDRESS").is_none_or(|a| a.is_empty()) {
        return Vec::new();
    }
    let cfg = match ClientConfig::from_env(get) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("omptarget error: remote plugin: {e}");
            return Vec::new();
        }
    };
    for w in &cfg.warnings {
        eprintln!("omptarget warning: remote plugin: {w}");
    }
    if cfg.inside_worker && !cfg.addresses.is_empty() {
        eprintln!("omptarget error: remote-to-remote offloading is refused: this process is an offload-server worker");
        return Vec::new();
    }
    cfg.addresses.iter().map(|a| RemotePlugin::new(a, cfg.clone())).collect()
}

impl RemotePlugin {
    pub fn new(addr: &str, cfg: Arc<ClientConfig>) -> Self {
        Self {
            addr: addr.to_string(),
            name: format!("remote({addr})"),
            cfg,
            conn: OnceLock::new(),
            failure: OnceLock::new(),
        }
    }

    /// The connection, made on first need; failures are reported once and the server's
    /// devices are then absent.
    fn conn(&self) -> Option<&Arc<Conn>> {
        self.conn
            .get_or_init(|| match Conn::connect(&self.addr, self.cfg.clone()) {
                Ok(c) => {
                    if self.cfg.verbose {
                        eprintln!(
                            "omptarget remote info: {} at {} (protocol {}) offers {} devices for {}",
                            c.hello.server,
                            self.addr,
                            c.hello.protocol_version,
                            c.hello.num_devices,
                            c.hello.triples.join(",")
                        );
                    }
                    let c = Arc::new(c);
                    static AT_EXIT: std::sync::Once = std::sync::Once::new();
                    // SAFETY: atexit takes a plain `extern "C" fn()`, which catches any panic.
                    AT_EXIT.call_once(|| unsafe {
                        libc::atexit(close_sessions_at_exit);
                    });
                    LIVE.lock().push(Arc::downgrade(&c));
                    Some(c)
                }
                Err(e) => {
                    eprintln!("omptarget error: remote plugin: {e}; its devices are not available");
                    let _ = self.failure.set(e.reason);
                    None
                }
            })
            .as_ref()
    }
}

impl Plugin for RemotePlugin {
    fn name(&self) -> &str {
        &self.name
    }

    fn device_count(&self) -> usize {
        self.conn().map_or(0, |c| c.hello.num_devices as usize)
    }

    fn is_compatible(&self, image: &[u8], triple: Option<&str>) -> bool {
        let arch_ok = |t: &str| t.split('-').next() == Some("x86_64");
        if let Some(t) = triple.filter(|t| !t.is_empty()) {
            if !arch_ok(t) {
                return false;
            }
        }
        if !elf::header(image).is_ok_and(|h| h.loadable_on_x86_64().is_ok()) {
            return false;
        }
        self.conn().is_some_and(|c| c.hello.triples.iter().any(|t| arch_ok(t)))
    }

    fn unavailable(&self) -> Option<String> {
        self.conn();
        self.failure.get().map(|why| format!("the devices of offload-server at {} are not available: {why}", self.addr))
    }

    fn open_device(&self, index: usize) -> Result<Box<dyn Device>> {
        let conn = self
            .conn()
            .ok_or_else(|| PluginError::failed(format!("offload-server at {} is not reachable", self.addr)))?;
        if index >= conn.hello.num_devices as usize {
            return Err(PluginError::failed(format!("offload-server at {} has no device {index}", self.addr)));
        }
        Ok(Box::new(RemoteDevice { conn: conn.clone(), index: index as u32, kernels: Mutex::new(HashMap::new()) }))
    }
}

/// One device of a server.
pub struct RemoteDevice {
    conn: Arc<Conn>,
    index: u32,
    /// Kernel names by handle, for messages.
    kernels: Mutex<HashMap<usize, String>>,
}

impl RemoteDevice {
    /// A control call: deadline `LIBOMPTARGET_RPC_LATENCY`.
    fn control<T, F, Fut>(&self, what: &str, f: F) -> Result<T>
    where
        F: FnOnce(Client, Arc<SessionState>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, tonic::Status>>,
    {
        let s = self.conn.session()?;
        let fut = f(self.conn.client.clone(), s.clone());
        let c = &self.conn;
        block(Some(c.cfg.latency), &format!("{what} on {}", c.addr), async {
            fut.await.map(|r| r.into_inner()).map_err(|st| c.status(&s, st))
        })
    }
}

impl Device for RemoteDevice {
    fn load_image(&self, image: &[u8]) -> Result<ImageId> {
        let s = self.conn.session()?;
        let (c, dev) = (&self.conn, self.index);
        let total = image.len() as u64;
        let chunks: Vec<ImageChunk> = image
            .chunks(c.cfg.block_size)
            .map(|d| ImageChunk { session: s.id, device: dev, total_size: total, data: d.to_vec().into() })
            .collect();
        let mut client = c.client.clone();
        let limit = c.cfg.latency * 4 + Duration::from_secs(total / (16 << 20));
        let r = block(Some(limit), &format!("loading an image on {}", c.addr), async {
            client
                .load_image(s.req(tokio_stream::iter(chunks)))
                .await
                .map(|r| r.into_inner())
                .map_err(|st| c.status(&s, st))
        })?;
        Ok(ImageId(r.image as usize))
    }

    fn kernel(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        let n = name.to_string_lossy().into_owned();
        let dev = self.index;
        let r = self.control("resolving a kernel", |mut cl, s| async move {
            cl.symbol(s.req(SymbolRequest { session: s.id, device: dev, image: image.0 as u64, name: n, kernel: true }))
                .await
        })?;
        self.kernels.lock().insert(r.value as usize, name.to_string_lossy().into_owned());
        Ok(KernelId::new(r.value as usize))
    }

    fn global(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        let n = name.to_string_lossy().into_owned();
        let dev = self.index;
        let r = self.control("resolving a global", |mut cl, s| async move {
            cl.symbol(s.req(SymbolRequest {
                session: s.id,
                device: dev,
                image: image.0 as u64,
                name: n,
                kernel: false,
            }))
            .await
        })?;
        Ok(GlobalSymbol { addr: r.value as usize, size: 0 })
    }

    fn alloc(&self, size: usize, kind: AllocKind) -> Result<usize> {
        let dev = self.index;
        let r = self.control("allocating", |mut cl, s| async move {
            cl.alloc(s.req(AllocRequest { session: s.id, device: dev, size: size as u64, kind: kind as u32 })).await
        })?;
        Ok(r.addr as usize)
    }

    fn free(&self, ptr: usize, _kind: AllocKind) -> Result<()> {
        let dev = self.index;
        self.control("freeing", |mut cl, s| async move {
            cl.free(s.req(FreeRequest { session: s.id, device: dev, addr: ptr as u64 })).await
        })?;
        Ok(())
    }

    unsafe fn submit(&self, tgt: usize, host: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let s = self.conn.session()?;
        let c = &*self.conn;
        let (block_size, latency, dev) = (c.cfg.block_size, c.cfg.latency, self.index);
        let mut client = c.client.clone();
        let what = format!("copying {size} bytes to {}", c.addr);
        // SAFETY: the caller promises `[host, host+size)` readable for the duration of this
        // call; it is only read, chunk by chunk, before `block` returns.
        let src: &[u8] = unsafe { std::slice::from_raw_parts(host as *const u8, size) };
        let stream = s.req(());
        block(None, &what.clone(), async {
            let (tx, rx) = mpsc::channel(c.cfg.inflight_chunks());
            let (md, ext, ()) = stream.into_parts();
            let req = tonic::Request::from_parts(md, ext, ReceiverStream::new(rx));
            let call = tokio::spawn(async move { client.submit(req).await });
            let mut off = 0usize;
            while off < size {
                let n = block_size.min(size - off);
                let data = bytes::Bytes::copy_from_slice(&src[off..off + n]);
                let chunk = SubmitChunk {
                    session: s.id,
                    device: dev,
                    addr: tgt as u64,
                    total_size: size as u64,
                    offset: off as u64,
                    data,
                };
                match tokio::time::timeout(latency, tx.send(chunk)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => break, // the call ended early: its status says why
                    Err(_) => {
                        call.abort();
                        return Err(c.err(&format!(
                            "{what}: no progress within {:.1}s (LIBOMPTARGET_RPC_LATENCY)",
                            latency.as_secs_f64()
                        )));
                    }
                }
                off += n;
            }
            drop(tx);
            match tokio::time::timeout(latency, call).await {
                Ok(Ok(Ok(_))) => Ok(()),
                Ok(Ok(Err(st))) => Err(c.status(&s, st)),
                Ok(Err(e)) => Err(c.err(&format!("{what}: {e}"))),
                Err(_) => Err(c.err(&format!(
                    "{what}: no answer within {:.1}s (LIBOMPTARGET_RPC_LATENCY)",
                    latency.as_secs_f64()
                ))),
            }
        })
    }

    unsafe fn retrieve(&self, host: usize, tgt: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let s = self.conn.session()?;
        let c = &*self.conn;
        let (latency, dev) = (c.cfg.latency, self.index);
        let mut client = c.client.clone();
        let what = format!("copying {size} bytes from {}", c.addr);
        let stalled =
            || c.err(&format!("{what}: no progress within {:.1}s (LIBOMPTARGET_RPC_LATENCY)", latency.as_secs_f64()));
        let req = RetrieveRequest {
            session: s.id,
            device: dev,
            addr: tgt as u64,
            size: size as u64,
            chunk: c.cfg.block_size as u32,
        };
        block(None, &what.clone(), async {
            let mut stream = match tokio::time::timeout(latency, client.retrieve(s.req(req))).await {
                Ok(r) => r.map_err(|st| c.status(&s, st))?.into_inner(),
                Err(_) => return Err(stalled()),
            };
            let mut assembly = check::Assembly::new(size);
            loop {
                let m = tokio::time::timeout(latency, stream.message())
                    .await
                    .map_err(|_| stalled())?
                    .map_err(|st| c.status(&s, st))?;
                let Some(chunk) = m else { break };
                assembly.accept(chunk.offset, chunk.data.len()).map_err(|e| c.err(&format!("{what}: {e}")))?;
                // SAFETY: accepted, so `[offset, offset+len)` lies inside `[0, size)`, and the
                // caller promises `[host, host+size)` writable for the duration of this call.
                unsafe {
                    host_memory::copy(host + chunk.offset as usize, chunk.data.as_ptr() as usize, chunk.data.len())
                };
            }
            assembly.finish().map_err(|e| c.err(&format!("{what}: {e}")))
        })
    }

    /// `unsafe` by the trait's contract only: the server checks both ranges against the
    /// session, and nothing in this process is touched.
    unsafe fn copy_within(&self, dst: usize, src: usize, size: usize) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let dev = self.index;
        self.control("copying on the device", |mut cl, s| async move {
            cl.copy_within(s.req(CopyWithinRequest {
                session: s.id,
                device: dev,
                dst: dst as u64,
                src: src as u64,
                size: size as u64,
            }))
            .await
        })?;
        Ok(())
    }

    /// `unsafe` by the trait's contract only: the kernel runs in the server's worker, which
    /// checks the kernel against those it resolved for the session.
    unsafe fn launch(&self, kernel: KernelId, args: &[usize], config: &LaunchConfig) -> Result<()> {
        let s = self.conn.session()?;
        let c = &*self.conn;
        let req = LaunchRequest {
            session: s.id,
            device: self.index,
            kernel: kernel.raw() as u64,
            args: args.iter().map(|&a| a as u64).collect(),
            with_dyn_ptr: config.with_dyn_ptr,
            num_teams: config.num_teams[0],
            thread_limit: config.thread_limit[0],
        };
        let mut client = c.client.clone();
        // No deadline: kernels run as long as they run; keepalive pings notice a dead server.
        let latency = c.cfg.latency;
        block(None, "launching", async {
            let r = client.launch(s.req(req)).await.map_err(|st| c.status(&s, st))?.into_inner();
            // The kernel's output comes on the session stream: deliver it before returning, so
            // that it precedes what the program prints next (bounded: a lost chunk only delays).
            let deadline = tokio::time::Instant::now() + latency;
            while s.output.load(std::sync::atomic::Ordering::Acquire) < r.output_bytes
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            Ok(())
        })
        .map_err(|e| {
            let name = self.kernels.lock().get(&kernel.raw()).cloned();
            match name {
                Some(n) if !e.reason.contains(&n) => {
                    PluginError { kind: e.kind, reason: format!("{} (kernel '{n}')", e.reason) }
                }
                _ => e,
            }
        })
    }

    fn info(&self) -> Vec<(String, String)> {
        vec![
            ("Device Type".into(), "Remote generic-elf-64bit (offload-server worker)".into()),
            ("Remote Server".into(), format!("{} ({})", self.conn.addr, self.conn.hello.server)),
            ("Remote Device".into(), self.index.to_string()),
            ("UID".into(), format!("remote-{}-{}", self.conn.addr, self.index)),
        ]
    }

    fn is_accessible(&self, _ptr: usize, _size: usize) -> bool {
        false
    }
}

/// A write to a server that died raises SIGPIPE, whose default action would end the program
/// silently. All of the plugin's socket writes happen on its runtime's threads, and SIGPIPE is
/// sent to the thread that wrote: blocked there, it stays pending and the write fails with
/// EPIPE, which names the server. The program's own threads and disposition are untouched, so
/// a program piped into `head` still ends with SIGPIPE.
fn block_sigpipe() {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; pthread_sigmask changes only
    // the calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct E(&'static str, Option<Box<E>>);
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for E {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    /// A server that is down: no devices, and the plugin says why (for MANDATORY).
    #[test]
    fn an_unreachable_server_says_why_its_devices_are_missing() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let cfg = ClientConfig::from_env(|k| match k {
            "LIBOMPTARGET_RPC_ADDRESS" => Some(addr.clone()),
            "LIBOMPTARGET_RPC_LATENCY" => Some("2".into()),
            _ => None,
        })
        .unwrap();
        let p = RemotePlugin::new(&addr, Arc::new(cfg));
        assert_eq!(p.device_count(), 0);
        let why = p.unavailable().expect("a reason");
        assert!(why.contains(&addr) && why.contains("refused"), "{why}");
    }

    #[test]
    fn error_chains_say_each_cause_once() {
        let e = E(
            "transport error",
            Some(Box::new(E(
                "tcp connect error",
                Some(Box::new(E("tcp connect error", Some(Box::new(E("Connection refused (os error 111)", None)))))),
            ))),
        );
        assert_eq!(source_chain(&e), "transport error: tcp connect error: Connection refused (os error 111)");
    }
}
