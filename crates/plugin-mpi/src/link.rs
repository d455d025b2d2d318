//! The program's side of the MPI link: carries every device call to its rank and the reply
//! back. MPI is `MPI_THREAD_SERIALIZED`: a caller that finds it free drives it itself until
//! its reply is in, for a short while; after that the `omp-mpi` thread moves its call,
//! polling while a transfer is in flight and otherwise backing off ([`Backoff`]), so a
//! program waiting for a long kernel uses almost no CPU ([`drive`]).

use crate::device::HostBlocks;
use crate::proto::{
    self, Backoff, CopyAcross, PeerCopy, HEAD, MAX_CHUNK, MAX_PEER_COPY, MAX_REPLY, OP_COPY_ACROSS, OP_PEER_RECV,
    OP_PEER_SEND, OP_SHUTDOWN, STATUS_LOST, TAG_REPLY,
};
use omp_mpi::{Mpi, Request as MpiRequest};
use omp_sync::Mutex;
use omp_worker::client::{decode, Expect};
use omp_worker::{wire, CallError, Request, Response};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

mod drive;
use drive::{Next, Shared, Slot};

/// A device rank, as the program sees it.
#[derive(Debug, Clone)]
pub struct Rank {
    pub rank: i32,
    pub host: String,
    pub devices: u32,
}

/// What a pending call expects back.
enum Reply {
    Typed(Expect),
    /// A read: an OK reply, then its bytes straight into `[ptr, ptr+len)`.
    Into {
        ptr: usize,
        len: usize,
    },
}

/// One call, for whoever holds MPI next.
struct Call {
    rank: i32,
    id: u64,
    header: Vec<u8>,
    /// Bytes sent after the header, from the caller's memory (the caller waits meanwhile).
    data: Option<(usize, usize)>,
    reply: Reply,
    slot: Arc<Slot>,
}

enum Msg {
    Call(Call),
    /// The two halves of a rank-to-rank copy: both are sent, or (a rank is lost) neither.
    Pair(Call, Call),
}

/// A place in a device rank's memory: its rank, the device there and an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    pub rank: i32,
    pub device: u32,
    pub addr: u64,
}

/// Which side of a copy between devices failed.
#[derive(Debug)]
pub enum CopyFailure {
    Source(CallError),
    Destination(CallError),
}

/// What the program's rank moved (`LIBOMPTARGET_INFO`'s data-transfer bit prints it at exit).
#[derive(Debug, Default)]
pub struct Moved {
    /// Copy bytes the program's rank sent to device ranks and received from them.
    pub sent: AtomicU64,
    pub received: AtomicU64,
    /// Copies (and their bytes) from a device rank to another, and inside one device rank,
    /// none of whose bytes passed through the program's rank.
    pub rank_to_rank: AtomicU64,
    pub rank_to_rank_bytes: AtomicU64,
    pub within_rank: AtomicU64,
    pub within_rank_bytes: AtomicU64,
}

impl Moved {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The line printed at exit.
    pub fn summary(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "MPI devices: the program's rank sent {} and received {} bytes of device data; {} copies ({} bytes) went \
             rank to rank directly and {} ({} bytes) within a rank, none through the program's rank",
            get(&self.sent),
            get(&self.received),
            get(&self.rank_to_rank),
            get(&self.rank_to_rank_bytes),
            get(&self.within_rank),
            get(&self.within_rank_bytes)
        )
    }
}

/// The link to every device rank.
pub struct Link {
    tx: Mutex<Sender<Msg>>,
    shared: Arc<Shared>,
    next: AtomicU64,
    pub ranks: Vec<Rank>,
    pub moved: Moved,
    /// `LIBOMPTARGET_INFO` has the data-transfer bit: each direct copy, and [`Moved`] at exit.
    pub info: bool,
    /// Host memory handed out for MPI devices (`llvm_omp_target_alloc_host`).
    pub host_blocks: HostBlocks,
}

