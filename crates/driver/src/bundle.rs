//! Reading device images out of host files: the `.llvm.offloading` section of ELF objects and
//! executables, members of static archives, and bare OffloadBinary files.

use crate::bail;
use crate::error::{Error, Result};
use object::read::archive::ArchiveFile;
use object::{Object, ObjectSection, ObjectSymbol};
use omp_format::OffloadBinary;
use std::collections::HashSet;

/// The section that carries OffloadBinaries.
pub const SECTION: &str = ".llvm.offloading";

/// What a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Container {
    Elf,
    Archive,
    OffloadBinary,
    Other,
}

/// Sniffs the container kind from the first bytes.
pub fn container(data: &[u8]) -> Container {
    if data.starts_with(b"\x7fELF") {
        Container::Elf
    } else if data.starts_with(b"!<arch>\n") || data.starts_with(b"!<thin>\n") {
        Container::Archive
    } else if OffloadBinary::has_magic(data) {
        Container::OffloadBinary
    } else {
        Container::Other
    }
}

/// Which offload-entry table a host object defines (this tells clang 19 from clang ≥ 20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryLayout {
    /// `omp_offloading_entries`, 32-byte entries (clang 19).
    Legacy,
    /// `llvm_offload_entries`, 56-byte entries (clang ≥ 20).
    New,
}

impl EntryLayout {
    /// The section the linker delimits with `__start_`/`__stop_`.
    pub fn section(self) -> &'static str {
        match self {
            EntryLayout::Legacy => "omp_offloading_entries",
            EntryLayout::New => "llvm_offload_entries",
        }
    }

    /// The LLVM version whose libomptarget reads this layout natively.
    pub fn abi_major(self) -> u32 {
        match self {
            EntryLayout::Legacy => 19,
            EntryLayout::New => 22,
        }
    }
}

/// What one ELF file holds that the driver cares about.
#[derive(Debug, Default)]
pub struct ElfInfo<'a> {
    pub images: Vec<OffloadBinary<'a>>,
    pub layout: Option<EntryLayout>,
    /// Global symbols it defines.
    pub defines: Vec<String>,
    /// Global symbols it needs.
    pub needs: Vec<String>,
}

/// Reads an ELF file; `with_symbols` also collects its symbol table.
pub fn read_elf<'a>(name: &str, data: &'a [u8], with_symbols: bool) -> Result<ElfInfo<'a>> {
    let file = object::File::parse(data).map_err(|e| Error::new(format!("{name}: not a valid ELF file: {e}")))?;
    let mut info = ElfInfo::default();
    for section in file.sections() {
        match section.name() {
            Ok(SECTION) => {
                let bytes =
                    section.data().map_err(|e| Error::new(format!("{name}: section {SECTION} cannot be read: {e}")))?;
                let images = OffloadBinary::parse_all(bytes)
                    .map_err(|e| Error::new(format!("{name}: corrupt {SECTION} section: {e}")))?;
                info.images.extend(images);
            }
            Ok("omp_offloading_entries") => info.layout = Some(EntryLayout::Legacy),
            Ok("llvm_offload_entries") => info.layout = Some(EntryLayout::New),
            _ => {}
        }
    }
    if with_symbols {
        for sym in file.symbols() {
            if !sym.is_global() && !sym.is_weak() {
                continue;
            }
            let Ok(n) = sym.name() else { continue };
            if sym.is_undefined() {
                info.needs.push(n.to_string());
            } else if sym.is_definition() {
                info.defines.push(n.to_string());
            }
        }
    }
    Ok(info)
}

/// The members of a static archive, by name.
pub fn archive_members<'a>(name: &str, data: &'a [u8]) -> Result<Vec<(String, &'a [u8])>> {
    let ar = ArchiveFile::parse(data).map_err(|e| Error::new(format!("{name}: not a valid archive: {e}")))?;
    let mut out = Vec::new();
    for m in ar.members() {
        let m = m.map_err(|e| Error::new(format!("{name}: corrupt archive member: {e}")))?;
        let member = String::from_utf8_lossy(m.name()).into_owned();
        let bytes = m.data(data).map_err(|e| Error::new(format!("{name}({member}): cannot be read: {e}")))?;
        out.push((member, bytes));
    }
    Ok(out)
}

