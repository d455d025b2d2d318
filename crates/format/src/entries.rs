//! Offload entry tables, in clang 19's 32-byte layout and clang 20+'s 56-byte layout.
//!
//! The table is read as bytes; pointer fields come back as plain addresses, which the ABI
//! layer interprets.

use crate::bytes::{u16_at, u32_at, u64_at};
use crate::FormatError;

const LEGACY_SIZE: usize = 32;
const NEW_SIZE: usize = 56;

/// Entry flag: a `declare target link` global (the entry is its reference pointer).
pub const FLAG_LINK: u32 = 0x1;
/// Entry flag: a `declare target indirect` function.
pub const FLAG_INDIRECT: u32 = 0x8;
/// Entry flag value (matched by equality): the `requires` entry.
pub const FLAG_REQUIRES: u32 = 0x10;
/// Entry flag (clang 22): an indirect vtable.
pub const FLAG_INDIRECT_VTABLE: u32 = 0x20;

/// Which layout a table was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryLayout {
    /// clang 19: `{addr, name, size, i32 flags, i32 data}`.
    Legacy,
    /// clang 20+: `{u64 0, u16 version=1, u16 kind, u32 flags, addr, name, size, data, aux}`.
    V1,
}

/// One offload entry, normalised to the newer layout's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadEntry {
    pub addr: u64,
    pub name: u64,
    pub size: u64,
    pub flags: u32,
    pub data: u64,
    /// Offload kind (1 = OpenMP); legacy entries are always OpenMP.
    pub kind: u16,
}

impl OffloadEntry {
    pub fn is_requires(&self) -> bool {
        self.flags == FLAG_REQUIRES
    }
    pub fn is_link(&self) -> bool {
        self.flags & FLAG_LINK != 0
    }
    pub fn is_indirect(&self) -> bool {
        self.flags & (FLAG_INDIRECT | FLAG_INDIRECT_VTABLE) != 0
    }
    /// A kernel: size 0 with a region-id address.
    pub fn is_kernel(&self) -> bool {
        self.size == 0 && self.addr != 0 && !self.is_requires()
    }
}

/// Decides the layout of a table from every entry, not just the first (LLVM 22 looks at the
/// first 8 bytes only and crashes on legacy tables that begin with a NULL-address entry).
///
/// A 56-byte entry has its reserved word zero, version 1 (0 in tables built by hand, as
/// LLVM's own `requires` test does) and a known offload kind; read at 56-byte strides, a
/// 32-byte table fails that on some entry (the third stride lands on a legacy entry's
/// flags, whose upper half, the would-be kind, is zero).
pub fn detect_layout(table: &[u8]) -> Result<EntryLayout, FormatError> {
    if table.is_empty() {
        return Ok(EntryLayout::V1);
    }
    if table.len().is_multiple_of(NEW_SIZE) {
        let all_v1 = table.chunks_exact(NEW_SIZE).all(|e| {
            let version = u16::from_le_bytes([e[8], e[9]]);
            let kind = u16::from_le_bytes([e[10], e[11]]);
            e[..8].iter().all(|&b| b == 0) && version <= 1 && (1..=4).contains(&kind)
        });
        if all_v1 {
            return Ok(EntryLayout::V1);
        }
    }
    if table.len().is_multiple_of(LEGACY_SIZE) {
        return Ok(EntryLayout::Legacy);
    }
    Err(FormatError::Invalid {
        what: "offload entry table",
        detail: format!("{} bytes is neither a 32-byte nor a 56-byte entry table", table.len()),
    })
}

