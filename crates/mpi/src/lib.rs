//! The system's MPI, loaded at run time: the dozen calls MPI devices need, for the two
//! ABIs in use.
//!
//! `libmpi` is `dlopen`ed by its versioned name when [`Mpi::load`] is called, never linked:
//! a program that is not started under MPI never loads it (docs/cluster.md). Two ABIs:
//!
//! - **Open MPI** (`libmpi.so.40`, 4.x/5.x): `MPI_Comm` and `MPI_Datatype` are pointers to
//!   the library's globals (`ompi_mpi_comm_world`, `ompi_mpi_byte`), `MPI_Request` a pointer,
//!   `MPI_Status` `{source, tag, error, cancelled, size_t count}`, `MPI_ANY_SOURCE` = -1.
//! - **MPICH** and its derivatives (`libmpi.so.12` or Debian's `libmpich.so.12`: MPICH
//!   3.x/4.x, Intel MPI, MVAPICH):
//!   handles are `int` constants (`MPI_COMM_WORLD` = `0x44000000`, `MPI_BYTE` =
//!   `0x4c00010d`), `MPI_Request` an `int`, `MPI_Status` `{count_lo, count_hi, source, tag,
//!   error}`, `MPI_ANY_SOURCE` = -2.
//!
//! Each ABI gets a table of function pointers of its own types ([`Fns`]), every symbol
//! resolved at load (a missing one is the same as a missing library). The library stays
//! loaded for the life of the process. An [`Mpi`] is `Send` but not `Sync`: one thread owns
//! it, which is how the `MPI_THREAD_SERIALIZED` level asked for is kept.

use std::ffi::{c_char, c_int, c_void, CStr};

/// Which ABI the loaded library follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    OpenMpi,
    Mpich,
}

/// The versioned names tried, in order, with their ABI.
/// (Debian names MPICH's `libmpich.so.12`; Fedora, Intel MPI and MVAPICH `libmpi.so.12`.)
pub const LIBRARIES: [(&str, Flavor); 3] =
    [("libmpi.so.40", Flavor::OpenMpi), ("libmpi.so.12", Flavor::Mpich), ("libmpich.so.12", Flavor::Mpich)];

const MPI_SUCCESS: c_int = 0;
const MPI_THREAD_SERIALIZED: c_int = 2;

type InitThread = unsafe extern "C" fn(*mut c_int, *mut *mut *mut c_char, c_int, *mut c_int) -> c_int;
type Initialized = unsafe extern "C" fn(*mut c_int) -> c_int;
type Finalize = unsafe extern "C" fn() -> c_int;
type CommQuery<H> = unsafe extern "C" fn(H, *mut c_int) -> c_int;
type Isend<H> = unsafe extern "C" fn(*const c_void, c_int, H, c_int, c_int, H, *mut c_void) -> c_int;
/// `MPI_Irecv` (last: the request) and `MPI_Recv` (last: the status).
type Recv<H> = unsafe extern "C" fn(*mut c_void, c_int, H, c_int, c_int, H, *mut c_void) -> c_int;
type Test = unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_void) -> c_int;
type Iprobe<H> = unsafe extern "C" fn(c_int, c_int, H, *mut c_int, *mut c_void) -> c_int;
type GetCount<H> = unsafe extern "C" fn(*const c_void, H, *mut c_int) -> c_int;
type Iallgather<H> = unsafe extern "C" fn(*const c_void, c_int, H, *mut c_void, c_int, H, H, *mut c_void) -> c_int;
type Abort<H> = unsafe extern "C" fn(H, c_int) -> c_int;

/// One ABI's entry points; `H` is its handle type (a pointer for Open MPI, `int` for MPICH).
struct Fns<H> {
    init_thread: InitThread,
    initialized: Initialized,
    finalize: Finalize,
    comm_rank: CommQuery<H>,
    comm_size: CommQuery<H>,
    isend: Isend<H>,
    irecv: Recv<H>,
    recv: Recv<H>,
    test: Test,
    iprobe: Iprobe<H>,
    get_count: GetCount<H>,
    iallgather: Iallgather<H>,
    abort: Abort<H>,
    world: H,
    byte: H,
}

