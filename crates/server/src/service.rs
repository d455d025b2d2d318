//! The gRPC service: each call finds its session (`session.rs`), checks what it asks for
//! against the session's limits and handles, and relays it to the session's worker.

use crate::auth::{same_secret, session_key};
use crate::config::ServerConfig;
use crate::relay::{unexpected, Relay};
use crate::session::{Kernel, Session, Slot};
use crate::sys;
use omp_remote_proto::pb::offload_server::Offload;
use omp_remote_proto::pb::*;
use omp_remote_proto::PROTOCOL_VERSION;
use omp_sync::Mutex;
use omp_worker::{CallError, Request as Call, Response as Reply};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// Supported image triples (the host plugin's).
pub const TRIPLES: [&str; 2] = ["x86_64-pc-linux-gnu", "x86_64-unknown-linux-gnu"];

/// Longest symbol name a client may look up.
const MAX_SYMBOL_NAME: usize = 4096;
/// Most arguments a kernel launch may carry.
const MAX_KERNEL_ARGS: usize = 4096;

/// The server: sessions by id.
pub struct Service {
    cfg: Arc<ServerConfig>,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    /// Sessions open or opening (`--max-sessions` counts these).
    slots: Arc<AtomicUsize>,
}

type Stream2<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl Service {
    pub fn new(cfg: Arc<ServerConfig>) -> Arc<Self> {
        Arc::new(Self { cfg, sessions: Mutex::new(HashMap::new()), slots: Arc::default() })
    }

    fn log(&self, msg: std::fmt::Arguments) {
        if !self.cfg.quiet {
            eprintln!("offload-server: {msg}");
        }
    }

    /// The live session `id`, if this connection opened it.
    fn session(&self, id: u64, key: Option<&str>) -> Result<Arc<Session>, Status> {
        let s = self.sessions.lock().get(&id).cloned();
        let s = s.ok_or_else(|| {
            Status::not_found(format!("no session {id:#x}: it never existed, ended, or its lease expired"))
        })?;
        if !same_secret(key.unwrap_or(""), &s.secret) {
            return Err(Status::permission_denied(format!(
                "session {id:#x} belongs to another client (calls must carry its secret in `{}`)",
                omp_remote_proto::SESSION_KEY_HEADER
            )));
        }
        if let Some(why) = s.ended.lock().clone() {
            return Err(Status::aborted(format!("session ended: {why}")));
        }
        Ok(s)
    }

    fn device(&self, d: u32) -> Result<u32, Status> {
        if (d as usize) < self.cfg.devices {
            Ok(d)
        } else {
            Err(Status::invalid_argument(format!("no device {d} (the server offers {})", self.cfg.devices)))
        }
    }

    fn close(&self, id: u64, why: &str) {
        let Some(s) = self.sessions.lock().remove(&id) else { return };
        let ended = s.ended.lock().clone();
        let why = match ended {
            Some(e) => format!("{why}; it had ended: {e}"),
            None => why.to_string(),
        };
        s.end(&why);
        s.worker.stop();
        let o = s.owned.lock();
        self.log(format_args!(
            "session {id:#x} closed ({why}): freed {} bytes in {} allocations, {} images; worker {} stopped",
            o.used,
            o.allocs.len(),
            o.images.len(),
            s.worker.pid()
        ));
    }

    /// Receives a client stream's first message, or fails.
    async fn first<T>(stream: &mut Streaming<T>) -> Result<T, Status> {
        stream.message().await?.ok_or_else(|| Status::invalid_argument("empty request stream"))
    }
}

/// Keeps `Arc<Service>` usable as the tonic service.
pub struct Handler(pub Arc<Service>);

