//! Command-line configuration of `offload-server`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: offload-server [options]
  --listen ADDR             address to listen on (default 127.0.0.1:50051; port 0 picks one)
  --token-file FILE         clients must present the token in FILE (or set OFFLOAD_SERVER_TOKEN)
  --insecure-loopback       accept clients without a token (only on a loopback address)
  --devices N               devices offered to each client (default 4, like the host plugin)
  --max-sessions N          concurrent client sessions (default 64)
  --max-session-memory SZ   device memory per session (default 16G; K/M/G suffixes)
  --max-image-size SZ       largest device image (default 512M)
  --lease SECS              a session without heartbeat for this long is freed (default 30)
  --library-path DIRS       prepended to the workers' LD_LIBRARY_PATH (default: <bin>/../lib)
  --tls-cert FILE --tls-key FILE
                            serve TLS with this PEM certificate chain and key (cargo feature `tls`)
  --quiet                   no per-session log lines
The first line on stdout is `offload-server listening on ADDR`.";

/// What the server was told to do.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub token: Option<String>,
    pub insecure_loopback: bool,
    pub devices: usize,
    pub max_sessions: usize,
    pub max_session_memory: u64,
    pub max_image_bytes: u64,
    pub lease: Duration,
    pub worker_exe: PathBuf,
    pub lib_path: String,
    pub quiet: bool,
    /// PEM certificate chain and key files for TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
}

/// Parses `512`, `64K`, `16M`, `2G`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, shift) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 10),
        'M' => (&s[..s.len() - 1], 20),
        'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

impl ServerConfig {
    /// Reads the arguments (without the program name) and `env` lookups.
    pub fn parse(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
        let default_lib = exe.parent().and_then(|b| b.parent()).map(|p| p.join("lib")).filter(|p| p.is_dir());
        let mut c = ServerConfig {
            listen: "127.0.0.1:50051".parse().unwrap(),
            token: env("OFFLOAD_SERVER_TOKEN").filter(|t| !t.is_empty()),
            insecure_loopback: false,
            devices: omp_plugin_host::NUM_DEVICES,
            max_sessions: 64,
            max_session_memory: 16 << 30,
            max_image_bytes: 512 << 20,
            lease: Duration::from_secs(30),
            worker_exe: exe,
            lib_path: default_lib.map(|p| p.display().to_string()).unwrap_or_default(),
            quiet: false,
            tls: None,
        };
        let (mut cert, mut key) = (None, None);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value"));
            match a.as_str() {
                "--listen" => c.listen = value(a)?.parse().map_err(|e| format!("--listen: {e}"))?,
                "--token-file" => {
                    let path = value(a)?;
                    let t = std::fs::read_to_string(&path).map_err(|e| format!("--token-file {path}: {e}"))?;
                    let t = t.trim().to_string();
                    if t.is_empty() {
                        return Err(format!("--token-file {path}: the file is empty"));
                    }
                    c.token = Some(t);
                }
                "--insecure-loopback" => c.insecure_loopback = true,
                "--devices" => c.devices = value(a)?.parse().map_err(|e| format!("--devices: {e}"))?,
                "--max-sessions" => c.max_sessions = value(a)?.parse().map_err(|e| format!("--max-sessions: {e}"))?,
                "--max-session-memory" => {
                    c.max_session_memory = parse_size(&value(a)?).ok_or("--max-session-memory: bad size")?
                }
                "--max-image-size" => c.max_image_bytes = parse_size(&value(a)?).ok_or("--max-image-size: bad size")?,
                "--lease" => c.lease = Duration::from_secs_f64(value(a)?.parse().map_err(|e| format!("--lease: {e}"))?),
                "--library-path" => c.lib_path = value(a)?,
                "--quiet" => c.quiet = true,
                "--tls-cert" => cert = Some(PathBuf::from(value(a)?)),
                "--tls-key" => key = Some(PathBuf::from(value(a)?)),
                "-h" | "--help" => return Err(USAGE.to_string()),
                other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
            }
        }
        c.tls = match (cert, key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => return Err("--tls-cert and --tls-key go together".into()),
        };
        if c.tls.is_some() && !cfg!(feature = "tls") {
            return Err("this offload-server was built without TLS support (cargo feature `tls`)".into());
        }
        if c.devices == 0 || c.devices > 64 {
            return Err("--devices must be between 1 and 64".into());
        }
        if c.token.is_none() && !c.insecure_loopback {
            return Err("clients must authenticate: give --token-file FILE or OFFLOAD_SERVER_TOKEN, \
                        or --insecure-loopback for a loopback-only server without a token"
                .into());
        }
        if c.insecure_loopback && c.token.is_none() && !c.listen.ip().is_loopback() {
            return Err(format!(
                "--insecure-loopback refuses to listen on {}, which is not a loopback address",
                c.listen
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str], token: Option<&str>) -> Result<ServerConfig, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        ServerConfig::parse(&args, |k| (k == "OFFLOAD_SERVER_TOKEN").then(|| token.map(str::to_string)).flatten())
    }

    #[test]
    fn security_defaults() {
        assert!(parse(&[], None).unwrap_err().contains("must authenticate"));
        let c = parse(&[], Some("s3cret")).unwrap();
        assert!(c.listen.ip().is_loopback());
        assert_eq!(c.token.as_deref(), Some("s3cret"));
        assert!(parse(&["--insecure-loopback", "--listen", "0.0.0.0:0"], None).unwrap_err().contains("not a loopback"));
        assert!(parse(&["--insecure-loopback", "--listen", "[::1]:0"], None).is_ok());
        assert!(parse(&["--bogus"], Some("t")).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("17"), Some(17));
        assert_eq!(parse_size("x"), None);
        let c = parse(&["--max-session-memory", "1M", "--devices", "2"], Some("t")).unwrap();
        assert_eq!((c.max_session_memory, c.devices), (1 << 20, 2));
    }
}
