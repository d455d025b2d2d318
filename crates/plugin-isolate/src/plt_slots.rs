//! The lazily bound calls of a device image (an x86_64 ELF shared object), read from its file:
//! each `R_X86_64_JUMP_SLOT` relocation of `.rela.plt` names a function the image calls
//! through its PLT and the GOT slot that holds where the call goes. Until the first call the
//! loader leaves the slot at its value in the file (plus the load bias), which leads back into
//! the PLT to bind it; the first call writes the function's address there
//! ([`crate::gpu_calls`] watches this).
//!
//! Read through the program headers (`PT_DYNAMIC`), as the loader reads it: section headers
//! may be stripped.

/// One GOT slot of a call to a function the image does not define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The slot's address in the image (before the load bias).
    pub got: u64,
    /// Its value in the file (before the load bias): where an unbound call goes.
    pub unbound: u64,
    /// The function's name.
    pub symbol: String,
}

/// What the loader does with an image's PLT slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PltSlots {
    pub slots: Vec<Slot>,
    /// Linked with `-z now` (`DT_BIND_NOW`, `DF_BIND_NOW` or `DF_1_NOW`): every slot is bound
    /// when the image is loaded.
    pub bind_now: bool,
    /// `DT_PLTGOT`: the GOT whose third word is the loader's lazy-binding entry (0 when the
    /// loader binds nothing lazily).
    pub plt_got: Option<u64>,
    /// `PT_GNU_RELRO`: the range the loader makes read-only after relocating.
    pub relro: Option<(u64, u64)>,
    /// The range the image's loadable segments span (before the load bias).
    pub span: (u64, u64),
    /// The image holds flang's runtime (it names a `_FortranA*` function it does not import):
    /// its calls to host functions may be the runtime's.
    pub flang_runtime: bool,
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const DT_NULL: u64 = 0;
const DT_PLTRELSZ: u64 = 2;
const DT_PLTGOT: u64 = 3;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const DT_PLTREL: u64 = 20;
const DT_RELA: u64 = 7;
const DT_JMPREL: u64 = 23;
const DT_BIND_NOW: u64 = 24;
const DT_FLAGS: u64 = 30;
const DT_FLAGS_1: u64 = 0x6fff_fffb;
const DF_BIND_NOW: u64 = 8;
const DF_1_NOW: u64 = 1;
const R_X86_64_JUMP_SLOT: u32 = 7;
const SHN_UNDEF: u16 = 0;

struct Elf<'a> {
    bytes: &'a [u8],
    loads: Vec<(u64, u64, u64)>,
}

impl Elf<'_> {
    fn u16(&self, at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes.get(at..at.checked_add(2)?)?.try_into().ok()?))
    }
    fn u32(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
    }
    fn u64(&self, at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
    }

    /// The file offset of the image address `vaddr` (through the segment that loads it from
    /// the file).
    fn offset(&self, vaddr: u64) -> Option<usize> {
        let &(start, offset, _) =
            self.loads.iter().find(|&&(start, _, filesz)| vaddr >= start && vaddr - start < filesz)?;
        usize::try_from(offset.checked_add(vaddr - start)?).ok()
    }
}

