//! A record's description (`NAME.json`, docs/replay.md) and the names of its files: what
//! [`crate::record`] writes beside the memory files, for `omp-replay` to read.

use crate::arena::Arena;
use crate::record::{Pending, FORMAT_VERSION};
use omp_plugin::LaunchConfig;
use std::fmt::Write as _;
use std::path::PathBuf;

use omp_format::json::quote as json_string;

/// A launch as a record describes it: the device, the kernel's arguments (after `dyn_ptr`),
/// its configuration and the device memory it ran on.
#[derive(Clone, Copy)]
pub(crate) struct Launched<'a> {
    pub(crate) device: u32,
    pub(crate) args: &'a [usize],
    pub(crate) config: &'a LaunchConfig,
    pub(crate) arena: &'a Arena,
}

/// How a launch that failed (its worker died) is described: the error it failed with, and
/// whether its recorded memory is from before the launch (it was chosen for recording) or
/// as the fault left it.
pub(crate) struct Faulted<'a> {
    pub(crate) reason: &'a str,
    pub(crate) memory_before_launch: bool,
}

/// A kernel name as a file name: letters, digits and `_` kept, the rest `_` (no `.`: the
/// record's files are this name with an extension each, so a dot would cut the name short).
pub(crate) fn file_name(kernel: &str) -> String {
    let s: String = kernel.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if s.is_empty() {
        "kernel".to_string()
    } else {
        s
    }
}

/// The libraries the worker's images bind to (this runtime and libomp), which a replay
/// loads before the image so that it binds to the same ones.
fn image_libraries() -> Vec<PathBuf> {
    let mut libs: Vec<PathBuf> = Vec::new();
    for lib in [crate::spawn::object_providing(c"__kmpc_fork_call"), crate::spawn::own_object()].into_iter().flatten() {
        if !libs.contains(&lib) {
            libs.push(lib);
        }
    }
    libs
}

/// The description (`NAME.json`). Addresses and argument values are hexadecimal strings (a
/// JSON number cannot hold every 64-bit value exactly); sizes and counts are numbers. A
/// launch that failed has no `Output` (there is no memory after the kernel to verify
/// against) and says how it failed (`Fault`) and when its memory was taken.
pub(crate) fn describe(p: &Pending, l: &Launched, fault: Option<&Faulted>) -> String {
    let Launched { device, args, config, arena } = *l;
    let file = |ext: &str| {
        json_string(
            &p.base.with_extension(ext).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(),
        )
    };
    let mut j = String::new();
    let _ = writeln!(j, "{{");
    let _ = writeln!(j, "  \"FormatVersion\": {FORMAT_VERSION},");
    let _ = writeln!(j, "  \"Producer\": {},", json_string(&format!("omprs {}", env!("CARGO_PKG_VERSION"))));
    let _ = writeln!(j, "  \"Name\": {},", json_string(&p.name));
    let _ = writeln!(j, "  \"DeviceId\": {device},");
    let _ = writeln!(j, "  \"Image\": {},", file("image"));
    let _ = writeln!(j, "  \"ImageSize\": {},", p.image.len());
    let _ = writeln!(j, "  \"NumTeams\": {},", config.num_teams[0]);
    let _ = writeln!(j, "  \"NumThreads\": {},", config.thread_limit[0]);
    let _ = writeln!(j, "  \"LoopTripCount\": {},", config.tripcount);
    let _ = writeln!(j, "  \"SharedMemorySize\": {},", config.dyn_group_mem);
    let _ = writeln!(j, "  \"WithDynPtr\": {},", config.with_dyn_ptr);
    let _ = writeln!(j, "  \"VAllocAddr\": \"0x{:x}\",", arena.base());
    let _ = writeln!(j, "  \"VAllocSize\": {},", arena.size());
    let libs: Vec<String> = image_libraries().iter().map(|l| json_string(&l.to_string_lossy())).collect();
    let _ = writeln!(j, "  \"Libraries\": [{}],", libs.join(", "));
    let _ = writeln!(j, "  \"NumArgs\": {},", args.len());
    let _ = writeln!(j, "  \"Args\": [");
    for (i, &a) in args.iter().enumerate() {
        let into = p.allocations.iter().position(|&(addr, size)| a >= addr && a < addr + size);
        let comma = if i + 1 < args.len() { "," } else { "" };
        match into {
            Some(k) => {
                let _ = writeln!(
                    j,
                    "    {{ \"Value\": \"0x{a:x}\", \"Allocation\": {k}, \"Offset\": {} }}{comma}",
                    a - p.allocations[k].0
                );
            }
            None => {
                let _ = writeln!(j, "    {{ \"Value\": \"0x{a:x}\" }}{comma}");
            }
        }
    }
    let _ = writeln!(j, "  ],");
    let memory: usize = p.allocations.iter().map(|a| a.1).sum();
    let _ = writeln!(j, "  \"Input\": {},", file("record_input"));
    match fault {
        None => {
            let _ = writeln!(j, "  \"Output\": {},", file("record_output"));
        }
        Some(f) => {
            let _ = writeln!(j, "  \"Fault\": {},", json_string(f.reason));
            let _ = writeln!(j, "  \"InputAfterFault\": {},", !f.memory_before_launch);
        }
    }
    if !p.globals.is_empty() {
        let _ = writeln!(j, "  \"Globals\": {},", file("globals"));
        let _ = writeln!(j, "  \"GlobalVariables\": [");
        let mut offset = 0usize;
        for (i, (name, addr, size)) in p.globals.iter().enumerate() {
            let comma = if i + 1 < p.globals.len() { "," } else { "" };
            let _ = writeln!(
                j,
                "    {{ \"Name\": {}, \"Addr\": \"0x{addr:x}\", \"Size\": {size}, \"FileOffset\": {offset} }}{comma}",
                json_string(name)
            );
            offset += size;
        }
        let _ = writeln!(j, "  ],");
    }
    let _ = writeln!(j, "  \"MemorySize\": {memory},");
    let _ = writeln!(j, "  \"Allocations\": [");
    let mut offset = 0usize;
    for (i, &(addr, size)) in p.allocations.iter().enumerate() {
        let comma = if i + 1 < p.allocations.len() { "," } else { "" };
        let _ = writeln!(j, "    {{ \"Addr\": \"0x{addr:x}\", \"Size\": {size}, \"FileOffset\": {offset} }}{comma}");
        offset += size;
    }
    let _ = writeln!(j, "  ]");
    let _ = writeln!(j, "}}");
    j
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_keep_letters_digits_and_underscores() {
        assert_eq!(file_name("__omp_offloading_10303_2a1c3b1_sum_l5"), "__omp_offloading_10303_2a1c3b1_sum_l5");
        assert_eq!(file_name("a/../b"), "a____b");
        assert_eq!(file_name(".x"), "_x");
        assert_eq!(file_name("k.a"), "k_a", "a dot would be taken for the start of an extension");
        assert_eq!(file_name(""), "kernel");
    }
}
