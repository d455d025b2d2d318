//! Reads the device code a GPU compile left in textual LLVM IR (`-S -emit-llvm
//! -gline-tables-only`) into the declare-target analysis's [`Unit`]: defined and declared
//! functions, each call and taken address with its source line, and one target region per
//! kernel (`__omp_offloading_<dev>_<file>_<parent>_l<line>`). What the IR says beyond the
//! graph (calls through pointers, which functions the compiler made up) is kept beside it.
//!
//! One pass over the lines collects functions and the `!dbg` numbers of their references; the
//! metadata (at the end of the module) then turns those numbers into places. Linear in the
//! size of the IR.

use crate::declare_target::graph::{Compiler, Func, Loc, Ref, RefKind, Region, SymKind, Unit};
use std::collections::HashMap;

/// A module's device code as the declare-target graph sees it, and what the graph leaves out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceCode {
    pub unit: Unit,
    /// Calls through a pointer: the function (index into `unit.funcs`, or a region as
    /// `Caller::Region`) and the call's place.
    pub indirect: Vec<(Caller, Loc)>,
    /// Functions the compiler made (outlined regions, wrappers): left out of printed chains.
    pub made_up: Vec<bool>,
    /// The kernel symbol of each of `unit.regions`.
    pub kernels: Vec<String>,
    /// The back end's frame sizes ([`super::frames`]), when asked for.
    pub frames: super::frames::Frames,
}

/// Where a reference sits: a function of the unit or a target region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Func(usize),
    Region(usize),
}

/// One raw reference: to a symbol, how, at which `!dbg` number.
struct RawRef<'t> {
    to: &'t str,
    kind: RefKind,
    dbg: Option<&'t str>,
}

struct RawFunc<'t> {
    sym: &'t str,
    defined: bool,
    local: bool,
    dbg: Option<&'t str>,
    refs: Vec<RawRef<'t>>,
    indirect: Vec<Option<&'t str>>,
}

/// The symbol after `@` at the start of `s` (quoted or plain), and the rest.
fn symbol(s: &str) -> Option<(&str, &str)> {
    if let Some(q) = s.strip_prefix('"') {
        let end = q.find('"')?;
        return Some((&q[..end], &q[end + 1..]));
    }
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-'))).unwrap_or(s.len());
    (end > 0).then(|| (&s[..end], &s[end..]))
}

/// The `!dbg !N` attachment of an instruction or definition line.
fn dbg_of(line: &str) -> Option<&str> {
    let at = line.rfind("!dbg !")? + "!dbg !".len();
    let rest = &line[at..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// The callee of a `call`/`invoke` instruction: `Some(Ok(symbol))` for a direct call,
/// `Some(Err(()))` for a call through a pointer, `None` for no call (or inline asm).
fn callee(line: &str) -> Option<Result<&str, ()>> {
    let at = [" call ", " invoke "].iter().filter_map(|k| line.find(k).map(|i| i + k.len())).min()?;
    let rest = &line[at..];
    let mut from = 0;
    while let Some(i) = rest[from..].find(['@', '%']).map(|i| i + from) {
        let sigil = rest.as_bytes()[i];
        let (name, after) = symbol(&rest[i + 1..])?;
        if after.starts_with('(') {
            return Some(if sigil == b'@' { Ok(name) } else { Err(()) });
        }
        from = i + 1 + name.len().max(1);
        if from >= rest.len() {
            break;
        }
    }
    None
}

/// Every `@symbol` in a line (the callee included), in order.
fn symbols(line: &str) -> impl Iterator<Item = &str> {
    line.match_indices('@').filter_map(move |(i, _)| symbol(&line[i + 1..]).map(|(s, _)| s))
}

/// `key: value` of a metadata node's fields (`line: 7`, `file: !5`, `name: "x"`).
fn field<'t>(node: &'t str, key: &str) -> Option<&'t str> {
    let pat = format!("{key}: ");
    let mut from = 0;
    while let Some(i) = node[from..].find(&pat).map(|i| i + from) {
        // A whole field name: preceded by `(` or `, ` (`scopeLine:` is not `line:`).
        if i == 0 || matches!(node.as_bytes()[i - 1], b'(' | b' ') {
            let v = &node[i + pat.len()..];
            if let Some(q) = v.strip_prefix('"') {
                return q.find('"').map(|e| &q[..e]);
            }
            let end = v.find([',', ')']).unwrap_or(v.len());
            return Some(v[..end].trim().trim_start_matches('!'));
        }
        from = i + pat.len();
    }
    None
}

