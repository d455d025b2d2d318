//! Reads clang's textual AST dump (`-Xclang -ast-dump -fsyntax-only`) into a [`Unit`].
//!
//! Why the text dump and not `-ast-dump=json`: the JSON dump leaves out the map type and
//! device type of `OMPDeclareTargetDeclAttr` (it prints only `"kind"` and `"implicit"`), the
//! very facts we need, while the text dump prints `MT_To DT_NoHost`. The text dump is also
//! about nine times smaller and is read here line by line as clang writes it, so memory stays
//! flat however large the headers are.
//!
//! The dump is a tree drawn with `|-`, `` `- `` and `| ` prefixes, two columns per level.
//! Locations are printed relative to the previous one (`file:L:C`, then `line:L:C`, then
//! `col:C`), so the reader replays them in order.

use super::graph::{Capture, Compiler, DeviceType, Func, Loc, Mark, Ref, RefKind, Region, SymKind, Unit};
use crate::error::{Error, Result};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::rc::Rc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Func(usize),
    /// A variable at file scope, created in the unit only when it has a mark.
    Var(usize),
    Region,
    Call,
    /// `<FunctionToPointerDecay>` cast; true when it is the callee of a call.
    Decay(bool),
    Scope,
    LinkageC,
    Other,
}

#[derive(Debug)]
struct Frame {
    depth: usize,
    kind: Kind,
    children: usize,
    /// Name of a namespace or record, for qualified names.
    scope: Option<String>,
    /// Where a function declaration is.
    loc: Option<Loc>,
}

/// A place while reading: the file is shared with the reader's state, so replaying the
/// locations of every line copies no file names; a [`Loc`] is made only for what is kept.
type Place = (Rc<str>, u32);

fn to_loc(p: &Option<Place>) -> Loc {
    p.as_ref().map_or_else(Loc::default, |(f, l)| Loc::new(&**f, *l))
}

/// Replays the relative locations of the dump.
#[derive(Debug)]
struct LocState {
    file: Rc<str>,
    line: u32,
}

impl Default for LocState {
    fn default() -> Self {
        LocState { file: Rc::from(""), line: 0 }
    }
}

impl LocState {
    /// Applies every location in `text` in order; returns the first and the last one.
    fn scan(&mut self, text: &str) -> (Option<Place>, Option<Place>) {
        // Pseudo-files hold characters the tokenizer splits on; rare, so rewritten only then.
        let cleaned = if text.contains("<invalid sloc>")
            || text.contains("<built-in>")
            || text.contains("<scratch space>")
            || text.contains("<command line>")
        {
            Cow::Owned(
                text.replace("<invalid sloc>", " ")
                    .replace("<built-in>", "built-in")
                    .replace("<scratch space>", "scratch-space")
                    .replace("<command line>", "command-line"),
            )
        } else {
            Cow::Borrowed(text)
        };
        let (mut first, mut last) = (None, None);
        for tok in cleaned.split(['<', '>', ',', ' ', '=']) {
            if let Some(c) = tok.strip_prefix("col:") {
                if c.parse::<u32>().is_err() {
                    continue;
                }
            } else if let Some(rest) = tok.strip_prefix("line:") {
                let Some((l, c)) = rest.split_once(':') else { continue };
                let (Ok(l), Ok(_)) = (l.parse::<u32>(), c.parse::<u32>()) else { continue };
                self.line = l;
            } else {
                if !tok.contains(':') {
                    continue;
                }
                let mut it = tok.rsplitn(3, ':');
                let (Some(c), Some(l), Some(f)) = (it.next(), it.next(), it.next()) else { continue };
                let (Ok(l), Ok(_)) = (l.parse::<u32>(), c.parse::<u32>()) else { continue };
                if f.is_empty() {
                    continue;
                }
                if *self.file != *f {
                    self.file = Rc::from(f);
                }
                self.line = l;
            }
            if first.is_none() {
                first = Some((self.file.clone(), self.line));
            }
            last = Some(self.line);
        }
        (first, last.map(|l| (self.file.clone(), l)))
    }
}

