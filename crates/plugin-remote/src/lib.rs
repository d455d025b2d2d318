//! Remote offload devices: the devices of an `offload-server`, reached over gRPC.
//!
//! One [`RemotePlugin`] per configured server (`LIBOMPTARGET_RPC_ADDRESS`). The plugin runs
//! inside the user's synchronous program, so it owns a small tokio runtime and blocks on
//! each call. Control calls have a deadline of `LIBOMPTARGET_RPC_LATENCY`; transfers fail
//! when a chunk makes no progress for that long; HTTP/2 keepalive pings with the same
//! timeout end a launch whose server died or stalled. Device addresses are the server's:
//! this process never dereferences them, and the server checks them against the session.

pub mod config;
mod conn;
mod device;
pub mod reply_checks;

pub use device::RemoteDevice;

use config::ClientConfig;
use conn::{close_sessions_at_exit, Conn, LIVE};
use omp_format::elf;
use omp_plugin::{Device, Plugin, PluginError, Result};
use omp_sync::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
