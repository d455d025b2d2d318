//! Requests to a worker and its replies: how each request is encoded, what reply it expects,
//! and the check of every reply against that expectation.

use crate::wire;

/// Why a worker call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The worker reported an error; it goes on serving.
    Failed(String),
    /// The worker is gone (how it ended), or was stopped because it misbehaved.
    Died(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Failed(m) => f.write_str(m),
            CallError::Died(how) => write!(f, "the device worker {how}"),
        }
    }
}

/// One request to a worker.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    Load { device: u32, image: &'a [u8] },
    Kernel { device: u32, image: u64, name: &'a str },
    Global { device: u32, image: u64, name: &'a str },
    Alloc { device: u32, size: u64 },
    Free { device: u32, addr: u64 },
    Write { device: u32, addr: u64, data: &'a [u8] },
    Read { device: u32, addr: u64, len: u64 },
    Copy { device: u32, dst: u64, src: u64, len: u64 },
    Launch { device: u32, kernel: u64, with_dyn_ptr: bool, num_teams: u32, thread_limit: u32, args: &'a [u64] },
}

/// A successful reply, of the shape its request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `Load`: the worker's image index.
    Image(u64),
    /// `Kernel`: the worker's kernel handle.
    Kernel(u64),
    /// `Global`: the device address and size (0 when unknown).
    Global { addr: u64, size: u64 },
    /// `Alloc`: the device address.
    Addr(u64),
    /// `Read`: exactly the bytes asked for.
    Data(Vec<u8>),
    /// `Free`, `Write`, `Copy`, `Launch`.
    Done,
}

impl Response {
    /// A successful reply's payload, as the worker sends it ([`decode`] reads it back); `Data`
    /// is the bytes themselves.
    pub fn encode(&self) -> Vec<u8> {
        use wire::Enc;
        match self {
            Response::Image(v) | Response::Addr(v) => Enc::default().u64(*v).0,
            Response::Kernel(k) => Enc::default().u64(*k).u64(0).0,
            Response::Global { addr, size } => Enc::default().u64(*addr).u64(*size).0,
            Response::Data(d) => d.clone(),
            Response::Done => Vec::new(),
        }
    }
}

/// What a reply must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    Image,
    Kernel,
    Global,
    Addr,
    Data(usize),
    Done,
}

impl Request<'_> {
    /// The request's op, its fixed-size head, its variable body and the reply it expects
    /// (a frame's payload is the head followed by the body). Also for other transports
    /// that carry worker requests (MPI devices).
    pub fn encode(&self) -> (u8, Vec<u8>, &[u8], Expect) {
        use wire::Enc;
        match *self {
            Request::Load { device, image } => (wire::OP_LOAD, Enc::default().u32(device).0, image, Expect::Image),
            Request::Kernel { device, image, name } => {
                (wire::OP_SYMBOL, Enc::default().u32(device).u64(image).u8(1).0, name.as_bytes(), Expect::Kernel)
            }
            Request::Global { device, image, name } => {
                (wire::OP_SYMBOL, Enc::default().u32(device).u64(image).u8(0).0, name.as_bytes(), Expect::Global)
            }
            Request::Alloc { device, size } => {
                (wire::OP_ALLOC, Enc::default().u32(device).u64(size).0, &[], Expect::Addr)
            }
            Request::Free { device, addr } => {
                (wire::OP_FREE, Enc::default().u32(device).u64(addr).0, &[], Expect::Done)
            }
            Request::Write { device, addr, data } => {
                (wire::OP_WRITE, Enc::default().u32(device).u64(addr).0, data, Expect::Done)
            }
            Request::Read { device, addr, len } => {
                (wire::OP_READ, Enc::default().u32(device).u64(addr).u64(len).0, &[], Expect::Data(len as usize))
            }
            Request::Copy { device, dst, src, len } => {
                (wire::OP_COPY, Enc::default().u32(device).u64(dst).u64(src).u64(len).0, &[], Expect::Done)
            }
            Request::Launch { device, kernel, with_dyn_ptr, num_teams, thread_limit, args } => {
                let mut e = Enc::default()
                    .u32(device)
                    .u64(kernel)
                    .u8(u8::from(with_dyn_ptr))
                    .u32(num_teams)
                    .u32(thread_limit)
                    .u32(args.len() as u32);
                for a in args {
                    e = e.u64(*a);
                }
                (wire::OP_LAUNCH, e.0, &[], Expect::Done)
            }
        }
    }

    /// The request a frame's op and payload hold, as [`Request::encode`] made it: the inverse
    /// for transports that relay requests to a worker (an MPI device rank). Every field is
    /// read bounds-checked; trailing bytes, an unknown op, an argument count the payload
    /// cannot hold, or a non-UTF-8 name are errors. A launch's arguments are read into `args`.
    /// Reads and writes carry their data apart on such transports and are not decoded here.
    pub fn decode<'a>(op: u8, payload: &'a [u8], args: &'a mut Vec<u64>) -> Result<Request<'a>, String> {
        let mut d = wire::Dec(payload);
        let e = |e: std::io::Error| e.to_string();
        let device = d.u32().map_err(e)?;
        let req = match op {
            wire::OP_LOAD => Request::Load { device, image: d.rest() },
            wire::OP_SYMBOL => {
                let image = d.u64().map_err(e)?;
                let kernel = d.u8().map_err(e)? != 0;
                let name = std::str::from_utf8(d.rest()).map_err(|_| "a symbol name that is not UTF-8".to_string())?;
                if kernel {
                    Request::Kernel { device, image, name }
                } else {
                    Request::Global { device, image, name }
                }
            }
            wire::OP_ALLOC => Request::Alloc { device, size: d.u64().map_err(e)? },
            wire::OP_FREE => Request::Free { device, addr: d.u64().map_err(e)? },
            wire::OP_COPY => {
                let (dst, src, len) = (d.u64().map_err(e)?, d.u64().map_err(e)?, d.u64().map_err(e)?);
                Request::Copy { device, dst, src, len }
            }
            wire::OP_LAUNCH => {
                let kernel = d.u64().map_err(e)?;
                let with_dyn_ptr = d.u8().map_err(e)? != 0;
                let (num_teams, thread_limit) = (d.u32().map_err(e)?, d.u32().map_err(e)?);
                let n = d.u32().map_err(e)? as usize;
                let rest = d.rest();
                if rest.len() != n.checked_mul(8).ok_or("too many kernel arguments")? {
                    return Err(format!("{n} kernel arguments announced, {} bytes sent", rest.len()));
                }
                args.clear();
                args.extend(rest.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))));
                return Ok(Request::Launch { device, kernel, with_dyn_ptr, num_teams, thread_limit, args });
            }
            op => return Err(format!("unknown worker op {op}")),
        };
        d.end().map_err(e)?;
        Ok(req)
    }

    /// Requests the client refuses to send.
    pub(super) fn check(&self) -> Result<(), String> {
        match *self {
            Request::Read { len, .. } if len > wire::MAX_READ as u64 => {
                Err(format!("a relayed read of {len} bytes exceeds the limit of {}", wire::MAX_READ))
            }
            Request::Launch { args, .. } if u32::try_from(args.len()).is_err() => {
                Err("too many kernel arguments".into())
            }
            _ => Ok(()),
        }
    }
}

