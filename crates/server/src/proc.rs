//! The server's side of a session's worker process: spawns it, relays requests, and turns
//! its death into an error for every pending call.

use crate::{sys, wire};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};

/// Why a worker call failed.
#[derive(Debug, Clone)]
pub enum CallError {
    /// The worker reported an error; the session goes on.
    Failed(String),
    /// The worker is gone (how it ended).
    Died(String),
}

type Reply = Result<Vec<u8>, CallError>;

/// A running worker.
pub struct Worker {
    pub pid: i32,
    stdin: Mutex<Option<ChildStdin>>,
    child: Arc<Mutex<Child>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>,
    next: AtomicU64,
    /// `Some(how it ended)` once the worker is gone.
    pub death: watch::Receiver<Option<String>>,
}

impl Worker {
    /// Starts `exe --worker` with `devices` devices and `lib_path` prepended to its library path.
    pub fn spawn(exe: &Path, devices: usize, lib_path: &str) -> std::io::Result<Worker> {
        let mut cmd = Command::new(exe);
        cmd.arg("--worker").arg(devices.to_string()).arg(std::process::id().to_string());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
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
        let mut child = cmd.spawn()?;
        let pid = child.id() as i32;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let child = Arc::new(Mutex::new(child));
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>> = Arc::default();
        let (death_tx, death) = watch::channel(None);
        let (p, c) = (pending.clone(), child.clone());
        // Replies are read on the runtime, next to the calls waiting for them.
        let stdout = tokio::process::ChildStdout::from_std(stdout)?;
        tokio::spawn(async move {
            let mut r = tokio::io::BufReader::with_capacity(1 << 20, stdout);
            while let Ok(Some(f)) = wire::read_frame_async(&mut r).await {
                let reply = if f.tag == wire::STATUS_OK {
                    Ok(f.payload)
                } else {
                    Err(CallError::Failed(String::from_utf8_lossy(&f.payload).into_owned()))
                };
                if let Some(tx) = p.lock().unwrap().remove(&f.id) {
                    let _ = tx.send(reply);
                }
            }
            let status = tokio::task::spawn_blocking(move || c.lock().unwrap().wait()).await;
            let how = match status {
                Ok(Ok(status)) => sys::describe_exit(status),
                Ok(Err(e)) => format!("lost ({e})"),
                Err(e) => format!("lost ({e})"),
            };
            let _ = death_tx.send(Some(how.clone()));
            for (_, tx) in p.lock().unwrap().drain() {
                let _ = tx.send(Err(CallError::Died(how.clone())));
            }
        });
        Ok(Worker { pid, stdin: Mutex::new(stdin), child, pending, next: AtomicU64::new(1), death })
    }

    /// How the worker ended, if it has.
    pub fn died(&self) -> Option<String> {
        self.death.borrow().clone()
    }

    /// Sends one request and waits for its reply.
    pub async fn call(&self, op: u8, parts: &[&[u8]]) -> Reply {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        if let Some(how) = self.died() {
            self.pending.lock().unwrap().remove(&id);
            return Err(CallError::Died(how));
        }
        let sent = {
            let mut stdin = self.stdin.lock().unwrap();
            match stdin.as_mut() {
                Some(w) => wire::write_frame(w, id, op, parts),
                None => Err(std::io::Error::other("worker stopped")),
            }
        };
        if sent.is_err() {
            // The reader thread reports the death; wait for it rather than guess.
            let mut death = self.death.clone();
            let how = match death.wait_for(|d| d.is_some()).await {
                Ok(d) => d.clone().unwrap_or_default(),
                Err(_) => "lost".to_string(),
            };
            self.pending.lock().unwrap().remove(&id);
            return Err(CallError::Died(how));
        }
        rx.await.unwrap_or_else(|_| Err(CallError::Died("lost".into())))
    }

    /// Copies `data` to worker address `addr`, directly when the system allows it.
    pub async fn write(&self, addr: u64, data: &[u8]) -> Reply {
        match sys::write_to(self.pid, addr, data) {
            Ok(()) => return Ok(Vec::new()),
            Err(e) if !relay_instead(&e) => return Err(self.copy_error(e)),
            Err(_) => {}
        }
        self.call(wire::OP_WRITE, &[&addr.to_le_bytes(), data]).await
    }

    /// Reads `len` bytes at worker address `addr`.
    pub async fn read(&self, addr: u64, len: usize) -> Reply {
        match sys::read_vec(self.pid, addr, len) {
            Ok(buf) => return Ok(buf),
            Err(e) if !relay_instead(&e) => return Err(self.copy_error(e)),
            Err(_) => {}
        }
        self.call(wire::OP_READ, &[&wire::Enc::default().u64(addr).u64(len as u64).0]).await
    }

    fn copy_error(&self, e: std::io::Error) -> CallError {
        match e.raw_os_error() {
            Some(libc::ESRCH) => CallError::Died(self.died().unwrap_or_else(|| "gone".into())),
            _ => CallError::Failed(format!("device memory copy failed: {e}")),
        }
    }

    /// Stops the worker (closing its pipe, then killing it).
    pub fn stop(&self) {
        self.stdin.lock().unwrap().take();
        let _ = self.child.lock().map(|mut c| c.kill());
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Direct copies are refused by the system (seccomp, ptrace policy): relay through the pipe.
fn relay_instead(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS | libc::EACCES))
}