enum Table {
    OpenMpi(Fns<*mut c_void>),
    Mpich(Fns<c_int>),
}

/// Runs `$body` with `$f` bound to the loaded ABI's table.
macro_rules! with_fns {
    ($self:expr, $f:ident => $body:expr) => {
        match &$self.table {
            Table::OpenMpi($f) => $body,
            Table::Mpich($f) => $body,
        }
    };
}

/// An outstanding non-blocking operation (`MPI_Request`: a pointer or an `int`, kept in 8
/// bytes). The buffer it names must stay valid until [`Mpi::test`] says it completed.
#[derive(Debug)]
pub struct Request(u64);

/// What a completed receive or a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: i32,
    pub tag: i32,
    /// Bytes in the message.
    pub len: usize,
}

/// Room for either ABI's `MPI_Status` (Open MPI: 24 bytes, MPICH: 20).
#[repr(C, align(8))]
struct RawStatus([u8; 64]);

/// The loaded library.
pub struct Mpi {
    table: Table,
    flavor: Flavor,
    /// The library's file name, for messages.
    name: &'static str,
}

// SAFETY: the table holds function addresses and handles that are addresses of (or numbers
// naming) the library's constant globals; moving them to another thread is harmless. `Mpi` is
// not `Sync`: calls are made by one thread at a time (MPI_THREAD_SERIALIZED).
unsafe impl Send for Mpi {}

