//! What the client accepts from a server. A server is a program on another machine: its
//! announcements are capped and every transfer is checked byte for byte, so a faulty or
//! hostile server can fail a call but never hang the program or leave stale bytes behind.

use omp_remote_proto::pb::HelloReply;

/// Most devices one server may announce (the server's own `--devices` limit).
pub const MAX_DEVICES: u32 = 64;

/// Checks a server's `Hello` reply; the error says what is wrong with it.
pub fn hello(h: &HelloReply) -> Result<(), String> {
    if h.protocol_version != omp_remote_proto::PROTOCOL_VERSION {
        return Err(format!(
            "the server speaks protocol {}, this runtime {}",
            h.protocol_version,
            omp_remote_proto::PROTOCOL_VERSION
        ));
    }
    if h.pointer_width != usize::BITS || h.little_endian != cfg!(target_endian = "little") {
        return Err("the server's pointer width or byte order differs from this machine's".into());
    }
    if h.num_devices > MAX_DEVICES {
        return Err(format!("the server announces {} devices; at most {MAX_DEVICES} are accepted", h.num_devices));
    }
    Ok(())
}

/// A device-to-host transfer being received: chunks must arrive in order, each starting
/// where the previous one ended, none empty, none past the end, so that every byte of
/// `[0, size)` is written exactly once when [`Assembly::finish`] succeeds.
#[derive(Debug)]
pub struct Assembly {
    size: usize,
    got: usize,
}

impl Assembly {
    pub fn new(size: usize) -> Self {
        Self { size, got: 0 }
    }

    /// Accepts a chunk of `len` bytes at `offset`, or says why not.
    pub fn accept(&mut self, offset: u64, len: usize) -> Result<(), String> {
        let end = usize::try_from(offset).ok().and_then(|o| o.checked_add(len));
        match end {
            Some(end) if end > self.size => {
                Err(format!("the server sent bytes {offset}..{end}, outside the {} requested", self.size))
            }
            None => Err(format!("the server sent a chunk at offset {offset}, outside the {} requested", self.size)),
            _ if offset != self.got as u64 => Err(format!(
                "the server sent bytes from offset {offset} where {} was next (a chunk repeated, skipped or out of order)",
                self.got
            )),
            _ if len == 0 => Err(format!("the server sent an empty chunk at offset {offset}")),
            Some(end) => {
                self.got = end;
                Ok(())
            }
        }
    }

