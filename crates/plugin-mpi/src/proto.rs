//! What the program's rank and the device ranks say to each other over MPI, and how both
//! wait for it.
//!
//! At start-up every rank contributes one [`Hello`] to an `MPI_Iallgather`: its role
//! (program or device), protocol and runtime version, device count, pid and host. Then:
//!
//! - program → device rank, tag [`TAG_REQUEST`]: `u64 id | u8 op | payload`, the worker's
//!   own requests (`omp_worker::Request::encode`, the same bytes a worker frame carries)
//!   except a write, whose payload is `u32 device | u64 addr | u64 len` with the bytes in a
//!   following [`TAG_TO_DEVICE`] message; and [`OP_SHUTDOWN`] at the program's exit.
//! - device rank → program, tag [`TAG_REPLY`]: `u64 id | u8 status | payload`, the worker's
//!   replies (`omp_worker::decode` checks them), output frames (id 0, what kernels printed),
//!   [`STATUS_LOST`] when the rank's worker ended; a read's bytes follow its OK reply in
//!   [`PIECE`]-sized [`TAG_TO_PROGRAM`] messages ([`pieces`]), so that the rank can send the
//!   first while it still gathers the next.
//!
//! - program → device rank, copies that skip the program (docs/cluster.md, "Rank to
//!   rank"): [`OP_PEER_SEND`] to the rank that holds the source and [`OP_PEER_RECV`] to the
//!   one that holds the destination ([`PeerCopy`]); the bytes go from the one to the other in
//!   [`PIECE`]-sized [`TAG_PEER`] messages, and each answers the program when its side is
//!   done. [`OP_COPY_ACROSS`] copies between two devices of one rank ([`CopyAcross`]).
//!
//! Every size that arrives is checked against a cap before anything is allocated.

use crate::keep::{self, Cpus, KeepCpu};
use omp_mpi::Mpi;
use omp_worker::wire::{Dec, Enc};
use std::time::{Duration, Instant};

pub const TAG_REQUEST: i32 = 0x4f10;
pub const TAG_REPLY: i32 = 0x4f11;
pub const TAG_TO_DEVICE: i32 = 0x4f12;
pub const TAG_TO_PROGRAM: i32 = 0x4f13;
/// The pieces of a copy from one device rank to another.
pub const TAG_PEER: i32 = 0x4f14;

/// The program is ending: the device rank stops its worker and finalises MPI.
pub const OP_SHUTDOWN: u8 = 0xf0;
/// A reply status: the rank's worker ended (payload: how); the rank's devices are lost.
pub const STATUS_LOST: u8 = 0xf1;

/// Send `len` bytes of a device of this rank to another device rank ([`PeerCopy`]).
pub const OP_PEER_SEND: u8 = 0xf2;
/// Receive `len` bytes from another device rank into a device of this rank ([`PeerCopy`]).
pub const OP_PEER_RECV: u8 = 0xf3;
/// Copy between two devices of this rank ([`CopyAcross`]).
pub const OP_COPY_ACROSS: u8 = 0xf4;

/// Bumped whenever a message's layout changes.
pub const PROTOCOL: u32 = 4;

/// Largest piece of a copy: one data message.
pub const MAX_CHUNK: usize = omp_worker::wire::MAX_READ;
/// Largest request header (an image travels in its load request).
pub const MAX_REQUEST: usize = 1 << 30;
/// Largest reply header: an error message or a chunk of kernel output, and the id and status.
pub const MAX_REPLY: usize = (64 << 10) + 4096;
/// One message of a rank-to-rank copy: a copy of `len` bytes is `len.div_ceil(PIECE)` of
/// them, each `PIECE` bytes but the last, or empty when the sender could not read its
/// device (the receiver then writes nothing and says so). (Measured with Open MPI on one
/// machine, 64 MiB copies: pieces of 2 MiB, four in flight, ran at 1.7-2.3 GB/s; 1 MiB
/// pieces 1.2-1.4, 4 MiB 0.7-1.5, 8 and 16 MiB 0.5-2.1.)
pub const PIECE: usize = 2 << 20;
/// Pieces of one copy in flight (being read, sent, received or written) on each side.
pub const DEPTH: usize = 4;
/// The pieces a read's `len` bytes come back in: (offset, length), each [`PIECE`] bytes but
/// the last.
pub fn pieces(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len).step_by(PIECE).map(move |at| (at, PIECE.min(len - at)))
}

/// Largest copy one peer or across request moves (the program sends larger ones in parts).
pub const MAX_PEER_COPY: usize = 1 << 30;

