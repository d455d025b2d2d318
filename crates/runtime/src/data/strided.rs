//! Strided (non-contiguous) updates.

use super::diagnose::MapError;
use crate::map_type as mt;
use crate::{info, DeviceCtx, MapName, Runtime};
use omp_plugin::host_memory;

impl Runtime {
    /// Strided updates: `begin` points to `dims` descriptors of {offset, count, stride}.
    pub(super) fn update_non_contiguous(
        &self,
        dev: &DeviceCtx,
        base: usize,
        descs: usize,
        dims: usize,
        ty: i64,
        name: MapName,
    ) -> Result<(), MapError> {
        if dims == 0 {
            return Ok(());
        }
        let dim: Vec<(u64, u64, u64)> = (0..dims)
            .map(|d| {
                let p = descs + d * 24;
                // SAFETY: for a NON_CONTIG entry the compiler passes, as `begin`, an array of
                // `dims` {offset, count, stride} descriptors of 24 bytes each.
                unsafe { (host_memory::read_u64(p), host_memory::read_u64(p + 8), host_memory::read_u64(p + 16)) }
            })
            .collect();
        // Trailing dimensions that are contiguous with the one before merge into it.
        let mut last = dims - 1;
        while last > 0 && dim[last].1.wrapping_mul(dim[last].2) == dim[last - 1].2 {
            last -= 1;
        }
        let piece = (dim[last].1 * dim[last].2) as usize;
        let mut idx = vec![0u64; last + 1];
        loop {
            let off: u64 = (0..=last).map(|d| (dim[d].0 + if d == last { 0 } else { idx[d] }) * dim[d].2).sum();
            self.update_contiguous(dev, base + off as usize, piece, ty & !mt::NON_CONTIG, name)?;
            // Advance the odometer over all but the last (contiguous) dimension.
            let mut d = last;
            loop {
                if d == 0 {
                    return Ok(());
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < dim[d].1 {
                    break;
                }
                idx[d] = 0;
            }
        }
    }
}

/// More dimensions than any array a program declares: a non-contiguous update's size beyond
/// this is not a dimension count.
pub(super) const MAX_DIMS: i64 = 64;

/// Whether a map-name string's last array section has a stride other than 1
/// (`a.p[0:n:2]`): the name is the only trace of it when the compiler dropped the stride.
pub(super) fn strided_name(name: MapName) -> bool {
    let Some(s) = info::map_name(name) else { return false };
    let expr = omp_format::SourceLocation::from_map_name(s).name;
    let Some(body) = expr.strip_suffix(']') else { return false };
    // The last section's bracket: scan back to the '[' that opens it.
    let mut depth = 0;
    let mut open = None;
    for (i, c) in body.char_indices().rev() {
        match c {
            ']' | ')' => depth += 1,
            '(' => depth -= 1,
            '[' if depth == 0 => {
                open = Some(i);
                break;
            }
            '[' => depth -= 1,
            _ => {}
        }
    }
    let Some(open) = open else { return false };
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, open + 1);
    for (i, c) in body[open + 1..].char_indices().map(|(i, c)| (i + open + 1, c)) {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ':' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts.len() == 3 && parts[2].trim() != "1"
}
