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

/// What a reply must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    Image,
    Kernel,
    Global,
    Addr,
    Data(usize),
    Done,
}

impl Request<'_> {
    pub(super) fn encode(&self) -> (u8, Vec<u8>, &[u8], Expect) {
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

/// Checks a reply's payload against what its request expects.
pub(super) fn decode(expect: Expect, tag: u8, payload: Vec<u8>) -> Result<Result<Response, CallError>, String> {
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

    #[test]
    fn oversized_reads_are_refused_before_sending() {
        assert!(Request::Read { device: 0, addr: 0, len: wire::MAX_READ as u64 + 1 }.check().is_err());
        assert!(Request::Read { device: 0, addr: 0, len: wire::MAX_READ as u64 }.check().is_ok());
    }
}
