//! The order between a device's streams: which writes to device memory are still in flight
//! on which queue, and what a later operation on another stream has to wait for.
//!
//! Work on one stream runs in order; two streams are unordered (all of ours are
//! non-blocking). As LLVM orders an asynchronous copy of a mapping before its use through
//! another `AsyncInfo` with an event, every asynchronous write to device memory on a queue (a
//! copy, a fill, a kernel) is followed by an event recorded on the queue's stream, and an
//! operation on another stream that touches the written range first makes its stream wait
//! for that event (`cuStreamWaitEvent`): ordered on the device, the host never blocks. A
//! queue's events are released when it is synchronised. Pure bookkeeping: the device makes
//! the driver calls.
//!
//! Only writes are tracked (read-after-write and write-after-write); a write that may
//! overwrite what an asynchronous read on another queue has yet to read is the program's
//! race, as it is with LLVM's runtime.

use omp_plugin::QueueId;

/// The device memory an operation touches: a range, or all of it (a kernel, whose
/// arguments may point anywhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touches {
    Range { begin: usize, end: usize },
    Everything,
}

impl Touches {
    /// `[addr, addr+size)`.
    pub fn range(addr: usize, size: usize) -> Touches {
        Touches::Range { begin: addr, end: addr.saturating_add(size) }
    }

    fn overlaps(self, other: Touches) -> bool {
        match (self, other) {
            (Touches::Range { begin: a, end: b }, Touches::Range { begin: c, end: d }) => a < d && c < b,
            _ => true,
        }
    }
}

/// A write enqueued on a queue and not yet known to be done, with the event recorded after it.
#[derive(Debug)]
struct PendingWrite {
    queue: QueueId,
    touches: Touches,
    event: usize,
}

/// A queue made by `create_queue`: its stream and the launch environments to free once
/// the stream is done.
#[derive(Debug)]
struct Queue {
    stream: usize,
    frees: Vec<usize>,
}

/// The queues of one device and the writes in flight on them.
#[derive(Debug, Default)]
pub struct Streams {
    /// `QueueId(i + 1)` is `queues[i]`.
    queues: Vec<Queue>,
    writes: Vec<PendingWrite>,
}

impl Streams {
    /// Adds a queue on `stream`.
    pub fn add(&mut self, stream: usize) -> QueueId {
        self.queues.push(Queue { stream, frees: Vec::new() });
        QueueId(self.queues.len())
    }

    /// The stream of `queue`, `None` for `QueueId::SYNC` and for a queue that is not ours.
    pub fn stream(&self, queue: QueueId) -> Option<usize> {
        self.queues.get(queue.0.wrapping_sub(1)).map(|q| q.stream)
    }

    /// Keeps device memory of a launch on `queue` until the queue is synchronised.
    pub fn free_after(&mut self, queue: QueueId, ptrs: Vec<usize>) {
        if let Some(q) = self.queues.get_mut(queue.0.wrapping_sub(1)) {
            q.frees.extend(ptrs);
        }
    }

    /// The events an operation on `queue` that touches `touches` must wait for: those of
    /// every overlapping write on another queue.
    pub fn waits(&self, queue: QueueId, touches: Touches) -> Vec<usize> {
        self.writes.iter().filter(|w| w.queue != queue && w.touches.overlaps(touches)).map(|w| w.event).collect()
    }

    /// Notes a write enqueued on `queue`, followed by `event`.
    pub fn wrote(&mut self, queue: QueueId, touches: Touches, event: usize) {
        self.writes.push(PendingWrite { queue, touches, event });
    }

    /// Once `queue` is synchronised: its events to destroy and the memory to free.
    pub fn done(&mut self, queue: QueueId) -> (Vec<usize>, Vec<usize>) {
        let mut events = Vec::new();
        self.writes.retain(|w| {
            let mine = w.queue == queue;
            if mine {
                events.push(w.event);
            }
            !mine
        });
        let frees = self.queues.get_mut(queue.0.wrapping_sub(1)).map(|q| std::mem::take(&mut q.frees));
        (events, frees.unwrap_or_default())
    }

    /// Everything, at the device's end: the streams to destroy and the events to release.
    pub fn drain(&mut self) -> (Vec<usize>, Vec<usize>) {
        let events = self.writes.drain(..).map(|w| w.event).collect();
        (self.queues.drain(..).map(|q| q.stream).collect(), events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_operation_waits_only_for_overlapping_writes_of_other_queues() {
        let mut s = Streams::default();
        let (q1, q2) = (s.add(0x100), s.add(0x200));
        assert_eq!((s.stream(q1), s.stream(q2), s.stream(QueueId::SYNC)), (Some(0x100), Some(0x200), None));
        s.wrote(q1, Touches::range(1000, 100), 1);
        s.wrote(q1, Touches::range(5000, 8), 2);
        s.wrote(q2, Touches::Everything, 3);
        assert_eq!(s.waits(q2, Touches::range(1050, 10)), vec![1], "its own kernel is ordered by the stream");
        assert_eq!(s.waits(q2, Touches::range(1100, 10)), Vec::<usize>::new(), "[1000, 1100) ends before 1100");
        assert_eq!(s.waits(QueueId::SYNC, Touches::range(0, 8)), vec![3], "a kernel may have written anything");
        assert_eq!(s.waits(QueueId::SYNC, Touches::Everything), vec![1, 2, 3]);
    }

    #[test]
    fn synchronising_a_queue_releases_its_events_and_launch_memory_only() {
        let mut s = Streams::default();
        let (q1, q2) = (s.add(0x100), s.add(0x200));
        s.wrote(q1, Touches::range(0, 8), 1);
        s.wrote(q2, Touches::range(0, 8), 2);
        s.free_after(q1, vec![0xdead]);
        assert_eq!(s.done(q1), (vec![1], vec![0xdead]));
        assert_eq!(s.waits(QueueId::SYNC, Touches::Everything), vec![2]);
        assert_eq!(s.done(q1), (vec![], vec![]), "nothing twice");
        assert_eq!(s.drain(), (vec![0x100, 0x200], vec![2]));
    }
}