    /// Succeeds when every byte arrived.
    pub fn finish(&self) -> Result<(), String> {
        if self.got == self.size {
            Ok(())
        } else {
            Err(format!("the transfer ended after {} of {} bytes", self.got, self.size))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*: deterministic, so a failure replays.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
    }

    /// Replays `chunks` into a buffer the way the client does (copy only what was
    /// accepted); returns the buffer if the transfer was accepted.
    fn receive(size: usize, chunks: &[(u64, Vec<u8>)]) -> Option<Vec<u8>> {
        let mut buf = vec![0xEEu8; size];
        let mut a = Assembly::new(size);
        for (off, data) in chunks {
            a.accept(*off, data.len()).ok()?;
            buf[*off as usize..*off as usize + data.len()].copy_from_slice(data);
        }
        a.finish().ok()?;
        Some(buf)
    }

    #[test]
    fn an_honest_server_is_accepted_with_any_chunking() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let size = rng.below(5000) as usize;
            let want: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
            let mut chunks = Vec::new();
            let mut off = 0;
            while off < size {
                let n = 1 + rng.below((size - off) as u64) as usize;
                chunks.push((off as u64, want[off..off + n].to_vec()));
                off += n;
            }
            assert_eq!(receive(size, &chunks).as_deref(), Some(&want[..]), "{size} in {} chunks", chunks.len());
        }
    }

    /// A server's replies, mutated at random: repeated, dropped, swapped, resized, moved,
    /// emptied chunks. Whenever the client accepts, every byte was written exactly once.
    #[test]
    fn a_faulty_server_never_leaves_stale_bytes() {
        let mut rng = Rng(0xdead_beef_cafe_f00d);
        let (mut accepted, mut refused) = (0, 0);
        for _ in 0..20_000 {
            let size = 1 + rng.below(4096) as usize;
            let mut chunks: Vec<(u64, usize)> = Vec::new();
            let mut off = 0;
            while off < size {
                let n = 1 + rng.below(1024.min((size - off) as u64)) as usize;
                chunks.push((off as u64, n));
                off += n;
            }
            for _ in 0..=rng.below(3) {
                if chunks.is_empty() {
                    break;
                }
                let i = rng.below(chunks.len() as u64) as usize;
                match rng.below(8) {
                    0 => chunks.insert(i, chunks[i]),
                    1 => {
                        chunks.remove(i);
                    }
                    2 => {
                        let j = rng.below(chunks.len() as u64) as usize;
                        chunks.swap(i, j);
                    }
                    3 => chunks[i].0 = chunks[i].0.wrapping_add(rng.below(9)).wrapping_sub(4),
                    4 => chunks[i].1 = rng.below(chunks[i].1 as u64) as usize,
                    5 => chunks[i].1 += 1 + rng.below(3) as usize,
                    6 => chunks[i].0 = u64::MAX - rng.below(4),
                    _ => chunks.push((rng.below(size as u64 * 2), rng.below(16) as usize)),
                }
            }
            // The client's loop: a chunk is copied only once accepted.
            let mut writes = vec![0u32; size];
            let mut a = Assembly::new(size);
            let ok = chunks.iter().all(|&(off, n)| {
                a.accept(off, n).is_ok_and(|()| {
                    writes[off as usize..off as usize + n].iter_mut().for_each(|w| *w += 1);
                    true
                })
            }) && a.finish().is_ok();
            if ok {
                assert!(writes.iter().all(|&w| w == 1), "accepted {chunks:?} for {size} bytes");
                accepted += 1;
            } else {
                refused += 1;
            }
        }
        // Mutations that keep the transfer intact (a swap with itself) exist; most do not.
        assert!(refused > accepted && accepted > 0, "{accepted} accepted, {refused} refused");
    }

    #[test]
    fn the_two_reported_cases() {
        // A repeated chunk and a skipped one: same byte count, stale bytes before the fix.
        let c = |o: u64| (o, vec![1u8; 100]);
        assert!(receive(300, &[c(0), c(100), c(100)]).is_none());
        assert!(receive(300, &[c(0), c(200), c(100)]).is_none());
        assert!(receive(300, &[c(0), c(100), c(200)]).is_some());
    }

    #[test]
    fn hello_announcements_are_capped() {
        let ok = HelloReply {
            protocol_version: omp_remote_proto::PROTOCOL_VERSION,
            num_devices: 4,
            pointer_width: usize::BITS,
            little_endian: cfg!(target_endian = "little"),
            ..Default::default()
        };
        assert!(hello(&ok).is_ok());
        let e = hello(&HelloReply { num_devices: 100_000_000, ..ok.clone() }).unwrap_err();
        assert!(e.contains("100000000 devices"), "{e}");
        assert!(hello(&HelloReply { num_devices: MAX_DEVICES, ..ok.clone() }).is_ok());
        assert!(hello(&HelloReply { pointer_width: 32, ..ok.clone() }).is_err());
        assert!(hello(&HelloReply { protocol_version: 0, ..ok.clone() }).is_err());
        let mut rng = Rng(7);
        for _ in 0..10_000 {
            let h = HelloReply {
                protocol_version: [omp_remote_proto::PROTOCOL_VERSION, rng.next() as u32][rng.below(2) as usize],
                num_devices: rng.next() as u32 >> rng.below(32),
                pointer_width: [64, 32, rng.next() as u32][rng.below(3) as usize],
                little_endian: rng.below(2) == 0,
                ..ok.clone()
            };
            if hello(&h).is_ok() {
                assert!(h.num_devices <= MAX_DEVICES && h.pointer_width == usize::BITS, "{h:?}");
            }
        }
    }
}
