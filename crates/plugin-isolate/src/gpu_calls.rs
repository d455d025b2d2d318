//! `LIBOMPTARGET_CHECK=gpu` (and `1`): the host functions a kernel called that no GPU's
//! device libraries provide, seen in the worker through the loader's lazy binding.
//!
//! A device image is a shared object the worker loads lazily (`RTLD_LAZY`): each function it
//! calls outside itself goes through a PLT entry and a GOT slot that leads back to the loader
//! until the first call, which writes the function's address into the slot
//! ([`crate::plt_slots`]). So, of the slots of functions no GPU provides
//! ([`omp_gpu_libs::no_gpu_provides`]), the ones bound after a launch were called by it:
//! [`after_launch`] names them and puts the unbound value back, so that the next call binds
//! again and the next kernel that calls the function is named too. [`before_launch`] does the
//! same for what was bound outside kernels (an image's constructors), unsaid. A slot bound to
//! another device image (a library's image, loaded `RTLD_GLOBAL`) is device code: not named.
//!
//! When the loader binds an image's calls as it loads it — an image linked with `-z now`, or
//! `LD_BIND_NOW` set — its slots say nothing: the launch says so ([`CALLS_UNSEEN`]), once per
//! program in the report. A function called through a pointer (not through the PLT) is not
//! seen either, nor an image loaded from a file that is gone (the temporary file used where
//! there is no `/proc`).
//!
//! An image that holds flang's runtime (ompcc links it into Fortran images) calls the C
//! library from the runtime: its calls are said together, as the runtime's
//! ([`FLANG_RUNTIME`]; a Fortran kernel calls C functions itself only through `bind(c)`
//! interfaces, which are said that way too).
//!
//! The results go in the arena's header: [`HOST_CALLS`], the bytes of names (one a line:
//! `SYMBOL`, or `SYMBOL\tNAME` with a C++ symbol's name) at [`HOST_CALL_NAMES`]. What does not
//! fit is named by a later launch that calls it again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Header words ([`crate::header`]): the bytes of names at [`HOST_CALL_NAMES`] the last
/// kernel left, and why the last kernel's calls could not all be seen (0: they were).
pub use crate::header::{CALLS_UNSEEN, HOST_CALLS, HOST_CALL_NAMES, HOST_CALL_NAMES_END};
/// [`CALLS_UNSEEN`]: a device image was linked with `-z now`.
pub const UNSEEN_LINKED_NOW: u64 = 1;
/// [`CALLS_UNSEEN`]: the loader bound a device image's calls when it loaded it.
pub const UNSEEN_BOUND_AT_LOAD: u64 = 2;

/// One watched GOT slot: its address, its value while unbound, the function's symbol.
struct Slot {
    got: usize,
    unbound: usize,
    symbol: String,
}

/// A device image the worker loaded.
struct Image {
    name: String,
    bias: usize,
    span: (usize, usize),
    /// Slots of functions no GPU provides.
    slots: Vec<Slot>,
    /// Why its calls cannot be seen (0: they can).
    unseen: u64,
    /// It holds flang's runtime: its calls are said as the runtime's ([`FLANG_RUNTIME`]).
    flang_runtime: bool,
}

/// The symbol a launch's calls from an image that holds flang's runtime are said under (one
/// line: `_FortranA\tFUNCTION FUNCTION …`): a Fortran kernel calls host functions through
/// the runtime (its I/O statements), which is linked into the image and calls the C library.
pub const FLANG_RUNTIME: &str = "_FortranA";

struct Watched {
    /// The loader's count of objects loaded and unloaded when the images were last listed.
    loads: (u64, u64),
    images: Vec<Image>,
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched { loads: (0, 0), images: Vec::new() });

/// Whether the loaded object `name` is a device image (omp-plugin-host loads them from a
/// memfd through `/proc/self/fd`).
fn is_device_image(name: &str) -> bool {
    name.starts_with("/proc/self/fd/")
}

/// Before a launch: the images are listed again if the loader loaded or unloaded any, and
/// what was bound outside kernels is unbound.
pub fn before_launch() {
    let mut watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    refresh(&mut watched);
    let _ = bound_since(&watched);
}