/// The PLT slots of the ELF image `bytes` (an x86_64 shared object), or why they cannot be read.
pub fn parse(bytes: &[u8]) -> Result<PltSlots, &'static str> {
    const MALFORMED: &str = "a malformed ELF image";
    if bytes.get(..7) != Some(b"\x7fELF\x02\x01\x01") {
        return Err("not a 64-bit little-endian ELF image");
    }
    let mut elf = Elf { bytes, loads: Vec::new() };
    // Offsets come from the file: every sum is checked (a wrapped one could land in range).
    let add = |a: usize, b: usize| a.checked_add(b).ok_or(MALFORMED);
    let phoff = elf.u64(0x20).ok_or(MALFORMED)? as usize;
    let (phentsize, phnum) = (elf.u16(0x36).ok_or(MALFORMED)? as usize, elf.u16(0x38).ok_or(MALFORMED)? as usize);
    let (mut dynamic, mut relro, mut span) = (None, None, (u64::MAX, 0));
    for i in 0..phnum {
        let h = phoff.checked_add(i.checked_mul(phentsize).ok_or(MALFORMED)?).ok_or(MALFORMED)?;
        let kind = elf.u32(h).ok_or(MALFORMED)?;
        let (offset, vaddr) = (elf.u64(add(h, 8)?).ok_or(MALFORMED)?, elf.u64(add(h, 16)?).ok_or(MALFORMED)?);
        let (filesz, memsz) = (elf.u64(add(h, 32)?).ok_or(MALFORMED)?, elf.u64(add(h, 40)?).ok_or(MALFORMED)?);
        match kind {
            PT_LOAD => {
                elf.loads.push((vaddr, offset, filesz));
                span = (span.0.min(vaddr), span.1.max(vaddr.saturating_add(memsz)));
            }
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            PT_GNU_RELRO => relro = Some((vaddr, vaddr.saturating_add(memsz))),
            _ => {}
        }
    }
    let (offset, size) = dynamic.ok_or("no dynamic section")?;
    let mut tags = std::collections::HashMap::new();
    let offset = usize::try_from(offset).map_err(|_| MALFORMED)?;
    for i in 0..size / 16 {
        // A read past the file's end ends the loop with an error: it is bounded by the file.
        let e = add(offset, usize::try_from(i).map_err(|_| MALFORMED)?.checked_mul(16).ok_or(MALFORMED)?)?;
        let tag = elf.u64(e).ok_or(MALFORMED)?;
        if tag == DT_NULL {
            break;
        }
        tags.entry(tag).or_insert(elf.u64(add(e, 8)?).ok_or(MALFORMED)?);
    }
    let flag = |tag, bit| tags.get(&tag).is_some_and(|v| v & bit != 0);
    let bind_now = tags.contains_key(&DT_BIND_NOW) || flag(DT_FLAGS, DF_BIND_NOW) || flag(DT_FLAGS_1, DF_1_NOW);
    let mut slots = Vec::new();
    let mut strings: &[u8] = &[];
    if let (Some(&jmprel), Some(&size)) = (tags.get(&DT_JMPREL), tags.get(&DT_PLTRELSZ)) {
        if tags.get(&DT_PLTREL).is_some_and(|&k| k != DT_RELA) {
            return Err("PLT relocations without addends (REL), which x86_64 does not use");
        }
        let symtab = elf.offset(*tags.get(&DT_SYMTAB).ok_or(MALFORMED)?).ok_or(MALFORMED)?;
        let strtab = elf.offset(*tags.get(&DT_STRTAB).ok_or(MALFORMED)?).ok_or(MALFORMED)?;
        let strsz = *tags.get(&DT_STRSZ).ok_or(MALFORMED)? as usize;
        strings = bytes.get(strtab..strtab.checked_add(strsz).ok_or(MALFORMED)?).ok_or(MALFORMED)?;
        let rela = elf.offset(jmprel).ok_or(MALFORMED)?;
        for i in 0..size / 24 {
            let r = add(rela, usize::try_from(i).map_err(|_| MALFORMED)?.checked_mul(24).ok_or(MALFORMED)?)?;
            let (got, info) = (elf.u64(r).ok_or(MALFORMED)?, elf.u64(add(r, 8)?).ok_or(MALFORMED)?);
            if info as u32 != R_X86_64_JUMP_SLOT {
                continue;
            }
            let sym = symtab.checked_add(((info >> 32) as usize).checked_mul(24).ok_or(MALFORMED)?).ok_or(MALFORMED)?;
            if elf.u16(add(sym, 6)?).ok_or(MALFORMED)? != SHN_UNDEF {
                continue;
            }
            let name = elf.u32(sym).ok_or(MALFORMED)? as usize;
            let name = strings.get(name..).ok_or(MALFORMED)?;
            let name = &name[..name.iter().position(|&b| b == 0).ok_or(MALFORMED)?];
            let unbound = elf.u64(elf.offset(got).ok_or(MALFORMED)?).ok_or(MALFORMED)?;
            slots.push(Slot { got, unbound, symbol: String::from_utf8_lossy(name).into_owned() });
        }
    }
    let flang_runtime = strings
        .split(|&b| b == 0)
        .any(|name| name.starts_with(b"_FortranA") && !slots.iter().any(|s: &Slot| s.symbol.as_bytes() == name));
    Ok(PltSlots { slots, bind_now, plt_got: tags.get(&DT_PLTGOT).copied(), relro, span, flang_runtime })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A shared object built by the C compiler from `source` with `flags`.
    pub(crate) fn shared_object(source: &str, flags: &[&str], dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        let c = dir.join(format!("{name}.c"));
        let so = dir.join(format!("{name}.so"));
        std::fs::write(&c, source).unwrap();
        let out = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&so)
            .arg(&c)
            .args(flags)
            .output()
            .expect("the C compiler (cc) runs");
        assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
        so
    }

    pub(crate) const CALLS_FOPEN: &str = "#include <stdio.h>\n#include <string.h>\n\
        int log_it(int take) { if (take) { FILE *f = fopen(\"/dev/null\", \"w\"); if (!f) return -1; fclose(f); return 1; } return 0; }\n\
        int own(int x) { return x + 1; }\n\
        int calls_own(int x) { return own(x) * 2; }\n";

    #[test]
    fn jump_slots_name_the_functions_the_image_calls() {
        let dir = std::env::temp_dir().join(format!("omp-plt-slots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lazy = parse(&std::fs::read(shared_object(CALLS_FOPEN, &[], &dir, "lazy")).unwrap()).unwrap();
        let now = parse(&std::fs::read(shared_object(CALLS_FOPEN, &["-Wl,-z,now"], &dir, "now")).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let names = |p: &PltSlots| {
            let mut n: Vec<String> = p.slots.iter().map(|s| s.symbol.clone()).collect();
            n.sort();
            n
        };
        // `own` is the image's own (defined there): not a slot of a function outside it.
        assert_eq!(names(&lazy), ["fclose", "fopen"]);
        assert_eq!(names(&now), ["fclose", "fopen"]);
        assert!(!lazy.bind_now && now.bind_now);
        assert!(!lazy.flang_runtime);
        assert!(lazy.plt_got.is_some());
        // An unbound slot leads back into the image.
        for s in &lazy.slots {
            assert!((lazy.span.0..lazy.span.1).contains(&s.unbound), "{s:?}");
            assert!(lazy.relro.is_none_or(|(a, b)| !(a..b).contains(&s.got)), "a lazy slot is writable: {s:?}");
        }
    }

    #[test]
    fn malformed_images_are_refused() {
        assert!(parse(b"not an ELF file").is_err());
        let mut truncated = b"\x7fELF\x02\x01\x01".to_vec();
        truncated.resize(64, 0xff);
        assert!(parse(&truncated).is_err());
    }

    /// Corrupted copies of a real image (headers, offsets and sizes set to extreme values)
    /// give an answer or an error, never a panic (the sums of file offsets are checked).
    #[test]
    fn corrupted_images_never_panic() {
        let dir = std::env::temp_dir().join(format!("omp-plt-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = std::fs::read(shared_object(CALLS_FOPEN, &[], &dir, "fuzz")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        // The dynamic section said to lie at the top of the address space: refused, not
        // wrapped around to the start of the file.
        let phoff = u64::from_le_bytes(image[0x20..0x28].try_into().unwrap()) as usize;
        let (size, count) =
            (u16::from_le_bytes([image[0x36], image[0x37]]), u16::from_le_bytes([image[0x38], image[0x39]]));
        let dynamic = (0..count as usize)
            .map(|i| phoff + i * size as usize)
            .find(|&h| u32::from_le_bytes(image[h..h + 4].try_into().unwrap()) == PT_DYNAMIC)
            .expect("a shared object has a dynamic segment");
        let mut high = image.clone();
        high[dynamic + 8..dynamic + 16].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
        assert_eq!(parse(&high).err(), Some("a malformed ELF image"));
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut refused = 0;
        for _ in 0..3000 {
            let mut bytes = image.clone();
            for _ in 0..1 + next() % 4 {
                // Mostly the ELF and program headers and the dynamic section's neighbourhood.
                let at = (next() as usize) % bytes.len().min(if next() % 2 == 0 { 4096 } else { usize::MAX });
                let word = [0u64, u64::MAX, u64::MAX / 2, next(), 1 << 40][(next() % 5) as usize].to_le_bytes();
                let end = (at + 8).min(bytes.len());
                bytes[at..end].copy_from_slice(&word[..end - at]);
            }
            if next() % 8 == 0 {
                bytes.truncate((next() as usize) % bytes.len());
            }
            refused += usize::from(parse(&bytes).is_err());
        }
        assert!(refused > 0, "no corruption was refused: the test did not reach the checks");
    }
}