/// The parent function and line of a kernel's name: `__omp_offloading_fe00_98e1d5_main_l19`
/// → `("main", 19)`.
pub fn kernel_parent(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix("__omp_offloading_")?;
    let (_dev, rest) = rest.split_once('_')?;
    let (_file, rest) = rest.split_once('_')?;
    let at = rest.rfind("_l")?;
    let line = rest[at + 2..].parse().ok()?;
    Some((&rest[..at], line))
}

/// True for functions the compiler made up for OpenMP constructs.
fn is_made_up(sym: &str) -> bool {
    sym.contains("omp_outlined") || sym.starts_with("__omp_") || sym.starts_with(".omp")
}

/// Reads the IR of one module compiled from `file`. `compiler` says whose (for the report).
pub fn parse(file: &str, compiler: Compiler, text: &str) -> DeviceCode {
    let mut funcs: Vec<RawFunc> = Vec::new();
    let mut meta: HashMap<&str, &str> = HashMap::new();
    let mut cur: Option<usize> = None;
    for line in text.lines() {
        if let Some(def) = line.strip_prefix("define ") {
            let Some(at) = def.find('@') else { continue };
            let Some((sym, _)) = symbol(&def[at + 1..]) else { continue };
            let local = def[..at].split_whitespace().any(|w| w == "internal" || w == "private");
            let dbg = def.rfind(" {").and_then(|b| dbg_of(&def[..b]));
            funcs.push(RawFunc { sym, defined: true, local, dbg, refs: Vec::new(), indirect: Vec::new() });
            cur = Some(funcs.len() - 1);
        } else if line.starts_with('}') {
            cur = None;
        } else if let Some(decl) = line.strip_prefix("declare ") {
            if let Some((sym, _)) = decl.find('@').and_then(|at| symbol(&decl[at + 1..])) {
                funcs.push(RawFunc {
                    sym,
                    defined: false,
                    local: false,
                    dbg: None,
                    refs: Vec::new(),
                    indirect: Vec::new(),
                });
            }
        } else if let Some(f) = cur {
            let dbg = dbg_of(line);
            let call = callee(line);
            if call == Some(Err(())) && !line.contains("asm ") {
                funcs[f].indirect.push(dbg);
            }
            let direct = match call {
                Some(Ok(s)) => Some(s),
                _ => None,
            };
            for s in symbols(line) {
                let kind = if Some(s) == direct { RefKind::Call } else { RefKind::Address };
                funcs[f].refs.push(RawRef { to: s, kind, dbg });
            }
        } else if let Some(rest) = line.strip_prefix('!') {
            if let Some((id, node)) = rest.split_once(" = ") {
                meta.insert(id, node);
            }
        }
    }
    build(file, compiler, &funcs, &meta)
}

/// Places from metadata: a `DILocation`'s line and the file of its scope chain.
struct Places<'m, 't> {
    meta: &'m HashMap<&'t str, &'t str>,
    file: &'m str,
}

impl<'t> Places<'_, 't> {
    fn file_of(&self, mut scope: &'t str) -> String {
        for _ in 0..64 {
            let Some(node) = self.meta.get(scope) else { break };
            if node.contains("DIFile(") {
                return field(node, "filename").unwrap_or(self.file).to_string();
            }
            match field(node, "file").or_else(|| field(node, "scope")) {
                Some(next) => scope = next,
                None => break,
            }
        }
        self.file.to_string()
    }

    /// The place of `!dbg !id`: a DILocation, or a DISubprogram (a function's own line).
    fn loc(&self, id: Option<&str>) -> Option<Loc> {
        let node = self.meta.get(id?)?;
        let line = field(node, "line")?.parse().ok()?;
        let scope = if node.contains("DISubprogram(") { field(node, "file") } else { field(node, "scope") };
        Some(Loc::new(scope.map_or_else(|| self.file.to_string(), |s| self.file_of(s)), line))
    }

    fn name(&self, id: Option<&str>) -> Option<&str> {
        field(self.meta.get(id?)?, "name")
    }
}