impl Link {
    /// Takes `mpi` (initialised, hellos exchanged) and starts the progress thread; `every`
    /// device rank hears the shutdown, also those that offer no devices.
    pub fn start(mpi: Mpi, ranks: Vec<Rank>, every: Vec<i32>, info: bool) -> std::io::Result<Link> {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::new(Progress::new(mpi, every, rx)));
        let progress = shared.clone();
        std::thread::Builder::new().name("omp-mpi".into()).spawn(move || progress.run())?;
        Ok(Link {
            tx: Mutex::new(tx),
            shared,
            next: AtomicU64::new(1),
            ranks,
            moved: Moved::default(),
            info,
            host_blocks: HostBlocks::default(),
        })
    }

    /// A call to `rank` (not yet sent) and the slot its result arrives in.
    fn call_to(
        &self,
        rank: i32,
        header_of: impl FnOnce(u64) -> Vec<u8>,
        data: Option<(usize, usize)>,
        reply: Reply,
    ) -> (Call, Arc<Slot>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::default());
        (Call { rank, id, header: header_of(id), data, reply, slot: slot.clone() }, slot)
    }

    fn post(&self, msg: Msg) -> Result<(), CallError> {
        self.tx
            .lock()
            .send(msg)
            .map_err(|_| CallError::Died("is unreachable: the program's MPI link has shut down".into()))
    }

    fn submit(
        &self,
        rank: i32,
        header_of: impl FnOnce(u64) -> Vec<u8>,
        data: Option<(usize, usize)>,
        reply: Reply,
    ) -> Result<Response, CallError> {
        let (call, slot) = self.call_to(rank, header_of, data, reply);
        self.post(Msg::Call(call))?;
        self.shared.wait(&slot)
    }

    /// Copies `len` bytes from `from` to `to`, two places in device ranks' memory, without
    /// the program's rank: between two ranks, the source's rank sends them to the
    /// destination's (the program sends each its half and waits for both); inside one rank,
    /// that rank copies.
    pub fn copy_between(&self, from: Place, to: Place, len: usize) -> Result<(), CopyFailure> {
        for at in (0..len).step_by(MAX_PEER_COPY) {
            let n = MAX_PEER_COPY.min(len - at);
            let (src, dst) = (from.addr + at as u64, to.addr + at as u64);
            if from.rank == to.rank {
                let c = CopyAcross { from: from.device, src, to: to.device, dst, len: n };
                let header = |id| proto::message(id, OP_COPY_ACROSS, &[&c.encode()]);
                self.submit(from.rank, header, None, Reply::Typed(Expect::Done)).map_err(CopyFailure::Source)?;
                Moved::add(&self.moved.within_rank_bytes, n);
                continue;
            }
            let send = PeerCopy { device: from.device, addr: src, len: n, other: to.rank };
            let recv = PeerCopy { device: to.device, addr: dst, len: n, other: from.rank };
            let (a, sent) = self.call_to(
                from.rank,
                |id| proto::message(id, OP_PEER_SEND, &[&send.encode()]),
                None,
                Reply::Typed(Expect::Done),
            );
            let (b, received) = self.call_to(
                to.rank,
                |id| proto::message(id, OP_PEER_RECV, &[&recv.encode()]),
                None,
                Reply::Typed(Expect::Done),
            );
            self.post(Msg::Pair(a, b)).map_err(CopyFailure::Source)?;
            // Both answer, whatever happens to the other (the sender's failure reaches the
            // receiver as empty pieces).
            let (sent, received) = (self.shared.wait(&sent), self.shared.wait(&received));
            sent.map_err(CopyFailure::Source)?;
            received.map_err(CopyFailure::Destination)?;
            Moved::add(&self.moved.rank_to_rank_bytes, n);
        }
        let copies = if from.rank == to.rank { &self.moved.within_rank } else { &self.moved.rank_to_rank };
        Moved::add(copies, 1);
        Ok(())
    }

    /// A worker request to `rank`, answered as the worker answers it.
    pub fn call(&self, rank: i32, req: &Request) -> Result<Response, CallError> {
        let (op, head, body, expect) = req.encode();
        self.submit(rank, |id| proto::message(id, op, &[&head, body]), None, Reply::Typed(expect))
    }

    /// Copies `[host, host+len)` to device address `addr` of `device` on `rank`.
    ///
    /// # Safety
    /// `[host, host+len)` must be readable for the duration of the call.
    pub unsafe fn write(&self, rank: i32, device: u32, addr: u64, host: usize, len: usize) -> Result<(), CallError> {
        for at in (0..len).step_by(MAX_CHUNK) {
            let n = MAX_CHUNK.min(len - at);
            let head = wire::Enc::default().u32(device).u64(addr + at as u64).u64(n as u64).0;
            let header = |id| proto::message(id, wire::OP_WRITE, &[&head]);
            self.submit(rank, header, Some((host + at, n)), Reply::Typed(Expect::Done))?;
            Moved::add(&self.moved.sent, n);
        }
        Ok(())
    }

    /// Copies device address `addr` of `device` on `rank` to `[host, host+len)`.
    ///
    /// # Safety
    /// `[host, host+len)` must be writable and unused by anything else during the call.
    pub unsafe fn read(&self, rank: i32, device: u32, addr: u64, host: usize, len: usize) -> Result<(), CallError> {
        for at in (0..len).step_by(MAX_CHUNK) {
            let n = MAX_CHUNK.min(len - at);
            let head = wire::Enc::default().u32(device).u64(addr + at as u64).u64(n as u64).0;
            let header = |id| proto::message(id, wire::OP_READ, &[&head]);
            self.submit(rank, header, None, Reply::Into { ptr: host + at, len: n })?;
            Moved::add(&self.moved.received, n);
        }
        Ok(())
    }

    /// Tells every rank the program ends and finalises MPI (the program's exit).
    pub fn shutdown(&self) {
        if self.info {
            eprintln!("omptarget info: {}", self.moved.summary());
        }
        let mut p = self.shared.progress.lock();
        // What callers queued goes first.
        self.shared.step(&mut p);
        if !p.ended {
            p.shutdown();
        }
        drop(p);
        self.shared.end();
    }
}

