//! A device rank's side of copies that skip the program (docs/cluster.md, "Rank to rank"):
//! the rank that holds the source reads it from its worker and sends it to the rank that
//! holds the destination, which writes it into its worker; both answer the program. A copy
//! between two devices of one rank is relayed inside the rank.
//!
//! The worker's memory is read and written on a thread of its own (the copier), so that
//! MPI, which moves bytes only while the MPI thread calls it, keeps moving meanwhile: up to
//! [`DEPTH`] pieces of a copy are being read, sent, received or written at once.
//!
//! When the copy's range lies in device memory this rank reaches itself (the arena shared
//! with its worker, or in process the devices' own memory: [`crate::direct`]), the worker is
//! not asked: the pieces go straight from
//! and into that memory, no buffer, no copier, [`DIRECT_DEPTH`] pieces in flight.
//!
//! Messages between two ranks with one tag arrive in the order they were sent, and a
//! receive takes the first message that matches it. So, towards each other rank, only the
//! oldest copy moves (others wait their turn); the program's requests reach both ranks in
//! the same order, so both sides agree which copy each piece belongs to.

use crate::backend::Backend;
use crate::direct::DeviceRange;
use crate::proto::{CopyAcross, PeerCopy, DEPTH, PIECE, TAG_PEER};
use omp_mpi::{Mpi, Request as MpiRequest};
use omp_worker::CallError;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which way a copy goes, and the other rank: at most one copy moves per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub outgoing: bool,
    pub other: i32,
}

/// Work for the copier thread.
enum Job {
    Read {
        key: Key,
        index: usize,
        device: u32,
        addr: u64,
        buf: Vec<u8>,
        len: usize,
    },
    Write {
        key: Key,
        index: usize,
        device: u32,
        addr: u64,
        buf: Vec<u8>,
        len: usize,
    },
    /// `c`, through the worker; or, when both ranges are device memory of this process
    /// (`direct`: source, destination), one `memmove`.
    Across {
        id: u64,
        c: CopyAcross,
        direct: Option<(DeviceRange, DeviceRange)>,
    },
}

/// What the copier hands back to the MPI thread.
pub enum Copied {
    /// Piece `index` was read (outgoing) or written (incoming); `buf` comes back.
    Piece { key: Key, index: usize, buf: Vec<u8>, result: Result<(), CallError> },
    /// A copy inside this rank ended; request `id` is answered with `result`.
    Across { id: u64, result: Result<(), CallError> },
}

/// One copy to or from another rank.
struct Transfer {
    /// The program's request, answered when every piece is done.
    id: u64,
    copy: PeerCopy,
    /// Pieces begun (in order), pieces at the copier, and pieces done.
    begun: usize,
    at_copier: usize,
    done: usize,
    /// The first failure; later pieces move no data (an outgoing copy sends empty pieces, an
    /// incoming one writes nothing) but still move, so both sides stay in step.
    failure: Option<CallError>,
    /// MPI sends or receives in flight: the request, the buffer (empty for a direct piece)
    /// and the piece's index.
    moving: Vec<(MpiRequest, Vec<u8>, usize)>,
    /// The copy's device memory in this process, which MPI moves the pieces from or into.
    direct: Option<DeviceRange>,
}

/// Pieces of a direct copy in flight: they need no buffer.
pub const DIRECT_DEPTH: usize = 16;

impl Transfer {
    /// Piece `index` of a direct copy's device memory.
    fn part(&self, range: DeviceRange, index: usize) -> DeviceRange {
        range.part(index * PIECE, self.copy.piece(index).1)
    }

    fn fail(&mut self, e: CallError) {
        if self.failure.is_none() {
            self.failure = Some(e);
        }
    }

    /// Sends piece `index` of an outgoing copy from `buf` (empty once the copy failed).
    fn send_piece(&mut self, mpi: &Mpi, index: usize, buf: Vec<u8>) {
        let n = if self.failure.is_some() { 0 } else { self.copy.piece(index).1 };
        // SAFETY: `buf` (at least `n` bytes) is kept in `moving` until the send completes.
        match unsafe { mpi.isend(buf.as_ptr(), n, self.copy.other, TAG_PEER) } {
            Ok(r) => self.moving.push((r, buf, index)),
            Err(e) => {
                // The receiver waits for this piece and cannot be told otherwise.
                eprintln!("offload-mpi-device: {e}");
                mpi.abort(1);
            }
        }
    }
}

/// Every rank-to-rank copy of this rank.
pub struct Peers {
    copier: Sender<Job>,
    queues: HashMap<Key, VecDeque<Transfer>>,
    /// Piece buffers kept for the next pieces.
    pool: Vec<Vec<u8>>,
    /// Copies that ended, with the program's request to answer.
    ended: Vec<(u64, Result<(), CallError>)>,
}

