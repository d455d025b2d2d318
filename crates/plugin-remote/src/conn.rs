//! The connection to one server: the plugin's private tokio runtime, the channel (TLS,
//! token), Hello, the session and its stream (heartbeats, the device code's output), and
//! closing the sessions at exit.

use crate::config::ClientConfig;
use crate::reply_checks;
use omp_plugin::{PluginError, Result};
use omp_remote_proto::pb::offload_client::OffloadClient;
use omp_remote_proto::pb::*;
use omp_sync::Mutex;
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
pub(crate) fn block<T>(limit: Option<Duration>, what: &str, fut: impl Future<Output = Result<T>>) -> Result<T> {
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
pub(crate) struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> std::result::Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert(omp_remote_proto::AUTH_HEADER, t.clone());
        }
        Ok(req)
    }
}

pub(crate) type Client = OffloadClient<InterceptedService<Channel, Auth>>;

/// The server's reply to Hello, and the connection.
pub(crate) struct Conn {
    pub(crate) addr: String,
    pub(crate) client: Client,
    pub(crate) hello: HelloReply,
    pub(crate) cfg: Arc<ClientConfig>,
    pub(crate) session: Mutex<Option<Arc<SessionState>>>,
    /// Set when the program exits: no new session is opened.
    pub(crate) closed: std::sync::atomic::AtomicBool,
}

/// A live session: its id, and why it ended if it did.
pub(crate) struct SessionState {
    pub(crate) id: u64,
    /// Carried by every call (`omp-session-secret`).
    pub(crate) secret: MetadataValue<Ascii>,
    pub(crate) ended: Arc<Mutex<Option<String>>>,
    /// Dropping the sender closes the session stream: the server frees everything.
    /// Taking it ends the session stream normally (the server logs a normal close).
    pub(crate) heartbeat: Mutex<Option<mpsc::Sender<SessionUp>>>,
    /// Bytes of the device code's output written to the program's streams so far.
    pub(crate) output: Arc<std::sync::atomic::AtomicU64>,
}

impl SessionState {
    /// `m` as a call of this session: with its secret.
    pub(crate) fn req<T>(&self, m: T) -> tonic::Request<T> {
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
    pub(crate) fn connect(addr: &str, cfg: Arc<ClientConfig>) -> Result<Conn> {
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
            reply_checks::hello(&hello).map_err(|e| PluginError::failed(format!("{what}: {e}")))?;
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
    pub(crate) fn session(&self) -> Result<Arc<SessionState>> {
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
    pub(crate) fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        let Some(s) = self.session.lock().take() else { return };
        s.heartbeat.lock().take();
        let deadline = std::time::Instant::now() + self.cfg.latency.min(Duration::from_secs(2));
        while s.ended.lock().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    pub(crate) fn err(&self, msg: &str) -> PluginError {
        PluginError::failed(format!("remote device on {}: {msg}", self.addr))
    }

    /// Turns a failed call into an error naming the server, preferring the session's end reason.
    pub(crate) fn status(&self, s: &SessionState, st: tonic::Status) -> PluginError {
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
pub(crate) static LIVE: Mutex<Vec<std::sync::Weak<Conn>>> = Mutex::new(Vec::new());

/// Closes every open session at exit, so the servers log a normal end.
pub(crate) extern "C" fn close_sessions_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let conns: Vec<_> = LIVE.lock().drain(..).collect();
        for c in conns.iter().filter_map(std::sync::Weak::upgrade) {
            c.close();
        }
    });
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