/// The images held by any file: ELF, archive (member by member) or bare OffloadBinary.
/// Each comes with the archive member it was found in.
pub fn images_in<'a>(name: &str, data: &'a [u8]) -> Result<Vec<(Option<String>, OffloadBinary<'a>)>> {
    match container(data) {
        Container::Elf => Ok(read_elf(name, data, false)?.images.into_iter().map(|b| (None, b)).collect()),
        Container::OffloadBinary => OffloadBinary::parse_all(data)
            .map(|v| v.into_iter().map(|b| (None, b)).collect())
            .map_err(|e| Error::new(format!("{name}: corrupt OffloadBinary: {e}"))),
        Container::Archive => {
            let mut out = Vec::new();
            for (member, bytes) in archive_members(name, data)? {
                if container(bytes) == Container::Elf {
                    let full = format!("{name}({member})");
                    out.extend(read_elf(&full, bytes, false)?.images.into_iter().map(|b| (Some(member.clone()), b)));
                }
            }
            Ok(out)
        }
        Container::Other => bail!("{name}: not an ELF file, archive or OffloadBinary"),
    }
}

/// The members of archives to take device code from: those that define a symbol the objects
/// (or members already taken) need, repeated until nothing changes, as the host link would.
/// `objects` are the plain inputs' (defines, needs); `members` each archive member's.
pub fn select_members(objects: &[(Vec<String>, Vec<String>)], members: &[(Vec<String>, Vec<String>)]) -> Vec<bool> {
    let mut defined: HashSet<&str> = HashSet::new();
    let mut needed: HashSet<&str> = HashSet::new();
    for (defs, needs) in objects {
        defined.extend(defs.iter().map(String::as_str));
        needed.extend(needs.iter().map(String::as_str));
    }
    let mut taken = vec![false; members.len()];
    loop {
        let mut changed = false;
        for (i, (defs, needs)) in members.iter().enumerate() {
            if taken[i] || !defs.iter().any(|d| needed.contains(d.as_str()) && !defined.contains(d.as_str())) {
                continue;
            }
            taken[i] = true;
            changed = true;
            defined.extend(defs.iter().map(String::as_str));
            needed.extend(needs.iter().map(String::as_str));
        }
        if !changed {
            return taken;
        }
    }
}

/// Which compiler made an ELF image, from its `.comment` section: the LLVM compiler's line if
/// there is one (a linked library also carries the C runtime's GCC line), else the first.
pub fn producer(image: &[u8]) -> Option<String> {
    let file = object::File::parse(image).ok()?;
    let data = file.section_by_name(".comment")?.data().ok()?;
    let lines: Vec<String> = data
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).trim().to_string())
        .collect();
    lines.iter().find(|l| l.contains("clang") || l.contains("flang")).or(lines.first()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn members_are_taken_transitively() {
        let objects = vec![(s(&["main"]), s(&["foo"]))];
        let members = vec![
            (s(&["bar"]), s(&[])),      // needed by foo's member
            (s(&["foo"]), s(&["bar"])), // needed by main
            (s(&["unused"]), s(&[])),
        ];
        assert_eq!(select_members(&objects, &members), vec![true, true, false]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(container(b"hello"), Container::Other);
        assert!(images_in("x", b"hello").is_err());
        let mut elf = b"\x7fELF".to_vec();
        elf.extend([0u8; 12]);
        assert!(images_in("x.o", &elf).is_err());
        assert!(images_in("x.a", b"!<arch>\nbroken").is_err());
        let mut bin = omp_format::offload_binary::MAGIC.to_vec();
        bin.extend([1, 0, 0, 0, 0xff, 0xff]);
        assert!(images_in("x.bin", &bin).is_err());
    }
}
