//! The client's configuration, read once from the environment (LLVM's variables where LLVM
//! had them).

use std::time::Duration;

/// How the remote plugin talks to its servers.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConfig {
    /// `LIBOMPTARGET_RPC_ADDRESS`: `host:port[,host:port…]`, one plugin per server.
    pub addresses: Vec<String>,
    /// `LIBOMPTARGET_BLOCK_SIZE` or `LIBOMPTARGET_RPC_BLOCK_SIZE`: bytes per streamed chunk.
    pub block_size: usize,
    /// `LIBOMPTARGET_RPC_ALLOCATOR_MAX`: bytes of one transfer buffered ahead of the network.
    pub allocator_max: usize,
    /// `LIBOMPTARGET_RPC_LATENCY` (seconds): deadline of control calls, and the longest a
    /// transfer may go without progress or a silent server may go unnoticed.
    pub latency: Duration,
    /// `LIBOMPTARGET_RPC_TOKEN`, or the contents of `LIBOMPTARGET_RPC_TOKEN_FILE`.
    pub token: Option<String>,
    /// Whether `LIBOMPTARGET_INFO` or `LIBOMPTARGET_DEBUG` asks for messages.
    pub verbose: bool,
    /// Set in offload-server workers: offloading further is refused.
    pub inside_worker: bool,
    /// `LIBOMPTARGET_RPC_TLS_CA`: PEM file of the CA that signed the servers' certificates;
    /// set, or an `https://` address, means TLS (cargo feature `tls`).
    pub tls_ca: Option<std::path::PathBuf>,
    /// Values that were invalid and ignored, or adjusted (each names its variable).
    pub warnings: Vec<String>,
}

pub const DEFAULT_BLOCK_SIZE: usize = 1 << 20;
const MIN_BLOCK_SIZE: usize = 4 << 10;

