//! `omp-replay --check`: what the mapping checker's page tracking can tell in one process,
//! about a replayed kernel and the recorded allocations. Only the pages that hold recorded
//! allocations are mapped ([`crate::memory`]), so an access anywhere else faults: a fault
//! handler names the address, whether it was read or written, and the allocation it is
//! nearest to (N bytes past its end, or before its start). After the kernel, the bytes of
//! those pages that no allocation holds (zero when mapped) are compared with zero: a write
//! there is a write out of bounds that no page protection could see.
//!
//! What it cannot tell (the checker in the program can): an access past one allocation that
//! lands inside another, a read of the unused bytes of an allocation's page, and everything
//! that needs the program's mappings (stale or uninitialized data, missing `from`). A record
//! made under `LIBOMPTARGET_CHECK` places every allocation against the end of its page (up
//! to 15 bytes for alignment), so there a read or write just past an array faults at once.

use crate::desc::Allocation;
use std::sync::OnceLock;

/// The allocations the fault handler compares a faulting address with.
static ALLOCATIONS: OnceLock<Box<[(usize, usize)]>> = OnceLock::new();

/// Farther than this from every allocation, an address is not named by one.
const NEAR: usize = 1 << 20;

/// A message built without allocating (the fault handler builds one).
struct Line {
    bytes: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line { bytes: [0; 512], len: 0 }
    }

    fn text(&mut self, s: &str) -> &mut Line {
        for &b in s.as_bytes() {
            if self.len < self.bytes.len() {
                self.bytes[self.len] = b;
                self.len += 1;
            }
        }
        self
    }

    fn number(&mut self, mut v: usize, base: usize) -> &mut Line {
        let mut digits = [0u8; 24];
        let mut n = 0;
        loop {
            digits[n] = b"0123456789abcdef"[v % base];
            n += 1;
            v /= base;
            if v == 0 {
                break;
            }
        }
        if base == 16 {
            self.text("0x");
        }
        for &d in digits[..n].iter().rev() {
            let c = [d];
            // Digits are ASCII.
            self.text(std::str::from_utf8(&c).unwrap_or("?"));
        }
        self
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("omp-replay: check: (message lost)")
    }
}

/// Says where `addr` is against `allocations` (sorted by address): `N bytes past the end of
/// allocation K (0x…, S bytes)`, `N bytes before the start of …`, or that no allocation is near.
fn place(line: &mut Line, addr: usize, allocations: &[(usize, usize)]) {
    let mut best: Option<(usize, usize, bool)> = None; // (distance, index, past the end)
    for (k, &(start, size)) in allocations.iter().enumerate() {
        let end = start + size;
        let (distance, past) = if addr >= end {
            (addr - end, true)
        } else if addr < start {
            (start - addr, false)
        } else {
            (0, true)
        };
        if best.is_none_or(|(d, _, _)| distance < d) {
            best = Some((distance, k, past));
        }
    }
    match best.filter(|&(d, _, _)| d <= NEAR) {
        Some((distance, k, past)) => {
            let (start, size) = allocations[k];
            line.number(distance, 10).text(if past { " bytes past the end of" } else { " bytes before the start of" });
            line.text(" allocation ").number(k, 10).text(" (").number(start, 16).text(", ");
            line.number(size, 10).text(" bytes)");
        }
        None => {
            line.text("no recorded device memory (a host pointer, or a pointer the kernel computed wrongly)");
        }
    }
}

extern "C" fn on_fault(_sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler of SIGSEGV/SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    let write = was_write(context);
    let mut line = Line::new();
    line.text("omp-replay: check: the kernel ").text(match write {
        Some(true) => "wrote ",
        Some(false) => "read ",
        None => "accessed ",
    });
    line.number(addr, 16).text(", ");
    place(&mut line, addr, ALLOCATIONS.get().map_or(&[], |a| a));
    line.text("\n");
    let s = line.as_str().as_bytes();
    // SAFETY: write(2) and _exit(2) are async-signal-safe; `s` is a live stack buffer.
    unsafe {
        libc::write(2, s.as_ptr().cast(), s.len());
        libc::_exit(1);
    }
}