fn build(file: &str, compiler: Compiler, raw: &[RawFunc], meta: &HashMap<&str, &str>) -> DeviceCode {
    let places = Places { meta, file };
    let mut unit = Unit::new(file, compiler);
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(raw.len());
    let mut region_of: HashMap<usize, usize> = HashMap::new();
    let mut made_up = Vec::new();
    let mut kernels = Vec::new();
    for (i, f) in raw.iter().enumerate() {
        if let (true, Some((parent, line))) = (f.defined, kernel_parent(f.sym)) {
            let p = *index.entry(parent).or_insert_with(|| {
                let shown = match parent {
                    "_QQmain" => "the main program".to_string(),
                    p if p.starts_with("_Q") => crate::declare_target::fortran::display_name(p),
                    p => p.to_string(),
                };
                unit.funcs.push(Func::new(parent, shown, Loc::new(file, 0)));
                made_up.push(false);
                unit.funcs.len() - 1
            });
            let kfile = places.loc(f.dbg).map_or_else(|| file.to_string(), |l| l.file);
            unit.regions.push(Region { loc: Loc::new(kfile, line), parent: Some(p), refs: Vec::new() });
            kernels.push(f.sym.to_string());
            region_of.insert(i, unit.regions.len() - 1);
            continue;
        }
        if let Some(&k) = index.get(f.sym) {
            unit.funcs[k].defined |= f.defined;
            continue;
        }
        let loc = places.loc(f.dbg).unwrap_or_else(|| Loc::new(file, 0));
        let name = places.name(f.dbg).filter(|n| !n.is_empty() && !n.contains('[')).unwrap_or(f.sym);
        let mut func = Func::new(f.sym, name, loc);
        func.defined = f.defined;
        func.local = f.local;
        unit.funcs.push(func);
        made_up.push(is_made_up(f.sym));
        index.insert(f.sym, unit.funcs.len() - 1);
    }
    let mut indirect = Vec::new();
    for (i, f) in raw.iter().enumerate() {
        let caller = match region_of.get(&i) {
            Some(&r) => Caller::Region(r),
            None => match index.get(f.sym) {
                Some(&k) if f.defined => Caller::Func(k),
                _ => continue,
            },
        };
        let own = match caller {
            Caller::Func(k) => unit.funcs[k].loc.clone(),
            Caller::Region(r) => unit.regions[r].loc.clone(),
        };
        let refs: Vec<Ref> = f
            .refs
            .iter()
            .filter_map(|r| {
                let to = *index.get(r.to)?;
                Some(Ref { to, kind: r.kind, loc: places.loc(r.dbg).unwrap_or_else(|| own.clone()) })
            })
            .collect();
        indirect.extend(f.indirect.iter().map(|d| (caller, places.loc(*d).unwrap_or_else(|| own.clone()))));
        match caller {
            Caller::Func(k) => unit.funcs[k].refs = refs,
            Caller::Region(r) => unit.regions[r].refs = refs,
        }
    }
    // Only functions are nodes; a global variable's `@name` found no function above.
    debug_assert!(unit.funcs.iter().all(|f| f.kind == SymKind::Function));
    DeviceCode { unit, indirect, made_up, kernels, frames: super::frames::Frames::NotAsked }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IR: &str = r#"
define hidden void @log_value(double noundef %0) #0 !dbg !13 {
  %3 = call noalias ptr @fopen(ptr noundef @.str, ptr noundef @.str.1), !dbg !16
  ret void, !dbg !20
}
declare noalias ptr @fopen(ptr noundef, ptr noundef) #1
define hidden i32 @fact(i32 noundef %0) #0 !dbg !24 {
  %5 = call i32 @fact(i32 noundef %4), !dbg !25
  ret i32 %5
}
define weak_odr protected void @__omp_offloading_fe00_98e1d5_main_l19(ptr %0) #3 !dbg !33 {
  call void @log_value(double noundef %1), !dbg !34
  %37 = call double %36(double noundef 2.000000e+00) #6, !dbg !35
  store ptr @fact, ptr %2
  call void asm sideeffect "exit;", ""()
}
!1 = !DIFile(filename: "a.c", directory: "/tmp")
!13 = distinct !DISubprogram(name: "log_value", scope: !1, file: !1, line: 6, type: !14, scopeLine: 6, unit: !0)
!16 = !DILocation(line: 7, column: 13, scope: !13)
!24 = distinct !DISubprogram(name: "fact", scope: !1, file: !1, line: 13, type: !14, scopeLine: 13, unit: !0)
!25 = !DILocation(line: 13, column: 40, scope: !26)
!26 = distinct !DILexicalBlock(scope: !24, file: !1, line: 13, column: 2)
!33 = distinct !DISubprogram(name: "__omp_offloading_fe00_98e1d5_main_l19", scope: !1, file: !1, line: 19, unit: !0)
!34 = !DILocation(line: 22, column: 5, scope: !33)
!35 = !DILocation(line: 23, column: 12, scope: !33)
"#;

    #[test]
    fn functions_calls_addresses_regions_and_indirect_calls() {
        let d = parse("a.c", Compiler::Clang, IR);
        let u = &d.unit;
        let names: Vec<(&str, bool)> = u.funcs.iter().map(|f| (f.sym.as_str(), f.defined)).collect();
        assert_eq!(names, [("log_value", true), ("fopen", false), ("fact", true), ("main", false)]);
        assert_eq!(u.funcs[0].loc, Loc::new("a.c", 6));
        assert_eq!(u.funcs[0].refs, [Ref { to: 1, kind: RefKind::Call, loc: Loc::new("a.c", 7) }]);
        assert_eq!(
            u.funcs[2].refs,
            [Ref { to: 2, kind: RefKind::Call, loc: Loc::new("a.c", 13) }],
            "via a lexical block"
        );
        assert_eq!(u.regions.len(), 1);
        let r = &u.regions[0];
        assert_eq!((r.loc.clone(), r.parent), (Loc::new("a.c", 19), Some(3)));
        let refs: Vec<(usize, RefKind, u32)> = r.refs.iter().map(|x| (x.to, x.kind, x.loc.line)).collect();
        assert_eq!(refs, [(0, RefKind::Call, 22), (2, RefKind::Address, 19)]);
        assert_eq!(d.indirect, [(Caller::Region(0), Loc::new("a.c", 23))], "inline asm is no indirect call");
    }

    #[test]
    fn names_and_pieces() {
        assert_eq!(kernel_parent("__omp_offloading_fe00_98e1d5_main_l19"), Some(("main", 19)));
        assert_eq!(kernel_parent("__omp_offloading_fe00_98e0e2__QQmain_l17"), Some(("_QQmain", 17)));
        assert_eq!(kernel_parent("__omp_offloading_10_2b_my_func_l7"), Some(("my_func", 7)));
        assert_eq!(kernel_parent("main"), None);
        assert_eq!(callee("  %1 = tail call fastcc i32 @f(i32 1)"), Some(Ok("f")));
        assert_eq!(callee("  call void (ptr, ...) @printf(ptr @.s)"), Some(Ok("printf")));
        assert_eq!(callee("  call void @\"quoted.name\"()"), Some(Ok("quoted.name")));
        assert_eq!(callee("  %2 = call i32 %fp(i32 3)"), Some(Err(())));
        assert_eq!(callee("  store i32 1, ptr %x"), None);
        assert_eq!(field("!DILocation(line: 7, column: 1, scope: !3)", "line"), Some("7"));
        assert_eq!(field("!DISubprogram(name: \"f\", scopeLine: 9, line: 3)", "line"), Some("3"));
        assert!(is_made_up("__omp_offloading_fe00_1_main_l3_omp_outlined") && !is_made_up("work"));
    }

    #[test]
    fn garbage_is_no_panic() {
        for text in ["define", "define @", "declare @\"", "!1 = !DILocation(line: x", "}\n}\n", "call @", "  call %("] {
            let d = parse("x.c", Compiler::Clang, text);
            assert!(d.unit.regions.is_empty());
        }
    }
}