/// A call that was sent and waits for its reply.
struct Pending {
    rank: i32,
    reply: Reply,
    slot: Arc<Slot>,
    /// A write's data send: complete before the call is (the caller's buffer is then free).
    data: Option<MpiRequest>,
    /// A copy whose bytes are moving (a write's, or one between devices): its reply comes as
    /// soon as they have moved.
    bulk: bool,
}

/// A read's pieces being received straight into the caller's buffer, and the caller.
struct Receiving {
    pieces: Vec<MpiRequest>,
    failure: Option<String>,
    slot: Arc<Slot>,
}

/// MPI and the calls in flight: whoever holds it calls MPI.
struct Progress {
    mpi: Mpi,
    ranks: Vec<i32>,
    /// Calls posted by callers that found MPI taken.
    queue: Receiver<Msg>,
    /// MPI was finalised: calls fail from now on.
    ended: bool,
    pending: HashMap<u64, Pending>,
    /// Sends in flight, with the buffer each reads (kept until it completes).
    sends: Vec<(MpiRequest, Vec<u8>)>,
    /// Reads' data receives in flight.
    recvs: Vec<Receiving>,
    /// Ranks that can no longer be trusted or reached, and why.
    lost: HashMap<i32, String>,
    wait: Backoff,
}

impl Progress {
    fn new(mpi: Mpi, ranks: Vec<i32>, queue: Receiver<Msg>) -> Self {
        Progress {
            mpi,
            ranks,
            queue,
            ended: false,
            pending: HashMap::new(),
            sends: Vec::new(),
            recvs: Vec::new(),
            lost: HashMap::new(),
            wait: Backoff::new(),
        }
    }

    /// Sends every queued call, in order.
    fn send_queued(&mut self) {
        while let Ok(m) = self.queue.try_recv() {
            let calls = match m {
                Msg::Call(c) if !self.ended => {
                    self.wait.active();
                    self.send(c);
                    continue;
                }
                Msg::Pair(a, b) if !self.ended => {
                    self.wait.active();
                    self.send_pair(a, b);
                    continue;
                }
                Msg::Call(c) => vec![c],
                Msg::Pair(a, b) => vec![a, b],
            };
            for c in calls {
                c.slot.complete(Err(CallError::Died("is unreachable: the program's MPI link has shut down".into())));
            }
        }
    }

    /// How the progress thread waits before it looks again.
    fn next_wait(&mut self) -> Next {
        if self.moving() {
            // A transfer moves only while MPI is called: poll.
            return Next::Poll;
        }
        match self.wait.pause() {
            d if d.is_zero() => Next::Poll,
            d => Next::Sleep(d),
        }
    }

