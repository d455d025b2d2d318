//! Just enough of the ELF header to decide whether an image suits a device.

use crate::bytes::{array, u16_at, u32_at};
use crate::FormatError;

pub const EM_X86_64: u16 = 62;
pub const EM_CUDA: u16 = 190;
pub const EM_AMDGPU: u16 = 224;
pub const ET_EXEC: u16 = 2;
pub const ET_DYN: u16 = 3;

/// The identifying fields of an ELF header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHeader {
    pub is_64: bool,
    pub little_endian: bool,
    pub file_type: u16,
    pub machine: u16,
}

/// True when the bytes start with `\x7fELF`.
pub fn is_elf(buf: &[u8]) -> bool {
    buf.starts_with(b"\x7fELF")
}

/// True when the bytes start with LLVM bitcode's magic.
pub fn is_bitcode(buf: &[u8]) -> bool {
    buf.starts_with(b"BC\xC0\xDE")
}

pub fn header(buf: &[u8]) -> Result<ElfHeader, FormatError> {
    let ident = array::<16>(buf, 0, "ELF identification")?;
    if &ident[..4] != b"\x7fELF" {
        return Err(FormatError::BadMagic { what: "ELF" });
    }
    let little_endian = ident[5] == 1;
    if !little_endian {
        return Err(FormatError::Invalid { what: "ELF", detail: "big-endian images are not supported".into() });
    }
    Ok(ElfHeader {
        is_64: ident[4] == 2,
        little_endian,
        file_type: u16_at(buf, 16, "ELF type")?,
        machine: u16_at(buf, 18, "ELF machine")?,
    })
}

impl ElfHeader {
    /// A shared object or executable for x86-64, the only thing the host device can load.
    pub fn loadable_on_x86_64(&self) -> Result<(), String> {
        if !self.is_64 || self.machine != EM_X86_64 {
            return Err(format!("not an x86-64 ELF image (machine {})", self.machine));
        }
        if self.file_type != ET_DYN && self.file_type != ET_EXEC {
            return Err("only executable ELF files are supported (this is a relocatable object)".into());
        }
        Ok(())
    }
}

/// The offload target an ELF image is for, read from its machine and flags: the triple and
/// the architecture (`gfx90a`, `sm_80`; empty for x86-64). `None` for other machines.
pub fn target_of(buf: &[u8]) -> Option<(&'static str, String)> {
    let h = header(buf).ok()?;
    let flags = u32_at(buf, if h.is_64 { 48 } else { 36 }, "ELF flags").ok()?;
    match h.machine {
        EM_X86_64 => Some(("x86_64-pc-linux-gnu", String::new())),
        EM_AMDGPU => Some(("amdgcn-amd-amdhsa", amdgpu_arch(flags & 0xff))),
        EM_CUDA => {
            // The SM number sits in the low byte (older cubins) or the next one (CUDA 12.x).
            let sm = match flags & 0xff {
                0 => (flags >> 8) & 0xff,
                sm => sm,
            };
            Some(("nvptx64-nvidia-cuda", format!("sm_{sm}")))
        }
        _ => None,
    }
}

/// The AMDGPU processor named by `EF_AMDGPU_MACH` (the low byte of the ELF flags).
fn amdgpu_arch(mach: u32) -> String {
    let name = match mach {
        0x22 => "gfx700",
        0x23 => "gfx701",
        0x24 => "gfx702",
        0x25 => "gfx703",
        0x26 => "gfx704",
        0x28 => "gfx801",
        0x29 => "gfx802",
        0x2a => "gfx803",
        0x2b => "gfx810",
        0x2c => "gfx900",
        0x2d => "gfx902",
        0x2e => "gfx904",
        0x2f => "gfx906",
        0x30 => "gfx908",
        0x31 => "gfx909",
        0x32 => "gfx90c",
        0x33 => "gfx1010",
        0x34 => "gfx1011",
        0x35 => "gfx1012",
        0x36 => "gfx1030",
        0x37 => "gfx1031",
        0x38 => "gfx1032",
        0x39 => "gfx1033",
        0x3d => "gfx1035",
        0x3e => "gfx1034",
        0x3f => "gfx90a",
        0x40 => "gfx940",
        0x41 => "gfx1100",
        0x42 => "gfx1013",
        0x43 => "gfx1150",
        0x44 => "gfx1103",
        0x45 => "gfx1036",
        0x46 => "gfx1101",
        0x47 => "gfx1102",
        0x48 => "gfx1200",
        0x4a => "gfx1151",
        0x4b => "gfx941",
        0x4c => "gfx942",
        0x4e => "gfx1201",
        _ => return format!("amdgpu mach {mach:#x}"),
    };
    name.to_string()
}

#[cfg(test)]
mod target_tests {
    use super::*;

    fn elf64(machine: u16, flags: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
        b[18..20].copy_from_slice(&machine.to_le_bytes());
        b[48..52].copy_from_slice(&flags.to_le_bytes());
        b
    }

    #[test]
    fn gpu_targets_from_headers() {
        // gfx90a with xnack and sramecc, as clang 19 writes it (flags 0x53f).
        assert_eq!(target_of(&elf64(EM_AMDGPU, 0x53f)), Some(("amdgcn-amd-amdhsa", "gfx90a".to_string())));
        assert_eq!(target_of(&elf64(EM_AMDGPU, 0x36)).unwrap().1, "gfx1030");
        assert_eq!(target_of(&elf64(EM_CUDA, 0x50)), Some(("nvptx64-nvidia-cuda", "sm_80".to_string())));
        assert_eq!(target_of(&elf64(EM_X86_64, 0)).unwrap().0, "x86_64-pc-linux-gnu");
        assert_eq!(target_of(&elf64(3, 0)), None);
        assert_eq!(target_of(b"\x7fELF"), None);
    }
}
