//! The facts of a translation unit kept in its object, so that a later link analyses the whole
//! program as if every source had been given to one ompcc command.
//!
//! With the analysis on, `ompcc -c` (and `-S`) writes the unit (functions with their places,
//! explicit marks, references, target regions) to a non-allocated section
//! `.ompcc.declare_target`; the link reads it back from objects and archive members. An object
//! without the section is treated as before: its functions are external.
//!
//! A record is `"OMPCCDT\0"`, a version (u32), the length of the body (u32) and the body, all
//! little-endian. `ld -r` concatenates sections, so a section may hold several records. The
//! reader checks every length and index and answers errors, never panics.

use super::graph::{Capture, Compiler, DeviceType, Func, Loc, Mark, Ref, RefKind, Region, SymKind, Unit};
use crate::error::{Error, Result};
use crate::exec::{Cmd, Runner};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// The section that holds the facts.
pub const SECTION: &str = ".ompcc.declare_target";
const MAGIC: &[u8; 8] = b"OMPCCDT\0";
/// The format version this ompcc writes and reads.
pub const VERSION: u32 = 1;
const NONE: u32 = u32::MAX;

/// Encodes one unit as a record. File names are written once, places refer to them.
pub fn encode(unit: &Unit) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(match unit.compiler {
        Compiler::Clang => 0,
        Compiler::Flang => 1,
    });
    w.str(&unit.file);
    let mut files: HashMap<&str, u32> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    let all_locs = unit
        .funcs
        .iter()
        .flat_map(|f| {
            std::iter::once(&f.loc).chain(f.marks.iter().map(|m| &m.loc)).chain(f.refs.iter().map(|r| &r.loc))
        })
        .chain(unit.regions.iter().flat_map(|r| std::iter::once(&r.loc).chain(r.refs.iter().map(|x| &x.loc))));
    for l in all_locs {
        files.entry(l.file.as_str()).or_insert_with(|| {
            order.push(l.file.as_str());
            (order.len() - 1) as u32
        });
    }
    w.u32(order.len() as u32);
    for f in &order {
        w.str(f);
    }
    let loc = |w: &mut Writer, l: &Loc| {
        w.u32(files[l.file.as_str()]);
        w.u32(l.line);
    };
    let refs = |w: &mut Writer, refs: &[Ref]| {
        w.u32(refs.len() as u32);
        for r in refs {
            w.u32(r.to as u32);
            w.u8(match r.kind {
                RefKind::Call => 0,
                RefKind::Address => 1,
            });
            loc(w, &r.loc);
        }
    };
    w.u32(unit.funcs.len() as u32);
    for f in &unit.funcs {
        w.str(&f.sym);
        w.str(&f.name);
        w.u8(match f.kind {
            SymKind::Function => 0,
            SymKind::Variable => 1,
        });
        w.u8(u8::from(f.defined) | u8::from(f.local) << 1 | u8::from(f.system) << 2 | u8::from(f.has_target) << 3);
        loc(&mut w, &f.loc);
        w.u32(f.marks.len() as u32);
        for m in &f.marks {
            w.u8(dt_code(m.dt));
            w.u8(match m.cap {
                Capture::To => 0,
                Capture::Enter => 1,
                Capture::Link => 2,
            });
            loc(&mut w, &m.loc);
        }
        refs(&mut w, &f.refs);
    }
    w.u32(unit.regions.len() as u32);
    for r in &unit.regions {
        loc(&mut w, &r.loc);
        w.u32(r.parent.map_or(NONE, |p| p as u32));
        refs(&mut w, &r.refs);
    }
    w.u32(unit.compiler_marks.len() as u32);
    for (sym, dt) in &unit.compiler_marks {
        w.str(sym);
        w.u8(dt_code(*dt));
    }
    let mut out = Vec::with_capacity(w.0.len() + 16);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(w.0.len() as u32).to_le_bytes());
    out.extend_from_slice(&w.0);
    out
}

fn dt_code(dt: DeviceType) -> u8 {
    match dt {
        DeviceType::Host => 0,
        DeviceType::NoHost => 1,
        DeviceType::Any => 2,
    }
}

#[derive(Default)]
struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

/// A bounds-checked reader of one record's body.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

type R<T> = std::result::Result<T, String>;

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> R<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or("truncated")?;
        let b = &self.data[self.pos..end];
        self.pos = end;
        Ok(b)
    }
    fn u8(&mut self) -> R<u8> {
        Ok(self.bytes(1)?[0])
    }
    fn u32(&mut self) -> R<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn str(&mut self) -> R<String> {
        let n = self.u32()? as usize;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| "a name is not UTF-8".to_string())
    }
    /// A count of items at least `min` bytes each: bounded by what is left, so a corrupt count
    /// cannot make us allocate much.
    fn count(&mut self, min: usize) -> R<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.data.len() - self.pos {
            return Err(format!("count {n} exceeds the data"));
        }
        Ok(n)
    }
    fn index(&mut self, len: usize, what: &str) -> R<usize> {
        let i = self.u32()? as usize;
        if i >= len {
            return Err(format!("{what} index {i} out of range ({len})"));
        }
        Ok(i)
    }
}