/// Why an MPI call failed.
pub type Result<T> = std::result::Result<T, String>;

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null: a NUL-terminated string (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Whether a libmpi is already in this process (the program itself links MPI). Loads nothing.
pub fn already_loaded() -> bool {
    LIBRARIES.iter().any(|(name, _)| {
        let c = std::ffi::CString::new(*name).expect("no NUL in a library name");
        // SAFETY: RTLD_NOLOAD only looks the name up among loaded objects; the handle it
        // returns holds one more reference, which is dropped at once.
        unsafe {
            let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
            if !h.is_null() {
                libc::dlclose(h);
            }
            !h.is_null()
        }
    })
}

/// Resolves every symbol of one ABI's table.
///
/// # Safety
/// `lib` must be a live handle of a libmpi of that ABI, so that each symbol has the type
/// the table gives it.
unsafe fn resolve<H: Copy>(
    lib: *mut c_void,
    world: impl Fn(*mut c_void) -> H,
    byte: impl Fn(*mut c_void) -> H,
) -> Result<Fns<H>> {
    let sym = |name: &CStr| -> Result<*mut c_void> {
        // SAFETY: `lib` is a live handle (the caller's promise); `name` is NUL-terminated.
        let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
        if p.is_null() {
            Err(format!("symbol {} is missing", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    macro_rules! f {
        ($name:literal, $ty:ty) => {
            // SAFETY: the symbol is the MPI function of this name, whose C type in this ABI is
            // `$ty` (the caller's promise).
            unsafe { std::mem::transmute::<*mut c_void, $ty>(sym($name)?) }
        };
    }
    Ok(Fns {
        init_thread: f!(c"MPI_Init_thread", InitThread),
        initialized: f!(c"MPI_Initialized", Initialized),
        finalize: f!(c"MPI_Finalize", Finalize),
        comm_rank: f!(c"MPI_Comm_rank", CommQuery<H>),
        comm_size: f!(c"MPI_Comm_size", CommQuery<H>),
        isend: f!(c"MPI_Isend", Isend<H>),
        irecv: f!(c"MPI_Irecv", Recv<H>),
        recv: f!(c"MPI_Recv", Recv<H>),
        test: f!(c"MPI_Test", Test),
        iprobe: f!(c"MPI_Iprobe", Iprobe<H>),
        get_count: f!(c"MPI_Get_count", GetCount<H>),
        iallgather: f!(c"MPI_Iallgather", Iallgather<H>),
        abort: f!(c"MPI_Abort", Abort<H>),
        world: world(sym(c"ompi_mpi_comm_world").unwrap_or(std::ptr::null_mut())),
        byte: byte(sym(c"ompi_mpi_byte").unwrap_or(std::ptr::null_mut())),
    })
}

fn check(what: &str, rc: c_int) -> Result<()> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed (MPI error {rc})"))
    }
}

fn count(len: usize) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| format!("a message of {len} bytes is larger than one MPI message may be"))
}

impl Mpi {
    /// Loads the system's MPI: `libmpi.so.40` (Open MPI), else the MPICH ABI's library;
    /// the `first` flavor's library first (the one whose launcher started this process, when
    /// both are installed).
    pub fn load(first: Flavor) -> Result<Mpi> {
        let mut tried = Vec::new();
        let order = LIBRARIES.iter().filter(|(_, f)| *f == first).chain(LIBRARIES.iter().filter(|(_, f)| *f != first));
        for &(name, flavor) in order {
            let c = std::ffi::CString::new(name).expect("no NUL in a library name");
            // SAFETY: loads a system library by name. RTLD_GLOBAL: Open MPI's components,
            // loaded by the library itself, resolve its symbols globally.
            let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
            if lib.is_null() {
                tried.push(dlerror());
                continue;
            }
            let table = match flavor {
                // SAFETY: `lib` is Open MPI's library (by its soname); its predefined handles
                // are the addresses of its globals.
                Flavor::OpenMpi => unsafe { resolve(lib, |w| w, |b| b) }.and_then(|f| {
                    if f.world.is_null() || f.byte.is_null() {
                        Err("ompi_mpi_comm_world or ompi_mpi_byte is missing: not Open MPI's ABI".into())
                    } else {
                        Ok(Table::OpenMpi(f))
                    }
                }),
                // SAFETY: `lib` is an MPICH-ABI library (by its soname); its predefined handles
                // are the constants of MPICH's mpi.h.
                Flavor::Mpich => unsafe { resolve(lib, |_| 0x4400_0000_u32 as c_int, |_| 0x4c00_010d_u32 as c_int) }
                    .map(Table::Mpich),
            };
            return match table {
                Ok(table) => Ok(Mpi { table, flavor, name }),
                Err(e) => Err(format!("{name}: {e}")),
            };
        }
        Err(format!("no MPI library found ({})", tried.join("; ")))
    }

    /// The flavor whose launcher started this process, from the variables it set (read
    /// through `get`): Open MPI's `OMPI_*`, else PMI-1/2 (MPICH's Hydra, Slurm's `pmi2`),
    /// else Open MPI (PMIx alone: Slurm starting Open MPI).
    pub fn launcher(get: impl Fn(&str) -> Option<String>) -> Flavor {
        if get("OMPI_COMM_WORLD_SIZE").is_none() && (get("PMI_RANK").is_some() || get("PMI_SIZE").is_some()) {
            Flavor::Mpich
        } else {
            Flavor::OpenMpi
        }
    }

    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The library's file name.
    pub fn library(&self) -> &'static str {
        self.name
    }

    fn any_source(&self) -> c_int {
        match self.flavor {
            Flavor::OpenMpi => -1,
            Flavor::Mpich => -2,
        }
    }

    /// `MPI_Init_thread` asking for `MPI_THREAD_SERIALIZED` (calls from any one thread at a
    /// time). Fails if MPI was initialised already or offers less.
    pub fn init(&self) -> Result<()> {
        let mut done: c_int = 0;
        // SAFETY: MPI_Initialized writes one int; allowed before MPI_Init.
        check("MPI_Initialized", with_fns!(self, f => unsafe { (f.initialized)(&mut done) }))?;
        if done != 0 {
            return Err("MPI is initialised already (the program uses MPI itself)".into());
        }
        let mut provided: c_int = 0;
        // SAFETY: NULL argc/argv are allowed by MPI-2; `provided` is one writable int.
        let rc = with_fns!(self, f => unsafe {
            (f.init_thread)(std::ptr::null_mut(), std::ptr::null_mut(), MPI_THREAD_SERIALIZED, &mut provided)
        });
        check("MPI_Init_thread", rc)?;
        if provided < MPI_THREAD_SERIALIZED {
            return Err(format!("MPI offers thread level {provided}, MPI_THREAD_SERIALIZED (2) is needed"));
        }
        Ok(())
    }

    /// This process's rank in `MPI_COMM_WORLD`.
    pub fn rank(&self) -> Result<i32> {
        let mut r: c_int = 0;
        // SAFETY: writes one int; MPI is initialised (callers call `init` first).
        check("MPI_Comm_rank", with_fns!(self, f => unsafe { (f.comm_rank)(f.world, &mut r) }))?;
        Ok(r)
    }

    /// The number of ranks in `MPI_COMM_WORLD`.
    pub fn size(&self) -> Result<i32> {
        let mut s: c_int = 0;
        // SAFETY: writes one int; MPI is initialised.
        check("MPI_Comm_size", with_fns!(self, f => unsafe { (f.comm_size)(f.world, &mut s) }))?;
        Ok(s)
    }

    /// Starts sending `len` bytes at `buf` to `dest` with `tag`.
    ///
    /// # Safety
    /// `[buf, buf+len)` must stay readable and unchanged until [`Mpi::test`] reports the
    /// returned request complete.
    pub unsafe fn isend(&self, buf: *const u8, len: usize, dest: i32, tag: i32) -> Result<Request> {
        let n = count(len)?;
        let mut req = Request(0);
        let r = (&mut req.0 as *mut u64).cast::<c_void>();
        // SAFETY: the buffer is the caller's promise; `r` has room for either ABI's request.
        let rc = with_fns!(self, f => unsafe { (f.isend)(buf.cast(), n, f.byte, dest, tag, f.world, r) });
        check("MPI_Isend", rc).map(|_| req)
    }

    /// Starts receiving at most `len` bytes into `buf` from `source` with `tag`.
    ///
    /// # Safety
    /// `[buf, buf+len)` must stay writable and unused by anything else until [`Mpi::test`]
    /// reports the returned request complete.
    pub unsafe fn irecv(&self, buf: *mut u8, len: usize, source: i32, tag: i32) -> Result<Request> {
        let n = count(len)?;
        let mut req = Request(0);
        let r = (&mut req.0 as *mut u64).cast::<c_void>();
        // SAFETY: the buffer is the caller's promise; `r` has room for either ABI's request.
        let rc = with_fns!(self, f => unsafe { (f.irecv)(buf.cast(), n, f.byte, source, tag, f.world, r) });
        check("MPI_Irecv", rc).map(|_| req)
    }

    /// Receives a message whose arrival [`Mpi::probe`] reported into `buf` (exactly its size).
    pub fn recv_probed(&self, st: Status, buf: &mut [u8]) -> Result<()> {
        let n = count(buf.len())?;
        let mut raw = RawStatus([0; 64]);
        // SAFETY: `buf` is writable for its length; `raw` has room for either ABI's status.
        let rc = with_fns!(self, f => unsafe {
            (f.recv)(buf.as_mut_ptr().cast(), n, f.byte, st.source, st.tag, f.world, raw.0.as_mut_ptr().cast())
        });
        check("MPI_Recv", rc)
    }

    /// Whether `req` completed (it may not be tested again once it has).
    pub fn test(&self, req: &mut Request) -> Result<bool> {
        self.test_status(req).map(|done| done.is_some())
    }

    /// Whether the receive `req` completed, and then how many bytes arrived (it may not be
    /// tested again once it has).
    pub fn test_received(&self, req: &mut Request) -> Result<Option<usize>> {
        match self.test_status(req)? {
            Some(raw) => self.byte_count(&raw).map(Some),
            None => Ok(None),
        }
    }

    fn test_status(&self, req: &mut Request) -> Result<Option<RawStatus>> {
        let mut flag: c_int = 0;
        let mut raw = RawStatus([0; 64]);
        let r = (&mut req.0 as *mut u64).cast::<c_void>();
        // SAFETY: `r` holds a request this library returned; `flag` and `raw` are writable.
        let rc = with_fns!(self, f => unsafe { (f.test)(r, &mut flag, raw.0.as_mut_ptr().cast()) });
        check("MPI_Test", rc).map(|_| (flag != 0).then_some(raw))
    }

    /// The bytes a status (of a completed receive or a probe) counts.
    fn byte_count(&self, raw: &RawStatus) -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: `raw` is a status MPI filled; `n` is writable.
        let rc = with_fns!(self, f => unsafe { (f.get_count)(raw.0.as_ptr().cast(), f.byte, &mut n) });
        check("MPI_Get_count", rc)?;
        usize::try_from(n).map_err(|_| format!("MPI reports a message of {n} bytes"))
    }

    /// A message waiting from `source` (any when `None`) with `tag`, without receiving it.
    pub fn probe(&self, source: Option<i32>, tag: i32) -> Result<Option<Status>> {
        let mut flag: c_int = 0;
        let mut raw = RawStatus([0; 64]);
        let src = source.unwrap_or(self.any_source());
        // SAFETY: `flag` and `raw` are writable, `raw` large enough for either ABI's status.
        let rc = with_fns!(self, f => unsafe { (f.iprobe)(src, tag, f.world, &mut flag, raw.0.as_mut_ptr().cast()) });
        check("MPI_Iprobe", rc)?;
        if flag == 0 {
            return Ok(None);
        }
        let len = self.byte_count(&raw)?;
        let field = |at: usize| i32::from_ne_bytes([raw.0[at], raw.0[at + 1], raw.0[at + 2], raw.0[at + 3]]);
        let (source, tag) = match self.flavor {
            Flavor::OpenMpi => (field(0), field(4)),
            Flavor::Mpich => (field(8), field(12)),
        };
        Ok(Some(Status { source, tag, len }))
    }

    /// Starts gathering `len` bytes from every rank into `recv` (`len` × size bytes), in rank order.
    ///
    /// # Safety
    /// `send` must stay readable for `len` bytes and `recv` writable for `len` × the number of
    /// ranks until [`Mpi::test`] reports the request complete.
    pub unsafe fn iallgather(&self, send: *const u8, len: usize, recv: *mut u8) -> Result<Request> {
        let n = count(len)?;
        let mut req = Request(0);
        let r = (&mut req.0 as *mut u64).cast::<c_void>();
        // SAFETY: the buffers are the caller's promise; `r` has room for either ABI's request.
        let rc = with_fns!(self, f => unsafe {
            (f.iallgather)(send.cast(), n, f.byte, recv.cast(), n, f.byte, f.world, r)
        });
        check("MPI_Iallgather", rc).map(|_| req)
    }

    /// `MPI_Finalize`.
    pub fn finalize(&self) -> Result<()> {
        // SAFETY: no arguments; MPI is initialised and nothing of ours is outstanding.
        check("MPI_Finalize", with_fns!(self, f => unsafe { (f.finalize)() }))
    }

    /// `MPI_Abort` on `MPI_COMM_WORLD`: ends every rank of the job.
    pub fn abort(&self, code: i32) -> ! {
        // SAFETY: MPI_Abort takes the world handle and an int.
        with_fns!(self, f => unsafe { (f.abort)(f.world, code) });
        std::process::exit(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_buffer_holds_both_layouts() {
        // Open MPI: 3 ints + int + size_t = 24 bytes; MPICH: 5 ints = 20 bytes.
        assert!(std::mem::size_of::<RawStatus>() >= 24);
        assert_eq!(std::mem::align_of::<RawStatus>(), 8);
    }

    #[test]
    fn oversized_messages_are_refused() {
        assert!(count(1 << 31).is_err());
        assert_eq!(count(4096), Ok(4096));
    }

    #[test]
    fn the_launcher_picks_the_library_tried_first() {
        let env = |vars: &'static [&'static str]| move |k: &str| vars.contains(&k).then(|| "1".to_string());
        assert_eq!(Mpi::launcher(env(&["OMPI_COMM_WORLD_SIZE", "PMIX_RANK"])), Flavor::OpenMpi);
        assert_eq!(Mpi::launcher(env(&["PMI_RANK", "PMI_SIZE"])), Flavor::Mpich);
        assert_eq!(Mpi::launcher(env(&["PMIX_RANK"])), Flavor::OpenMpi);
    }

    #[test]
    fn this_test_process_has_no_mpi() {
        assert!(!already_loaded());
    }
}
