//! The framing between the server and a session's worker process (a pipe pair, both ends
//! ours): `u32 length | u64 request id | u8 op-or-status | payload`, little-endian.

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

/// Largest frame either side accepts (an image, or a chunk of a fallback transfer).
pub const MAX_FRAME: usize = 1 << 31;

/// One frame: request id, op (or status) and payload.
pub struct Frame {
    pub id: u64,
    pub tag: u8,
    pub payload: Vec<u8>,
}

pub fn write_frame(w: &mut impl Write, id: u64, tag: u8, payload: &[&[u8]]) -> io::Result<()> {
    let body: usize = payload.iter().map(|p| p.len()).sum();
    let len = u32::try_from(9 + body).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut head = [0u8; 13];
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[4..12].copy_from_slice(&id.to_le_bytes());
    head[12] = tag;
    if body <= 4096 {
        // One write for small frames: latency of launches and control requests.
        let mut buf = Vec::with_capacity(13 + body);
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

/// [`read_frame`] for the server's asynchronous side.
pub async fn read_frame_async(r: &mut (impl tokio::io::AsyncRead + Unpin)) -> io::Result<Option<Frame>> {
    use tokio::io::AsyncReadExt;
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if !(9..=MAX_FRAME).contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("bad frame length {len}")));
    }
    let mut head = [0u8; 9];
    r.read_exact(&mut head).await?;
    let mut payload = vec![0u8; len - 9];
    r.read_exact(&mut payload).await?;
    Ok(Some(Frame { id: u64::from_le_bytes(head[..8].try_into().unwrap()), tag: head[8], payload }))
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Frame>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if !(9..=MAX_FRAME).contains(&len) {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("bad frame length {len}")));
    }
    let mut head = [0u8; 9];
    r.read_exact(&mut head)?;
    let mut payload = vec![0u8; len - 9];
    r.read_exact(&mut payload)?;
    Ok(Some(Frame { id: u64::from_le_bytes(head[..8].try_into().unwrap()), tag: head[8], payload }))
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
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "short payload"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    pub fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_garbage() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 7, OP_ALLOC, &[&Enc::default().u32(1).u64(4096).0]).unwrap();
        write_frame(&mut buf, 8, STATUS_OK, &[]).unwrap();
        let mut r = &buf[..];
        let f = read_frame(&mut r).unwrap().unwrap();
        assert_eq!((f.id, f.tag), (7, OP_ALLOC));
        let mut d = Dec(&f.payload);
        assert_eq!((d.u32().unwrap(), d.u64().unwrap()), (1, 4096));
        assert!(d.u8().is_err());
        let f = read_frame(&mut r).unwrap().unwrap();
        assert_eq!((f.id, f.tag, f.payload.len()), (8, STATUS_OK, 0));
        assert!(read_frame(&mut r).unwrap().is_none());
        let bad = [3u8, 0, 0, 0, 1, 2, 3];
        assert!(read_frame(&mut &bad[..]).is_err());
    }
}
