//! What the plugin reads in a device image before the driver sees it: the SM a cubin was
//! built for (to refuse a mismatch with a clear message instead of a launch failure), and a
//! kernel's `<name>_kernel_environment` (its execution mode and launch bounds), read from the
//! image as LLVM's plugins read it. Pure: bytes in, values out.

use crate::launch_rules::{ExecMode, KernelEnv};
use omp_format::elf::EM_CUDA;

/// An SM version as `major * 10 + minor` (`sm_90` is 90).
pub type Sm = u32;

/// The SM a cubin was built for: from `e_flags`, in bits 8..16 for ELF ABI version 8 and
/// later (CUDA 12 and newer), in bits 0..8 before. `None` for anything but a 64-bit
/// little-endian EM_CUDA ELF file (PTX text, a fatbin: the driver decides).
pub fn cubin_sm(image: &[u8]) -> Option<Sm> {
    if image.len() < 64 || &image[..4] != b"\x7fELF" || image[4] != 2 || image[5] != 1 {
        return None;
    }
    if u16_at(image, 18)? != EM_CUDA {
        return None;
    }
    let flags = u32_at(image, 48)?;
    let abi_version = image[8];
    Some(if abi_version >= 8 { (flags >> 8) & 0xff } else { flags & 0xff })
}

/// Whether a cubin for `image` runs on a device of compute capability `device`: the same
/// major version and no newer minor one (the driver's binary compatibility rule).
pub fn sm_runs_on(image: Sm, device: Sm) -> bool {
    image / 10 == device / 10 && image % 10 <= device % 10
}

/// The bytes of the symbol `name` in an ELF64 image's symbol table, where they lie in the
/// file (a symbol in a section without file contents, like `.bss`, has none).
pub fn symbol_bytes<'a>(image: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let mut found = None;
    each_symbol(image, |sym_name, bytes| {
        if sym_name != name.as_bytes() {
            return true;
        }
        found = bytes;
        false
    })?;
    found
}

/// The names of an ELF64 image's symbols that start with `prefix`, in table order (empty for
/// an image that is not one).
pub fn symbols_named_like<'a>(image: &'a [u8], prefix: &str) -> Vec<&'a str> {
    let mut names = Vec::new();
    let _ = each_symbol(image, |name, _| {
        if let Some(name) = std::str::from_utf8(name).ok().filter(|n| n.starts_with(prefix)) {
            names.push(name);
        }
        true
    });
    names
}

/// Calls `visit` with each symbol's name and its bytes in the file (`None` when it has none
/// there) until it returns `false`. `None` when the image is not a readable ELF64 file.
fn each_symbol<'a>(image: &'a [u8], mut visit: impl FnMut(&'a [u8], Option<&'a [u8]>) -> bool) -> Option<()> {
    if image.len() < 64 || &image[..4] != b"\x7fELF" || image[4] != 2 || image[5] != 1 {
        return None;
    }
    let shoff = usize::try_from(u64_at(image, 0x28)?).ok()?;
    let shentsize = usize::from(u16_at(image, 0x3a)?);
    let shnum = usize::from(u16_at(image, 0x3c)?);
    if shentsize < 64 {
        return None;
    }
    let section = |i: usize| -> Option<Section> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let header = image.get(at..at.checked_add(64)?)?;
        Some(Section {
            kind: u32_at(header, 4)?,
            addr: u64_at(header, 0x10)?,
            offset: u64_at(header, 0x18)?,
            size: u64_at(header, 0x20)?,
            link: u32_at(header, 0x28)?,
            entsize: u64_at(header, 0x38)?,
        })
    };
    const SHT_SYMTAB: u32 = 2;
    const SHT_NOBITS: u32 = 8;
    let bytes_of = |sym: &[u8]| -> Option<&'a [u8]> {
        let home = section(usize::from(u16_at(sym, 6)?))?;
        if home.kind == SHT_NOBITS {
            return None;
        }
        let (value, size) = (u64_at(sym, 8)?, u64_at(sym, 16)?);
        let within = value.checked_sub(home.addr)?;
        if within.checked_add(size)? > home.size {
            return None;
        }
        slice(image, home.offset.checked_add(within)?, size)
    };
    for i in 0..shnum {
        let symtab = section(i)?;
        if symtab.kind != SHT_SYMTAB || symtab.entsize < 24 {
            continue;
        }
        let strtab = section(symtab.link as usize)?;
        let strings = slice(image, strtab.offset, strtab.size)?;
        let count = symtab.size / symtab.entsize;
        for s in 0..count {
            let at = usize::try_from(symtab.offset.checked_add(s.checked_mul(symtab.entsize)?)?).ok()?;
            let sym = image.get(at..at.checked_add(24)?)?;
            let name_off = u32_at(sym, 0)? as usize;
            let name = strings.get(name_off..)?.split(|&b| b == 0).next()?;
            if !visit(name, bytes_of(sym)) {
                return Some(());
            }
        }
    }
    Some(())
}