/// The id and op (or status) before a payload.
pub const HEAD: usize = 9;

pub const ROLE_PROGRAM: u32 = 1;
pub const ROLE_DEVICE: u32 = 2;

/// Bytes of one rank's [`Hello`].
pub const HELLO_LEN: usize = 128;
const MAGIC: u32 = 0x4d50_4f4d;
const VERSION_LEN: usize = 24;
/// The CPU set's bytes, last in the hello (where an older protocol's hello had the end of
/// its host name: its version still reads right).
const CPUS_LEN: usize = 16;
const HOST_LEN: usize = HELLO_LEN - 20 - VERSION_LEN - CPUS_LEN;

/// This runtime's version, as the hello carries it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// One rank's introduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub role: u32,
    pub protocol: u32,
    pub version: String,
    pub devices: u32,
    pub pid: u32,
    pub host: String,
    /// The CPUs the rank's process may run on (as its first thread was bound at start).
    pub cpus: Cpus,
}

impl Hello {
    /// This process, in `role`, offering `devices`.
    pub fn me(role: u32, devices: u32) -> Hello {
        Hello {
            role,
            protocol: PROTOCOL,
            version: VERSION.into(),
            devices,
            pid: std::process::id(),
            host: hostname(),
            cpus: Cpus::of_this_thread(),
        }
    }

    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        for (i, v) in [MAGIC, self.role, self.protocol, self.devices, self.pid].iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        let text = |dst: &mut [u8], s: &str| {
            let n = s.len().min(dst.len() - 1);
            dst[..n].copy_from_slice(&s.as_bytes()[..n]);
        };
        text(&mut b[20..20 + VERSION_LEN], &self.version);
        text(&mut b[20 + VERSION_LEN..HELLO_LEN - CPUS_LEN], &self.host);
        for (i, w) in self.cpus.0.iter().enumerate() {
            let at = HELLO_LEN - CPUS_LEN + 8 * i;
            b[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// `None` for bytes that are not a hello (a rank running something else).
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() != HELLO_LEN {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        if word(0) != MAGIC {
            return None;
        }
        let text = |s: &[u8]| {
            let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
            String::from_utf8_lossy(&s[..end]).into_owned()
        };
        Some(Hello {
            role: word(1),
            protocol: word(2),
            devices: word(3),
            pid: word(4),
            version: text(&b[20..20 + VERSION_LEN]),
            host: text(&b[20 + VERSION_LEN..HELLO_LEN - CPUS_LEN]),
            cpus: Cpus([0, 1].map(|i| {
                let at = HELLO_LEN - CPUS_LEN + 8 * i;
                u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
            })),
        })
    }

    /// Whether this rank speaks our protocol and runs our version.
    pub fn matches_us(&self) -> bool {
        self.protocol == PROTOCOL && self.version == VERSION
    }
}

const _: () = assert!(HOST_LEN >= 64);

/// This machine's name.
pub fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: gethostname writes at most `b.len()` bytes into our buffer.
    if unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) } != 0 {
        return "unknown host".into();
    }
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The CPUs of this machine that the ranks of `hellos` other than `me` which `wanted` picks
/// (and which speak our protocol) may run on: what a wait of `me` waits for
/// ([`keep::set_peer_cpus`]). Every CPU when `me` is not among them (this machine unknown).
pub fn cpus_here(hellos: &[Option<Hello>], me: usize, wanted: impl Fn(&Hello) -> bool) -> Cpus {
    // Our machine's name as the others received it (cut to its field).
    let Some(here) = hellos.get(me).and_then(|h| h.as_ref()).map(|h| h.host.as_str()) else { return Cpus::ALL };
    hellos
        .iter()
        .enumerate()
        .filter_map(|(r, h)| h.as_ref().filter(|h| r != me && h.matches_us() && h.host == here && wanted(h)))
        .fold(Cpus::NONE, |all, h| all.union(h.cpus))
}