/// After a launch: the functions no GPU provides that it called (symbol, and a C++ symbol's
/// name), and why some calls could not be seen (0: none).
pub fn after_launch() -> (Vec<(String, Option<String>)>, u64) {
    let watched = WATCHED.lock().unwrap_or_else(|e| e.into_inner());
    let unseen = watched.images.iter().map(|i| i.unseen).max().unwrap_or(0);
    let mut called: Vec<(String, Option<String>)> = Vec::new();
    let mut through_flang: Vec<String> = Vec::new();
    for (symbol, flang) in bound_since(&watched) {
        if flang {
            if !through_flang.contains(&symbol) {
                through_flang.push(symbol);
            }
        } else if !called.iter().any(|(s, _)| *s == symbol) {
            let name = symbol.starts_with("_Z").then(|| demangle(&symbol)).flatten();
            called.push((symbol, name));
        }
    }
    if !through_flang.is_empty() {
        called.push((FLANG_RUNTIME.to_string(), Some(through_flang.join(" "))));
    }
    (called, unseen)
}

/// Leaves [`after_launch`]'s results in the header of the arena at `base`.
///
/// # Safety
/// `base` must be the arena's address in this process, its header page mapped read-write.
pub unsafe fn write(base: usize, called: &[(String, Option<String>)], unseen: u64) {
    let mut text = Vec::new();
    for (symbol, name) in called {
        let line = match name {
            Some(n) => format!("{symbol}\t{n}\n"),
            None => format!("{symbol}\n"),
        };
        if text.len() + line.len() > HOST_CALL_NAMES_END - HOST_CALL_NAMES {
            break;
        }
        text.extend_from_slice(line.as_bytes());
    }
    // SAFETY: the caller's promise: the header page is mapped read-write, and the names'
    // bytes lie within it; the program reads them only after the launch's reply.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), (base + HOST_CALL_NAMES) as *mut u8, text.len());
        crate::track::header_word(base, CALLS_UNSEEN).store(unseen, Ordering::Relaxed);
        crate::track::header_word(base, HOST_CALLS).store(text.len() as u64, Ordering::Release);
    }
}

/// What the last launch left in the header of the arena at `base`.
///
/// # Safety
/// `base` must be a mapped arena (its header page readable), the launch answered.
pub unsafe fn read(base: usize) -> (Vec<(String, Option<String>)>, u64) {
    // SAFETY: the caller's promise.
    let (len, unseen) = unsafe {
        (
            crate::track::header_word(base, HOST_CALLS).load(Ordering::Acquire) as usize,
            crate::track::header_word(base, CALLS_UNSEEN).load(Ordering::Relaxed),
        )
    };
    let len = len.min(HOST_CALL_NAMES_END - HOST_CALL_NAMES);
    // SAFETY: as above: `len` bytes of the header page, which the worker wrote before it
    // answered.
    let text = unsafe { std::slice::from_raw_parts((base + HOST_CALL_NAMES) as *const u8, len) };
    let called = String::from_utf8_lossy(text)
        .lines()
        .map(|l| match l.split_once('\t') {
            Some((s, n)) => (s.to_string(), Some(n.to_string())),
            None => (l.to_string(), None),
        })
        .collect();
    (called, unseen)
}

/// The symbols of the watched slots bound since they were last looked at (each slot is
/// unbound again), each with whether its image holds flang's runtime.
fn bound_since(watched: &Watched) -> Vec<(String, bool)> {
    let device_code = |addr: usize| watched.images.iter().any(|i| (i.span.0..i.span.1).contains(&addr));
    let mut bound = Vec::new();
    for image in watched.images.iter().filter(|i| i.unseen == 0) {
        for slot in &image.slots {
            // SAFETY: `refresh` keeps only slots that lie in a loaded image's writable GOT
            // (outside its RELRO range), 8-aligned; the image stays loaded until the loader's
            // count changes, which `refresh` notices before the next launch. The loader writes
            // the slot with one aligned store, as this does.
            let word = unsafe { &*(slot.got as *const AtomicU64) };
            let now = word.load(Ordering::Relaxed) as usize;
            if now == slot.unbound || device_code(now) {
                continue;
            }
            word.store(slot.unbound as u64, Ordering::Relaxed);
            bound.push((slot.symbol.clone(), image.flang_runtime));
        }
    }
    bound
}

/// A loaded object: its name, load bias and the range its segments span.
struct Loaded {
    name: String,
    bias: usize,
    span: (usize, usize),
}

