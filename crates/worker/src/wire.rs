//! The framing between a parent and its worker (a pipe pair, both ends ours):
//! `u32 length | u64 request id | u8 op-or-status | payload`, little-endian, where `length`
//! counts the id, the tag and the payload. One reader serves both directions; each side
//! passes the largest frame it accepts.

use std::io::{self, Read, Write};

pub const OP_LOAD: u8 = 1;
pub const OP_SYMBOL: u8 = 2;
pub const OP_ALLOC: u8 = 3;
pub const OP_FREE: u8 = 4;
pub const OP_LAUNCH: u8 = 5;
pub const OP_WRITE: u8 = 6;
pub const OP_READ: u8 = 7;
pub const OP_COPY: u8 = 8;

pub const STATUS_OK: u8 = 0;
pub const STATUS_ERR: u8 = 1;
/// Unsolicited frames (request id 0) from the worker: what its code wrote to fd 1 and fd 2.
pub const OUT_STDOUT: u8 = 2;
pub const OUT_STDERR: u8 = 3;

/// The worker's descriptor for the parent's doorbell (named by `OMP_WORKER_DOORBELL`): one
/// byte per request sent while other requests are outstanding.
pub const DOORBELL_FD: i32 = 5;

/// The worker's descriptors for its output pipes, made by the parent (named by
/// `OMP_WORKER_CAPTURE`): the read ends of its stdout and stderr pipes, then their write ends
/// (which become its fd 1 and 2). The parent keeps the read ends too, to take what a worker
/// that died had not forwarded.
pub const CAPTURE_FDS: [i32; 4] = [6, 7, 8, 9];

/// Bytes of a frame's length-counted header (request id and tag).
const HEAD: usize = 9;

/// Largest request frame a worker accepts (an image, or a chunk of a relayed copy).
pub const MAX_REQUEST_FRAME: usize = 1 << 31;

/// Largest reply frame the parent accepts: a worker runs client code, so what it sends is
/// bounded by what was asked ([`MAX_READ`] bytes of data at most) plus room for a message.
pub const MAX_REPLY_FRAME: usize = MAX_READ + (64 << 10);

/// Largest single relayed read.
pub const MAX_READ: usize = 64 << 20;

/// One frame: request id, op (or status) and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub id: u64,
    pub tag: u8,
    pub payload: Vec<u8>,
}

/// Writes one frame and flushes it.
pub fn write_frame(w: &mut impl Write, id: u64, tag: u8, payload: &[&[u8]]) -> io::Result<()> {
    let body: usize = payload.iter().map(|p| p.len()).sum();
    let len = body
        .checked_add(HEAD)
        .and_then(|l| u32::try_from(l).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut head = [0u8; 4 + HEAD];
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[4..12].copy_from_slice(&id.to_le_bytes());
    head[12] = tag;
    if body <= 4096 {
        // One write for small frames: latency of launches and control requests.
        let mut buf = Vec::with_capacity(head.len() + body);
        buf.extend_from_slice(&head);
        payload.iter().for_each(|p| buf.extend_from_slice(p));
        w.write_all(&buf)?;
    } else {
        w.write_all(&head)?;
        for p in payload {
            w.write_all(p)?;
        }
    }
    w.flush()
}

/// Reads one frame of at most `max` bytes (as counted by its length field); `Ok(None)` at a
/// clean end of stream (no byte of a next frame). A length outside `9..=max` is an error,
/// found before anything is allocated; so is a stream that ends inside a frame.
pub fn read_frame(r: &mut impl Read, max: usize) -> io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream ended inside a frame header")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if !(HEAD..=max).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad frame length {len} (at most {max} accepted)"),
        ));
    }
    let mut head = [0u8; HEAD];
    r.read_exact(&mut head)?;
    let mut payload = vec![0u8; len - HEAD];
    r.read_exact(&mut payload)?;
    let mut id = [0u8; 8];
    id.copy_from_slice(&head[..8]);
    Ok(Some(Frame { id: u64::from_le_bytes(id), tag: head[8], payload }))
}

/// Little-endian payload builder.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

/// Little-endian payload reader; every read is bounds-checked.
pub struct Dec<'a>(pub &'a [u8]);

impl<'a> Dec<'a> {
    fn take<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        if self.0.len() < N {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "short payload"));
        }
        let (a, b) = self.0.split_at(N);
        self.0 = b;
        let mut out = [0u8; N];
        out.copy_from_slice(a);
        Ok(out)
    }
    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take::<1>()?[0])
    }
    pub fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    pub fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
    /// Fails unless everything was read.
    pub fn end(&self) -> io::Result<()> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::InvalidData, format!("{} unexpected trailing bytes", self.0.len())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 7, OP_ALLOC, &[&Enc::default().u32(1).u64(4096).0]).unwrap();
        write_frame(&mut buf, 8, STATUS_OK, &[]).unwrap();
        let big = vec![5u8; 10_000];
        write_frame(&mut buf, 9, OP_WRITE, &[&[1, 2], &big]).unwrap();
        let mut r = &buf[..];
        let f = read_frame(&mut r, 1 << 20).unwrap().unwrap();
        assert_eq!((f.id, f.tag), (7, OP_ALLOC));
        let mut d = Dec(&f.payload);
        assert_eq!((d.u32().unwrap(), d.u64().unwrap()), (1, 4096));
        assert!(d.end().is_ok());
        assert!(d.u8().is_err());
        let f = read_frame(&mut r, 1 << 20).unwrap().unwrap();
        assert_eq!((f.id, f.tag, f.payload.len()), (8, STATUS_OK, 0));
        let f = read_frame(&mut r, 1 << 20).unwrap().unwrap();
        assert_eq!((f.id, f.payload.len(), f.payload[..2].to_vec()), (9, 10_002, vec![1, 2]));
        assert!(read_frame(&mut r, 1 << 20).unwrap().is_none());
    }

    #[test]
    fn the_cap_is_checked_before_anything_is_allocated() {
        // A frame announcing 2 GiB, followed by nothing: refused from its length alone.
        let mut huge = ((1u32 << 31) - 1).to_le_bytes().to_vec();
        huge.extend_from_slice(&[0; 9]);
        let e = read_frame(&mut &huge[..], MAX_REPLY_FRAME).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("bad frame length"), "{e}");
        // Exactly at the cap is accepted, one byte over is not.
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, STATUS_OK, &[&[0u8; 91]]).unwrap();
        assert!(read_frame(&mut &buf[..], 100).unwrap().is_some());
        assert!(read_frame(&mut &buf[..], 99).is_err());
        // Shorter than the id and tag.
        let bad = [3u8, 0, 0, 0, 1, 2, 3];
        assert!(read_frame(&mut &bad[..], MAX_REPLY_FRAME).is_err());
    }

    #[test]
    fn a_stream_cut_inside_a_frame_is_an_error_not_an_end() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 1, STATUS_OK, &[&[7u8; 32]]).unwrap();
        for cut in 1..buf.len() {
            let r = read_frame(&mut &buf[..cut], MAX_REPLY_FRAME);
            assert!(r.is_err(), "cut at {cut}: {r:?}");
        }
        assert!(read_frame(&mut &buf[..0], MAX_REPLY_FRAME).unwrap().is_none());
    }
}