    /// Whether bytes are moving: a send, a read's pieces, a write's data or a copy between
    /// devices, whose reply comes as soon as they have moved (waiting for it in sleeps would
    /// add up to a sleep, up to 1 ms, to every copy).
    fn moving(&self) -> bool {
        !self.sends.is_empty() || !self.recvs.is_empty() || self.pending.values().any(|p| p.bulk)
    }

    /// Sends a call; `false` when it could not be (its caller has its answer already).
    fn send(&mut self, c: Call) -> bool {
        if let Some(why) = self.lost.get(&c.rank) {
            c.slot.complete(Err(CallError::Died(why.clone())));
            return false;
        }
        let copy = matches!(proto::split(&c.header), Some((_, OP_PEER_SEND | OP_PEER_RECV | OP_COPY_ACROSS, _)));
        let posted = self.post(c.rank, c.header, proto::TAG_REQUEST).and_then(|_| match c.data {
            Some((ptr, len)) => {
                // SAFETY: the caller waits for this call, so its buffer stays readable until
                // the send completes (`reply` sees it complete before it completes the call).
                unsafe { self.mpi.isend(ptr as *const u8, len, c.rank, proto::TAG_TO_DEVICE) }.map(Some)
            }
            None => Ok(None),
        });
        match posted {
            Ok(data) => {
                let bulk = data.is_some() || copy;
                self.pending.insert(c.id, Pending { rank: c.rank, reply: c.reply, slot: c.slot, data, bulk });
                true
            }
            Err(e) => {
                c.slot.complete(Err(CallError::Died(format!("cannot be reached: {e}"))));
                false
            }
        }
    }

    /// Both halves of a rank-to-rank copy, or, when either rank is lost, neither (a half
    /// sent alone would leave its rank waiting for pieces that never come).
    fn send_pair(&mut self, a: Call, b: Call) {
        let lost = [&a, &b].iter().find_map(|c| self.lost.get(&c.rank).map(|why| (c.rank, why.clone())));
        let Some((rank, why)) = lost else {
            if self.send(a) {
                self.send(b);
            } else {
                b.slot.complete(Err(CallError::Failed("the copy's source rank could not be sent its part".into())));
            }
            return;
        };
        for c in [a, b] {
            let e = if c.rank == rank {
                CallError::Died(why.clone())
            } else {
                CallError::Failed(format!("the copy's other rank, MPI rank {rank}, is lost"))
            };
            c.slot.complete(Err(e));
        }
    }

    fn post(&mut self, rank: i32, buf: Vec<u8>, tag: i32) -> Result<(), String> {
        // SAFETY: `buf` is kept in `sends` until the send completes (moving a Vec does not
        // move its heap buffer).
        let r = unsafe { self.mpi.isend(buf.as_ptr(), buf.len(), rank, tag)? };
        self.sends.push((r, buf));
        Ok(())
    }

    /// Completes what finished and takes in every reply that arrived.
    fn progress(&mut self) {
        let mpi = &self.mpi;
        self.sends.retain_mut(|(r, _)| !mpi.test(r).unwrap_or(true));
        let mut done = Vec::new();
        self.recvs.retain_mut(|r| {
            // Every piece ends before the call does: MPI writes the caller's buffer until then.
            r.pieces.retain_mut(|p| match mpi.test(p) {
                Ok(done) => !done,
                Err(e) => {
                    r.failure.get_or_insert(e);
                    false
                }
            });
            if !r.pieces.is_empty() {
                return true;
            }
            done.push((r.slot.clone(), r.failure.take().map_or(Ok(Response::Done), |e| Err(CallError::Failed(e)))));
            false
        });
        for (slot, r) in done {
            self.wait.active();
            slot.complete(r);
        }
        while let Ok(Some(st)) = self.mpi.probe(None, TAG_REPLY) {
            self.wait.active();
            if st.len > MAX_REPLY || st.len < HEAD {
                // Received (to keep the stream in step) only when it is small enough.
                let mut sink = vec![0u8; st.len.min(MAX_REPLY)];
                let _ = self.mpi.recv_probed(st, &mut sink);
                self.lose(st.source, format!("sent a reply of {} bytes (at most {MAX_REPLY} accepted)", st.len));
                continue;
            }
            let mut m = vec![0u8; st.len];
            if let Err(e) = self.mpi.recv_probed(st, &mut m) {
                self.lose(st.source, e);
                continue;
            }
            self.reply(st.source, &m);
        }
    }