/// Parses a whole entry table.
pub fn parse_entry_table(table: &[u8]) -> Result<(EntryLayout, Vec<OffloadEntry>), FormatError> {
    let layout = detect_layout(table)?;
    let entries = match layout {
        EntryLayout::Legacy => table
            .chunks_exact(LEGACY_SIZE)
            .map(|e| {
                Ok(OffloadEntry {
                    addr: u64_at(e, 0, "entry addr")?,
                    name: u64_at(e, 8, "entry name")?,
                    size: u64_at(e, 16, "entry size")?,
                    flags: u32_at(e, 24, "entry flags")?,
                    data: u64::from(u32_at(e, 28, "entry data")?),
                    kind: 1,
                })
            })
            .collect::<Result<Vec<_>, FormatError>>()?,
        EntryLayout::V1 => table
            .chunks_exact(NEW_SIZE)
            .map(|e| {
                Ok(OffloadEntry {
                    kind: u16_at(e, 10, "entry kind")?,
                    flags: u32_at(e, 12, "entry flags")?,
                    addr: u64_at(e, 16, "entry addr")?,
                    name: u64_at(e, 24, "entry name")?,
                    size: u64_at(e, 32, "entry size")?,
                    data: u64_at(e, 40, "entry data")?,
                })
            })
            .collect::<Result<Vec<_>, FormatError>>()?,
    };
    Ok((layout, entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(addr: u64, name: u64, size: u64, flags: u32, data: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(addr.to_le_bytes());
        v.extend(name.to_le_bytes());
        v.extend(size.to_le_bytes());
        v.extend(flags.to_le_bytes());
        v.extend(data.to_le_bytes());
        v
    }

    fn v1(addr: u64, name: u64, size: u64, flags: u32, data: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend(0u64.to_le_bytes());
        v.extend(1u16.to_le_bytes());
        v.extend(1u16.to_le_bytes());
        v.extend(flags.to_le_bytes());
        v.extend(addr.to_le_bytes());
        v.extend(name.to_le_bytes());
        v.extend(size.to_le_bytes());
        v.extend(data.to_le_bytes());
        v.extend(0u64.to_le_bytes());
        v
    }

    #[test]
    fn legacy_table_starting_with_requires_entry() {
        // A NULL-address requires entry first: the case LLVM 22 misreads.
        let mut t = legacy(0, 0x5000, 0, FLAG_REQUIRES, 1);
        t.extend(legacy(0x1000, 0x5010, 0, 0, 0));
        t.extend(legacy(0x2000, 0x5020, 4, 0, 0));
        // 96 bytes is not a multiple of 56, but make a 7-entry (224 byte) case too.
        let (layout, e) = parse_entry_table(&t).unwrap();
        assert_eq!(layout, EntryLayout::Legacy);
        assert!(e[0].is_requires());
        assert!(e[1].is_kernel());
        assert_eq!(e[2].size, 4);
    }

    #[test]
    fn legacy_table_whose_length_is_a_multiple_of_56() {
        // 7 legacy entries = 224 bytes = 4 * 56; the name pointers are not version 1.
        let mut t = legacy(0, 0x5000, 0, FLAG_REQUIRES, 1);
        for i in 0..6 {
            t.extend(legacy(0x1000 + i, 0x5010 + i, 0, 0, 0));
        }
        assert_eq!(detect_layout(&t).unwrap(), EntryLayout::Legacy);
    }

    #[test]
    fn new_layout() {
        let mut t = v1(0x1000, 0x5000, 0, 0, 0);
        t.extend(v1(0x2000, 0x5010, 8, FLAG_LINK, 0));
        t.extend(v1(0, 0x5020, 0, FLAG_REQUIRES, 8));
        let (layout, e) = parse_entry_table(&t).unwrap();
        assert_eq!(layout, EntryLayout::V1);
        assert!(e[1].is_link());
        assert!(e[2].is_requires());
        assert_eq!(e[2].data, 8);
    }

    #[test]
    fn hand_built_version_0_requires_entries() {
        // LLVM 22's offloading/requires.c registers two such entries: 112 bytes.
        let mut t = v1(0, 0x5000, 0, FLAG_REQUIRES, 1);
        t.extend(v1(0, 0x5000, 0, FLAG_REQUIRES, 2));
        for e in t.chunks_exact_mut(NEW_SIZE) {
            e[8] = 0; // version 0
        }
        let (layout, e) = parse_entry_table(&t).unwrap();
        assert_eq!(layout, EntryLayout::V1);
        assert!(e.iter().all(|e| e.is_requires()));
        assert_eq!((e[0].data, e[1].data), (1, 2));
    }

    #[test]
    fn legacy_kernels_table_of_224_bytes_is_not_v1() {
        // 7 kernel entries whose name pointers' low halves look like (version 1, kind 1).
        let mut t = Vec::new();
        for i in 0..7 {
            t.extend(legacy(0, 0x0001_0001 + (i << 32), 0, 0, 0));
        }
        assert_eq!(detect_layout(&t).unwrap(), EntryLayout::Legacy);
    }

    #[test]
    fn empty_and_ragged() {
        assert_eq!(parse_entry_table(&[]).unwrap().1.len(), 0);
        assert!(parse_entry_table(&[0u8; 33]).is_err());
    }
}