/// Lists the device images again when the loader's counts changed.
fn refresh(watched: &mut Watched) {
    struct Found {
        loads: (u64, u64),
        objects: Vec<Loaded>,
    }
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> i32 {
        // SAFETY: dl_iterate_phdr passes a valid info (its program headers and name
        // included) and the `Found` given to it below.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Found>()) };
        found.loads = (info.dlpi_adds, info.dlpi_subs);
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_string_lossy();
        if !is_device_image(&name) {
            return 0;
        }
        // SAFETY: `dlpi_phnum` headers at `dlpi_phdr`.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let loads = headers.iter().filter(|h| h.p_type == libc::PT_LOAD);
        let bias = info.dlpi_addr as usize;
        let start = loads.clone().map(|h| bias + h.p_vaddr as usize).min().unwrap_or(0);
        let end = loads.map(|h| bias + (h.p_vaddr + h.p_memsz) as usize).max().unwrap_or(0);
        found.objects.push(Loaded { name: name.into_owned(), bias, span: (start, end) });
        0
    }
    let mut found = Found { loads: (0, 0), objects: Vec::new() };
    // SAFETY: `each` matches dl_iterate_phdr's callback type and only reads what it is given;
    // `found` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut found as *mut Found).cast()) };
    if found.loads == watched.loads {
        return;
    }
    // After an unload, a new image may have the old one's path and address: all are read again.
    let mut old = std::mem::take(&mut watched.images);
    if found.loads.1 != watched.loads.1 {
        old.clear();
    }
    for object in found.objects {
        let kept = old.iter().position(|i| i.name == object.name && i.bias == object.bias);
        match kept {
            Some(k) => watched.images.push(old.swap_remove(k)),
            None => watched.images.extend(watch(object)),
        }
    }
    watched.loads = found.loads;
}

/// The image `object` as watched: its slots of functions no GPU provides, read from its file.
fn watch(object: Loaded) -> Option<Image> {
    let plt = crate::plt_slots::parse(&std::fs::read(&object.name).ok()?).ok()?;
    let at = |vaddr: u64| object.bias.checked_add(usize::try_from(vaddr).ok()?);
    let in_relro = |got: u64| plt.relro.is_some_and(|(a, b)| (a..b).contains(&got));
    let mut slots = Vec::new();
    // A slot the loader makes read-only after relocating is bound by then (`-z now`).
    let mut read_only = false;
    for s in plt.slots.iter().filter(|s| omp_gpu_libs::no_gpu_provides(&s.symbol)) {
        let (Some(got), Some(unbound)) = (at(s.got), at(s.unbound)) else { return None };
        if !got.is_multiple_of(8) || !(object.span.0..object.span.1).contains(&got) {
            return None;
        }
        read_only |= in_relro(s.got);
        slots.push(Slot { got, unbound, symbol: s.symbol.clone() });
    }
    let lazy_entry = plt
        .plt_got
        .and_then(|g| at(g.checked_add(16)?))
        .filter(|&a| a.is_multiple_of(8) && a >= object.span.0 && a + 8 <= object.span.1);
    // The loader installs its lazy-binding entry in the GOT's third word only when it binds
    // lazily (GNU ld puts the GOT's first three words in the RELRO range: read-only then).
    // SAFETY: the word lies within the loaded image's segments (checked above), 8-aligned,
    // and is only read.
    let lazy = lazy_entry.is_some_and(|a| unsafe { &*(a as *const AtomicU64) }.load(Ordering::Relaxed) != 0);
    let unseen = match () {
        _ if slots.is_empty() => 0,
        _ if plt.bind_now || read_only => UNSEEN_LINKED_NOW,
        _ if !lazy => UNSEEN_BOUND_AT_LOAD,
        _ => 0,
    };
    let flang_runtime = plt.flang_runtime;
    Some(Image { name: object.name, bias: object.bias, span: object.span, slots, unseen, flang_runtime })
}

