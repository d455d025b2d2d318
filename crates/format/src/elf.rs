//! Just enough of the ELF header to decide whether an image suits a device.

use crate::bytes::{array, u16_at};
use crate::FormatError;

pub const EM_X86_64: u16 = 62;
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
