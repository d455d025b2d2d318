//! A device rank's bulk copies that skip its buffers and its worker (docs/cluster.md, "Copies"):
//! the devices allocate from the arena the rank shares with its worker, or in process from
//! the rank's own devices ([`DeviceMemory`]), and a write's bytes are received, a read's sent,
//! straight there, once the range from the wire was found inside one live allocation of the
//! device it names. Everything else (no arena, a global, an allocation the worker made) goes
//! the old way, through a buffer and the request handling.

use super::{Incoming, Read, Serve};
use crate::direct::{DeviceMemory, DeviceRange};
use crate::proto;
use omp_plugin_isolate::arena::Arena;
use omp_worker::{wire, CallError, Request, Response, Worker};

/// How long a free waits for the sends of a read from the memory it frees.
const SEND_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The arena as the devices' memory, once the worker has said it mapped it (any reply comes
/// after it did or could not).
pub(super) fn shared_memory(worker: &Worker, arena: Option<Arena>, devices: u32) -> Option<DeviceMemory> {
    let arena = arena?;
    let _ = worker.call(&Request::Free { device: 0, addr: 0 });
    arena.acknowledged().then(|| DeviceMemory::new(arena, devices))
}

impl Serve {
    /// An allocation or free of device memory the rank holds itself; `None` for every other
    /// request, and for those the worker answers (no arena; a device the rank does not have;
    /// a full arena; an address the arena did not give out).
    pub(super) fn memory_request(&mut self, op: u8, payload: &[u8]) -> Option<Result<Response, CallError>> {
        let memory = self.memory.as_mut()?;
        if op != wire::OP_ALLOC && op != wire::OP_FREE {
            return None;
        }
        let mut d = wire::Dec(payload);
        let (device, value) = (d.u32().ok()?, d.u64().ok()?);
        d.end().ok()?;
        if op == wire::OP_ALLOC {
            let addr = memory.alloc(device, usize::try_from(value).ok()?)?;
            return Some(Ok(Response::Addr(addr as u64)));
        }
        let addr = usize::try_from(value).ok()?;
        if let Some(freed) = memory.allocation(device, addr) {
            self.finish_reads_from(freed);
        }
        self.memory.as_mut()?.free(device, addr).then_some(Ok(Response::Done))
    }

    /// Waits until no read's piece is being sent from `range` (memory about to be freed): the
    /// program has received them all before it frees, but MPI may complete a send here a
    /// moment after its receive completed there. A send that has not completed in
    /// [`SEND_LIMIT`] will not (the program never took the read), and the memory cannot be
    /// freed under it: the job ends, saying so, rather than hang.
    fn finish_reads_from(&mut self, range: DeviceRange) {
        let start = std::time::Instant::now();
        while self.reads.iter().any(|r| r.source.is_some_and(|s| s.overlaps(&range))) {
            if start.elapsed() > SEND_LIMIT {
                eprintln!(
                    "offload-mpi-device: the program freed device memory that a read of it is still being sent \
                     from ({} s after it asked); ending the job",
                    SEND_LIMIT.as_secs()
                );
                self.mpi.abort(1);
            }
            self.finish_reads();
            std::thread::yield_now();
        }
    }

    /// Where `[addr, addr+len)` of `device` lies in this rank's memory, when MPI may move it
    /// there directly: inside one live allocation of that device in its memory here, the
    /// worker (if any) alive.
    pub(super) fn direct_range(&self, device: u32, addr: u64, len: usize) -> Option<DeviceRange> {
        let range = self.memory.as_ref()?.range(device, addr, len)?;
        // A lost device's memory is not used again (its copies fail the old way, naming how
        // the worker ended).
        self.worker.died().is_none().then_some(range)
    }

    /// A write of request `id` received straight into device memory.
    pub(super) fn receive_direct(&mut self, id: u64, device: u32, addr: u64, range: DeviceRange) {
        // SAFETY: `range` lies inside a live allocation of device memory in this process (the
        // arena, mapped read-write for the rank's life, or the devices' own); the program
        // waits for this write's reply, sent once the receive completed, before it uses or
        // frees that memory.
        match unsafe { self.mpi.irecv(range.ptr as *mut u8, range.len, self.program, proto::TAG_TO_DEVICE) } {
            Ok(req) => self.writes.push(Incoming { req, id, device, addr, buf: None, len: range.len }),
            Err(e) => {
                eprintln!("offload-mpi-device: {e}");
                self.mpi.abort(1);
            }
        }
    }

    /// Answers read `id`, then sends its `len` bytes in pieces ([`proto::pieces`]): from
    /// `buf`, or with `source`, straight from device memory in this process.
    pub(super) fn send_read(&mut self, id: u64, buf: Vec<u8>, len: usize, source: Option<DeviceRange>) {
        self.send(proto::message(id, wire::STATUS_OK, &[]));
        let base = source.map_or(buf.as_ptr(), |s| s.ptr as *const u8);
        let mut pieces = Vec::new();
        for (at, n) in proto::pieces(len) {
            // SAFETY: `buf` (at least `len` bytes) is kept in `reads` until every piece's send
            // completed, and not touched meanwhile; or `source`, `len` bytes inside a live
            // allocation of device memory mapped in this process, which is not freed before
            // those sends completed (`finish_reads_from`).
            match unsafe { self.mpi.isend(base.add(at), n, self.program, proto::TAG_TO_PROGRAM) } {
                Ok(req) => pieces.push(req),
                Err(e) => {
                    eprintln!("offload-mpi-device: cannot answer the program: {e}");
                    self.mpi.abort(1);
                }
            }
        }
        self.reads.push(Read { pieces, buf, source });
    }

    /// Reads whose pieces were all sent give their buffers back.
    pub(super) fn finish_reads(&mut self) {
        let mut i = 0;
        while i < self.reads.len() {
            let mpi = &self.mpi;
            self.reads[i].pieces.retain_mut(|r| !mpi.test(r).unwrap_or(true));
            if self.reads[i].pieces.is_empty() {
                let read = self.reads.swap_remove(i);
                self.recycle(read.buf);
            } else {
                i += 1;
            }
        }
    }
}