/// The name of the C++ symbol `symbol`, shortened, by the C++ library's demangler where the
/// worker has one loaded.
fn demangle(symbol: &str) -> Option<String> {
    type Demangle =
        unsafe extern "C" fn(*const libc::c_char, *mut libc::c_char, *mut usize, *mut libc::c_int) -> *mut libc::c_char;
    let symbol = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__cxa_demangle".as_ptr()) };
    if f.is_null() {
        return None;
    }
    let mut status = 0;
    // SAFETY: `__cxa_demangle` has this type (the Itanium C++ ABI); with a null buffer it
    // returns a new malloc'd string or null, which is freed here.
    unsafe {
        let f = std::mem::transmute::<*mut libc::c_void, Demangle>(f);
        let out = f(symbol.as_ptr(), std::ptr::null_mut(), std::ptr::null_mut(), &mut status);
        if out.is_null() {
            return None;
        }
        let name = std::ffi::CStr::from_ptr(out).to_string_lossy().into_owned();
        libc::free(out.cast());
        (status == 0).then(|| omp_gpu_libs::short_cxx_name(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plt_slots::tests::{shared_object, CALLS_FOPEN};

    /// Loads the shared object at `path` as omp-plugin-host loads a device image (a memfd,
    /// through /proc/self/fd, lazily), and finds `name` in it.
    fn load_as_device_image(path: &std::path::Path, name: &std::ffi::CStr) -> (usize, i32, usize) {
        let bytes = std::fs::read(path).unwrap();
        // SAFETY: memfd_create with a NUL-terminated name; dlopen and dlsym with
        // NUL-terminated strings; the memfd is written with our own buffer.
        unsafe {
            let fd = libc::memfd_create(c"omp-test-image".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            assert_eq!(libc::write(fd, bytes.as_ptr().cast(), bytes.len()), bytes.len() as isize);
            let path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap();
            let handle = libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_GLOBAL);
            assert!(!handle.is_null());
            let f = libc::dlsym(handle, name.as_ptr());
            assert!(!f.is_null());
            (handle as usize, fd, f as usize)
        }
    }

    #[test]
    fn a_call_is_named_after_the_launch_that_made_it_and_again_after_the_next() {
        let dir = std::env::temp_dir().join(format!("omp-gpu-calls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lazy = shared_object(CALLS_FOPEN, &[], &dir, "lazy");
        let now = shared_object(CALLS_FOPEN, &["-Wl,-z,now"], &dir, "now");
        let (handle, fd, log_it) = load_as_device_image(&lazy, c"log_it");
        // SAFETY: `log_it` is the image's `int log_it(int)`.
        let log_it = unsafe { std::mem::transmute::<usize, extern "C" fn(i32) -> i32>(log_it) };
        let launch = |take: i32| {
            before_launch();
            assert_eq!(log_it(take), take);
            let (mut called, unseen) = after_launch();
            called.sort();
            assert_eq!(unseen, 0);
            called.into_iter().map(|(s, _)| s).collect::<Vec<_>>()
        };
        assert!(launch(0).is_empty(), "the branch not taken calls nothing");
        assert_eq!(launch(1), ["fclose", "fopen"]);
        // Unbound again: the next launch that calls them is named too.
        assert_eq!(launch(1), ["fclose", "fopen"]);
        assert!(launch(0).is_empty());
        // An image whose calls the loader bound as it loaded it: said, never named.
        let (handle_now, fd_now, log_now) = load_as_device_image(&now, c"log_it");
        // SAFETY: as above.
        let log_now = unsafe { std::mem::transmute::<usize, extern "C" fn(i32) -> i32>(log_now) };
        before_launch();
        assert_eq!(log_now(1), 1);
        let (called, unseen) = after_launch();
        assert!(called.is_empty(), "{called:?}");
        assert_eq!(unseen, UNSEEN_LINKED_NOW);
        // SAFETY: the handles and fds opened above, each closed once.
        unsafe {
            libc::dlclose(handle as *mut libc::c_void);
            libc::dlclose(handle_now as *mut libc::c_void);
            libc::close(fd);
            libc::close(fd_now);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_round_trip_through_the_header() {
        let mut page = vec![0u64; 512];
        let base = page.as_mut_ptr() as usize;
        let called = vec![("fopen".to_string(), None), ("_Znwm".to_string(), Some("operator new".to_string()))];
        // SAFETY: `page` is a 4096-byte, 8-aligned buffer standing for the header page.
        let back = unsafe {
            write(base, &called, UNSEEN_BOUND_AT_LOAD);
            read(base)
        };
        assert_eq!(back, (called, UNSEEN_BOUND_AT_LOAD));
        // What does not fit is left out, whole names only.
        let many: Vec<_> = (0..200).map(|i| (format!("function_number_{i}"), None)).collect();
        // SAFETY: as above.
        let (back, _) = unsafe {
            write(base, &many, 0);
            read(base)
        };
        assert!(back.len() > 10 && back.len() < 200 && back[..] == many[..back.len()]);
    }
}