/// Every rank's hello, in rank order (`None` for a rank that sent something else). Gives up
/// after `limit`: a rank that never joins (a program without offload images, which never
/// starts its MPI devices) must not keep the others waiting for ever. The buffers of an
/// exchange given up on are leaked: MPI may still write into them.
pub fn exchange(mpi: &Mpi, me: &Hello, limit: Duration) -> Result<Vec<Option<Hello>>, String> {
    let size = usize::try_from(mpi.size()?).map_err(|_| "a negative MPI world size".to_string())?;
    let mine = Box::new(me.encode());
    let mut all = vec![0u8; HELLO_LEN * size];
    // SAFETY: both buffers live until the request completes: this function waits for it,
    // or leaks them when it gives up.
    let mut req = unsafe { mpi.iallgather(mine.as_ptr(), HELLO_LEN, all.as_mut_ptr())? };
    let start = Instant::now();
    let mut wait = Backoff::new();
    while !mpi.test(&mut req)? {
        if start.elapsed() > limit {
            std::mem::forget(mine);
            std::mem::forget(all);
            return Err(format!("not every rank of the job joined within {} s", limit.as_secs()));
        }
        std::thread::sleep(wait.pause().max(Duration::from_micros(200)));
    }
    Ok(all.chunks_exact(HELLO_LEN).map(Hello::decode).collect())
}

/// How a loop that polls MPI waits: without sleeping for [`SPIN`] after the last thing that
/// happened (a reply in flight arrives within tens of microseconds, more on a loaded
/// machine), then sleeping for longer and longer: up to [`MAX_SLEEP`], and after a long
/// quiet time up to a sixteenth of it ([`LONG_SLEEP`] at most), so that a rank waiting for a
/// long kernel, or idle, uses almost no CPU and a reply waits at most ~6% longer than it took.
/// (Open MPI's own waits spin a core.)
pub struct Backoff {
    last: Instant,
    sleep: Duration,
    /// Whether polls keep the CPU, and the current wait since the last activity.
    keep: KeepCpu,
    wait: keep::Wait,
}

pub const SPIN: Duration = Duration::from_millis(1);
pub const MIN_SLEEP: Duration = Duration::from_micros(5);
pub const MAX_SLEEP: Duration = Duration::from_millis(1);
pub const LONG_SLEEP: Duration = Duration::from_millis(10);

/// A yield longer than this gave the CPU to another process's time slice.
pub const YIELD_LOST: Duration = Duration::from_micros(50);

/// Yields the CPU once, between two polls of a loop that waits without sleeping; `false`
/// when that gave the CPU away for longer than [`YIELD_LOST`]. Yielding is cheap only
/// while nothing but the side waited for wants the CPU; with a busy process on this CPU one
/// yield hands it a whole time slice, where a thread that sleeps is woken ahead of it: the
/// loop should then sleep instead.
pub fn yield_cheaply() -> bool {
    let before = Instant::now();
    std::thread::yield_now();
    before.elapsed() < YIELD_LOST
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    pub fn new() -> Self {
        let keep = KeepCpu::default();
        let wait = keep.begin(Instant::now());
        Backoff { last: Instant::now(), sleep: MIN_SLEEP, keep, wait }
    }

    /// Something happened: poll without sleeping for a while.
    pub fn active(&mut self) {
        self.keep.came(&self.wait);
        self.last = Instant::now();
        self.sleep = MIN_SLEEP;
        self.wait = self.keep.begin(self.last);
    }

    /// Between two polls while [`Backoff::pause`] says not to sleep: keeps the CPU for a
    /// while after the last activity, then yields it ([`KeepCpu`]).
    pub fn between_polls(&mut self) {
        if !self.keep.pause(&mut self.wait) {
            self.keep.gave_up(&self.wait);
        }
    }

    /// Whether something happened within the last [`SPIN`].
    pub fn recent(&self) -> bool {
        self.last.elapsed() < SPIN
    }

    /// How long to wait before polling again (zero: just yield the CPU).
    pub fn pause(&mut self) -> Duration {
        let quiet = self.last.elapsed();
        if quiet < SPIN {
            return Duration::ZERO;
        }
        let d = self.sleep;
        let cap = (quiet / 16).clamp(MAX_SLEEP, LONG_SLEEP);
        self.sleep = (self.sleep * 2).min(cap);
        d
    }
}

/// `u64 id | u8 tag | payload` as one buffer.
pub fn message(id: u64, tag: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEAD + parts.iter().map(|p| p.len()).sum::<usize>());
    m.extend_from_slice(&id.to_le_bytes());
    m.push(tag);
    parts.iter().for_each(|p| m.extend_from_slice(p));
    m
}

/// A message's id, tag and payload; `None` when it is shorter than its head.
pub fn split(m: &[u8]) -> Option<(u64, u8, &[u8])> {
    if m.len() < HEAD {
        return None;
    }
    Some((u64::from_le_bytes(m[..8].try_into().expect("8 bytes")), m[8], &m[HEAD..]))
}

