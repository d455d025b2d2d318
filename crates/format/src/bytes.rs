//! Bounds-checked little-endian reads.

use crate::FormatError;

/// Reads `N` bytes at `off`, or reports which field was cut short.
pub fn array<const N: usize>(buf: &[u8], off: u64, what: &'static str) -> Result<[u8; N], FormatError> {
    let start = usize::try_from(off).ok();
    let slice = start.and_then(|s| s.checked_add(N).map(|e| (s, e))).and_then(|(s, e)| buf.get(s..e));
    match slice {
        Some(s) => {
            let mut out = [0u8; N];
            out.copy_from_slice(s);
            Ok(out)
        }
        None => Err(FormatError::Truncated { what, need: off.saturating_add(N as u64), have: buf.len() as u64 }),
    }
}

pub fn u16_at(buf: &[u8], off: u64, what: &'static str) -> Result<u16, FormatError> {
    array::<2>(buf, off, what).map(u16::from_le_bytes)
}

pub fn u32_at(buf: &[u8], off: u64, what: &'static str) -> Result<u32, FormatError> {
    array::<4>(buf, off, what).map(u32::from_le_bytes)
}

pub fn u64_at(buf: &[u8], off: u64, what: &'static str) -> Result<u64, FormatError> {
    array::<8>(buf, off, what).map(u64::from_le_bytes)
}

/// The sub-slice `[off, off+len)`, checked.
pub fn range<'a>(buf: &'a [u8], off: u64, len: u64, what: &'static str) -> Result<&'a [u8], FormatError> {
    let end = off.checked_add(len);
    match end {
        Some(end) if end <= buf.len() as u64 => Ok(&buf[off as usize..end as usize]),
        _ => Err(FormatError::Truncated { what, need: off.saturating_add(len), have: buf.len() as u64 }),
    }
}

/// A NUL-terminated string starting at `off`.
pub fn c_str<'a>(buf: &'a [u8], off: u64, what: &'static str) -> Result<&'a str, FormatError> {
    let tail = range(buf, off, (buf.len() as u64).saturating_sub(off), what)?;
    let end = tail
        .iter()
        .position(|&b| b == 0)
        .ok_or(FormatError::Invalid { what, detail: "string is not NUL-terminated".into() })?;
    std::str::from_utf8(&tail[..end]).map_err(|_| FormatError::Invalid { what, detail: "string is not UTF-8".into() })
}
