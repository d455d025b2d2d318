//! Device memory the program allocates itself (`omp_target_alloc`): watched, like mapped
//! memory, for kernels that read what nothing wrote, and reported when never freed.

use super::*;
use omp_plugin::{PageAccess, TRACK_PAGE};
use omp_runtime::trace::ApiOp;

/// One live `omp_target_alloc` block: its size, and which of its pages hold data.
pub(crate) struct RawBlock {
    bytes: usize,
    init: Vec<bool>,
}

/// The first page of a block at `ptr`.
fn first_page(ptr: usize) -> usize {
    ptr & !(TRACK_PAGE - 1)
}

impl RawBlock {
    fn new(ptr: usize, bytes: usize) -> Self {
        let pages = (ptr + bytes).next_multiple_of(TRACK_PAGE).saturating_sub(first_page(ptr)) / TRACK_PAGE;
        RawBlock { bytes, init: vec![false; pages] }
    }

    /// Something wrote block offsets `[s, e)`: their pages hold data (a page partly written
    /// counts as written: a missed finding, never a false one).
    fn written(&mut self, ptr: usize, s: usize, e: usize) {
        let (first, last) =
            ((ptr + s - first_page(ptr)) / TRACK_PAGE, (ptr + e - first_page(ptr)).div_ceil(TRACK_PAGE));
        for p in first..last.min(self.init.len()) {
            self.init[p] = true;
        }
    }
}

/// The watched pages of `omp_target_alloc` blocks during one kernel.
#[derive(Default)]
pub(crate) struct RawWatch {
    /// Page → (device, block address), page index.
    pub(crate) pages: HashMap<usize, ((i32, usize), usize)>,
    /// Pages left unwatched: taken as written after the kernel.
    unwatched: Vec<((i32, usize), usize)>,
}

impl Checker {
    /// A device memory API call: blocks come and go, and copies and memsets write them.
    /// Memory the host reaches too (`host_reachable`: `llvm_omp_target_alloc_host`,
    /// `…_shared`) is not followed: the host may write it unseen.
    pub(crate) fn raw_api(&self, op: ApiOp, device: i32, ptr: usize, host_reachable: usize, bytes: usize) {
        let mut blocks = self.raw.lock();
        match op {
            ApiOp::Alloc if ptr != 0 && bytes > 0 && host_reachable == 0 => {
                blocks.insert((device, ptr), RawBlock::new(ptr, bytes));
            }
            ApiOp::Free => {
                blocks.remove(&(device, ptr));
            }
            ApiOp::CopyToDevice | ApiOp::CopyWithinDevice | ApiOp::Memset => {
                Self::raw_written(&mut blocks, device, ptr, bytes);
            }
            _ => {}
        }
    }

    /// Device bytes `[tgt, tgt+bytes)` were written by a copy: the blocks they lie in hold data.
    pub(crate) fn raw_copied(&self, device: i32, tgt: usize, bytes: usize) {
        Self::raw_written(&mut self.raw.lock(), device, tgt, bytes);
    }

    fn raw_written(blocks: &mut BTreeMap<(i32, usize), RawBlock>, device: i32, tgt: usize, bytes: usize) {
        let end = tgt.saturating_add(bytes);
        for (&(_, ptr), b) in blocks.range_mut((device, 0)..(device, end)).rev() {
            if ptr + b.bytes <= tgt {
                break;
            }
            let (s, e) = (tgt.max(ptr) - ptr, end.min(ptr + b.bytes) - ptr);
            b.written(ptr, s, e);
        }
    }

    /// The pages of `device`'s blocks that nothing wrote, to watch during the next kernel
    /// (those `taken` are watched for mappings already, and `room` bounds how many).
    pub(crate) fn raw_watch(&self, device: i32, taken: &HashMap<usize, impl Sized>, room: usize) -> RawWatch {
        let mut w = RawWatch::default();
        if !self.findings() {
            return w;
        }
        for (&key, b) in self.raw.lock().range((device, 0)..=(device, usize::MAX)) {
            for i in (0..b.init.len()).filter(|&i| !b.init[i]) {
                let page = first_page(key.1) + i * TRACK_PAGE;
                if w.pages.len() < room && !taken.contains_key(&page) {
                    w.pages.insert(page, (key, i));
                } else {
                    w.unwatched.push((key, i));
                }
            }
        }
        w
    }

    /// The kernel of `construct` ran to its end: what it did to the blocks' watched pages.
    pub(crate) fn raw_done(&self, w: RawWatch, accesses: &[PageAccess], construct: u64) {
        let mut found: Vec<(i32, usize)> = Vec::new();
        {
            let mut blocks = self.raw.lock();
            for (key, i) in w.unwatched {
                if let Some(b) = blocks.get_mut(&key).filter(|b| i < b.init.len()) {
                    b.init[i] = true;
                }
            }
            for a in accesses {
                let Some(&(key, i)) = w.pages.get(&a.page) else { continue };
                // Another thread may have freed the block and allocated one anew meanwhile.
                let Some(b) = blocks.get_mut(&key).filter(|b| i < b.init.len()) else { continue };
                if a.read_first && !b.init[i] {
                    found.push(key);
                }
                if a.written {
                    b.init[i] = true;
                }
            }
        }
        found.dedup();
        for (device, ptr) in found {
            let (kernel, loc) = self.kernel_of(construct);
            if !self.reported.lock().0.insert((finding::UNINIT, device, ptr, loc)) {
                continue;
            }
            let at = report::place_for(loc, MapName::NONE, Some(&kernel));
            report::finding(
                "uninitialized device memory",
                format_args!(
                    "kernel {kernel} at {at} read the omp_target_alloc memory at 0x{ptr:x} on device {device} before \
                     anything wrote it (checked per 4 KiB page); copy data into it (omp_target_memcpy) or write it on \
                     the device before reading it"
                ),
            );
        }
    }

    /// The program is ending: blocks never freed leaked.
    pub(crate) fn raw_leaks(&self) {
        let blocks = std::mem::take(&mut *self.raw.lock());
        if !self.findings() {
            return;
        }
        for (&(device, ptr), b) in &blocks {
            report::finding(
                "leak",
                format_args!(
                    "the omp_target_alloc memory at 0x{ptr:x} ({} on device {device}) is never freed; add \
                     omp_target_free(ptr, {device}) when it is no longer needed",
                    report::bytes(b.bytes)
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_write_the_pages_they_touch_in_every_block_they_overlap() {
        let checker = Checker::new(CheckMode::All).expect("checking is on");
        let (a, b) = (0x10_0010, 0x10_4000);
        checker.raw_api(ApiOp::Alloc, 0, a, 0, 3 * TRACK_PAGE);
        checker.raw_api(ApiOp::Alloc, 0, b, 0, TRACK_PAGE);
        checker.raw_api(ApiOp::CopyToDevice, 0, a + 3 * TRACK_PAGE - 8, 0, TRACK_PAGE);
        let blocks = checker.raw.lock();
        assert_eq!(blocks[&(0, a)].init, [false, false, false, true], "a spans four pages; the last one was written");
        assert_eq!(blocks[&(0, b)].init, [true], "the copy's end fell in b");
    }
}