impl Peers {
    /// Starts the copier thread, which works on `worker` and hands what it did to `report`.
    pub fn start(worker: Arc<dyn Backend>, report: impl Fn(Copied) + Send + 'static) -> std::io::Result<Peers> {
        let (copier, jobs) = mpsc::channel::<Job>();
        std::thread::Builder::new().name("omp-mpi-copier".into()).spawn(move || {
            for job in jobs {
                report(match job {
                    Job::Read { key, index, device, addr, mut buf, len } => {
                        let result =
                            worker.read_into(device, addr, &mut buf[..len]).map_err(|e| how_it_ended(&worker, e));
                        Copied::Piece { key, index, buf, result }
                    }
                    Job::Write { key, index, device, addr, buf, len } => {
                        let result = worker.write(device, addr, &buf[..len]).map_err(|e| how_it_ended(&worker, e));
                        Copied::Piece { key, index, buf, result }
                    }
                    Job::Across { id, c: _, direct: Some((src, dst)) } => {
                        // SAFETY: both ranges lie in live allocations of device memory in this
                        // process (checked when the request came: the arena, mapped read-write for
                        // the rank's life, or the devices' own), holding no Rust object; the
                        // program frees neither before this copy is answered.
                        unsafe { std::ptr::copy(src.ptr as *const u8, dst.ptr as *mut u8, src.len.min(dst.len)) };
                        Copied::Across { id, result: Ok(()) }
                    }
                    Job::Across { id, c, direct: None } => {
                        Copied::Across { id, result: across(&worker, c).map_err(|e| how_it_ended(&worker, e)) }
                    }
                });
            }
        })?;
        Ok(Peers { copier, queues: HashMap::new(), pool: Vec::new(), ended: Vec::new() })
    }

    /// Whether a copy is moving (the MPI thread then polls without sleeping).
    pub fn moving(&self) -> bool {
        self.queues.values().any(|q| !q.is_empty())
    }

    /// Request `id`: send (`outgoing`) or receive `copy`; straight from or into `direct`, the
    /// copy's device memory in this process, when the caller found it there.
    pub fn begin(&mut self, mpi: &Mpi, id: u64, outgoing: bool, copy: PeerCopy, direct: Option<DeviceRange>) {
        let key = Key { outgoing, other: copy.other };
        let direct = direct.filter(|r| r.len == copy.len);
        let t = Transfer { id, copy, begun: 0, at_copier: 0, done: 0, failure: None, moving: Vec::new(), direct };
        self.queues.entry(key).or_default().push_back(t);
        self.pump(mpi, key);
    }

    /// Request `id`: a copy between two devices of this rank (answered through [`Copied`]);
    /// `direct` when the caller found both ranges in this process's device memory.
    pub fn across(&mut self, id: u64, c: CopyAcross, direct: Option<(DeviceRange, DeviceRange)>) {
        // The copier lives as long as the sender: this cannot fail.
        let _ = self.copier.send(Job::Across { id, c, direct });
    }

    /// The copier finished piece `index` of the moving copy of `key`.
    pub fn piece(&mut self, mpi: &Mpi, key: Key, index: usize, buf: Vec<u8>, result: Result<(), CallError>) {
        let Some(t) = self.queues.get_mut(&key).and_then(|q| q.front_mut()) else { return };
        t.at_copier -= 1;
        if let Err(e) = result {
            t.fail(e);
        }
        if key.outgoing {
            // Read (pieces come back in order): send it.
            t.send_piece(mpi, index, buf);
        } else {
            t.done += 1;
            recycle(&mut self.pool, buf);
        }
        self.pump(mpi, key);
    }

    /// Completes what MPI finished and starts what may start; returns the requests to answer.
    pub fn progress(&mut self, mpi: &Mpi) -> Vec<(u64, Result<(), CallError>)> {
        let keys: Vec<Key> = self.queues.iter().filter(|(_, q)| !q.is_empty()).map(|(k, _)| *k).collect();
        for key in keys {
            let Some(t) = self.queues.get_mut(&key).and_then(|q| q.front_mut()) else { continue };
            let mut i = 0;
            while i < t.moving.len() {
                let got = if key.outgoing {
                    mpi.test(&mut t.moving[i].0).map(|done| done.then_some(0))
                } else {
                    mpi.test_received(&mut t.moving[i].0)
                };
                let got = match got {
                    Ok(None) => {
                        i += 1;
                        continue;
                    }
                    Ok(Some(n)) => Ok(n),
                    Err(e) => Err(e),
                };
                let (_, buf, index) = t.moving.remove(i);
                let (addr, len) = t.copy.piece(index);
                match got {
                    Ok(_) if key.outgoing => {}
                    // Received into the device's memory: done.
                    Ok(n) if n == len && t.direct.is_some() => {}
                    Ok(n) if n == len && t.failure.is_none() => {
                        t.at_copier += 1;
                        let _ = self.copier.send(Job::Write { key, index, device: t.copy.device, addr, buf, len });
                        continue;
                    }
                    Ok(0) => t.fail(CallError::Failed(format!(
                        "MPI rank {} could not read the copy's source and sent nothing",
                        key.other
                    ))),
                    Ok(n) if n != len => {
                        t.fail(CallError::Failed(format!("MPI rank {} sent {n} bytes for a piece of {len}", key.other)))
                    }
                    Ok(_) => {}
                    Err(e) => t.fail(CallError::Failed(e)),
                }
                t.done += 1;
                recycle(&mut self.pool, buf);
            }
            self.pump(mpi, key);
        }
        std::mem::take(&mut self.ended)
    }