/// Largest piece of a copy relayed through the pipe (direct copies take any size).
pub const RELAY_CHUNK: usize = wire::MAX_READ;

/// Longest error message kept from a worker.
pub(super) const MAX_MESSAGE: usize = 4096;

/// Checks a reply's payload against what its request expects: the outer error means the
/// reply does not fit its request (the worker, or whatever relays it, cannot be trusted).
pub fn decode(expect: Expect, tag: u8, payload: Vec<u8>) -> Result<Result<Response, CallError>, String> {
    match tag {
        wire::STATUS_OK => {}
        wire::STATUS_ERR => {
            let mut m = String::from_utf8_lossy(&payload[..payload.len().min(MAX_MESSAGE)]).into_owned();
            if payload.len() > MAX_MESSAGE {
                m.push_str("...");
            }
            return Ok(Err(CallError::Failed(m)));
        }
        t => return Err(format!("a reply with unknown status {t}")),
    }
    let bad = |what: &str| format!("a {what} reply of {} bytes", payload.len());
    let mut d = wire::Dec(&payload);
    let r = match expect {
        Expect::Image | Expect::Kernel | Expect::Addr => {
            let v = d.u64().map_err(|_| bad("short"))?;
            match expect {
                Expect::Image => Response::Image(v),
                Expect::Kernel => {
                    // The second word is a size, always 0 for kernels.
                    d.u64().map_err(|_| bad("short kernel"))?;
                    Response::Kernel(v)
                }
                _ => Response::Addr(v),
            }
        }
        Expect::Global => {
            let addr = d.u64().map_err(|_| bad("short symbol"))?;
            let size = d.u64().map_err(|_| bad("short symbol"))?;
            Response::Global { addr, size }
        }
        Expect::Data(n) => {
            if payload.len() != n {
                return Err(format!("{} bytes for a read of {n}", payload.len()));
            }
            return Ok(Ok(Response::Data(payload)));
        }
        Expect::Done => Response::Done,
    };
    d.end().map_err(|_| bad("long"))?;
    Ok(Ok(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Enc;

    #[test]
    fn requests_and_replies_round_trip() {
        let args = [1u64, u64::MAX, 42];
        let reqs = [
            Request::Load { device: 1, image: b"\x7fELF" },
            Request::Kernel { device: 0, image: 3, name: "__omp_offloading_k" },
            Request::Global { device: 2, image: 0, name: "g" },
            Request::Alloc { device: 0, size: 4096 },
            Request::Free { device: 0, addr: 0x1000 },
            Request::Copy { device: 3, dst: 1, src: 2, len: 3 },
            Request::Launch { device: 1, kernel: 9, with_dyn_ptr: true, num_teams: 4, thread_limit: 8, args: &args },
        ];
        for r in reqs {
            let (op, head, body, _) = r.encode();
            let payload = [head, body.to_vec()].concat();
            let mut scratch = Vec::new();
            let back = Request::decode(op, &payload, &mut scratch).unwrap();
            assert_eq!(format!("{back:?}"), format!("{r:?}"));
            // Cut anywhere inside the fixed fields, or with a byte more: refused, never a panic.
            let fixed = payload.len() - body.len();
            for cut in 0..fixed {
                if op != wire::OP_SYMBOL || cut < 13 {
                    assert!(Request::decode(op, &payload[..cut], &mut scratch).is_err(), "{r:?} cut at {cut}");
                }
            }
            if matches!(op, wire::OP_ALLOC | wire::OP_FREE | wire::OP_COPY | wire::OP_LAUNCH) {
                let longer = [payload.clone(), vec![0]].concat();
                assert!(Request::decode(op, &longer, &mut scratch).is_err(), "{r:?} with a trailing byte");
            }
        }
        assert!(Request::decode(99, &[0; 16], &mut Vec::new()).is_err());
        // A launch announcing more arguments than it carries.
        let mut bad = Enc::default().u32(0).u64(1).u8(0).u32(1).u32(1).u32(1 << 30).0;
        bad.extend_from_slice(&[0; 8]);
        assert!(Request::decode(wire::OP_LAUNCH, &bad, &mut Vec::new()).is_err());
        for (resp, expect) in [
            (Response::Image(7), Expect::Image),
            (Response::Kernel(5), Expect::Kernel),
            (Response::Global { addr: 1, size: 2 }, Expect::Global),
            (Response::Addr(9), Expect::Addr),
            (Response::Data(vec![1, 2, 3]), Expect::Data(3)),
            (Response::Done, Expect::Done),
        ] {
            assert_eq!(decode(expect, wire::STATUS_OK, resp.encode()), Ok(Ok(resp)));
        }
    }

    #[test]
    fn oversized_reads_are_refused_before_sending() {
        assert!(Request::Read { device: 0, addr: 0, len: wire::MAX_READ as u64 + 1 }.check().is_err());
        assert!(Request::Read { device: 0, addr: 0, len: wire::MAX_READ as u64 }.check().is_ok());
    }
}
