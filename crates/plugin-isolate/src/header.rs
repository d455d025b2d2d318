//! The arena's header page: where the program and its worker leave each other words. Every
//! offset in the page is named here, so that a new one cannot land on another unseen; the
//! modules that use them say what each word means.
//!
//! | bytes | word | written by | see |
//! |---|---|---|---|
//! | 0 | the worker mapped the arena ([`crate::arena::MAGIC`]) | worker | [`crate::arena`] |
//! | 64–87 | a fault: set, address, flags | worker | [`crate::track`] |
//! | 128–143 | the control block: address, length | program | [`crate::track`] |
//! | 192 | the worker gave up protections | worker | [`crate::track`] |
//! | 200 | a kernel's watch was dropped | worker | [`crate::track`] |
//! | 208 | a kernel's stack overflowed: its size | worker | [`crate::signals`] |
//! | 216, 224 | where globals are saved; that they were | program, worker | [`crate::record_globals`] |
//! | 1024, 1032 | the last kernel's stack use and heap peak | worker | [`crate::gpu_limits`] |
//! | 1040, 1048 | host calls: bytes of names, why unseen | worker | `gpu_calls` |
//! | 3072–4095 | host calls: the names | worker | `gpu_calls` |

use std::sync::atomic::AtomicU64;

/// The header's size: the arena's first page.
pub const SIZE: usize = 4096;

pub const ACKNOWLEDGED: usize = 0;
pub const FAULT_SET: usize = 64;
pub const FAULT_ADDR: usize = 72;
pub const FAULT_FLAGS: usize = 80;
pub const CTL_ADDR: usize = 128;
pub const CTL_LEN: usize = 136;
pub const TRACK_OFF: usize = 192;
pub const WATCH_DROPPED: usize = 200;
pub const STACK_OVERFLOW: usize = 208;
pub const GLOBALS_AREA: usize = 216;
pub const GLOBALS_SAVED: usize = 224;
pub const STACK_USE: usize = 1024;
pub const HEAP_PEAK: usize = 1032;
pub const HOST_CALLS: usize = 1040;
pub const CALLS_UNSEEN: usize = 1048;
/// Where the names of host calls begin in the page, and where they end.
pub const HOST_CALL_NAMES: usize = 3072;
pub const HOST_CALL_NAMES_END: usize = SIZE;

/// The header word at `offset` of the arena at `base`.
///
/// # Safety
/// `base` must be the address of a mapped arena (its first page readable and writable).
pub unsafe fn word<'a>(base: usize, offset: usize) -> &'a AtomicU64 {
    debug_assert!(offset.is_multiple_of(8) && offset < HOST_CALL_NAMES);
    // SAFETY: the caller's promise; the header page is 4096 bytes and `offset` is inside it
    // and 8-aligned.
    unsafe { &*((base + offset) as *const AtomicU64) }
}

/// Every word, for the layout check below.
const WORDS: [usize; 15] = [
    ACKNOWLEDGED,
    FAULT_SET,
    FAULT_ADDR,
    FAULT_FLAGS,
    CTL_ADDR,
    CTL_LEN,
    TRACK_OFF,
    WATCH_DROPPED,
    STACK_OVERFLOW,
    GLOBALS_AREA,
    GLOBALS_SAVED,
    STACK_USE,
    HEAP_PEAK,
    HOST_CALLS,
    CALLS_UNSEEN,
];

/// Whether every word has its own 8-aligned place before the names, and the names fit the page.
const fn laid_out(words: &[usize]) -> bool {
    let mut i = 0;
    while i < words.len() {
        if !words[i].is_multiple_of(8) || words[i] + 8 > HOST_CALL_NAMES {
            return false;
        }
        let mut j = i + 1;
        while j < words.len() {
            if words[i] == words[j] {
                return false;
            }
            j += 1;
        }
        i += 1;
    }
    HOST_CALL_NAMES < HOST_CALL_NAMES_END && HOST_CALL_NAMES_END <= SIZE
}

// A word added on top of another, or outside its part of the page, stops the build.
const _: () = assert!(laid_out(&WORDS), "two header words overlap, or one is misplaced");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_check_sees_a_clash_and_a_misplaced_word() {
        assert!(laid_out(&WORDS));
        assert!(!laid_out(&[FAULT_SET, TRACK_OFF, FAULT_SET]));
        assert!(!laid_out(&[FAULT_SET, FAULT_SET + 4]));
        assert!(!laid_out(&[HOST_CALL_NAMES]));
    }
}
