//! The server's side of a session's worker: an `omp-worker` client, bridged to async calls.
//! Fork/exec, images and copies relayed through the pipe run on tokio's blocking threads;
//! direct copies of a transfer's chunk (`process_vm_writev`/`readv`, well under a
//! millisecond) and small requests run inline. A hop to a blocking thread per chunk costs two
//! thread wake-ups, which on an idle machine took a third of a host-to-device transfer's
//! time. A small request's thread looks for the reply itself for a few microseconds
//! ([`Worker::send_and_look`]): an empty kernel's reply then reaches the gRPC reply without
//! waking the worker client's reader thread and then this task. Later replies come through a
//! oneshot channel from that reader.

use omp_worker::{CallError, Request, Response, SpawnOptions, Worker};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// Output chunks queued for the client; more is dropped (a client that does not read must
/// not grow the server's memory).
const OUTPUT_QUEUE: usize = 256;

/// A chunk of the worker's output: `(is stderr, bytes)`.
pub type Output = (bool, Vec<u8>);

/// Requests up to this size are written on the async thread (they fit the pipe's buffer,
/// which the worker keeps draining). The service bounds symbol names and kernel arguments
/// below it.
pub const INLINE_REQUEST: usize = 60 << 10;

/// Direct copies up to this size run on the async thread (a transfer's chunks are at most
/// `--block-size`, 1 MiB by default).
const INLINE_COPY: usize = 4 << 20;

/// A running worker and the news of its death.
pub struct Relay {
    worker: Arc<Worker>,
    /// `Some(how it ended)` once the worker is gone.
    pub death: watch::Receiver<Option<String>>,
    /// Output bytes queued for the client so far.
    output_bytes: Arc<AtomicU64>,
    /// Whether direct copies may still run inline: cleared at the first that fails (the
    /// worker's client then decides between relaying and an error, on a blocking thread).
    inline_copies: AtomicBool,
}

impl Relay {
    /// Starts `exe --worker` with `devices` devices and `lib_path` prepended to its library path.
    pub async fn spawn(exe: &Path, devices: usize, lib_path: &str) -> std::io::Result<(Relay, mpsc::Receiver<Output>)> {
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("--worker").arg(devices.to_string()).arg(std::process::id().to_string());
        cmd.stderr(std::process::Stdio::inherit());
        // No remote-to-remote offloading: the worker's own runtime must not reach out.
        for var in [
            "LIBOMPTARGET_RPC_ADDRESS",
            "LIBOMPTARGET_RPC_TOKEN",
            "LIBOMPTARGET_RPC_TOKEN_FILE",
            "OFFLOAD_SERVER_TOKEN",
        ] {
            cmd.env_remove(var);
        }
        cmd.env(omp_remote_proto::WORKER_ENV, "1");
        if !lib_path.is_empty() {
            let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
            cmd.env("LD_LIBRARY_PATH", if old.is_empty() { lib_path.to_string() } else { format!("{lib_path}:{old}") });
        }
        let (death_tx, death) = watch::channel(None);
        let (out_tx, out_rx) = mpsc::channel(OUTPUT_QUEUE);
        let output_bytes = Arc::new(AtomicU64::new(0));
        let counted = output_bytes.clone();
        let opts = SpawnOptions {
            on_output: Some(Box::new(move |is_err, bytes: &[u8]| {
                if out_tx.try_send((is_err, bytes.to_vec())).is_ok() {
                    counted.fetch_add(bytes.len() as u64, Ordering::AcqRel);
                }
            })),
            // The worker hosts the host plugin: device addresses are its own.
            direct_copies: true,
            on_exit: Some(Box::new(move |how: &str| {
                let _ = death_tx.send(Some(how.to_string()));
            })),
        };
        let (spawned_tx, spawned) = oneshot::channel();
        on_spawner_thread(Box::new(move || {
            let _ = spawned_tx.send(Worker::spawn(cmd, opts));
        }))?;
        let worker = spawned.await.map_err(|_| std::io::Error::other("the worker spawner thread is gone"))??;
        Ok((Relay { worker: Arc::new(worker), death, output_bytes, inline_copies: AtomicBool::new(true) }, out_rx))
    }

    /// Output bytes queued for the client so far (all output written before a completed
    /// call's reply is counted when the call completes).
    pub fn output_bytes(&self) -> u64 {
        self.output_bytes.load(Ordering::Acquire)
    }

    pub fn pid(&self) -> i32 {
        self.worker.pid()
    }

    /// How the worker ended, if it has.
    pub fn died(&self) -> Option<String> {
        self.worker.died()
    }

