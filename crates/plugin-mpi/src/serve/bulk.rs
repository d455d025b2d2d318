//! A device rank's bulk copies that skip its buffers and its worker (docs/cluster.md, "Copies"):
//! the devices allocate from the arena the rank shares with its worker ([`DeviceMemory`]), and
//! a write's bytes are received, a read's sent, straight there, once the range from the wire
//! was found inside one live allocation of the device it names. Everything else (no arena, a
//! global, an allocation the worker made) goes the old way, through a buffer and the worker.

use super::{Incoming, Serve};
use crate::direct::{DeviceMemory, DeviceRange};
use crate::proto;
use omp_plugin_isolate::arena::Arena;
use omp_worker::{wire, CallError, Request, Response, Worker};

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
        memory.free(device, usize::try_from(value).ok()?).then_some(Ok(Response::Done))
    }

    /// Where `[addr, addr+len)` of `device` lies in this rank's memory, when MPI may move it
    /// there directly: inside one live allocation of that device in the arena, the worker alive.
    pub(super) fn direct_range(&self, device: u32, addr: u64, len: usize) -> Option<DeviceRange> {
        let range = self.memory.as_ref()?.range(device, addr, len)?;
        // A lost device's memory is not used again (its copies fail the old way, naming how
        // the worker ended).
        self.worker.died().is_none().then_some(range)
    }

    /// A write of request `id` received straight into device memory.
    pub(super) fn receive_direct(&mut self, id: u64, device: u32, addr: u64, range: DeviceRange) {
        // SAFETY: `range` lies inside a live allocation of the arena, mapped read-write in
        // this process for the rank's life; the program waits for this write's reply, sent
        // once the receive completed, before it uses or frees that memory.
        match unsafe { self.mpi.irecv(range.ptr as *mut u8, range.len, self.program, proto::TAG_TO_DEVICE) } {
            Ok(req) => self.writes.push(Incoming { req, id, device, addr, buf: None, len: range.len }),
            Err(e) => {
                eprintln!("offload-mpi-device: {e}");
                self.mpi.abort(1);
            }
        }
    }

    /// Answers read `id`, then sends its `len` bytes from `buf` in pieces ([`proto::pieces`]);
    /// with `source`, its device memory here, each piece is first copied from there, so the
    /// first pieces travel while the next are gathered.
    ///
    /// The copy into `buf` is there because MPI's receiver on this node reads the bytes out of
    /// this process (Open MPI's `process_vm_readv`), which the kernel does at a third of the
    /// speed from shared memory (the arena) into private memory (the program's buffer) as from
    /// private memory (measured: docs/cluster.md, "Copies"). A write needs no such copy: the
    /// rank reads the program's buffer into its own memory.
    pub(super) fn send_read(&mut self, id: u64, mut buf: Vec<u8>, len: usize, source: Option<DeviceRange>) {
        self.send(proto::message(id, wire::STATUS_OK, &[]));
        let base = buf.as_mut_ptr();
        let mut pieces = Vec::new();
        for (at, n) in proto::pieces(len) {
            if let Some(src) = source {
                // SAFETY: `src` lies inside a live allocation of the arena (at least `len`
                // bytes), mapped in this process for the rank's life; `buf` holds at least
                // `len` bytes, none of them sent yet past `at`.
                unsafe { std::ptr::copy_nonoverlapping((src.ptr + at) as *const u8, base.add(at), n) };
            }
            // SAFETY: `buf` is kept in `reads` until every piece's send completed, and not
            // touched meanwhile.
            match unsafe { self.mpi.isend(base.add(at), n, self.program, proto::TAG_TO_PROGRAM) } {
                Ok(req) => pieces.push(req),
                Err(e) => {
                    eprintln!("offload-mpi-device: cannot answer the program: {e}");
                    self.mpi.abort(1);
                }
            }
        }
        self.reads.push((pieces, buf));
    }

    /// Reads whose pieces were all sent give their buffers back.
    pub(super) fn finish_reads(&mut self) {
        let mut i = 0;
        while i < self.reads.len() {
            let mpi = &self.mpi;
            self.reads[i].0.retain_mut(|r| !mpi.test(r).unwrap_or(true));
            if self.reads[i].0.is_empty() {
                let (_, buf) = self.reads.swap_remove(i);
                self.recycle(buf);
            } else {
                i += 1;
            }
        }
    }
}