/// The functions a `__init_array_object_<name>_<priority>` (or `__fini_array_object_…`)
/// symbol each hold, ordered as LLVM's CUDA plugin calls them: by priority, lowest first
/// (a stable sort: equal priorities keep the image's order). An unreadable priority is an
/// error naming the symbol.
pub fn by_priority<'a>(names: &[&'a str]) -> Result<Vec<&'a str>, String> {
    let mut ranked = names
        .iter()
        .map(|&n| {
            let priority = n.rsplit('_').next().and_then(|p| p.parse::<u16>().ok());
            priority.map(|p| (p, n)).ok_or_else(|| format!("invalid priority in the constructor or destructor {n}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    ranked.sort_by_key(|&(p, _)| p);
    Ok(ranked.into_iter().map(|(_, n)| n).collect())
}

/// Size of the part of LLVM's `ConfigurationEnvironmentTy` read here: three flag bytes, a
/// pad byte, then `MinThreads`, `MaxThreads`, `MinTeams`, `MaxTeams`, `ReductionDataSize`,
/// `ReductionBufferLength` (all `int32_t`).
const CONFIGURATION_SIZE: usize = 28;

/// A kernel's environment as the image holds it; `None` when the image has none for this
/// kernel (LLVM then launches it as a bare SPMD kernel).
pub fn kernel_environment(image: &[u8], kernel: &str) -> Option<KernelEnv> {
    let bytes = symbol_bytes(image, &format!("{kernel}_kernel_environment"))?;
    parse_configuration(bytes)
}

/// The launch-relevant fields of a `KernelEnvironmentTy`'s configuration.
pub fn parse_configuration(bytes: &[u8]) -> Option<KernelEnv> {
    if bytes.len() < CONFIGURATION_SIZE {
        return None;
    }
    let i32_at = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    Some(KernelEnv {
        mode: ExecMode::from_flags(bytes[2]),
        min_threads: i32_at(4),
        max_threads: i32_at(8),
        reduction_data_size: i32_at(20).max(0) as u32,
        reduction_buffer_length: i32_at(24).max(0) as u32,
    })
}

struct Section {
    kind: u32,
    addr: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

fn slice(image: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    image.get(start..end)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 EM_CUDA image: sections null, .data (the symbols' bytes), .symtab,
    /// .strtab; `symbols` are (name, bytes).
    pub(crate) fn cubin(abi_version: u8, flags: u32, symbols: &[(&str, &[u8])]) -> Vec<u8> {
        let mut data = Vec::new();
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for (name, bytes) in symbols {
            let name_off = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            let mut sym = Vec::new();
            sym.extend_from_slice(&name_off.to_le_bytes());
            sym.extend_from_slice(&[0x11, 0]); // GLOBAL OBJECT, default visibility
            sym.extend_from_slice(&1u16.to_le_bytes()); // in .data
            sym.extend_from_slice(&(data.len() as u64).to_le_bytes());
            sym.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            symtab.extend_from_slice(&sym);
            data.extend_from_slice(bytes);
        }
        let data_off = 64u64;
        let symtab_off = data_off + data.len() as u64;
        let strtab_off = symtab_off + symtab.len() as u64;
        let shoff = strtab_off + strtab.len() as u64;
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[6] = 1;
        f[8] = abi_version;
        f[16..18].copy_from_slice(&2u16.to_le_bytes());
        f[18..20].copy_from_slice(&EM_CUDA.to_le_bytes());
        f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        f[48..52].copy_from_slice(&flags.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&4u16.to_le_bytes());
        f.extend_from_slice(&data);
        f.extend_from_slice(&symtab);
        f.extend_from_slice(&strtab);
        let header = |kind: u32, off: u64, size: u64, link: u32, entsize: u64| {
            let mut h = vec![0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&off.to_le_bytes());
            h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
            h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
            h[0x38..0x40].copy_from_slice(&entsize.to_le_bytes());
            h
        };
        f.extend(header(0, 0, 0, 0, 0));
        f.extend(header(1, data_off, data.len() as u64, 0, 0));
        f.extend(header(2, symtab_off, symtab.len() as u64, 3, 24));
        f.extend(header(3, strtab_off, strtab.len() as u64, 0, 0));
        f
    }

    fn environment(mode: u8, min_threads: i32, max_threads: i32, reduction: (i32, i32)) -> Vec<u8> {
        let mut b = vec![0u8; 48];
        b[0] = 1;
        b[1] = 1;
        b[2] = mode;
        b[4..8].copy_from_slice(&min_threads.to_le_bytes());
        b[8..12].copy_from_slice(&max_threads.to_le_bytes());
        b[12..16].copy_from_slice(&(-1i32).to_le_bytes());
        b[16..20].copy_from_slice(&(-1i32).to_le_bytes());
        b[20..24].copy_from_slice(&reduction.0.to_le_bytes());
        b[24..28].copy_from_slice(&reduction.1.to_le_bytes());
        b
    }

    #[test]
    fn the_sm_moved_to_the_second_byte_of_the_flags_in_abi_version_8() {
        // CUDA 12+ ptxas: ABI version 8, sm_90 in bits 8..16 (0x5a00), low byte other flags.
        assert_eq!(cubin_sm(&cubin(8, 0x0005_5a05, &[])), Some(90));
        // Older cubins: the SM in the low byte.
        assert_eq!(cubin_sm(&cubin(7, 0x0050_0050, &[])), Some(80));
        let mut x86 = cubin(8, 0x5a00, &[]);
        x86[18] = 62;
        assert_eq!(cubin_sm(&x86), None);
        assert_eq!(cubin_sm(b"//\n// Generated by LLVM NVPTX Back-End\n.version 8.0\n.target sm_90\n"), None);
    }

    #[test]
    fn a_cubin_runs_on_the_same_major_version_with_an_equal_or_newer_minor_one() {
        assert!(sm_runs_on(90, 90));
        assert!(sm_runs_on(80, 86));
        assert!(!sm_runs_on(86, 80));
        assert!(!sm_runs_on(90, 80));
        assert!(!sm_runs_on(80, 90));
    }

    #[test]
    fn the_kernel_environment_is_read_from_the_image() {
        let spmd = environment(2, -1, -1, (0, 0));
        let generic = environment(1, 0, 256, (8, 1024));
        let img =
            cubin(8, 0x5a00, &[("__omp_offloading_a_kernel_environment", &spmd), ("k_kernel_environment", &generic)]);
        let a = kernel_environment(&img, "__omp_offloading_a").expect("an environment");
        assert_eq!((a.mode, a.min_threads, a.max_threads), (ExecMode::Spmd, -1, -1));
        let k = kernel_environment(&img, "k").expect("an environment");
        assert_eq!(
            (k.mode, k.max_threads, k.reduction_data_size, k.reduction_buffer_length),
            (ExecMode::Generic, 256, 8, 1024)
        );
        assert_eq!(kernel_environment(&img, "missing"), None);
    }

    #[test]
    fn a_damaged_image_yields_nothing_instead_of_a_panic() {
        let env = environment(2, -1, -1, (0, 0));
        let img = cubin(8, 0x5a00, &[("k_kernel_environment", &env)]);
        for cut in [0, 10, 63, 64, 100, img.len() - 1] {
            assert_eq!(kernel_environment(&img[..cut], "k"), None, "cut at {cut}");
        }
        let mut bad = img.clone();
        bad[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(kernel_environment(&bad, "k"), None);
        assert_eq!(parse_configuration(&env[..27]), None);
    }

    #[test]
    fn constructors_run_by_priority_and_a_bad_priority_is_named() {
        let image = cubin(
            8,
            90 << 8,
            &[("__init_array_object_b_200", &[0; 8]), ("x", &[]), ("__init_array_object_a_101", &[0; 8])],
        );
        let names = symbols_named_like(&image, "__init_array_object_");
        assert_eq!(names, ["__init_array_object_b_200", "__init_array_object_a_101"]);
        assert_eq!(by_priority(&names).unwrap(), ["__init_array_object_a_101", "__init_array_object_b_200"]);
        assert_eq!(symbol_bytes(&image, "x"), Some(&[][..]));
        assert!(by_priority(&["__init_array_object_c_high"]).unwrap_err().contains("__init_array_object_c_high"));
        assert!(symbols_named_like(b"not an image", "").is_empty());
    }
}