    fn reply(&mut self, rank: i32, m: &[u8]) {
        let Some((id, status, payload)) = proto::split(m) else { return };
        if id == 0 && matches!(status, wire::OUT_STDOUT | wire::OUT_STDERR) {
            // What a kernel printed, in order with the replies.
            return write_all(if status == wire::OUT_STDOUT { 1 } else { 2 }, payload);
        }
        let Some(mut p) = self.pending.remove(&id).filter(|p| p.rank == rank) else {
            return self.lose(rank, format!("sent a reply (id {id}) that answers no request"));
        };
        if let Some(mut data) = p.data.take() {
            // The rank answers after it received the bytes: this ends at once.
            while !self.mpi.test(&mut data).unwrap_or(true) {
                std::thread::yield_now();
            }
        }
        if status == STATUS_LOST {
            let how = String::from_utf8_lossy(&payload[..payload.len().min(4096)]).into_owned();
            self.lost.insert(rank, how.clone());
            return p.slot.complete(Err(CallError::Died(how)));
        }
        let expect = match p.reply {
            Reply::Typed(e) => e,
            Reply::Into { ptr, len } => {
                if status != wire::STATUS_OK {
                    Expect::Done
                } else {
                    let mut r = Receiving { pieces: Vec::new(), failure: None, slot: p.slot };
                    for (at, n) in proto::pieces(len) {
                        // SAFETY: the caller of `Link::read` waits for this call with
                        // `[ptr, ptr+len)` writable and unused until every piece's receive
                        // completed (`progress`).
                        match unsafe { self.mpi.irecv((ptr + at) as *mut u8, n, rank, proto::TAG_TO_PROGRAM) } {
                            Ok(req) => r.pieces.push(req),
                            Err(e) => {
                                r.failure = Some(e);
                                break;
                            }
                        }
                    }
                    return self.recvs.push(r);
                }
            }
        };
        match decode(expect, status, payload.to_vec()) {
            Ok(r) => p.slot.complete(r),
            Err(e) => {
                p.slot.complete(Err(CallError::Died(format!("sent a malformed reply: {e}"))));
                self.lose(rank, format!("sent a malformed reply: {e}"));
            }
        }
    }

    /// A rank that broke the protocol: every call to it fails from now on.
    fn lose(&mut self, rank: i32, why: String) {
        let ids: Vec<u64> = self.pending.iter().filter(|(_, p)| p.rank == rank).map(|(id, _)| *id).collect();
        for id in ids {
            if let Some(mut p) = self.pending.remove(&id) {
                // A write's bytes may still be in flight from the caller's buffer: the call
                // ends once they left (a rank that stopped receiving gets 1 s; after that MPI
                // may read a buffer the program reuses, never write it).
                if let Some(mut data) = p.data.take() {
                    let start = std::time::Instant::now();
                    while !self.mpi.test(&mut data).unwrap_or(true)
                        && start.elapsed() < std::time::Duration::from_secs(1)
                    {
                        std::thread::yield_now();
                    }
                }
                p.slot.complete(Err(CallError::Died(why.clone())));
            }
        }
        self.lost.insert(rank, why);
    }

    fn shutdown(&mut self) {
        let ranks = self.ranks.clone();
        for rank in ranks {
            let _ = self.post(rank, proto::message(0, OP_SHUTDOWN, &[]), proto::TAG_REQUEST);
        }
        let start = std::time::Instant::now();
        while !self.sends.is_empty() && start.elapsed() < std::time::Duration::from_secs(5) {
            let mpi = &self.mpi;
            self.sends.retain_mut(|(r, _)| !mpi.test(r).unwrap_or(true));
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        let _ = self.mpi.finalize();
        self.ended = true;
    }
}

/// Writes all of `b` to descriptor `fd` (kernel output forwarded to the program's own).
fn write_all(fd: i32, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: writes from our own buffer to one of the process's standard descriptors.
        let n = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n <= 0 {
            return;
        }
        b = &b[n as usize..];
    }
}