    /// Begins the oldest copy's next pieces, in order, and ends it when every piece is done.
    fn pump(&mut self, mpi: &Mpi, key: Key) {
        let Some(q) = self.queues.get_mut(&key) else { return };
        while let Some(t) = q.front_mut() {
            let depth = if t.direct.is_some() { DIRECT_DEPTH } else { DEPTH };
            while t.begun < t.copy.pieces() && t.begun - t.done < depth {
                let index = t.begun;
                let (addr, len) = t.copy.piece(index);
                if key.outgoing && t.failure.is_some() && t.at_copier > 0 {
                    // Pieces still being read are sent first: pieces go out in order.
                    break;
                }
                t.begun += 1;
                if let Some(range) = t.direct {
                    let part = t.part(range, index);
                    // SAFETY: the piece lies in a live allocation of device memory in this
                    // process (checked when the copy began: the arena, mapped read-write for
                    // the rank's life, or the rank's own devices' memory); the program does
                    // not use or free it before this copy is answered.
                    let started = unsafe {
                        if key.outgoing {
                            mpi.isend(part.ptr as *const u8, part.len, key.other, TAG_PEER)
                        } else {
                            mpi.irecv(part.ptr as *mut u8, part.len, key.other, TAG_PEER)
                        }
                    };
                    match started {
                        Ok(r) => t.moving.push((r, Vec::new(), index)),
                        Err(e) => {
                            // The other side waits for this piece and cannot be told otherwise.
                            eprintln!("offload-mpi-device: {e}");
                            mpi.abort(1);
                        }
                    }
                    continue;
                }
                let mut buf = self.pool.pop().unwrap_or_else(|| vec![0u8; PIECE]);
                if key.outgoing {
                    if t.failure.is_some() {
                        t.send_piece(mpi, index, buf);
                    } else {
                        t.at_copier += 1;
                        let _ = self.copier.send(Job::Read { key, index, device: t.copy.device, addr, buf, len });
                    }
                    continue;
                }
                // SAFETY: `buf` (PIECE bytes) is kept in `moving` until the receive completes.
                match unsafe { mpi.irecv(buf.as_mut_ptr(), len, key.other, TAG_PEER) } {
                    Ok(r) => t.moving.push((r, buf, index)),
                    Err(e) => {
                        // The sender's piece can never be taken: the ranks are out of step.
                        eprintln!("offload-mpi-device: {e}");
                        mpi.abort(1);
                    }
                }
            }
            if t.done < t.copy.pieces() {
                return;
            }
            let t = q.pop_front().expect("the front");
            self.ended.push((t.id, t.failure.map_or(Ok(()), Err)));
        }
    }
}

/// A copy that found the worker gone learns how it ended (its reader thread reaps it a
/// moment later: a second at most).
fn how_it_ended(worker: &Arc<dyn Backend>, e: CallError) -> CallError {
    let CallError::Died(gone) = e else { return e };
    let start = Instant::now();
    loop {
        if let Some(how) = worker.died() {
            return CallError::Died(how);
        }
        if start.elapsed() > Duration::from_secs(1) {
            return CallError::Died(gone);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Keeps a piece buffer for the next pieces (a direct piece's empty one is dropped).
fn recycle(pool: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
    if buf.len() == PIECE && pool.len() < 2 * DEPTH {
        pool.push(buf);
    }
}

/// A copy between two devices of one worker, through a buffer of this rank.
fn across(worker: &Arc<dyn Backend>, c: CopyAcross) -> Result<(), CallError> {
    let mut buf = vec![0u8; c.len.min(PIECE)];
    for at in (0..c.len).step_by(PIECE) {
        let n = PIECE.min(c.len - at);
        worker.read_into(c.from, c.src + at as u64, &mut buf[..n])?;
        worker.write(c.to, c.dst + at as u64, &buf[..n])?;
    }
    Ok(())
}