/// A write's or read's `u32 device | u64 addr | u64 len`, its length at most [`MAX_CHUNK`].
pub fn copy_request(payload: &[u8]) -> Result<(u32, u64, usize), String> {
    let mut d = omp_worker::wire::Dec(payload);
    let fields = (|| Ok::<_, std::io::Error>((d.u32()?, d.u64()?, d.u64()?)))();
    let (device, addr, len) = fields.map_err(|_| format!("a copy request of {} bytes", payload.len()))?;
    d.end().map_err(|_| format!("a copy request of {} bytes", payload.len()))?;
    match usize::try_from(len) {
        Ok(n) if n <= MAX_CHUNK => Ok((device, addr, n)),
        _ => Err(format!("a copy of {len} bytes in one piece (at most {MAX_CHUNK})")),
    }
}

/// Half of a copy between devices of two ranks: `u32 device | u64 addr | u64 len | i32
/// other`, where `other` is the rank the bytes go to ([`OP_PEER_SEND`]) or come from
/// ([`OP_PEER_RECV`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCopy {
    pub device: u32,
    pub addr: u64,
    pub len: usize,
    pub other: i32,
}

impl PeerCopy {
    pub fn encode(&self) -> Vec<u8> {
        Enc::default().u32(self.device).u64(self.addr).u64(self.len as u64).u32(self.other as u32).0
    }

    /// Checks the length against [`MAX_PEER_COPY`]; the rank is checked by the caller, who
    /// knows the job.
    pub fn decode(payload: &[u8]) -> Result<PeerCopy, String> {
        let bad = || format!("a rank-to-rank copy request of {} bytes", payload.len());
        let mut d = Dec(payload);
        let fields = (|| Ok::<_, std::io::Error>((d.u32()?, d.u64()?, d.u64()?, d.u32()?)))();
        let (device, addr, len, other) = fields.map_err(|_| bad())?;
        d.end().map_err(|_| bad())?;
        Ok(PeerCopy { device, addr, len: bounded_copy(len)?, other: other as i32 })
    }

    /// How many [`PIECE`]s the copy is.
    pub fn pieces(&self) -> usize {
        self.len.div_ceil(PIECE)
    }

    /// Piece `i`'s device address and length.
    pub fn piece(&self, i: usize) -> (u64, usize) {
        let at = i * PIECE;
        (self.addr + at as u64, PIECE.min(self.len - at))
    }
}

/// A copy between two devices of one rank: `u32 from | u64 src | u32 to | u64 dst | u64 len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyAcross {
    pub from: u32,
    pub src: u64,
    pub to: u32,
    pub dst: u64,
    pub len: usize,
}

impl CopyAcross {
    pub fn encode(&self) -> Vec<u8> {
        Enc::default().u32(self.from).u64(self.src).u32(self.to).u64(self.dst).u64(self.len as u64).0
    }

    pub fn decode(payload: &[u8]) -> Result<CopyAcross, String> {
        let bad = || format!("a copy-across request of {} bytes", payload.len());
        let mut d = Dec(payload);
        let fields = (|| Ok::<_, std::io::Error>((d.u32()?, d.u64()?, d.u32()?, d.u64()?, d.u64()?)))();
        let (from, src, to, dst, len) = fields.map_err(|_| bad())?;
        d.end().map_err(|_| bad())?;
        Ok(CopyAcross { from, src, to, dst, len: bounded_copy(len)? })
    }
}

