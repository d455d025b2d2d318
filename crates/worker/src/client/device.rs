//! The HAL operations of a device whose peer speaks the worker's request protocol (the
//! isolated device's worker, an MPI device rank): each is one request and a reply of the
//! shape it asks for. A device says how a request reaches its peer ([`RequestPeer`]) and
//! keeps only what differs (the isolated device's shared arena, the MPI link's copies).

use super::{Request, Response};
use omp_plugin::{ErrorKind, GlobalSymbol, ImageId, KernelId, LaunchConfig, PluginError, Result};
use std::ffi::CStr;

/// A device's peer that answers the worker's requests; the provided methods are the HAL
/// operations that are one request each, their replies checked.
pub trait RequestPeer {
    /// The peer's number for the device.
    fn device_index(&self) -> u32;

    /// The peer as an unexpected reply names it ("the isolated device's worker").
    fn peer_name(&self) -> &str;

    /// Sends one request and waits for its reply; a failure is already the plugin
    /// contract's error (a dead peer is a lost device).
    fn request(&self, req: &Request) -> Result<Response>;

    /// A reply of the wrong shape for its request.
    fn unexpected(&self, reply: Response) -> PluginError {
        PluginError::failed(format!("unexpected reply from {}: {reply:?}", self.peer_name()))
    }

    /// `Device::load_image`.
    fn load_request(&self, image: &[u8]) -> Result<ImageId> {
        match self.request(&Request::Load { device: self.device_index(), image })? {
            Response::Image(i) => Ok(ImageId(i as usize)),
            r => Err(self.unexpected(r)),
        }
    }

    /// `Device::kernel`.
    fn kernel_request(&self, image: ImageId, name: &CStr) -> Result<KernelId> {
        let req = Request::Kernel { device: self.device_index(), image: image.0 as u64, name: symbol_name(name)? };
        match self.request(&req)? {
            Response::Kernel(k) => Ok(KernelId::new(k as usize)),
            r => Err(self.unexpected(r)),
        }
    }

    /// `Device::global`.
    fn global_request(&self, image: ImageId, name: &CStr) -> Result<GlobalSymbol> {
        let req = Request::Global { device: self.device_index(), image: image.0 as u64, name: symbol_name(name)? };
        match self.request(&req)? {
            Response::Global { addr, size } => Ok(GlobalSymbol { addr: addr as usize, size: size as usize }),
            r => Err(self.unexpected(r)),
        }
    }

    /// `Device::alloc` in the peer's memory; the peer's "out of memory" is the contract's
    /// `OutOfMemory`.
    fn alloc_request(&self, size: usize) -> Result<usize> {
        match self.request(&Request::Alloc { device: self.device_index(), size: size as u64 }) {
            Ok(Response::Addr(a)) => Ok(a as usize),
            Ok(r) => Err(self.unexpected(r)),
            Err(e) if e.kind == ErrorKind::Failed && e.reason.contains("out of memory") => {
                Err(PluginError::out_of_memory(e.reason))
            }
            Err(e) => Err(e),
        }
    }

    /// `Device::free` in the peer's memory.
    fn free_request(&self, ptr: usize) -> Result<()> {
        self.request(&Request::Free { device: self.device_index(), addr: ptr as u64 }).map(|_| ())
    }

    /// `Device::copy_within` in the peer's memory.
    fn copy_request(&self, dst: usize, src: usize, len: usize) -> Result<()> {
        let req = Request::Copy { device: self.device_index(), dst: dst as u64, src: src as u64, len: len as u64 };
        self.request(&req).map(|_| ())
    }
}

/// A symbol name as the protocol carries it (UTF-8).
pub fn symbol_name(name: &CStr) -> Result<&str> {
    name.to_str().map_err(|_| PluginError::failed(format!("symbol name {name:?} is not UTF-8")))
}

