//! Deterministic fuzzing of the byte parsers: random buffers and mutations of valid ones must
//! give `Ok` or `Err`, never a panic or an out-of-bounds read. (A coverage-guided harness for
//! the same functions lives in `fuzz/`.)

use omp_format::{elf, entries, offload_binary, OffloadBinary};

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn exercise(buf: &[u8]) {
    let _ = OffloadBinary::parse(buf);
    let _ = OffloadBinary::parse_all(buf);
    let _ = entries::parse_entry_table(buf);
    let _ = elf::header(buf);
}

#[test]
fn random_buffers() {
    let mut r = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..20_000 {
        let len = r.below(300);
        let mut buf: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        if len >= 4 && r.below(2) == 0 {
            buf[..4].copy_from_slice(&offload_binary::MAGIC);
        }
        exercise(&buf);
    }
}

#[test]
fn mutated_offload_binaries() {
    let valid = offload_binary::write(
        offload_binary::ImageKind::Object,
        offload_binary::OffloadKind::OpenMp,
        &[("triple", "x86_64-pc-linux-gnu"), ("arch", "generic")],
        b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\x3e\0",
    );
    assert!(OffloadBinary::parse(&valid).is_ok());
    let mut r = XorShift(42);
    for _ in 0..20_000 {
        let mut buf = valid.clone();
        for _ in 0..1 + r.below(4) {
            let i = r.below(buf.len());
            buf[i] = r.next() as u8;
        }
        if r.below(4) == 0 {
            buf.truncate(r.below(buf.len()));
        }
        exercise(&buf);
        let mut twice = buf.clone();
        twice.extend_from_slice(&valid);
        exercise(&twice);
    }
}
