//! Command-line configuration of `offload-server`: one clap definition gives the parser,
//! `--help` and the man page (`--man`). Options not given fall back to the runtime's
//! `LIBOMPTARGET_RPC_*` variables where the two ends share a meaning; an invalid variable
//! is a warning that names it, never a silent default.

use clap::{Arg, ArgAction, ArgMatches, Command};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

/// Shortest lease: clients heartbeat every third of it, so a shorter one would end sessions
/// (and their running kernels) on a busy machine.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
/// Longest lease (a day).
pub const MAX_LEASE: Duration = Duration::from_secs(86_400);
/// Most devices a session may have (and a client accepts).
pub const MAX_DEVICES: usize = 64;
/// Most concurrent sessions.
pub const MAX_SESSIONS: usize = 65_536;
const DEFAULT_LISTEN: &str = "127.0.0.1:50051";
const MIN_BLOCK: u64 = 4 << 10;

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
    /// Largest chunk of a device-to-host stream (a client may ask for less).
    pub block_size: u32,
    /// Bytes of one device-to-host transfer read ahead of the network.
    pub allocator_max: u64,
    pub lease: Duration,
    pub worker_exe: PathBuf,
    pub lib_path: String,
    pub quiet: bool,
    /// PEM certificate chain and key files for TLS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Said once at start-up (values raised, variables ignored).
    pub warnings: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    Serve(Box<ServerConfig>),
    /// Print this on stdout and exit 0 (`--help`, `--version`, `--man`).
    Print(String),
}

/// Parses `512`, `64K`, `16M`, `2G` (also `KiB`/`k`/`KB` spellings).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let upper = s.to_ascii_uppercase();
    let digits_end = upper.find(|c: char| !c.is_ascii_digit()).unwrap_or(upper.len());
    let (digits, unit) = upper.split_at(digits_end);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).ok_or_else(|| format!("'{s}' is not a size (a number with an optional K, M, G or T suffix)"))
}

