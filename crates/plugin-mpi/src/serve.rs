//! A device rank (`offload-mpi-device`): relays the program's requests to this node's
//! devices through an `offload-worker` process, the same worker (and so the same handling of
//! images, allocations, copies and launches) that isolated and remote devices use, and
//! sends the replies and what kernels print back in order. With `--in-process`, the rank
//! serves them itself with the worker's request handling ([`crate::backend`]).
//!
//! One thread at a time calls MPI (`MPI_THREAD_SERIALIZED`): the rank's MPI thread, or, while
//! that thread runs a launch itself (in process), a standby thread once the launch runs long
//! ([`inline`]). Worker calls complete on the worker client's thread (in process: a kernel
//! thread, or the MPI thread itself) and come back through a channel, which also wakes the
//! MPI thread; while nothing is in flight it backs off, so an idle rank, or one whose kernel
//! runs for seconds, uses almost no CPU.

use crate::backend::{Backend, Job};
use crate::direct::{DeviceMemory, DeviceRange};
use crate::peer::{Copied, Peers};
use crate::proto::{
    self, Backoff, CopyAcross, Hello, PeerCopy, MAX_CHUNK, MAX_REQUEST, OP_COPY_ACROSS, OP_PEER_RECV, OP_PEER_SEND,
    OP_SHUTDOWN, PIECE, ROLE_DEVICE, ROLE_PROGRAM, STATUS_LOST,
};
use omp_mpi::{Mpi, Request as MpiRequest};
use omp_worker::{wire, CallError, Request, Response};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::Duration;

mod backends;
mod bulk;
mod inline;

/// How long a device rank waits for the program's rank to join at start-up.
pub const JOIN_LIMIT: Duration = Duration::from_secs(60);

/// What the worker's threads tell the MPI thread.
enum Event {
    Reply(u64, Result<Response, CallError>),
    Output(bool, Vec<u8>),
    Copied(Copied),
}

/// A write whose bytes are being received.
struct Incoming {
    req: MpiRequest,
    id: u64,
    device: u32,
    addr: u64,
    /// The bytes arrive in `buf[..len]`, then go to the worker; `None`: they arrive in the
    /// device memory itself ([`DeviceMemory`]).
    buf: Option<Vec<u8>>,
    len: usize,
}

/// A read's pieces being sent, from `buf` or straight from device memory (`source`).
struct Read {
    pieces: Vec<MpiRequest>,
    buf: Vec<u8>,
    source: Option<DeviceRange>,
}

/// Buffers of copies at least this large go back to the pool, at most [`POOL`] of them.
const POOLED: usize = 1 << 20;
const POOL: usize = 4;

struct Serve {
    mpi: Mpi,
    program: i32,
    /// This rank and every device rank of the job (the others a copy may go to or come from).
    me: i32,
    device_ranks: Vec<i32>,
    worker: Arc<dyn Backend>,
    /// The devices' memory, which MPI reaches directly: shared with the worker, or in process
    /// the rank's own (`None`: the worker could not map it and allocates device memory itself).
    memory: Option<DeviceMemory>,
    /// Copies to and from other device ranks, and between devices of this one.
    peers: Peers,
    events: Receiver<Event>,
    tx: Sender<Event>,
    sends: Vec<(MpiRequest, Vec<u8>)>,
    reads: Vec<Read>,
    writes: Vec<Incoming>,
    /// Copy buffers kept for the next copies: a fresh 64 MiB buffer costs its page faults
    /// at every copy.
    pool: Vec<Vec<u8>>,
    wait: Backoff,
    args: Vec<u64>,
    /// A launch handed back to run on the thread that serves ([`inline`]), when it may.
    inline: Option<Job>,
    may_inline: bool,
}

/// Where a device rank's kernels run.
pub enum Serving {
    /// In an `offload-worker` started from this path (the default).
    Worker(PathBuf),
    /// In the rank's own process (`--in-process`).
    InProcess,
}