fn bounded_copy(len: u64) -> Result<usize, String> {
    match usize::try_from(len) {
        Ok(n) if n <= MAX_PEER_COPY => Ok(n),
        _ => Err(format!("a copy of {len} bytes in one request (at most {MAX_PEER_COPY})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip_and_strangers_are_refused() {
        let h = Hello::me(ROLE_DEVICE, 4);
        assert_eq!(Hello::decode(&h.encode()), Some(h.clone()));
        assert!(h.matches_us());
        let mut other = h.encode();
        other[0] ^= 1;
        assert_eq!(Hello::decode(&other), None);
        assert_eq!(Hello::decode(&other[..10]), None);
        let old = Hello { protocol: PROTOCOL + 1, ..h.clone() };
        assert!(!Hello::decode(&old.encode()).unwrap().matches_us());
        // An overlong host name is cut, never spills.
        let long = Hello { host: "h".repeat(500), ..h.clone() };
        let decoded = Hello::decode(&long.encode()).unwrap();
        assert_eq!(decoded.host.len(), HOST_LEN - 1);
        assert_eq!(decoded.cpus, h.cpus, "the host name leaves the CPU set alone");
        let bound = Hello { cpus: Cpus([0b101, 1 << 63]), ..h };
        assert_eq!(Hello::decode(&bound.encode()), Some(bound));
    }

    #[test]
    fn the_cpus_waited_for_are_those_of_the_other_ranks_on_this_machine() {
        let on = |host: &str, cpus: u64| {
            Some(Hello { host: host.into(), cpus: Cpus([cpus, 0]), ..Hello::me(ROLE_DEVICE, 1) })
        };
        let stranger = Some(Hello { protocol: PROTOCOL + 1, ..on("a", 0b1000).unwrap() });
        let hellos = [on("a", 0b1), on("a", 0b10), on("b", 0b100), stranger, None];
        assert_eq!(
            cpus_here(&hellos, 0, |_| true),
            Cpus([0b10, 0]),
            "not ours, not another machine's, not a stranger's"
        );
        assert_eq!(cpus_here(&hellos, 1, |_| true), Cpus([0b1, 0]));
        assert_eq!(cpus_here(&hellos, 4, |_| true), Cpus::ALL, "our own hello unknown: every CPU");
        assert_eq!(cpus_here(&hellos, 0, |h| h.devices > 1), Cpus::NONE, "only the ranks asked for");
    }

    #[test]
    fn copy_requests_are_bounded() {
        use omp_worker::wire::Enc;
        let ok = Enc::default().u32(2).u64(0x1000).u64(MAX_CHUNK as u64).0;
        assert_eq!(copy_request(&ok), Ok((2, 0x1000, MAX_CHUNK)));
        let big = Enc::default().u32(2).u64(0x1000).u64(MAX_CHUNK as u64 + 1).0;
        assert!(copy_request(&big).unwrap_err().contains("in one piece"));
        assert!(copy_request(&ok[..19]).is_err());
        assert!(copy_request(&[ok.clone(), vec![0]].concat()).is_err());
    }

    #[test]
    fn peer_requests_round_trip_and_are_bounded() {
        let c = PeerCopy { device: 3, addr: 0x7000, len: 2 * PIECE + 5, other: 2 };
        assert_eq!(PeerCopy::decode(&c.encode()), Ok(c));
        assert_eq!(c.pieces(), 3);
        assert_eq!(c.piece(0), (0x7000, PIECE));
        assert_eq!(c.piece(2), (0x7000 + 2 * PIECE as u64, 5));
        assert_eq!(PeerCopy { len: 0, ..c }.pieces(), 0);
        let big = PeerCopy { len: MAX_PEER_COPY + 1, ..c }.encode();
        assert!(PeerCopy::decode(&big).unwrap_err().contains("in one request"));
        assert!(PeerCopy::decode(&c.encode()[..23]).is_err());
        let a = CopyAcross { from: 0, src: 0x10, to: 1, dst: 0x20, len: 64 };
        assert_eq!(CopyAcross::decode(&a.encode()), Ok(a));
        assert!(CopyAcross::decode(&[a.encode(), vec![0]].concat()).is_err());
        let huge = CopyAcross { len: usize::MAX, ..a }.encode();
        assert!(CopyAcross::decode(&huge).is_err());
    }

    #[test]
    fn a_read_comes_back_in_pieces() {
        assert_eq!(pieces(0).count(), 0);
        assert_eq!(pieces(5).collect::<Vec<_>>(), [(0, 5)]);
        assert_eq!(pieces(2 * PIECE + 1).collect::<Vec<_>>(), [(0, PIECE), (PIECE, PIECE), (2 * PIECE, 1)]);
        assert_eq!(pieces(MAX_CHUNK).map(|(_, n)| n).sum::<usize>(), MAX_CHUNK);
    }

    #[test]
    fn messages_split_back() {
        let m = message(7, 3, &[b"ab", b"c"]);
        assert_eq!(split(&m), Some((7, 3, &b"abc"[..])));
        assert_eq!(split(&m[..8]), None);
    }

    #[test]
    fn the_backoff_spins_then_sleeps_longer_up_to_its_cap() {
        let mut b = Backoff::new();
        assert_eq!(b.pause(), Duration::ZERO);
        std::thread::sleep(SPIN);
        let first = b.pause();
        assert_eq!(first, MIN_SLEEP);
        let mut last = first;
        for _ in 0..20 {
            last = b.pause();
        }
        assert_eq!(last, MAX_SLEEP);
        // After a long quiet time, longer sleeps, never beyond LONG_SLEEP.
        b.last -= Duration::from_secs(1);
        for _ in 0..20 {
            last = b.pause();
        }
        assert_eq!(last, LONG_SLEEP);
        b.active();
        assert_eq!(b.pause(), Duration::ZERO);
    }
}
