//! LLVM's OffloadBinary container (magic `0x10FF10AD`, version 1).
//!
//! Layout: a 32-byte header, one 40-byte entry, a string map of key/value offsets, and the
//! image bytes. Several binaries may be concatenated; [`OffloadBinary::parse_all`] walks them.

use crate::bytes::{c_str, range, u16_at, u32_at, u64_at};
use crate::FormatError;

/// The four magic bytes that start every OffloadBinary.
pub const MAGIC: [u8; 4] = [0x10, 0xFF, 0x10, 0xAD];
const HEADER_SIZE: u64 = 32;
const ENTRY_SIZE: u64 = 40;

/// What the image bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    None,
    Object,
    Bitcode,
    Cubin,
    Fatbinary,
    Ptx,
    Spirv,
    Other(u16),
}

impl ImageKind {
    pub fn from_raw(v: u16) -> Self {
        match v {
            0 => Self::None,
            1 => Self::Object,
            2 => Self::Bitcode,
            3 => Self::Cubin,
            4 => Self::Fatbinary,
            5 => Self::Ptx,
            6 => Self::Spirv,
            n => Self::Other(n),
        }
    }
    pub fn raw(self) -> u16 {
        match self {
            Self::None => 0,
            Self::Object => 1,
            Self::Bitcode => 2,
            Self::Cubin => 3,
            Self::Fatbinary => 4,
            Self::Ptx => 5,
            Self::Spirv => 6,
            Self::Other(n) => n,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Object => "elf",
            Self::Bitcode => "bc",
            Self::Cubin => "cubin",
            Self::Fatbinary => "fatbin",
            Self::Ptx => "ptx",
            Self::Spirv => "spv",
            Self::Other(_) => "unknown",
        }
    }
}

/// Which programming model produced the image. OpenMP is 1 in LLVM 19 and 22 alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadKind {
    None,
    OpenMp,
    Cuda,
    Other(u16),
}

impl OffloadKind {
    pub fn from_raw(v: u16) -> Self {
        match v {
            0 => Self::None,
            1 => Self::OpenMp,
            2 => Self::Cuda,
            n => Self::Other(n),
        }
    }
    pub fn raw(self) -> u16 {
        match self {
            Self::None => 0,
            Self::OpenMp => 1,
            Self::Cuda => 2,
            Self::Other(n) => n,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::OpenMp => "openmp",
            Self::Cuda => "cuda",
            Self::Other(_) => "other",
        }
    }
}

/// One parsed OffloadBinary, borrowing its image and strings from the input.
#[derive(Debug, Clone)]
pub struct OffloadBinary<'a> {
    pub image_kind: ImageKind,
    pub offload_kind: OffloadKind,
    pub flags: u32,
    pub strings: Vec<(&'a str, &'a str)>,
    pub image: &'a [u8],
    /// Bytes this binary occupies in its buffer (the header's `Size`).
    pub total_size: u64,
}

impl<'a> OffloadBinary<'a> {
    /// True when `buf` starts with the OffloadBinary magic.
    pub fn has_magic(buf: &[u8]) -> bool {
        buf.len() >= 4 && buf[..4] == MAGIC
    }

    /// Parses the binary at the start of `buf`.
    pub fn parse(buf: &'a [u8]) -> Result<Self, FormatError> {
        if !Self::has_magic(buf) {
            return Err(FormatError::BadMagic { what: "OffloadBinary" });
        }
        let version = u32_at(buf, 4, "OffloadBinary version")?;
        if version != 1 {
            return Err(FormatError::Invalid {
                what: "OffloadBinary version",
                detail: format!("{version} is not supported (expected 1)"),
            });
        }
        let size = u64_at(buf, 8, "OffloadBinary size")?;
        if size < HEADER_SIZE + ENTRY_SIZE {
            return Err(FormatError::Invalid {
                what: "OffloadBinary size",
                detail: format!("{size} is too small for a header and one entry ({} bytes)", HEADER_SIZE + ENTRY_SIZE),
            });
        }
        if size > buf.len() as u64 {
            return Err(FormatError::Invalid {
                what: "OffloadBinary size",
                detail: format!("{size} does not fit a buffer of {} bytes", buf.len()),
            });
        }
        let bin = &buf[..size as usize];
        let entry_off = u64_at(bin, 16, "OffloadBinary entry offset")?;
        let entry_size = u64_at(bin, 24, "OffloadBinary entry size")?;
        if entry_size < ENTRY_SIZE {
            return Err(FormatError::Invalid {
                what: "OffloadBinary entry size",
                detail: format!("{entry_size} < {ENTRY_SIZE}"),
            });
        }
        let entry = range(bin, entry_off, ENTRY_SIZE, "OffloadBinary entry")?;
        let image_kind = ImageKind::from_raw(u16_at(entry, 0, "image kind")?);
        let offload_kind = OffloadKind::from_raw(u16_at(entry, 2, "offload kind")?);
        let flags = u32_at(entry, 4, "flags")?;
        let string_off = u64_at(entry, 8, "string offset")?;
        let num_strings = u64_at(entry, 16, "string count")?;
        let image_off = u64_at(entry, 24, "image offset")?;
        let image_size = u64_at(entry, 32, "image size")?;
        let image = range(bin, image_off, image_size, "OffloadBinary image")?;
        // Every string pair takes 16 bytes, so the count is bounded by the buffer.
        if num_strings > bin.len() as u64 / 16 {
            return Err(FormatError::Invalid {
                what: "OffloadBinary strings",
                detail: format!("{num_strings} strings cannot fit"),
            });
        }
        let mut strings = Vec::with_capacity(num_strings as usize);
        for i in 0..num_strings {
            let pair = string_off
                .checked_add(i * 16)
                .ok_or(FormatError::Invalid { what: "string table", detail: "offset overflow".into() })?;
            let key = u64_at(bin, pair, "string key offset")?;
            let value = u64_at(bin, pair + 8, "string value offset")?;
            strings.push((c_str(bin, key, "string key")?, c_str(bin, value, "string value")?));
        }
        Ok(Self { image_kind, offload_kind, flags, strings, image, total_size: size })
    }

