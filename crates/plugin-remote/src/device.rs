//! One device of a server: each HAL operation as a call of the session, transfers as
//! streams of checked chunks.

use crate::conn::{block, Client, Conn, SessionState};
use crate::reply_checks;
use omp_plugin::{host_memory, AllocKind, Device, GlobalSymbol, ImageId, KernelId, LaunchConfig, PluginError, Result};
use omp_remote_proto::pb::*;
use omp_sync::Mutex;
use std::collections::HashMap;
use std::ffi::CStr;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// One device of a server.
pub struct RemoteDevice {
    pub(crate) conn: Arc<Conn>,
    pub(crate) index: u32,
    /// Kernel names by handle, for messages.
    pub(crate) kernels: Mutex<HashMap<usize, String>>,
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
            let mut assembly = reply_checks::Assembly::new(size);
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