#[tonic::async_trait]
impl Offload for Handler {
    async fn hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let r = req.into_inner();
        if r.inside_worker {
            return Err(Status::failed_precondition(
                "remote-to-remote offloading is refused: the client runs inside an offload-server worker",
            ));
        }
        if r.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "protocol version {} is not supported (this server speaks {PROTOCOL_VERSION})",
                r.protocol_version
            )));
        }
        let c = &self.0.cfg;
        Ok(Response::new(HelloReply {
            protocol_version: PROTOCOL_VERSION,
            server: format!("offload-server {}", env!("CARGO_PKG_VERSION")),
            capabilities: vec!["sessions".into(), "chunked-transfers".into(), "worker-process".into()],
            triples: TRIPLES.iter().map(|t| t.to_string()).collect(),
            num_devices: c.devices as u32,
            pointer_width: usize::BITS,
            little_endian: cfg!(target_endian = "little"),
            max_image_bytes: c.max_image_bytes,
            max_session_memory: c.max_session_memory,
            max_chunk_bytes: omp_remote_proto::MAX_CHUNK_BYTES,
            lease_ms: c.lease.as_millis() as u32,
        }))
    }

    type SessionStream = Stream2<SessionDown>;

    async fn session(&self, req: Request<Streaming<SessionUp>>) -> Result<Response<Self::SessionStream>, Status> {
        let svc = self.0.clone();
        let peer = req.remote_addr();
        let mut inbound = req.into_inner();
        let slot = Slot::take(&svc.slots, svc.cfg.max_sessions).ok_or_else(|| {
            Status::resource_exhausted(format!("the server is at its limit of {} sessions", svc.cfg.max_sessions))
        })?;
        let (worker, mut output) = {
            Relay::spawn(&svc.cfg.worker_exe, svc.cfg.devices, &svc.cfg.lib_path)
                .await
                .map_err(|e| Status::unavailable(format!("cannot start a device worker: {e}")))?
        };
        let id = loop {
            let id = sys::random_u64();
            if id != 0 && !svc.sessions.lock().contains_key(&id) {
                break id;
            }
        };
        let mut death = worker.death.clone();
        let secret = format!("{:016x}{:016x}", sys::random_u64(), sys::random_u64());
        let session = Arc::new(Session {
            secret: secret.clone(),
            worker,
            owned: Mutex::default(),
            last_beat: Mutex::new(Instant::now()),
            ended: Mutex::new(None),
            running: Mutex::default(),
            _slot: slot,
        });
        svc.log(format_args!(
            "session {id:#x} opened for {} (worker {})",
            peer.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
            session.worker.pid()
        ));
        svc.sessions.lock().insert(id, session.clone());
        let (tx, rx) = mpsc::channel(4);
        let lease = svc.cfg.lease;
        let first = SessionDown { session: id, lease_ms: lease.as_millis() as u32, secret, ..Default::default() };
        let _ = tx.send(Ok(first)).await;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 4);
            let mut told = false;
            let why = loop {
                tokio::select! {
                    m = inbound.message() => match m {
                        Ok(Some(_)) => *session.last_beat.lock() = Instant::now(),
                        Ok(None) => break "client closed the session".to_string(),
                        Err(e) => break format!("client disconnected ({})", e.message()),
                    },
                    Some((is_err, bytes)) = output.recv() => {
                        let m = if is_err {
                            SessionDown { session: id, stderr: bytes.into(), ..Default::default() }
                        } else {
                            SessionDown { session: id, stdout: bytes.into(), ..Default::default() }
                        };
                        let _ = tx.send(Ok(m)).await;
                    }
                    _ = tick.tick() => {
                        if session.last_beat.lock().elapsed() > lease {
                            break format!("lease of {:?} expired", lease);
                        }
                    }
                    _ = death.changed(), if !told => {
                        told = true;
                        let how = session.worker.died().unwrap_or_default();
                        session.end(&session.death_reason(&how));
                        let why = session.ended.lock().clone().unwrap_or_default();
                        let _ = tx.send(Ok(SessionDown { session: id, ended: why, ..Default::default() })).await;
                    }
                }
            };
            let _ = tx.send(Err(Status::aborted(why.clone()))).await;
            svc.close(id, &why);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn load_image(&self, req: Request<Streaming<ImageChunk>>) -> Result<Response<LoadImageReply>, Status> {
        let key = session_key(&req);
        let mut stream = req.into_inner();
        let first = Service::first(&mut stream).await?;
        let s = self.0.session(first.session, key.as_deref())?;
        let device = self.0.device(first.device)?;
        let limit = self.0.cfg.max_image_bytes;
        if first.total_size > limit {
            return Err(Status::resource_exhausted(format!(
                "image of {} bytes exceeds the server's limit of {limit}",
                first.total_size
            )));
        }
        let mut image = Vec::with_capacity(first.total_size as usize);
        image.extend_from_slice(&first.data);
        while let Some(c) = stream.message().await? {
            if (image.len() + c.data.len()) as u64 > first.total_size {
                return Err(Status::invalid_argument("image chunks exceed the announced size"));
            }
            image.extend_from_slice(&c.data);
        }
        if image.len() as u64 != first.total_size {
            return Err(Status::invalid_argument("image transfer ended early"));
        }
        let index = s.worker.load(device, image).await.map_err(|e| s.map_err(e, "image load"))?;
        let mut o = s.owned.lock();
        o.images.push((device, index));
        Ok(Response::new(LoadImageReply { image: o.images.len() as u64 }))
    }

    async fn symbol(&self, req: Request<SymbolRequest>) -> Result<Response<SymbolReply>, Status> {
        let key = session_key(&req);
        let r = req.into_inner();
        let s = self.0.session(r.session, key.as_deref())?;
        let device = self.0.device(r.device)?;
        if r.name.len() > MAX_SYMBOL_NAME {
            return Err(Status::invalid_argument(format!("a symbol name of {} bytes is too long", r.name.len())));
        }
        let index = {
            let o = s.owned.lock();
            match r.image.checked_sub(1).and_then(|i| o.images.get(i as usize)) {
                Some(&(d, index)) if d == device => index,
                _ => return Err(Status::not_found(format!("no image {} on device {device} in this session", r.image))),
            }
        };
        let req = if r.kernel {
            Call::Kernel { device, image: index, name: &r.name }
        } else {
            Call::Global { device, image: index, name: &r.name }
        };
        let reply = s.worker.call(req).await.map_err(|e| match e {
            CallError::Failed(m) => Status::not_found(m),
            e => s.map_err(e, "symbol lookup"),
        })?;
        let (addr, size) = match reply {
            Reply::Kernel(k) => (k, 0),
            Reply::Global { addr, size } => (addr, size),
            r => return Err(s.map_err(unexpected(r), "symbol lookup")),
        };
        let mut o = s.owned.lock();
        if r.kernel {
            o.kernels.push(Kernel { device, addr, name: r.name });
            Ok(Response::new(SymbolReply { value: o.kernels.len() as u64, size: 0 }))
        } else {
            let e = o.globals.entry(addr).or_insert(0);
            *e = (*e).max(size);
            Ok(Response::new(SymbolReply { value: addr, size }))
        }
    }

    async fn alloc(&self, req: Request<AllocRequest>) -> Result<Response<AllocReply>, Status> {
        let key = session_key(&req);
        let r = req.into_inner();
        let s = self.0.session(r.session, key.as_deref())?;
        let device = self.0.device(r.device)?;
        if r.size == 0 {
            return Err(Status::invalid_argument("zero-size allocation"));
        }
        let size = r.size;
        {
            let mut o = s.owned.lock();
            let limit = self.0.cfg.max_session_memory;
            if o.used.saturating_add(r.size) > limit {
                return Err(Status::resource_exhausted(format!(
                    "allocating {} bytes would exceed the session's limit of {limit} bytes ({} in use)",
                    r.size, o.used
                )));
            }
            o.used += r.size; // reserved now, so concurrent allocations respect the limit
        }
        let reply = s.worker.call(Call::Alloc { device, size: r.size }).await;
        let mut o = s.owned.lock();
        let addr = match reply {
            Ok(Reply::Addr(a)) => a,
            Ok(r) => {
                o.used -= size;
                return Err(Status::internal(unexpected(r).to_string()));
            }
            Err(e) => {
                o.used -= r.size;
                drop(o);
                return Err(match e {
                    CallError::Failed(m) => Status::resource_exhausted(m),
                    e => s.map_err(e, "allocation"),
                });
            }
        };
        o.allocs.insert(addr, r.size);
        Ok(Response::new(AllocReply { addr }))
    }

    async fn free(&self, req: Request<FreeRequest>) -> Result<Response<Empty>, Status> {
        let key = session_key(&req);
        let r = req.into_inner();
        let s = self.0.session(r.session, key.as_deref())?;
        let device = self.0.device(r.device)?;
        let size = s
            .owned
            .lock()
            .allocs
            .remove(&r.addr)
            .ok_or_else(|| Status::not_found(format!("0x{:x} is not an allocation of this session", r.addr)))?;
        s.owned.lock().used -= size;
        s.worker.call(Call::Free { device, addr: r.addr }).await.map_err(|e| s.map_err(e, "free"))?;
        Ok(Response::new(Empty {}))
    }

    async fn submit(&self, req: Request<Streaming<SubmitChunk>>) -> Result<Response<Empty>, Status> {
        let key = session_key(&req);
        let mut stream = req.into_inner();
        let first = Service::first(&mut stream).await?;
        let s = self.0.session(first.session, key.as_deref())?;
        let device = self.0.device(first.device)?;
        let (addr, total) = (first.addr, first.total_size);
        s.check_range(addr, total)?;
        let mut received = 0u64;
        let mut chunk = Some(first);
        while let Some(c) = chunk {
            let len = c.data.len() as u64;
            if c.offset.checked_add(len).is_none_or(|end| end > total) {
                return Err(Status::invalid_argument("chunk outside the announced transfer"));
            }
            s.worker.write(device, addr + c.offset, c.data).await.map_err(|e| s.map_err(e, "a host-to-device copy"))?;
            received += len;
            chunk = stream.message().await?;
        }
        if received != total {
            return Err(Status::invalid_argument(format!("transfer ended after {received} of {total} bytes")));
        }
        Ok(Response::new(Empty {}))
    }

    type RetrieveStream = Stream2<DataChunk>;

    async fn retrieve(&self, req: Request<RetrieveRequest>) -> Result<Response<Self::RetrieveStream>, Status> {
        let key = session_key(&req);
        let r = req.into_inner();
        let s = self.0.session(r.session, key.as_deref())?;
        let device = self.0.device(r.device)?;
        s.check_range(r.addr, r.size)?;
        let chunk = u64::from(r.chunk.clamp(4096, self.0.cfg.block_size));
        let (tx, rx) = mpsc::channel(self.0.cfg.read_ahead(chunk));
        tokio::spawn(async move {
            let mut off = 0u64;
            while off < r.size {
                let n = chunk.min(r.size - off);
                let item = match s.worker.read(device, r.addr + off, n as usize).await {
                    Ok(data) => Ok(DataChunk { offset: off, data: data.into() }),
                    Err(e) => Err(s.map_err(e, "a device-to-host copy")),
                };
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
                off += n;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn copy_within(&self, req: Request<CopyWithinRequest>) -> Result<Response<Empty>, Status> {
        let key = session_key(&req);
        let r = req.into_inner();
        let s = self.0.session(r.session, key.as_deref())?;
        let device = self.0.device(r.device)?;
        s.check_range(r.src, r.size)?;
        s.check_range(r.dst, r.size)?;
        let req = Call::Copy { device, dst: r.dst, src: r.src, len: r.size };
        s.worker.call(req).await.map_err(|e| s.map_err(e, "a device-to-device copy"))?;
        Ok(Response::new(Empty {}))
    }

    async fn launch(&self, req: Request<LaunchRequest>) -> Result<Response<LaunchReply>, Status> {
        let key = session_key(&req);
        let r = req.into_inner();
        let s = self.0.session(r.session, key.as_deref())?;
        let device = self.0.device(r.device)?;
        if r.args.len() > MAX_KERNEL_ARGS {
            return Err(Status::invalid_argument(format!("{} kernel arguments are too many", r.args.len())));
        }
        let (addr, name) = {
            let o = s.owned.lock();
            match r.kernel.checked_sub(1).and_then(|i| o.kernels.get(i as usize)) {
                Some(k) if k.device == device => (k.addr, k.name.clone()),
                _ => {
                    return Err(Status::not_found(format!("no kernel {} on device {device} in this session", r.kernel)))
                }
            }
        };
        let req = Call::Launch {
            device,
            kernel: addr,
            with_dyn_ptr: r.with_dyn_ptr,
            num_teams: r.num_teams,
            thread_limit: r.thread_limit,
            args: &r.args,
        };
        s.running.lock().push(name.clone());
        let r = s.worker.call(req).await;
        let r = r.map_err(|e| match e {
            CallError::Failed(m) => Status::internal(m),
            CallError::Died(how) => {
                s.end(&s.death_reason(&how));
                let why = s.ended.lock().clone().unwrap_or_default();
                Status::aborted(format!("session ended: {why}"))
            }
        });
        let mut running = s.running.lock();
        if let Some(i) = running.iter().position(|n| *n == name) {
            running.remove(i);
        }
        drop(running);
        r?;
        Ok(Response::new(LaunchReply { output_bytes: s.worker.output_bytes() }))
    }

    async fn ping(&self, _req: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }
}