    /// Parses every binary concatenated in `buf` (a `.llvm.offloading` section), skipping
    /// zero padding between them.
    pub fn parse_all(buf: &'a [u8]) -> Result<Vec<Self>, FormatError> {
        let mut out = Vec::new();
        let mut off = 0usize;
        while off < buf.len() {
            let rest = &buf[off..];
            if rest.iter().all(|&b| b == 0) {
                break;
            }
            let bin = Self::parse(rest)?;
            off += bin.total_size as usize;
            off = off.next_multiple_of(8).min(buf.len());
            out.push(bin);
        }
        Ok(out)
    }

    /// The value of a string-map key, such as `triple` or `arch`.
    pub fn string(&self, key: &str) -> Option<&'a str> {
        self.strings.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    pub fn triple(&self) -> &'a str {
        self.string("triple").unwrap_or("")
    }

    pub fn arch(&self) -> &'a str {
        self.string("arch").unwrap_or("")
    }
}

/// Writes an OffloadBinary holding `image` with the given string map.
pub fn write(image_kind: ImageKind, offload_kind: OffloadKind, strings: &[(&str, &str)], image: &[u8]) -> Vec<u8> {
    let string_off = HEADER_SIZE + ENTRY_SIZE;
    let mut table = Vec::new();
    let mut pairs = Vec::new();
    let table_start = string_off + 16 * strings.len() as u64;
    for (k, v) in strings {
        let ko = table_start + table.len() as u64;
        table.extend_from_slice(k.as_bytes());
        table.push(0);
        let vo = table_start + table.len() as u64;
        table.extend_from_slice(v.as_bytes());
        table.push(0);
        pairs.push((ko, vo));
    }
    let image_off = (table_start + table.len() as u64).next_multiple_of(8);
    let size = (image_off + image.len() as u64).next_multiple_of(8);
    let mut out = Vec::with_capacity(size as usize);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&HEADER_SIZE.to_le_bytes());
    out.extend_from_slice(&ENTRY_SIZE.to_le_bytes());
    out.extend_from_slice(&image_kind.raw().to_le_bytes());
    out.extend_from_slice(&offload_kind.raw().to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&string_off.to_le_bytes());
    out.extend_from_slice(&(strings.len() as u64).to_le_bytes());
    out.extend_from_slice(&image_off.to_le_bytes());
    out.extend_from_slice(&(image.len() as u64).to_le_bytes());
    for (ko, vo) in pairs {
        out.extend_from_slice(&ko.to_le_bytes());
        out.extend_from_slice(&vo.to_le_bytes());
    }
    out.extend_from_slice(&table);
    out.resize(image_off as usize, 0);
    out.extend_from_slice(image);
    out.resize(size as usize, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let img = b"\x7fELF-payload";
        let bin =
            write(ImageKind::Object, OffloadKind::OpenMp, &[("triple", "x86_64-pc-linux-gnu"), ("arch", "")], img);
        let parsed = OffloadBinary::parse(&bin).unwrap();
        assert_eq!(parsed.image, img);
        assert_eq!(parsed.triple(), "x86_64-pc-linux-gnu");
        assert_eq!(parsed.arch(), "");
        assert_eq!(parsed.image_kind, ImageKind::Object);
        assert_eq!(parsed.offload_kind, OffloadKind::OpenMp);
    }

    #[test]
    fn concatenated() {
        let mut buf = write(ImageKind::Object, OffloadKind::OpenMp, &[("triple", "a")], b"one");
        buf.extend(write(ImageKind::Bitcode, OffloadKind::OpenMp, &[("triple", "b")], b"two!"));
        let all = OffloadBinary::parse_all(&buf).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1].image, b"two!");
        assert_eq!(all[1].triple(), "b");
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bin = write(ImageKind::Object, OffloadKind::OpenMp, &[("triple", "x86_64-pc-linux-gnu")], b"payload");
        for n in 0..bin.len() {
            assert!(OffloadBinary::parse(&bin[..n]).is_err(), "prefix {n} parsed");
        }
    }

    #[test]
    fn a_bad_size_says_which_way_it_is_wrong() {
        let bin = write(ImageKind::Object, OffloadKind::OpenMp, &[("triple", "x")], b"payload");
        let with_size = |size: u64| {
            let mut b = bin.clone();
            b[8..16].copy_from_slice(&size.to_le_bytes());
            OffloadBinary::parse(&b).unwrap_err().to_string()
        };
        let small = with_size(16);
        assert!(small.contains("16 is too small for a header and one entry"), "{small}");
        assert!(!small.contains("does not fit"), "{small}");
        let big = with_size(bin.len() as u64 + 1);
        assert!(big.contains(&format!("does not fit a buffer of {} bytes", bin.len())), "{big}");
    }

    #[test]
    fn corrupt_offsets_are_errors() {
        let bin = write(ImageKind::Object, OffloadKind::OpenMp, &[("triple", "x")], b"payload");
        for field in [16usize, 32 + 8, 32 + 16, 32 + 24, 32 + 32] {
            let mut bad = bin.clone();
            bad[field..field + 8].copy_from_slice(&u64::MAX.to_le_bytes());
            assert!(OffloadBinary::parse(&bad).is_err(), "field at {field}");
        }
    }
}