fn is_system(file: &str) -> bool {
    file.starts_with("/usr/") || file == "built-in" || file == "scratch-space" || file == "command-line"
}

/// Target constructs that have a region running on the device.
fn is_target_region(kind: &str) -> bool {
    kind.starts_with("OMPTarget")
        && kind.ends_with("Directive")
        && !matches!(
            kind,
            "OMPTargetDataDirective"
                | "OMPTargetEnterDataDirective"
                | "OMPTargetExitDataDirective"
                | "OMPTargetUpdateDirective"
        )
}

/// The word after `key` in `s` (`Function 0x55…` → `0x55…`).
fn word_after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let i = s.find(key)?;
    s[i + key.len()..].split_whitespace().next()
}

/// Parses a whole dump. `file` names the source (for the unit); `cxx` selects C++ symbol keys.
pub fn parse(file: &str, cxx: bool, input: impl BufRead) -> Result<Unit> {
    let mut unit = Unit::new(file, Compiler::Clang);
    let mut by_addr: HashMap<String, usize> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut locs = LocState::default();
    let mut saw_tu = false;
    let mut pending_vars: HashMap<usize, Func> = HashMap::new();
    let mut next_var = 0usize;
    let mut input = input;
    let mut buf = Vec::with_capacity(256);
    for lineno in 0usize.. {
        buf.clear();
        let read = input
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::new(format!("{file}: reading clang's AST dump: {e}")))?;
        if read == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        let start = line.find(|c: char| !matches!(c, ' ' | '|' | '`' | '-')).unwrap_or(line.len());
        let text = &line[start..];
        if text.is_empty() {
            continue;
        }
        if lineno == 0 {
            if !text.starts_with("TranslationUnitDecl") {
                return Err(Error::new(format!("{file}: clang's AST dump does not start with TranslationUnitDecl")));
            }
            saw_tu = true;
        }
        let depth = start / 2;
        while stack.last().is_some_and(|f| f.depth >= depth) {
            stack.pop();
        }
        let child_index = match stack.last_mut() {
            Some(p) => {
                p.children += 1;
                p.children - 1
            }
            None => 0,
        };
        let parent = stack.last().map(|f| f.kind);
        let kind_name = text.split_whitespace().next().unwrap_or("");
        let head = text.find('\'').map_or(text, |q| &text[..q]);
        let (first, last) = locs.scan(head);
        let enclosing_func = stack.iter().rev().find_map(|f| match f.kind {
            Kind::Func(i) => Some(i),
            _ => None,
        });
        let in_region = stack.iter().any(|f| f.kind == Kind::Region);
        let mut frame = Frame { depth, kind: Kind::Other, children: 0, scope: None, loc: None };
        match kind_name {
            "FunctionDecl" | "CXXMethodDecl" | "CXXConstructorDecl" | "CXXDestructorDecl" | "CXXConversionDecl" => {
                let mut words = head.split_whitespace();
                let addr = words.nth(1).unwrap_or("").to_string();
                let name = head.split_whitespace().last().unwrap_or("").to_string();
                let ty = text.split('\'').nth(1).unwrap_or("");
                let loc = to_loc(&last);
                let local = text.ends_with(" static") || text.contains("' static");
                let idx = match word_after(head, " prev ").and_then(|p| by_addr.get(p).copied()) {
                    Some(i) => i,
                    None => match by_addr.get(&addr) {
                        Some(&i) => i,
                        None => {
                            let scopes: Vec<&str> = stack.iter().filter_map(|f| f.scope.as_deref()).collect();
                            let qual =
                                if scopes.is_empty() { name.clone() } else { format!("{}::{name}", scopes.join("::")) };
                            let c_linkage = !cxx || stack.iter().any(|f| f.kind == Kind::LinkageC);
                            let sym = if c_linkage || name == "main" { name.clone() } else { format!("{qual}({ty})") };
                            let mut f = Func::new(sym, qual, loc.clone());
                            f.local = local;
                            f.system = is_system(&loc.file) || head.contains(" implicit ");
                            unit.funcs.push(f);
                            unit.funcs.len() - 1
                        }
                    },
                };
                by_addr.insert(addr, idx);
                frame.kind = Kind::Func(idx);
                frame.loc = Some(loc);
            }
            "CompoundStmt" | "CXXTryStmt" => {
                if let (Some(Kind::Func(i)), Some(p)) = (parent, stack.last()) {
                    if p.depth + 1 == depth {
                        // The definition's place is the one to point users at.
                        let f = &mut unit.funcs[i];
                        f.defined = true;
                        if let Some(l) = &p.loc {
                            f.loc = l.clone();
                        }
                    }
                }
            }
            "VarDecl" if enclosing_func.is_none() => {
                let name = head.split_whitespace().last().unwrap_or("").to_string();
                let loc = to_loc(&last);
                let mut v = Func::new(name.clone(), name, loc.clone());
                v.kind = SymKind::Variable;
                v.local = text.contains("' static") || text.ends_with(" static");
                v.system = is_system(&loc.file);
                v.defined = !text.contains(" extern");
                pending_vars.insert(next_var, v);
                frame.kind = Kind::Var(next_var);
                next_var += 1;
            }
            "OMPDeclareTargetDeclAttr" if !head.contains(" Inherited") => {
                let dt = head.split_whitespace().find_map(|w| w.strip_prefix("DT_").and_then(DeviceType::parse));
                let cap = head.split_whitespace().find_map(|w| w.strip_prefix("MT_").and_then(Capture::parse));
                let (Some(dt), Some(cap)) = (dt, cap) else {
                    return Err(Error::new(format!(
                        "{file}: clang's AST dump line {}: OMPDeclareTargetDeclAttr without MT_/DT_ fields",
                        lineno + 1
                    )));
                };
                let mark = Mark { dt, cap, loc: to_loc(&first) };
                match parent {
                    Some(Kind::Func(i)) if !unit.funcs[i].marks.contains(&mark) => unit.funcs[i].marks.push(mark),
                    Some(Kind::Var(v)) => {
                        if let Some(mut var) = pending_vars.remove(&v) {
                            var.marks.push(mark);
                            unit.funcs.push(var);
                        }
                    }
                    _ => {}
                }
            }
            k if is_target_region(k) && !in_region => {
                let loc = to_loc(&first);
                if let Some(p) = enclosing_func {
                    unit.funcs[p].has_target = true;
                }
                unit.regions.push(Region { loc, parent: enclosing_func, refs: Vec::new() });
                frame.kind = Kind::Region;
            }
            "CallExpr" | "CXXMemberCallExpr" | "CXXOperatorCallExpr" => frame.kind = Kind::Call,
            "ImplicitCastExpr" if text.contains("<FunctionToPointerDecay>") => {
                frame.kind = Kind::Decay(parent == Some(Kind::Call) && child_index == 0);
            }
            "NamespaceDecl" | "CXXRecordDecl" | "ClassTemplateSpecializationDecl" => {
                frame.kind = Kind::Scope;
                let name = head.split_whitespace().last().unwrap_or("");
                if !matches!(name, "definition" | "struct" | "class" | "union" | "") && !name.starts_with("0x") {
                    frame.scope = Some(name.to_string());
                }
            }
            "LinkageSpecDecl" if head.trim_end().ends_with(" C") => frame.kind = Kind::LinkageC,
            "DeclRefExpr" | "MemberExpr" => {
                let target = if kind_name == "DeclRefExpr" {
                    word_after(text, "' Function ")
                        .or_else(|| word_after(text, " Function "))
                        .or_else(|| word_after(text, " CXXMethod "))
                } else if text.contains("<bound member function type>") {
                    head.split_whitespace().last()
                } else {
                    None
                };
                if let Some(addr) = target.filter(|a| a.starts_with("0x")) {
                    let to = match by_addr.get(addr) {
                        Some(&i) => i,
                        None => {
                            let name = text.rsplit('\'').nth(3).unwrap_or(addr).to_string();
                            let mut f = Func::new(name.clone(), name, Loc::default());
                            f.system = true;
                            unit.funcs.push(f);
                            by_addr.insert(addr.to_string(), unit.funcs.len() - 1);
                            unit.funcs.len() - 1
                        }
                    };
                    let kind = if kind_name == "MemberExpr" || parent == Some(Kind::Decay(true)) {
                        RefKind::Call
                    } else {
                        RefKind::Address
                    };
                    let r = Ref { to, kind, loc: to_loc(&first) };
                    if in_region {
                        if let Some(reg) = unit.regions.last_mut() {
                            reg.refs.push(r);
                        }
                    } else if let Some(f) = enclosing_func {
                        unit.funcs[f].refs.push(r);
                    }
                }
            }
            _ => {}
        }
        stack.push(frame);
    }
    if !saw_tu {
        return Err(Error::new(format!("{file}: clang's AST dump is empty")));
    }
    dedup_refs(&mut unit);
    Ok(unit)
}

