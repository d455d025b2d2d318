//! `--offload-list` and `--offload-extract`: the device images inside a fat binary, object,
//! archive or bare OffloadBinary (ours or clang's).

use crate::bundle::{self, images_in};
use crate::error::{Error, Result};
use omp_format::{ImageKind, OffloadBinary};
use std::path::Path;

fn read(path: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::new(format!("cannot read {path}: {e}")))
}

/// One line per image: where, triple, arch, offload kind, image kind, size, producer.
pub fn list(path: &str) -> Result<String> {
    let data = read(path)?;
    let images = images_in(path, &data)?;
    if images.is_empty() {
        return Err(Error::new(format!("{path}: no offload images found")));
    }
    let mut out = String::new();
    for (i, (member, bin)) in images.iter().enumerate() {
        let place = member.as_ref().map_or_else(|| path.to_string(), |m| format!("{path}({m})"));
        let arch = if bin.arch().is_empty() { "-" } else { bin.arch() };
        out.push_str(&format!(
            "{place}: image {i}: triple={} arch={arch} kind={} image={} size={} producer={}\n",
            bin.triple(),
            bin.offload_kind.name(),
            bin.image_kind.name(),
            bin.image.len(),
            describe_producer(bin),
        ));
    }
    Ok(out)
}

fn describe_producer(bin: &OffloadBinary) -> String {
    bundle::producer(bin.image).map_or_else(|| "unknown".to_string(), |p| format!("\"{p}\""))
}

/// Writes every image into `dir` as `<stem>.<n>.<triple>[-<arch>].<ext>`; returns the paths.
pub fn extract(path: &str, dir: &Path) -> Result<Vec<String>> {
    let data = read(path)?;
    let images = images_in(path, &data)?;
    if images.is_empty() {
        return Err(Error::new(format!("{path}: no offload images found")));
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    let stem = crate::temps::stem(path);
    let mut written = Vec::new();
    for (i, (_, bin)) in images.iter().enumerate() {
        let ext = match bin.image_kind {
            ImageKind::Bitcode => "bc",
            ImageKind::Ptx => "ptx",
            ImageKind::Cubin => "cubin",
            _ if is_shared(bin.image) => "so",
            _ => "o",
        };
        let arch = if bin.arch().is_empty() { String::new() } else { format!("-{}", bin.arch()) };
        let file = dir.join(format!("{stem}.{i}.{}{arch}.{ext}", bin.triple()));
        std::fs::write(&file, bin.image).map_err(|e| Error::new(format!("cannot write {}: {e}", file.display())))?;
        written.push(file.to_string_lossy().into_owned());
    }
    Ok(written)
}

fn is_shared(image: &[u8]) -> bool {
    omp_format::elf::header(image).is_ok_and(|h| h.file_type == omp_format::elf::ET_DYN)
}