/// Runs a device rank offering `devices` devices, served as `serving` says; returns the
/// exit status.
pub fn main(devices: u32, serving: Serving) -> i32 {
    let fail = |m: String| {
        eprintln!("offload-mpi-device: {m}");
        1
    };
    let mpi = match Mpi::load(Mpi::launcher(|k| std::env::var(k).ok())) {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    if let Err(e) = mpi.init() {
        return fail(e);
    }
    let rank = mpi.rank().unwrap_or(-1);
    let hellos = match proto::exchange(&mpi, &Hello::me(ROLE_DEVICE, devices), JOIN_LIMIT) {
        Ok(h) => h,
        Err(e) => {
            // No MPI_Finalize: it would wait for the ranks that never joined.
            eprintln!(
                "offload-mpi-device (rank {rank} on {}): {e}: the program's rank never started its MPI devices \
                 (a program without target regions, or one that calls MPI itself, cannot use them)",
                proto::hostname()
            );
            std::process::exit(1);
        }
    };
    let programs: Vec<usize> = hellos
        .iter()
        .enumerate()
        .filter(|(_, h)| h.as_ref().is_some_and(|h| h.role == ROLE_PROGRAM))
        .map(|(i, _)| i)
        .collect();
    let first_device = hellos.iter().position(|h| h.as_ref().is_some_and(|h| h.role == ROLE_DEVICE));
    let speaker = first_device == usize::try_from(rank).ok();
    if programs.len() != 1 {
        if speaker {
            eprintln!(
                "offload-mpi-device: this job has {} program ranks; MPI devices need exactly one: start them as \
                 `mpirun -np 1 ./program : -np K offload-mpi-device` (docs/cluster.md)",
                programs.len()
            );
        }
        let _ = mpi.finalize();
        return 1;
    }
    let program = programs[0] as i32;
    if let Some(h) = hellos[programs[0]].as_ref().filter(|h| !h.matches_us()) {
        if speaker {
            eprintln!(
                "offload-mpi-device: the program's OpenMP runtime is version {} (protocol {}), this device program \
                 is {} (protocol {}): they must be the same build; this rank offers no devices",
                h.version,
                h.protocol,
                proto::VERSION,
                proto::PROTOCOL
            );
        }
    }
    backends::keep_cpus_beside(&serving, &hellos, rank);
    let device_ranks: Vec<i32> = (0..hellos.len())
        .filter(|&r| hellos[r].as_ref().is_some_and(|h| h.role == ROLE_DEVICE))
        .map(|r| r as i32)
        .collect();
    let (tx, events) = mpsc::channel();
    let started = backends::start(&serving, devices, tx.clone()).and_then(|(w, memory)| {
        let copied = tx.clone();
        Peers::start(w.clone(), move |c| drop(copied.send(Event::Copied(c)))).map(|p| (w, memory, p))
    });
    let (worker, memory, peers) = match started {
        Ok(w) => w,
        Err(e) => {
            match &serving {
                Serving::Worker(exe) => {
                    eprintln!("offload-mpi-device (rank {rank}): cannot start {}: {e}", exe.display())
                }
                Serving::InProcess => eprintln!("offload-mpi-device (rank {rank}): cannot open its devices: {e}"),
            }
            // The program learns it at its first call: every request is answered "lost".
            let peer = move |r: i32| r != rank && device_ranks.contains(&r);
            return serve_lost(mpi, program, format!("could not start its device worker: {e}"), peer);
        }
    };
    crate::slice::shorten_this_thread();
    let in_process = matches!(serving, Serving::InProcess);
    let serve = Serve {
        mpi,
        program,
        me: rank,
        device_ranks,
        memory,
        worker,
        peers,
        events,
        tx,
        sends: Vec::new(),
        reads: Vec::new(),
        writes: Vec::new(),
        pool: Vec::new(),
        wait: Backoff::new(),
        args: Vec::new(),
        inline: None,
        may_inline: false,
    };
    inline::run(serve, in_process)
}

impl Serve {
    /// One turn of the serving loop: waits (briefly) for something to do, then does what
    /// came; the exit status once the program ends. A launch handed back to this thread is
    /// left in `inline`.
    fn turn(&mut self) -> Option<i32> {
        let busy = !self.sends.is_empty() || !self.reads.is_empty() || !self.writes.is_empty();
        let event = if busy || self.peers.moving() {
            std::thread::yield_now();
            self.events.try_recv().ok()
        } else {
            match self.wait.pause() {
                d if d.is_zero() => {
                    self.wait.between_polls();
                    self.events.try_recv().ok()
                }
                d => match self.events.recv_timeout(d) {
                    Ok(e) => Some(e),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return Some(1),
                },
            }
        };
        if let Some(e) = event {
            self.event(e);
            self.take_events();
        }
        self.finish_sends();
        self.finish_writes();
        for (id, r) in self.peers.progress(&self.mpi) {
            self.wait.active();
            self.reply(id, r.map(|_| Response::Done));
        }
        loop {
            match self.mpi.probe(Some(self.program), proto::TAG_REQUEST) {
                Ok(Some(st)) => {
                    self.wait.active();
                    if st.len > MAX_REQUEST {
                        eprintln!("offload-mpi-device: a request of {} bytes (at most {MAX_REQUEST})", st.len);
                        self.mpi.abort(1);
                    }
                    let mut m = vec![0u8; st.len];
                    if let Err(e) = self.mpi.recv_probed(st, &mut m) {
                        eprintln!("offload-mpi-device: {e}");
                        self.mpi.abort(1);
                    }
                    if proto::split(&m).is_some_and(|(_, op, _)| op == OP_SHUTDOWN) {
                        return Some(self.shutdown());
                    }
                    self.request(&m);
                    if self.inline.is_some() {
                        // Runs now; the next requests wait for the next turn.
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    eprintln!("offload-mpi-device: {e}");
                    self.mpi.abort(1);
                }
            }
        }
        // Calls this thread completed itself (in process) are answered at once.
        self.take_events();
        None
    }

    /// Handles what came through the channel (replies, output, copied pieces).
    fn take_events(&mut self) {
        while let Ok(e) = self.events.try_recv() {
            self.event(e);
        }
    }

    fn event(&mut self, e: Event) {
        self.wait.active();
        match e {
            Event::Reply(id, r) => self.reply(id, r),
            Event::Copied(Copied::Piece { key, index, buf, result }) => {
                self.peers.piece(&self.mpi, key, index, buf, result)
            }
            Event::Copied(Copied::Across { id, result }) => self.reply(id, result.map(|_| Response::Done)),
            Event::Output(is_err, b) => {
                let tag = if is_err { wire::OUT_STDERR } else { wire::OUT_STDOUT };
                for chunk in b.chunks(64 << 10) {
                    self.send(proto::message(0, tag, &[chunk]));
                }
            }
        }
    }

    fn send(&mut self, m: Vec<u8>) {
        // SAFETY: `m` is kept in `sends` until the send completes.
        match unsafe { self.mpi.isend(m.as_ptr(), m.len(), self.program, proto::TAG_REPLY) } {
            Ok(r) => self.sends.push((r, m)),
            Err(e) => {
                eprintln!("offload-mpi-device: cannot answer the program: {e}");
                self.mpi.abort(1);
            }
        }
    }

    fn reply(&mut self, id: u64, r: Result<Response, CallError>) {
        let m = match r {
            Ok(resp) => proto::message(id, wire::STATUS_OK, &[&resp.encode()]),
            Err(CallError::Failed(m)) => proto::message(id, wire::STATUS_ERR, &[m.as_bytes()]),
            Err(CallError::Died(how)) => {
                let m = format!("its device worker (pid {}) ended: {how}", self.worker.pid());
                proto::message(id, STATUS_LOST, &[m.as_bytes()])
            }
        };
        self.send(m);
    }

    fn request(&mut self, m: &[u8]) {
        let Some((id, op, payload)) = proto::split(m) else {
            eprintln!("offload-mpi-device: a request of {} bytes", m.len());
            self.mpi.abort(1);
        };
        if let Some(r) = self.memory_request(op, payload) {
            return self.reply(id, r);
        }
        match op {
            wire::OP_WRITE | wire::OP_READ => {
                let (device, addr, len) = match proto::copy_request(payload) {
                    Ok(c) => c,
                    // A write's bytes would follow, of a size it does not tell: the program
                    // is not ours, and the stream cannot be kept in step.
                    Err(e) if op == wire::OP_WRITE => {
                        eprintln!("offload-mpi-device: {e}");
                        self.mpi.abort(1);
                    }
                    Err(e) => return self.reply(id, Err(CallError::Failed(e))),
                };
                let direct = self.direct_range(device, addr, len);
                match (op, direct) {
                    (wire::OP_WRITE, Some(range)) => return self.receive_direct(id, device, addr, range),
                    (_, Some(range)) => return self.send_read(id, Vec::new(), len, Some(range)),
                    _ => {}
                }
                let mut buf = self.buffer(len);
                if op == wire::OP_READ {
                    return match self.worker.read_into(device, addr, &mut buf[..len]) {
                        Ok(()) => self.send_read(id, buf, len, None),
                        Err(e) => {
                            self.recycle(buf);
                            self.reply(id, Err(e));
                        }
                    };
                }
                // SAFETY: `buf` is kept in `writes` until the receive completes.
                match unsafe { self.mpi.irecv(buf.as_mut_ptr(), len, self.program, proto::TAG_TO_DEVICE) } {
                    Ok(req) => self.writes.push(Incoming { req, id, device, addr, buf: Some(buf), len }),
                    Err(e) => {
                        eprintln!("offload-mpi-device: {e}");
                        self.mpi.abort(1);
                    }
                }
            }
            OP_PEER_SEND | OP_PEER_RECV => match PeerCopy::decode(payload) {
                Ok(c) if c.other != self.me && self.device_ranks.contains(&c.other) => {
                    let direct = self.direct_range(c.device, c.addr, c.len);
                    self.peers.begin(&self.mpi, id, op == OP_PEER_SEND, c, direct)
                }
                Ok(c) => {
                    self.reply(id, Err(CallError::Failed(format!("MPI rank {} is not another device rank", c.other))))
                }
                Err(e) => self.reply(id, Err(CallError::Failed(e))),
            },
            OP_COPY_ACROSS => match CopyAcross::decode(payload) {
                Ok(c) => {
                    let src = self.direct_range(c.from, c.src, c.len);
                    let direct = src.zip(self.direct_range(c.to, c.dst, c.len));
                    self.peers.across(id, c, direct)
                }
                Err(e) => self.reply(id, Err(CallError::Failed(e))),
            },
            _ => {
                let mut args = std::mem::take(&mut self.args);
                match Request::decode(op, payload, &mut args) {
                    Ok(req) => {
                        let tx = self.tx.clone();
                        let done = Box::new(move |r| drop(tx.send(Event::Reply(id, r))));
                        if self.may_inline && self.inline.is_none() {
                            self.inline = self.worker.send_or_hand_back(&req, done);
                        } else {
                            self.worker.send(&req, done);
                        }
                    }
                    Err(e) => self.reply(id, Err(CallError::Failed(format!("a malformed request: {e}")))),
                }
                self.args = args;
            }
        }
    }

    /// Writes whose bytes arrived go to the worker's memory.
    fn finish_writes(&mut self) {
        let mut i = 0;
        while i < self.writes.len() {
            if !self.mpi.test(&mut self.writes[i].req).unwrap_or(true) {
                i += 1;
                continue;
            }
            let w = self.writes.swap_remove(i);
            self.wait.active();
            let Some(buf) = w.buf else {
                // The bytes are in the device's memory already.
                self.reply(w.id, Ok(Response::Done));
                continue;
            };
            let r = self.worker.write(w.device, w.addr, &buf[..w.len]).map(|_| Response::Done);
            self.recycle(buf);
            self.reply(w.id, r);
        }
    }

    /// Sends that completed give their buffers back.
    fn finish_sends(&mut self) {
        self.finish_reads();
        let mut i = 0;
        while i < self.sends.len() {
            if self.mpi.test(&mut self.sends[i].0).unwrap_or(true) {
                let (_, buf) = self.sends.swap_remove(i);
                self.recycle(buf);
            } else {
                i += 1;
            }
        }
    }

    /// A buffer of at least `len` bytes (its length is its capacity).
    fn buffer(&mut self, len: usize) -> Vec<u8> {
        match self.pool.iter().position(|b| b.len() >= len) {
            Some(i) => self.pool.swap_remove(i),
            None => vec![0u8; len],
        }
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if buf.len() >= POOLED && self.pool.len() < POOL {
            self.pool.push(buf);
        }
    }

    fn shutdown(&mut self) -> i32 {
        let start = std::time::Instant::now();
        while !self.sends.is_empty() && start.elapsed() < Duration::from_secs(5) {
            let mpi = &self.mpi;
            self.sends.retain_mut(|(r, _)| !mpi.test(r).unwrap_or(true));
            std::thread::sleep(Duration::from_micros(50));
        }
        self.worker.stop();
        let _ = self.mpi.finalize();
        0
    }
}

/// A rank whose worker could not start: every request is answered "lost", until shutdown.
/// Its part of a copy with another device rank (one that `peer` accepts) still moves, empty.
fn serve_lost(mpi: Mpi, program: i32, why: String, peer: impl Fn(i32) -> bool) -> i32 {
    let mut wait = Backoff::new();
    let mut sends = Vec::new();
    loop {
        sends.retain_mut(|(r, _): &mut (MpiRequest, Vec<u8>)| !mpi.test(r).unwrap_or(true));
        match mpi.probe(Some(program), proto::TAG_REQUEST) {
            Ok(Some(st)) if st.len <= MAX_REQUEST => {
                wait.active();
                let mut m = vec![0u8; st.len];
                if mpi.recv_probed(st, &mut m).is_err() {
                    return 1;
                }
                match proto::split(&m) {
                    Some((_, OP_SHUTDOWN, _)) => {
                        let _ = mpi.finalize();
                        return 1;
                    }
                    Some((id, op, p)) => {
                        let copy = PeerCopy::decode(p).ok().filter(|c| peer(c.other));
                        if let (OP_PEER_SEND | OP_PEER_RECV, Some(c)) = (op, copy) {
                            // Keep the other rank in step: empty pieces out, its pieces taken.
                            let mut sink = vec![0u8; if op == OP_PEER_RECV { PIECE } else { 0 }];
                            for i in 0..c.pieces() {
                                let n = if op == OP_PEER_RECV { c.piece(i).1 } else { 0 };
                                let moved = if op == OP_PEER_RECV {
                                    // SAFETY: `sink` outlives the receive, which is waited for here.
                                    unsafe { mpi.irecv(sink.as_mut_ptr(), n, c.other, proto::TAG_PEER) }
                                } else {
                                    // SAFETY: as above; an empty send reads nothing.
                                    unsafe { mpi.isend(sink.as_ptr(), 0, c.other, proto::TAG_PEER) }
                                };
                                if let Ok(mut r) = moved {
                                    while !mpi.test(&mut r).unwrap_or(true) {
                                        std::thread::yield_now();
                                    }
                                }
                            }
                        }
                        if op == wire::OP_WRITE {
                            // Take its bytes, to keep the stream in step.
                            let len = wire::Dec(p.get(12..).unwrap_or(&[])).u64().unwrap_or(0) as usize;
                            let mut sink = vec![0u8; len.min(MAX_CHUNK)];
                            let received =
                                // SAFETY: `sink` outlives the receive, which is waited for here.
                                unsafe { mpi.irecv(sink.as_mut_ptr(), sink.len(), program, proto::TAG_TO_DEVICE) };
                            if let Ok(mut r) = received {
                                while !mpi.test(&mut r).unwrap_or(true) {
                                    std::thread::yield_now();
                                }
                            }
                        }
                        let m = proto::message(id, STATUS_LOST, &[why.as_bytes()]);
                        // SAFETY: `m` is kept in `sends` until the send completes.
                        if let Ok(r) = unsafe { mpi.isend(m.as_ptr(), m.len(), program, proto::TAG_REPLY) } {
                            sends.push((r, m));
                        }
                    }
                    None => return 1,
                }
            }
            Ok(Some(_)) | Err(_) => return 1,
            Ok(None) => std::thread::sleep(wait.pause()),
        }
    }
}