/// clang dumps a captured region's body twice; keep each reference once.
pub fn dedup_refs(unit: &mut Unit) {
    let dedup = |refs: &mut Vec<Ref>| {
        if refs.len() < 2 {
            return;
        }
        let keep: Vec<bool> = {
            let mut seen = HashSet::with_capacity(refs.len());
            refs.iter().map(|r| seen.insert((r.to, r.kind, &r.loc))).collect()
        };
        let mut k = keep.into_iter();
        refs.retain(|_| k.next().unwrap_or(true));
    };
    for f in &mut unit.funcs {
        dedup(&mut f.refs);
    }
    for r in &mut unit.regions {
        dedup(&mut r.refs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "\
TranslationUnitDecl 0x1 <<invalid sloc>> <invalid sloc>
|-FunctionDecl 0x10 </usr/include/stdio.h:356:1, col:40> col:12 used printf 'int (const char *, ...)' extern
|-FunctionDecl 0x20 <d1.c:4:1, col:35> col:5 hostfn 'int (int)'
| |-ParmVarDecl 0x21 <col:12, col:16> col:16 used x 'int'
| |-CompoundStmt 0x22 <col:19, col:35>
| `-OMPDeclareTargetDeclAttr 0x23 <line:3:27> Implicit MT_To DT_Host 1
|-FunctionDecl 0x30 <line:9:1, col:38> col:5 used mid 'int (int)'
| `-CompoundStmt 0x31 <col:16, col:38>
|   `-ReturnStmt 0x32 <col:18, col:35>
|     `-CallExpr 0x33 <col:25, col:31> 'int'
|       |-ImplicitCastExpr 0x34 <col:25> 'int (*)(int)' <FunctionToPointerDecay>
|       | `-DeclRefExpr 0x35 <col:25> 'int (int)' Function 0x20 'hostfn' 'int (int)'
|       `-IntegerLiteral 0x36 <col:30> 'int' 1
|-FunctionDecl 0x40 <line:10:1, col:39> col:12 used cb 'int (int)' static
| `-CompoundStmt 0x41 <col:22, col:39>
|-VarDecl 0x50 <line:14:1, col:5> col:5 gv 'int'
| `-OMPDeclareTargetDeclAttr 0x51 <line:15:33> Implicit MT_Link DT_Any 4294967295
`-FunctionDecl 0x60 <line:16:1, line:22:1> line:16:5 main 'int (void)'
  `-CompoundStmt 0x61 <col:16, line:22:1>
    |-OMPTargetDirective 0x62 <line:18:1, col:34>
    | `-CapturedStmt 0x63 <line:19:3, col:32>
    |   `-CallExpr 0x64 <col:18, col:29> 'int'
    |     |-ImplicitCastExpr 0x65 <col:18> 'int (*)(int)' <FunctionToPointerDecay>
    |     | `-DeclRefExpr 0x66 <col:18> 'int (int)' Function 0x30 'mid' 'int (int)'
    |     `-ImplicitCastExpr 0x67 <col:24> 'int (*)(int)' <FunctionToPointerDecay>
    |       `-DeclRefExpr 0x68 <col:24> 'int (int)' Function 0x40 'cb' 'int (int)'
    `-CallExpr 0x70 <line:20:3, col:19> 'int'
      |-ImplicitCastExpr 0x71 <col:3> 'int (*)(const char *, ...)' <FunctionToPointerDecay>
      | `-DeclRefExpr 0x72 <col:3> 'int (const char *, ...)' Function 0x10 'printf' 'int (const char *, ...)'
      `-IntegerLiteral 0x73 <col:10> 'int' 0
";

    #[test]
    fn reads_functions_marks_regions_and_references() {
        let u = parse("d1.c", false, DUMP.as_bytes()).unwrap();
        let names: Vec<&str> = u.funcs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["printf", "hostfn", "mid", "cb", "gv", "main"]);
        assert!(u.funcs[0].system && !u.funcs[0].defined);
        let h = &u.funcs[1];
        assert!(h.defined);
        assert_eq!(h.loc, Loc::new("d1.c", 4));
        assert_eq!(h.marks, vec![Mark { dt: DeviceType::Host, cap: Capture::To, loc: Loc::new("d1.c", 3) }]);
        assert_eq!(u.funcs[2].refs, vec![Ref { to: 1, kind: RefKind::Call, loc: Loc::new("d1.c", 9) }]);
        assert!(u.funcs[3].local);
        assert_eq!(u.funcs[4].kind, SymKind::Variable);
        assert_eq!(u.funcs[4].marks[0].cap, Capture::Link);
        assert_eq!(u.regions.len(), 1);
        let r = &u.regions[0];
        assert_eq!(r.loc, Loc::new("d1.c", 18));
        assert_eq!(r.parent, Some(5));
        assert_eq!(
            r.refs,
            vec![
                Ref { to: 2, kind: RefKind::Call, loc: Loc::new("d1.c", 19) },
                Ref { to: 3, kind: RefKind::Address, loc: Loc::new("d1.c", 19) },
            ]
        );
        assert!(u.funcs[5].has_target);
        assert_eq!(u.funcs[5].refs.len(), 1, "printf call outside the region belongs to main");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert!(parse("x.c", false, "".as_bytes()).is_err());
        assert!(parse("x.c", false, "garbage\n".as_bytes()).is_err());
        let bad = "TranslationUnitDecl 0x1 <<invalid sloc>> <invalid sloc>\n|-FunctionDecl 0x2 <a.c:1:1> col:5 f 'int ()'\n| `-OMPDeclareTargetDeclAttr 0x3 <line:1:1> Implicit\n";
        assert!(parse("x.c", false, bad.as_bytes()).is_err());
        // Truncated and odd lines parse without panicking.
        let odd = "TranslationUnitDecl 0x1\n|-FunctionDecl\n| `-DeclRefExpr 0x9 <col:> 'x' Function 0x77\n`-\n";
        assert!(parse("x.c", false, odd.as_bytes()).is_ok());
    }

    /// The cost of reading a dump alone (not counted in the analysis time `ompcc -v` prints):
    /// `OMPCC_AST_DUMP=dag.ast cargo test --release -p ompcc -- --ignored --nocapture parse_time`.
    #[test]
    #[ignore]
    fn parse_time() {
        let Ok(path) = std::env::var("OMPCC_AST_DUMP") else { return };
        let data = std::fs::read(&path).unwrap();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let u = parse(&path, false, &data[..]).unwrap();
            let refs: usize = u.funcs.iter().map(|f| f.refs.len()).sum();
            eprintln!(
                "parse of {path} ({} MB): {} functions, {refs} references, {:.1} ms",
                data.len() >> 20,
                u.funcs.len(),
                t.elapsed().as_secs_f64() * 1e3
            );
        }
    }
}