    /// Sends a small request and waits for its reply.
    pub async fn call(&self, req: Request<'_>) -> Result<Response, CallError> {
        let (tx, rx) = oneshot::channel();
        let done = Box::new(move |r| {
            let _ = tx.send(r);
        });
        let size = match req {
            Request::Load { image, .. } => image.len(),
            Request::Write { data, .. } => data.len(),
            Request::Kernel { name, .. } | Request::Global { name, .. } => name.len(),
            Request::Launch { args, .. } => args.len() * 8,
            _ => 0,
        };
        if size <= INLINE_REQUEST {
            self.worker.send_and_look(&req, done);
        } else {
            // Only small requests come here today; a large one must not block this thread.
            return Err(CallError::Failed(format!("internal error: a {size}-byte request on an async thread")));
        }
        rx.await.unwrap_or_else(|_| Err(CallError::Died("lost".into())))
    }

    /// Loads an image (written to the pipe on a blocking thread).
    pub async fn load(&self, device: u32, image: Vec<u8>) -> Result<u64, CallError> {
        let w = self.worker.clone();
        match blocking(move || w.call(&Request::Load { device, image: &image })).await? {
            Response::Image(i) => Ok(i),
            r => Err(unexpected(r)),
        }
    }

    /// Copies `data` to device address `addr`: directly on this thread when it can, else on
    /// a blocking thread.
    pub async fn write(&self, device: u32, addr: u64, data: bytes::Bytes) -> Result<(), CallError> {
        if data.len() <= INLINE_COPY && self.copies_inline() {
            match omp_worker::sys::write_to(self.worker.pid(), addr, &data) {
                Ok(()) => return Ok(()),
                Err(_) => self.inline_copies.store(false, Ordering::Relaxed),
            }
        }
        let w = self.worker.clone();
        blocking(move || w.write(device, addr, &data)).await
    }

    /// Reads `len` bytes at device address `addr`: directly on this thread when it can, else
    /// on a blocking thread.
    pub async fn read(&self, device: u32, addr: u64, len: usize) -> Result<Vec<u8>, CallError> {
        if len <= INLINE_COPY && self.copies_inline() {
            match omp_worker::sys::read_vec(self.worker.pid(), addr, len) {
                Ok(buf) => return Ok(buf),
                Err(_) => self.inline_copies.store(false, Ordering::Relaxed),
            }
        }
        let w = self.worker.clone();
        blocking(move || w.read(device, addr, len)).await
    }

    /// Whether a direct copy may run inline: none has failed, and the worker is alive (its
    /// pid is not free for another process).
    fn copies_inline(&self) -> bool {
        self.inline_copies.load(Ordering::Relaxed) && self.worker.died().is_none()
    }

    /// Stops the worker (closing its pipe, then killing it).
    pub fn stop(&self) {
        self.worker.stop();
    }
}

/// Work for the spawner thread.
type SpawnJob = Box<dyn FnOnce() + Send>;

/// Runs `job` on the thread that forks every worker. The worker asks for SIGKILL when the
/// *thread* that forked it ends (`PR_SET_PDEATHSIG`), so that thread must live as long as the
/// server: a tokio blocking thread retires after 10 s without work, which killed the worker
/// of a session that made no blocking call for that long (a long kernel, say).
fn on_spawner_thread(job: SpawnJob) -> std::io::Result<()> {
    static SPAWNER: std::sync::OnceLock<std::io::Result<std::sync::mpsc::Sender<SpawnJob>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
        std::thread::Builder::new().name("worker-spawner".into()).spawn(move || rx.iter().for_each(|job| job()))?;
        Ok(tx)
    });
    match spawner {
        Ok(tx) => tx.send(job).map_err(|_| std::io::Error::other("the worker spawner thread is gone")),
        Err(e) => Err(std::io::Error::new(e.kind(), format!("cannot start the worker spawner thread: {e}"))),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, CallError> + Send + 'static,
) -> Result<T, CallError> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(CallError::Failed(format!("internal error: {e}"))))
}

/// A reply of the wrong kind (the worker client checks shapes; this is a bug here).
pub fn unexpected(r: Response) -> CallError {
    CallError::Failed(format!("internal error: unexpected worker reply {r:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker's parent thread (for `PR_SET_PDEATHSIG`) is one thread, not the caller's
    /// and not whichever pool thread is free, and it outlives the jobs it ran.
    #[test]
    fn every_worker_is_forked_by_the_same_lasting_thread() {
        let forker = || {
            let (tx, rx) = std::sync::mpsc::channel();
            on_spawner_thread(Box::new(move || tx.send(std::thread::current().id()).unwrap())).unwrap();
            rx.recv().unwrap()
        };
        let first = forker();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(forker(), first);
        assert_ne!(first, std::thread::current().id());
    }
}