fn int(s: Option<String>) -> Option<u64> {
    let s = s?;
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl ClientConfig {
    /// Reads the configuration through `get` (the process environment in production).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let addresses: Vec<String> = get("LIBOMPTARGET_RPC_ADDRESS")
            .unwrap_or_default()
            .split(',')
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        let mut warnings = Vec::new();
        // A number, or a warning naming the variable (never a silent default).
        let mut number = |var: &str| -> Option<u64> {
            let v = get(var).filter(|v| !v.trim().is_empty())?;
            let n = int(Some(v.clone()));
            if n.is_none() {
                warnings.push(format!("ignoring {var}={v}: not a number"));
            }
            n
        };
        let block = number("LIBOMPTARGET_RPC_BLOCK_SIZE")
            .map(|b| ("LIBOMPTARGET_RPC_BLOCK_SIZE", b))
            .or_else(|| number("LIBOMPTARGET_BLOCK_SIZE").map(|b| ("LIBOMPTARGET_BLOCK_SIZE", b)));
        let allocator = number("LIBOMPTARGET_RPC_ALLOCATOR_MAX");
        let max_block = omp_remote_proto::MAX_CHUNK_BYTES as usize;
        let block_size = match block {
            None => DEFAULT_BLOCK_SIZE,
            Some((var, b)) => {
                let clamped = usize::try_from(b).unwrap_or(usize::MAX).clamp(MIN_BLOCK_SIZE, max_block);
                if clamped as u64 != b {
                    warnings.push(format!("{var}={b} is outside {MIN_BLOCK_SIZE}..={max_block}: using {clamped}"));
                }
                clamped
            }
        };
        let allocator_max =
            allocator.map(|b| usize::try_from(b).unwrap_or(usize::MAX)).unwrap_or(16 << 20).max(block_size);
        let latency = match get("LIBOMPTARGET_RPC_LATENCY") {
            None => Duration::from_secs(5),
            Some(v) => match v.trim().parse::<f64>() {
                Ok(secs) if secs > 0.0 && secs < 1e6 => Duration::from_secs_f64(secs),
                _ => {
                    warnings.push(format!(
                        "ignoring LIBOMPTARGET_RPC_LATENCY={v}: not a positive number of seconds below 1e6; using 5"
                    ));
                    Duration::from_secs(5)
                }
            },
        };
        let token = match (get("LIBOMPTARGET_RPC_TOKEN"), get("LIBOMPTARGET_RPC_TOKEN_FILE")) {
            (Some(t), _) if !t.is_empty() => Some(t),
            (_, Some(path)) if !path.is_empty() => {
                let t =
                    std::fs::read_to_string(&path).map_err(|e| format!("LIBOMPTARGET_RPC_TOKEN_FILE={path}: {e}"))?;
                Some(t.trim().to_string())
            }
            _ => None,
        };
        let on = |k: &str| int(get(k)).is_some_and(|v| v != 0) || get(k).is_some_and(|v| v.trim().starts_with('-'));
        Ok(Self {
            addresses,
            block_size,
            allocator_max,
            latency,
            token,
            verbose: on("LIBOMPTARGET_INFO") || on("LIBOMPTARGET_DEBUG"),
            inside_worker: get(omp_remote_proto::WORKER_ENV).is_some(),
            tls_ca: get("LIBOMPTARGET_RPC_TLS_CA").filter(|p| !p.is_empty()).map(std::path::PathBuf::from),
            warnings,
        })
    }

    /// Chunks of one transfer allowed in flight.
    pub fn inflight_chunks(&self) -> usize {
        (self.allocator_max / self.block_size).clamp(2, 64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<ClientConfig, String> {
        let m: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ClientConfig::from_env(|k| m.get(k).cloned())
    }

    #[test]
    fn llvm_variables() {
        let c = cfg(&[("LIBOMPTARGET_RPC_ADDRESS", "127.0.0.1:5000, [::1]:6000,")]).unwrap();
        assert_eq!(c.addresses, ["127.0.0.1:5000", "[::1]:6000"]);
        assert_eq!(c.block_size, DEFAULT_BLOCK_SIZE);
        assert_eq!(c.latency, Duration::from_secs(5));
        // Both spellings of the block size; LLVM's code read the RPC_ one.
        assert_eq!(cfg(&[("LIBOMPTARGET_BLOCK_SIZE", "65536")]).unwrap().block_size, 65536);
        assert_eq!(
            cfg(&[("LIBOMPTARGET_RPC_BLOCK_SIZE", "0x20000"), ("LIBOMPTARGET_BLOCK_SIZE", "65536")])
                .unwrap()
                .block_size,
            0x20000
        );
        let c = cfg(&[("LIBOMPTARGET_RPC_BLOCK_SIZE", "1")]).unwrap();
        assert_eq!(c.block_size, MIN_BLOCK_SIZE);
        assert!(c.warnings[0].contains("LIBOMPTARGET_RPC_BLOCK_SIZE=1"), "{:?}", c.warnings);
        assert_eq!(cfg(&[("LIBOMPTARGET_RPC_LATENCY", "0.5")]).unwrap().latency, Duration::from_millis(500));
        assert!(cfg(&[]).unwrap().warnings.is_empty());
        let c = cfg(&[("LIBOMPTARGET_RPC_ALLOCATOR_MAX", "4194304"), ("LIBOMPTARGET_INFO", "-1")]).unwrap();
        assert_eq!(c.inflight_chunks(), 4);
        assert!(c.verbose);
        assert!(!cfg(&[]).unwrap().verbose);
    }

    /// A bad value is a warning naming its variable; the remote devices stay.
    #[test]
    fn invalid_values_are_warnings_that_name_the_variable() {
        for (var, v) in [
            ("LIBOMPTARGET_RPC_LATENCY", "soon"),
            ("LIBOMPTARGET_RPC_LATENCY", "-1"),
            ("LIBOMPTARGET_RPC_LATENCY", "nan"),
            ("LIBOMPTARGET_RPC_BLOCK_SIZE", "1M"),
            ("LIBOMPTARGET_BLOCK_SIZE", "big"),
            ("LIBOMPTARGET_RPC_ALLOCATOR_MAX", "0x"),
            ("LIBOMPTARGET_RPC_BLOCK_SIZE", "99999999999"),
        ] {
            let c = cfg(&[("LIBOMPTARGET_RPC_ADDRESS", "h:1"), (var, v)]).expect("a bad value drops nothing");
            assert_eq!(c.addresses, ["h:1"]);
            assert!(c.warnings.iter().any(|w| w.contains(&format!("{var}={v}"))), "{var}={v}: {:?}", c.warnings);
        }
        let c = cfg(&[("LIBOMPTARGET_RPC_LATENCY", "soon")]).unwrap();
        assert_eq!(c.latency, Duration::from_secs(5));
    }

    #[test]
    fn token_sources() {
        assert_eq!(cfg(&[("LIBOMPTARGET_RPC_TOKEN", "abc")]).unwrap().token.as_deref(), Some("abc"));
        assert!(cfg(&[("LIBOMPTARGET_RPC_TOKEN_FILE", "/nonexistent/token")]).is_err());
        assert_eq!(cfg(&[]).unwrap().token, None);
    }
}