/// Hands `send` the `Launch` request of a kernel of the peer's device `device`, after
/// flushing what the program printed so far (it goes out before what the kernel prints, as
/// when both share one process). Up to 16 arguments take no allocation.
pub fn with_launch_request<R>(
    device: u32,
    kernel: KernelId,
    args: &[usize],
    config: &LaunchConfig,
    send: impl FnOnce(&Request) -> R,
) -> R {
    let mut small = [0u64; 16];
    let heap: Vec<u64>;
    let args: &[u64] = if args.len() <= small.len() {
        for (d, s) in small.iter_mut().zip(args) {
            *d = *s as u64;
        }
        &small[..args.len()]
    } else {
        heap = args.iter().map(|a| *a as u64).collect();
        &heap
    };
    // SAFETY: fflush(NULL) flushes every open output stream; it takes no pointer of ours.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    send(&Request::Launch {
        device,
        kernel: kernel.raw() as u64,
        with_dyn_ptr: config.with_dyn_ptr,
        num_teams: config.num_teams[0],
        thread_limit: config.thread_limit[0],
        args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A peer that answers each request with the next canned reply and records what it was
    /// asked.
    struct Canned {
        replies: RefCell<Vec<Result<Response>>>,
        asked: RefCell<Vec<String>>,
    }

    impl Canned {
        fn new(replies: Vec<Result<Response>>) -> Self {
            Self { replies: RefCell::new(replies), asked: RefCell::new(Vec::new()) }
        }
    }

    impl RequestPeer for Canned {
        fn device_index(&self) -> u32 {
            3
        }
        fn peer_name(&self) -> &str {
            "the test's peer"
        }
        fn request(&self, req: &Request) -> Result<Response> {
            self.asked.borrow_mut().push(format!("{req:?}"));
            self.replies.borrow_mut().remove(0)
        }
    }

    #[test]
    fn replies_of_the_asked_shape_become_the_hal_values() {
        let peer = Canned::new(vec![
            Ok(Response::Image(7)),
            Ok(Response::Kernel(0x40)),
            Ok(Response::Global { addr: 0x1000, size: 8 }),
            Ok(Response::Addr(0x2000)),
            Ok(Response::Done),
            Ok(Response::Done),
        ]);
        let asked_for = |req: Request| assert_eq!(peer.asked.borrow().last(), Some(&format!("{req:?}")));
        assert_eq!(peer.load_request(b"\x7fELF").unwrap(), ImageId(7));
        asked_for(Request::Load { device: 3, image: b"\x7fELF" });
        assert_eq!(peer.kernel_request(ImageId(7), c"k").unwrap(), KernelId::new(0x40));
        asked_for(Request::Kernel { device: 3, image: 7, name: "k" });
        assert_eq!(peer.global_request(ImageId(7), c"g").unwrap(), GlobalSymbol { addr: 0x1000, size: 8 });
        asked_for(Request::Global { device: 3, image: 7, name: "g" });
        assert_eq!(peer.alloc_request(64).unwrap(), 0x2000);
        asked_for(Request::Alloc { device: 3, size: 64 });
        peer.free_request(0x2000).unwrap();
        asked_for(Request::Free { device: 3, addr: 0x2000 });
        peer.copy_request(0x3000, 0x2000, 16).unwrap();
        asked_for(Request::Copy { device: 3, dst: 0x3000, src: 0x2000, len: 16 });
        assert_eq!(peer.asked.borrow().len(), 6, "one request each");
    }

    #[test]
    fn a_reply_of_another_shape_is_an_error_that_names_the_peer() {
        let peer = Canned::new(vec![Ok(Response::Done), Ok(Response::Image(1)), Ok(Response::Done)]);
        let e = peer.load_request(b"").unwrap_err();
        assert_eq!((e.kind, e.reason.as_str()), (ErrorKind::Failed, "unexpected reply from the test's peer: Done"));
        let e = peer.kernel_request(ImageId(0), c"k").unwrap_err();
        assert_eq!(e.reason, "unexpected reply from the test's peer: Image(1)");
        assert!(peer.alloc_request(8).unwrap_err().reason.ends_with("Done"));
    }

    #[test]
    fn the_peers_out_of_memory_is_the_contracts_and_other_failures_pass_unchanged() {
        let peer = Canned::new(vec![
            Err(PluginError::failed("out of memory allocating 1 GiB")),
            Err(PluginError::lost("worker ended")),
        ]);
        let e = peer.alloc_request(1 << 30).unwrap_err();
        assert_eq!((e.kind, e.reason.as_str()), (ErrorKind::OutOfMemory, "out of memory allocating 1 GiB"));
        let e = peer.alloc_request(8).unwrap_err();
        assert_eq!((e.kind, e.reason.as_str()), (ErrorKind::DeviceLost, "worker ended"));
    }

    #[test]
    fn a_symbol_name_that_is_not_utf8_is_refused_before_anything_is_sent() {
        let peer = Canned::new(vec![]);
        let e = peer.kernel_request(ImageId(0), c"\xff").unwrap_err();
        assert_eq!(e.reason, r#"symbol name "\xff" is not UTF-8"#);
        assert!(peer.asked.borrow().is_empty());
    }

    #[test]
    fn a_launch_request_carries_every_argument_few_or_many() {
        let config = LaunchConfig {
            num_teams: [4, 0, 0],
            thread_limit: [8, 0, 0],
            tripcount: 0,
            dyn_group_mem: 0,
            with_dyn_ptr: true,
        };
        for n in [0usize, 3, 16, 17, 40] {
            let args: Vec<usize> = (0..n).map(|i| 0x1000 + i).collect();
            let got = with_launch_request(2, KernelId::new(9), &args, &config, |req| format!("{req:?}"));
            let wide: Vec<u64> = args.iter().map(|&a| a as u64).collect();
            let want = Request::Launch {
                device: 2,
                kernel: 9,
                with_dyn_ptr: true,
                num_teams: 4,
                thread_limit: 8,
                args: &wide,
            };
            assert_eq!(got, format!("{want:?}"), "{n} arguments");
        }
    }
}