/// Whether the faulting access was a write (x86-64 page-fault error code, bit 1).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn was_write(context: *mut libc::c_void) -> Option<bool> {
    if context.is_null() {
        return None;
    }
    // SAFETY: an SA_SIGINFO handler's third argument is the interrupted thread's ucontext.
    let err = unsafe { (*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_ERR as usize] };
    Some(err & 2 != 0)
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn was_write(_context: *mut libc::c_void) -> Option<bool> {
    None
}

/// From now on an access of the replayed kernel outside the mapped pages is reported,
/// against `allocations`, and ends the process with status 1.
pub fn watch_faults(allocations: &[Allocation]) {
    let _ = ALLOCATIONS.set(allocations.iter().map(|a| (a.addr, a.size)).collect());
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        // SAFETY: a zeroed sigaction is valid; the handler is an SA_SIGINFO handler that only
        // reads its arguments and a set-once table, and calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// After the kernel: the first byte written in the mapped pages `ranges` outside every
/// allocation (those bytes were zero when mapped), said as a finding.
///
/// # Safety
/// `ranges` must be mapped and readable, and no kernel may be running.
pub unsafe fn written_outside(ranges: &[(usize, usize)], allocations: &[Allocation]) -> Option<String> {
    let allocs: Vec<(usize, usize)> = allocations.iter().map(|a| (a.addr, a.size)).collect();
    for &(start, end) in ranges {
        let mut at = start;
        let inside = allocs.iter().filter(|&&(a, s)| a < end && a + s > start);
        let gaps = inside.map(|&(a, s)| (a, a + s)).chain([(end, end)]).map(|(a, e)| {
            let gap = (at, a.max(at));
            at = e;
            gap
        });
        for (from, to) in gaps.collect::<Vec<_>>() {
            // SAFETY: the caller's promise: `[from, to)` lies in a mapped range, and nothing
            // writes it while this slice lives.
            let bytes = unsafe { std::slice::from_raw_parts(from as *const u8, to - from) };
            if let Some(i) = bytes.iter().position(|&b| b != 0) {
                let mut line = Line::new();
                line.text("omp-replay: check: the kernel wrote ").number(from + i, 16).text(", ");
                place(&mut line, from + i, &allocs);
                return Some(line.as_str().to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(addr: usize, allocs: &[(usize, usize)]) -> String {
        let mut l = Line::new();
        place(&mut l, addr, allocs);
        l.as_str().to_string()
    }

    #[test]
    fn an_address_is_named_by_its_nearest_allocation() {
        let allocs = [(0x1000, 0x100), (0x3000, 16)];
        assert_eq!(placed(0x1100, &allocs), "0 bytes past the end of allocation 0 (0x1000, 256 bytes)");
        assert_eq!(placed(0x1108, &allocs), "8 bytes past the end of allocation 0 (0x1000, 256 bytes)");
        assert_eq!(placed(0x2ff0, &allocs), "16 bytes before the start of allocation 1 (0x3000, 16 bytes)");
        assert_eq!(placed(0x3010, &allocs), "0 bytes past the end of allocation 1 (0x3000, 16 bytes)");
        assert!(placed(0x7fff_0000_0000, &allocs).starts_with("no recorded device memory"));
        assert!(placed(0x10, &[]).starts_with("no recorded device memory"));
    }

    #[test]
    fn a_write_between_allocations_of_a_mapped_page_is_found() {
        let page = vec![0u8; 3 * 4096];
        let base = page.as_ptr() as usize;
        let allocations = [Allocation { addr: base + 64, size: 100, file_offset: 0 }];
        let ranges = [(base, base + page.len())];
        // SAFETY: `page` is this test's own readable buffer.
        assert_eq!(unsafe { written_outside(&ranges, &allocations) }, None);
        let mut page = page;
        page[64] = 1; // inside the allocation: fine
        page[64 + 100 + 4] = 7;
        // SAFETY: as above.
        let found = unsafe { written_outside(&ranges, &allocations) }.unwrap();
        assert_eq!(
            found,
            format!(
                "omp-replay: check: the kernel wrote 0x{:x}, 4 bytes past the end of allocation 0 (0x{:x}, 100 bytes)",
                base + 168,
                base + 64
            )
        );
    }
}