/// A lease in seconds: finite, positive, at most a day.
fn lease_arg(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.trim().parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("'{s}': the lease must be a positive number of seconds"));
    }
    if secs > MAX_LEASE.as_secs_f64() {
        return Err(format!("'{s}': the lease is at most {} seconds (a day)", MAX_LEASE.as_secs()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A listen address: `host:port`, names resolved.
fn addr_arg(s: &str) -> Result<SocketAddr, String> {
    let s = s.trim();
    let s = s.strip_prefix("http://").or_else(|| s.strip_prefix("https://")).unwrap_or(s);
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    s.to_socket_addrs()
        .map_err(|e| format!("'{s}' is not an address (host:port): {e}"))?
        .next()
        .ok_or_else(|| format!("'{s}' resolves to no address"))
}

/// The command line, as clap sees it.
pub fn command() -> Command {
    Command::new("offload-server")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Serves this machine's offload devices to remote OpenMP programs over gRPC")
        .after_help(
            "The first line on stdout is `offload-server listening on ADDR`. \
             Options not given fall back to LIBOMPTARGET_RPC_ADDRESS (--listen), \
             LIBOMPTARGET_RPC_BLOCK_SIZE or LIBOMPTARGET_BLOCK_SIZE (--block-size) and \
             LIBOMPTARGET_RPC_ALLOCATOR_MAX (--allocator-max). See docs/remote.md.",
        )
        .arg(
            Arg::new("listen")
                .long("listen")
                .value_name("ADDR")
                .value_parser(addr_arg)
                .help(format!("Address to listen on; port 0 picks one [default: {DEFAULT_LISTEN}]")),
        )
        .arg(
            Arg::new("token-file")
                .long("token-file")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .conflicts_with("insecure-loopback")
                .help("Clients must present the token in FILE (or set OFFLOAD_SERVER_TOKEN)"),
        )
        .arg(
            Arg::new("insecure-loopback")
                .long("insecure-loopback")
                .action(ArgAction::SetTrue)
                .help("Accept clients without a token (only on a loopback address)"),
        )
        .arg(
            Arg::new("devices")
                .long("devices")
                .value_name("N")
                .value_parser(clap::value_parser!(u32).range(1..=MAX_DEVICES as i64))
                .allow_negative_numbers(true)
                .default_value("4")
                .help("Devices offered to each client, like the host plugin's"),
        )
        .arg(
            Arg::new("max-sessions")
                .long("max-sessions")
                .value_name("N")
                .value_parser(clap::value_parser!(u32).range(1..=MAX_SESSIONS as i64))
                .allow_negative_numbers(true)
                .default_value("64")
                .help("Concurrent client sessions"),
        )
        .arg(
            Arg::new("max-session-memory")
                .long("max-session-memory")
                .value_name("SIZE")
                .value_parser(size_arg)
                .default_value("16G")
                .help("Device memory per session (K/M/G/T suffixes)"),
        )
        .arg(
            Arg::new("max-image-size")
                .long("max-image-size")
                .value_name("SIZE")
                .value_parser(size_arg)
                .default_value("512M")
                .help("Largest device image"),
        )
        .arg(Arg::new("block-size").long("block-size").value_name("SIZE").value_parser(size_arg).help(format!(
            "Largest chunk of a device-to-host stream, {MIN_BLOCK} to {} bytes [default: what the client asks]",
            omp_remote_proto::MAX_CHUNK_BYTES
        )))
        .arg(
            Arg::new("allocator-max")
                .long("allocator-max")
                .value_name("SIZE")
                .value_parser(size_arg)
                .help("Bytes of one device-to-host transfer read ahead of the network [default: 16M]"),
        )
        .arg(
            Arg::new("lease")
                .long("lease")
                .value_name("SECS")
                .value_parser(lease_arg)
                .allow_negative_numbers(true)
                .default_value("30")
                .help(format!(
                    "A session without heartbeat for this long is freed; at least {}s (clients beat every third of it)",
                    MIN_LEASE.as_secs()
                )),
        )
        .arg(
            Arg::new("library-path")
                .long("library-path")
                .value_name("DIRS")
                .help("Prepended to the workers' LD_LIBRARY_PATH [default: <bin>/../lib]"),
        )
        .arg(
            Arg::new("tls-cert")
                .long("tls-cert")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .requires("tls-key")
                .help("Serve TLS with this PEM certificate chain (cargo feature `tls`)"),
        )
        .arg(
            Arg::new("tls-key")
                .long("tls-key")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .requires("tls-cert")
                .help("The TLS certificate's PEM private key"),
        )
        .arg(Arg::new("quiet").long("quiet").action(ArgAction::SetTrue).help("No per-session log lines"))
        .arg(Arg::new("man").long("man").action(ArgAction::SetTrue).hide(true).help("Print the man page (roff)"))
}

/// The man page, from the same definition as `--help`.
pub fn man_page() -> String {
    let mut out = Vec::new();
    let _ = clap_mangen::Man::new(command()).render(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads a `LIBOMPTARGET_RPC_*` default: `None` when unset, a warning when invalid.
fn from_env<T>(
    env: &impl Fn(&str) -> Option<String>,
    var: &str,
    parse: impl Fn(&str) -> Result<T, String>,
    warnings: &mut Vec<String>,
) -> Option<T> {
    let v = env(var).filter(|v| !v.trim().is_empty())?;
    match parse(&v) {
        Ok(t) => Some(t),
        Err(e) => {
            warnings.push(format!("ignoring {var}={v}: {e}"));
            None
        }
    }
}

/// The token file's text and permission bits, both from the one file opened (no window in which
/// another file could take its name).
fn read_token_file(path: &std::path::Path) -> std::io::Result<(String, u32)> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::File::open(path)?;
    let mode = f.metadata()?.permissions().mode();
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok((text, mode))
}

impl ServerConfig {
    /// Reads the arguments (without the program name) and `env` lookups. `Err` is a usage
    /// error, to be printed and answered with exit status 2.
    pub fn parse(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Parsed, String> {
        let m = match command()
            .try_get_matches_from(std::iter::once("offload-server".to_string()).chain(args.iter().cloned()))
        {
            Ok(m) => m,
            Err(e) if e.exit_code() == 0 => return Ok(Parsed::Print(e.render().to_string())),
            Err(e) => return Err(e.render().to_string()),
        };
        if m.get_flag("man") {
            return Ok(Parsed::Print(man_page()));
        }
        Self::from_matches(&m, env).map(|c| Parsed::Serve(Box::new(c)))
    }

    fn from_matches(m: &ArgMatches, env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut warnings = Vec::new();
        let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
        let default_lib = exe.parent().and_then(|b| b.parent()).map(|p| p.join("lib")).filter(|p| p.is_dir());

        let listen = match m.get_one::<SocketAddr>("listen") {
            Some(a) => *a,
            None => from_env(
                &env,
                "LIBOMPTARGET_RPC_ADDRESS",
                |v| {
                    if v.contains(',') {
                        return Err("a server listens on one address (the list is for clients)".into());
                    }
                    addr_arg(v)
                },
                &mut warnings,
            )
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("default address")),
        };
        let mut token = env("OFFLOAD_SERVER_TOKEN").filter(|t| !t.is_empty());
        if let Some(path) = m.get_one::<PathBuf>("token-file") {
            let (t, mode) = read_token_file(path).map_err(|e| format!("--token-file {}: {e}", path.display()))?;
            let t = t.trim().to_string();
            if t.is_empty() {
                return Err(format!("--token-file {}: the file is empty", path.display()));
            }
            if mode & 0o077 != 0 {
                warnings.push(format!(
                    "--token-file {}: mode {:04o} lets other users read or change the token; make it private \
                     (chmod 600 {})",
                    path.display(),
                    mode & 0o7777,
                    path.display()
                ));
            }
            token = Some(t);
        }
        let block = |v: &str| {
            let b = size_arg(v)?;
            if (MIN_BLOCK..=u64::from(omp_remote_proto::MAX_CHUNK_BYTES)).contains(&b) {
                Ok(b as u32)
            } else {
                Err(format!("a block is {MIN_BLOCK} to {} bytes", omp_remote_proto::MAX_CHUNK_BYTES))
            }
        };
        let block_size = match m.get_one::<u64>("block-size") {
            Some(&b) => block(&b.to_string()).map_err(|e| format!("--block-size: {e}"))?,
            None => from_env(&env, "LIBOMPTARGET_RPC_BLOCK_SIZE", block, &mut warnings)
                .or_else(|| from_env(&env, "LIBOMPTARGET_BLOCK_SIZE", block, &mut warnings))
                .unwrap_or(omp_remote_proto::MAX_CHUNK_BYTES),
        };
        let allocator_max = match m.get_one::<u64>("allocator-max") {
            Some(&b) => b,
            None => from_env(&env, "LIBOMPTARGET_RPC_ALLOCATOR_MAX", size_arg, &mut warnings).unwrap_or(16 << 20),
        };
        let mut lease = *m.get_one::<Duration>("lease").expect("defaulted");
        if lease < MIN_LEASE {
            warnings.push(format!(
                "--lease {:.3}s raised to {}s: clients heartbeat every third of the lease, and a shorter one \
                 would end sessions whose kernels are running",
                lease.as_secs_f64(),
                MIN_LEASE.as_secs()
            ));
            lease = MIN_LEASE;
        }
        let tls = match (m.get_one::<PathBuf>("tls-cert"), m.get_one::<PathBuf>("tls-key")) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            _ => None,
        };
        let mut c = ServerConfig {
            listen,
            token,
            insecure_loopback: m.get_flag("insecure-loopback"),
            devices: *m.get_one::<u32>("devices").expect("defaulted") as usize,
            max_sessions: *m.get_one::<u32>("max-sessions").expect("defaulted") as usize,
            max_session_memory: *m.get_one::<u64>("max-session-memory").expect("defaulted"),
            max_image_bytes: *m.get_one::<u64>("max-image-size").expect("defaulted"),
            block_size,
            allocator_max,
            lease,
            worker_exe: exe,
            lib_path: m
                .get_one::<String>("library-path")
                .cloned()
                .or_else(|| default_lib.map(|p| p.display().to_string()))
                .unwrap_or_default(),
            quiet: m.get_flag("quiet"),
            tls,
            warnings,
        };
        if c.tls.is_some() && !cfg!(feature = "tls") {
            return Err("this offload-server was built without TLS support (cargo feature `tls`)".into());
        }
        if c.token.is_none() && !c.insecure_loopback {
            return Err("clients must authenticate: give --token-file FILE or OFFLOAD_SERVER_TOKEN, \
                        or --insecure-loopback for a loopback-only server without a token"
                .into());
        }
        if c.tls.is_none() && !c.listen.ip().is_loopback() {
            c.warnings.push(format!(
                "listening on {} without TLS: tokens, session secrets and data travel in clear \
                 (give --tls-cert and --tls-key, or listen on a loopback address)",
                c.listen
            ));
        }
        if c.insecure_loopback && c.token.is_none() && !c.listen.ip().is_loopback() {
            return Err(format!(
                "--insecure-loopback refuses to listen on {}, which is not a loopback address",
                c.listen
            ));
        }
        Ok(c)
    }

    /// Device-to-host chunks read ahead of the network for one transfer of `chunk`-byte chunks.
    pub fn read_ahead(&self, chunk: u64) -> usize {
        (self.allocator_max / chunk.max(1)).clamp(2, 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse_env(args: &[&str], vars: &[(&str, &str)]) -> Result<ServerConfig, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        match ServerConfig::parse(&args, |k| vars.get(k).cloned())? {
            Parsed::Serve(c) => Ok(*c),
            Parsed::Print(p) => Err(format!("printed: {p}")),
        }
    }

    fn parse(args: &[&str], token: Option<&str>) -> Result<ServerConfig, String> {
        let vars: Vec<(&str, &str)> = token.map(|t| ("OFFLOAD_SERVER_TOKEN", t)).into_iter().collect();
        parse_env(args, &vars)
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
        assert!(parse(&["--tls-cert", "a.pem"], Some("t")).unwrap_err().contains("--tls-key"));
        let c = parse(&["--listen", "0.0.0.0:0"], Some("t")).unwrap();
        assert!(c.warnings.iter().any(|w| w.contains("without TLS") && w.contains("in clear")), "{:?}", c.warnings);
        assert!(parse(&["--listen", "127.0.0.1:0"], Some("t")).unwrap().warnings.is_empty());
    }

    #[test]
    fn a_token_file_others_can_read_is_named_with_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("offload-server-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let name = file.to_str().unwrap();
        for (mode, warned) in [(0o600, false), (0o400, false), (0o644, true), (0o666, true), (0o640, true)] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            let c = parse(&["--token-file", name], None).unwrap();
            assert_eq!(c.token.as_deref(), Some("s3cret"));
            let w: Vec<&String> = c.warnings.iter().filter(|w| w.contains("--token-file")).collect();
            assert_eq!(!w.is_empty(), warned, "mode {mode:o}: {:?}", c.warnings);
            if warned {
                assert!(w[0].contains(name) && w[0].contains(&format!("mode {mode:04o}")), "{}", w[0]);
                assert!(w[0].contains("chmod 600"), "{}", w[0]);
            }
        }
        let e = parse(&["--token-file", name, "--insecure-loopback"], None).unwrap_err();
        assert!(
            e.contains("--token-file") && e.contains("--insecure-loopback") && e.contains("cannot be used with"),
            "{e}"
        );
        let e = parse(&["--insecure-loopback", "--token-file", name], None).unwrap_err();
        assert!(e.contains("cannot be used with"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("16MiB"), Some(16 << 20));
        assert_eq!(parse_size("17"), Some(17));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999T"), None);
        let c = parse(&["--max-session-memory", "1M", "--devices", "2"], Some("t")).unwrap();
        assert_eq!((c.max_session_memory, c.devices), (1 << 20, 2));
        assert!(parse(&["--max-session-memory", "lots"], Some("t")).unwrap_err().contains("not a size"));
    }

    #[test]
    fn every_option_is_range_checked_with_a_usage_error() {
        for (args, needle) in [
            (&["--lease", "0"][..], "positive"),
            (&["--lease", "-1"], "positive"),
            (&["--lease", "nan"], "positive"),
            (&["--lease", "inf"], "positive"),
            (&["--lease", "1e30"], "at most"),
            (&["--lease", "soon"], "not a number"),
            (&["--devices", "0"], "--devices"),
            (&["--devices", "65"], "--devices"),
            (&["--max-sessions", "0"], "--max-sessions"),
            (&["--max-sessions", "-3"], "--max-sessions"),
            (&["--block-size", "1"], "--block-size"),
            (&["--listen", "nowhere"], "--listen"),
        ] {
            let e = parse(args, Some("t")).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn a_lease_below_the_heartbeat_floor_is_raised_and_said() {
        let c = parse(&["--lease", "0.2"], Some("t")).unwrap();
        assert_eq!(c.lease, MIN_LEASE);
        assert!(c.warnings.iter().any(|w| w.contains("raised to 1s")), "{:?}", c.warnings);
        let c = parse(&["--lease", "2.5"], Some("t")).unwrap();
        assert_eq!((c.lease, c.warnings.len()), (Duration::from_millis(2500), 0));
    }

    #[test]
    fn runtime_variables_are_defaults_and_bad_ones_are_named() {
        let t = ("OFFLOAD_SERVER_TOKEN", "t");
        let c = parse_env(
            &[],
            &[
                t,
                ("LIBOMPTARGET_RPC_ADDRESS", "127.0.0.1:6000"),
                ("LIBOMPTARGET_BLOCK_SIZE", "65536"),
                ("LIBOMPTARGET_RPC_ALLOCATOR_MAX", "4M"),
            ],
        )
        .unwrap();
        assert_eq!((c.listen.port(), c.block_size, c.allocator_max), (6000, 65536, 4 << 20));
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        // RPC_BLOCK_SIZE wins over BLOCK_SIZE; the command line over both.
        let c = parse_env(&[], &[t, ("LIBOMPTARGET_RPC_BLOCK_SIZE", "0x10000"), ("LIBOMPTARGET_BLOCK_SIZE", "8192")]);
        // (hex is not a size spelling: a warning, then the next variable)
        let c = c.unwrap();
        assert_eq!(c.block_size, 8192);
        assert!(c.warnings.iter().any(|w| w.contains("LIBOMPTARGET_RPC_BLOCK_SIZE=0x10000")), "{:?}", c.warnings);
        let c = parse_env(
            &["--block-size", "1M", "--listen", "127.0.0.1:7000"],
            &[t, ("LIBOMPTARGET_RPC_BLOCK_SIZE", "64K"), ("LIBOMPTARGET_RPC_ADDRESS", "127.0.0.1:6000")],
        )
        .unwrap();
        assert_eq!((c.block_size, c.listen.port()), (1 << 20, 7000));
        let c = parse_env(
            &[],
            &[
                t,
                ("LIBOMPTARGET_RPC_ADDRESS", "a:1,b:2"),
                ("LIBOMPTARGET_RPC_ALLOCATOR_MAX", "much"),
                ("LIBOMPTARGET_BLOCK_SIZE", "3"),
            ],
        )
        .unwrap();
        assert_eq!(c.listen, DEFAULT_LISTEN.parse().unwrap());
        for var in ["LIBOMPTARGET_RPC_ADDRESS", "LIBOMPTARGET_RPC_ALLOCATOR_MAX", "LIBOMPTARGET_BLOCK_SIZE"] {
            assert!(c.warnings.iter().any(|w| w.contains(var)), "{var}: {:?}", c.warnings);
        }
    }

    #[test]
    fn help_and_man_page_come_from_one_definition() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let Ok(Parsed::Print(help)) = ServerConfig::parse(&args(&["--help"]), |_| None) else { panic!() };
        let Ok(Parsed::Print(man)) = ServerConfig::parse(&args(&["--man"]), |_| None) else { panic!() };
        for opt in ["--lease", "--max-sessions", "--block-size", "--token-file"] {
            assert!(help.contains(opt), "{opt} in --help");
            assert!(man.contains(&opt.replace('-', "\\-")), "{opt} in the man page");
        }
        assert!(man.starts_with(".ie") || man.contains(".TH"), "{man}");
        assert!(!help.contains("--man"), "the man flag is hidden");
    }
}