fn decode_body(body: &[u8]) -> R<Unit> {
    let mut r = Reader { data: body, pos: 0 };
    let compiler = match r.u8()? {
        0 => Compiler::Clang,
        1 => Compiler::Flang,
        c => return Err(format!("unknown compiler {c}")),
    };
    let mut unit = Unit::new(r.str()?, compiler);
    let nfiles = r.count(4)?;
    let files: Vec<String> = (0..nfiles).map(|_| r.str()).collect::<R<_>>()?;
    let loc = |r: &mut Reader| -> R<Loc> {
        let f = r.index(files.len(), "file")?;
        Ok(Loc::new(files[f].as_str(), r.u32()?))
    };
    let dt = |c: u8| match c {
        0 => Ok(DeviceType::Host),
        1 => Ok(DeviceType::NoHost),
        2 => Ok(DeviceType::Any),
        c => Err(format!("unknown device type {c}")),
    };
    // Reference targets are checked once every function is known.
    let refs = |r: &mut Reader| -> R<Vec<Ref>> {
        let n = r.count(13)?;
        (0..n)
            .map(|_| {
                let to = r.u32()? as usize;
                let kind = match r.u8()? {
                    0 => RefKind::Call,
                    1 => RefKind::Address,
                    k => return Err(format!("unknown reference kind {k}")),
                };
                Ok(Ref { to, kind, loc: loc(r)? })
            })
            .collect()
    };
    let nfuncs = r.count(22)?;
    for _ in 0..nfuncs {
        let sym = r.str()?;
        let name = r.str()?;
        let kind = match r.u8()? {
            0 => SymKind::Function,
            1 => SymKind::Variable,
            k => return Err(format!("unknown symbol kind {k}")),
        };
        let flags = r.u8()?;
        let mut f = Func::new(sym, name, loc(&mut r)?);
        f.kind = kind;
        (f.defined, f.local, f.system, f.has_target) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0, flags & 8 != 0);
        let nmarks = r.count(10)?;
        for _ in 0..nmarks {
            let d = dt(r.u8()?)?;
            let cap = match r.u8()? {
                0 => Capture::To,
                1 => Capture::Enter,
                2 => Capture::Link,
                c => return Err(format!("unknown capture clause {c}")),
            };
            f.marks.push(Mark { dt: d, cap, loc: loc(&mut r)? });
        }
        f.refs = refs(&mut r)?;
        unit.funcs.push(f);
    }
    let nregions = r.count(12)?;
    for _ in 0..nregions {
        let l = loc(&mut r)?;
        let parent = match r.u32()? {
            NONE => None,
            p if (p as usize) < nfuncs => Some(p as usize),
            p => return Err(format!("region parent {p} out of range ({nfuncs})")),
        };
        unit.regions.push(Region { loc: l, parent, refs: refs(&mut r)? });
    }
    let nmarks = r.count(5)?;
    for _ in 0..nmarks {
        let sym = r.str()?;
        unit.compiler_marks.push((sym, dt(r.u8()?)?));
    }
    if r.pos != body.len() {
        return Err(format!("{} bytes left over", body.len() - r.pos));
    }
    let bad = unit.funcs.iter().flat_map(|f| &f.refs).chain(unit.regions.iter().flat_map(|r| &r.refs));
    if let Some(b) = bad.into_iter().find(|x| x.to >= nfuncs) {
        return Err(format!("reference to function {} out of range ({nfuncs})", b.to));
    }
    Ok(unit)
}

/// Decodes every record of a section's contents (`name` for messages). Zero bytes between
/// records (alignment padding from a linker) are skipped.
pub fn decode_all(name: &str, data: &[u8]) -> Result<Vec<Unit>> {
    let err = |m: String| Error::new(format!("{name}: corrupt {SECTION} section: {m}"));
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        if data[pos] == 0 {
            pos += 1;
            continue;
        }
        let mut r = Reader { data, pos };
        let magic = r.bytes(8).map_err(err)?;
        if magic != MAGIC {
            return Err(err("bad magic".into()));
        }
        let version = r.u32().map_err(err)?;
        if version != VERSION {
            return Err(Error::new(format!(
                "{name}: {SECTION} section of version {version}, this ompcc reads version {VERSION}: compile it again with this ompcc"
            )));
        }
        let len = r.u32().map_err(err)? as usize;
        let body = r.bytes(len).map_err(err)?;
        out.push(decode_body(body).map_err(err)?);
        pos = r.pos;
    }
    Ok(out)
}

/// The units kept in an ELF object (none when it has no facts section).
pub fn read_object(name: &str, data: &[u8]) -> Result<Vec<Unit>> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).map_err(|e| Error::new(format!("{name}: not a valid ELF file: {e}")))?;
    let mut out = Vec::new();
    for s in file.sections().filter(|s| s.name() == Ok(SECTION)) {
        let bytes = s.data().map_err(|e| Error::new(format!("{name}: section {SECTION} cannot be read: {e}")))?;
        out.extend(decode_all(name, bytes)?);
    }
    Ok(out)
}

/// Assembly that puts `record` in the (non-allocated) facts section, for `-S`.
pub fn asm_section(record: &[u8]) -> String {
    let mut s = format!("\t.section\t{SECTION},\"\",@progbits\n");
    for chunk in record.chunks(16) {
        let bytes: Vec<String> = chunk.iter().map(u8::to_string).collect();
        let _ = writeln!(s, "\t.byte\t{}", bytes.join(","));
    }
    s
}

/// Keeps `unit` in the host output of `-c` (an object: added with llvm-objcopy) or `-S`
/// (assembly: appended). `scratch` is a temporary file for the record.
pub fn keep(runner: Runner, objcopy: &str, unit: &Unit, host: &Path, assembly: bool, scratch: &Path) -> Result<()> {
    let record = encode(unit);
    let io = |p: &Path, e: std::io::Error| Error::new(format!("cannot write {}: {e}", p.display()));
    if assembly {
        runner.note(&format!("append the declare target facts of {} to {}", unit.file, host.display()));
        if !runner.dry_run {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(host).map_err(|e| io(host, e))?;
            f.write_all(asm_section(&record).as_bytes()).map_err(|e| io(host, e))?;
        }
        return Ok(());
    }
    if !runner.dry_run {
        std::fs::write(scratch, &record).map_err(|e| io(scratch, e))?;
    }
    let mut c = Cmd::new(objcopy, format!("{}: keep the declare target facts in the object", unit.file));
    c.arg(format!("--add-section={SECTION}={}", scratch.display()));
    c.arg(host.to_string_lossy());
    runner.run(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Unit {
        let mut u = Unit::new("dir/a b.c", Compiler::Flang);
        let mut f = Func::new("ext", "ns::ext(int (int))", Loc::new("a.h", 3));
        f.marks.push(Mark { dt: DeviceType::Host, cap: Capture::Enter, loc: Loc::new("dir/a b.c", 2) });
        f.local = true;
        let mut g = Func::new("main", "main", Loc::new("dir/a b.c", 9));
        g.defined = true;
        g.has_target = true;
        g.refs.push(Ref { to: 0, kind: RefKind::Address, loc: Loc::new("dir/a b.c", 10) });
        let mut v = Func::new("gv", "gv", Loc::default());
        v.kind = SymKind::Variable;
        v.system = true;
        u.funcs = vec![f, g, v];
        u.regions.push(Region {
            loc: Loc::new("dir/a b.c", 11),
            parent: Some(1),
            refs: vec![Ref { to: 0, kind: RefKind::Call, loc: Loc::new("dir/a b.c", 12) }],
        });
        u.regions.push(Region { loc: Loc::default(), parent: None, refs: vec![] });
        u.compiler_marks.push(("ext".into(), DeviceType::Any));
        u
    }

    #[test]
    fn round_trip_and_concatenation() {
        let u = sample();
        let rec = encode(&u);
        assert_eq!(decode_all("x.o", &rec).unwrap(), vec![u.clone()]);
        // `ld -r` output: two records, with alignment padding between them.
        let mut two = rec.clone();
        two.extend([0, 0, 0]);
        two.extend(encode(&Unit::new("b.c", Compiler::Clang)));
        let units = decode_all("x.o", &two).unwrap();
        assert_eq!(units.len(), 2);
        assert_eq!(units[0], u);
        assert!(units[1].funcs.is_empty());
        assert!(asm_section(&rec).starts_with("\t.section\t.ompcc.declare_target,\"\",@progbits\n\t.byte\t79,"));
    }

    #[test]
    fn corrupt_records_are_errors_not_panics() {
        let rec = encode(&sample());
        // Every truncation, and every single-byte change, parses to a result without panicking.
        for n in 0..rec.len() {
            let _ = decode_all("x.o", &rec[..n]);
        }
        for i in 0..rec.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut bad = rec.clone();
                bad[i] = v;
                let _ = decode_all("x.o", &bad);
            }
        }
        assert!(decode_all("x.o", &rec[..rec.len() - 1]).is_err());
        let mut newer = rec.clone();
        newer[8] = 2;
        let e = decode_all("x.o", &newer).unwrap_err().to_string();
        assert!(e.contains("version 2"), "{e}");
        let mut bad_ref = sample();
        bad_ref.funcs[1].refs[0].to = 7;
        let e = decode_all("x.o", &encode(&bad_ref)).unwrap_err().to_string();
        assert!(e.contains("out of range"), "{e}");
        assert!(decode_all("x.o", b"garbage!").is_err());
        assert!(decode_all("x.o", &[]).unwrap().is_empty());
    }
}
