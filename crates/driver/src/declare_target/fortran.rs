//! Reads flang's HLFIR (`flang -fc1 -emit-hlfir -mmlir -mlir-print-debuginfo`) into a [`Unit`],
//! and finds the explicit `!$omp declare target` directives in the source.
//!
//! flang runs its own marking pass before it prints HLFIR, so the `omp.declare_target`
//! attributes there are the *result* (explicit and implicit mixed). The explicit marks come from
//! the directives in the source instead; the HLFIR marks are kept as `compiler_marks` to check
//! the analysis against (and as a fallback for a mark the source scan missed).

use super::graph::{Capture, Compiler, DeviceType, Func, Loc, Mark, Ref, RefKind, Region, SymKind, Unit};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The link name of a FIR symbol: external procedures get gfortran's trailing underscore.
pub fn link_name(sym: &str) -> String {
    match sym.strip_prefix("_QP") {
        Some(n) => format!("{n}_"),
        None => sym.to_string(),
    }
}

/// `_QMmodPf` → `mod::f`, `_QPf` → `f`, `_QFhostPinner` → `host::inner`; other names as they are.
pub fn display_name(sym: &str) -> String {
    let Some(rest) = sym.strip_prefix("_Q") else { return sym.to_string() };
    if rest.starts_with('Q') {
        return sym.to_string();
    }
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut tag = ' ';
    for c in rest.chars() {
        if c.is_ascii_uppercase() {
            if matches!(tag, 'M' | 'F' | 'P' | 'S' | 'E') && !cur.is_empty() {
                parts.push(std::mem::take(&mut cur));
            }
            cur.clear();
            tag = c;
        } else {
            cur.push(c);
        }
    }
    if matches!(tag, 'M' | 'F' | 'P' | 'S' | 'E') && !cur.is_empty() {
        parts.push(cur);
    }
    if parts.is_empty() {
        sym.to_string()
    } else {
        parts.join("::")
    }
}

fn last_component(sym: &str) -> String {
    display_name(sym).rsplit("::").next().unwrap_or(sym).to_ascii_lowercase()
}

/// `loc("file":L:C)` text, or an alias `#locN`, resolved to a place.
fn resolve_loc(text: &str, aliases: &HashMap<String, String>, depth: u32) -> Option<Loc> {
    let (file, line, _) = resolve_place(text, aliases, depth)?;
    Some(Loc::new(file, line))
}

/// `loc("file":L:C)` text, or an alias `#locN`, resolved to file, line and column.
pub(crate) fn resolve_place(text: &str, aliases: &HashMap<String, String>, depth: u32) -> Option<(String, u32, u32)> {
    if depth > 16 {
        return None;
    }
    if let Some(q) = text.find('"') {
        let rest = &text[q + 1..];
        let end = rest.find('"')?;
        let file = &rest[..end];
        let mut nums =
            rest[end + 1..].split(':').skip(1).map(|n| n.chars().take_while(char::is_ascii_digit).collect::<String>());
        let line = nums.next()?.parse().ok()?;
        let col = nums.next().and_then(|c| c.parse().ok()).unwrap_or(0);
        return Some((file.to_string(), line, col));
    }
    let i = text.find("#loc")?;
    let alias: String = text[i..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '#' || *c == '_').collect();
    resolve_place(aliases.get(&alias)?, aliases, depth + 1)
}

/// The `#locN = loc(…)` aliases at the end of an MLIR module.
pub(crate) fn loc_aliases(text: &str) -> HashMap<String, String> {
    let mut aliases = HashMap::new();
    for line in text.lines() {
        if let Some((name, rest)) = line.strip_prefix('#').and_then(|l| l.split_once(" = ")) {
            if name.starts_with("loc") {
                aliases.insert(format!("#{name}"), rest.to_string());
            }
        }
    }
    aliases
}

/// The location at the end of an op line (`… loc(#loc12)`).
fn op_loc(line: &str, aliases: &HashMap<String, String>) -> Option<Loc> {
    let i = line.rfind(" loc(")?;
    resolve_loc(&line[i + 5..], aliases, 0)
}

/// `#omp.declaretarget<device_type = (nohost), capture_clause = (to)…>` on a line.
fn fir_mark(line: &str) -> Option<(DeviceType, Capture)> {
    let i = line.find("#omp.declaretarget<")?;
    let s = &line[i..];
    let field = |key: &str| -> Option<&str> {
        let j = s.find(key)?;
        let r = &s[j + key.len()..];
        let r = r.trim_start().strip_prefix('=')?.trim_start().strip_prefix('(')?;
        Some(&r[..r.find(')')?])
    };
    Some((DeviceType::parse(field("device_type")?)?, Capture::parse(field("capture_clause")?)?))
}

/// The symbol after `@` at byte `at` of `line`.
fn symbol_at(line: &str, at: usize) -> &str {
    let rest = &line[at + 1..];
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$'))).unwrap_or(rest.len());
    &rest[..end]
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Func(usize),
    Target(usize),
}

/// Parses HLFIR text for source `file` (explicit marks are added by [`apply_directives`]).
pub fn parse_hlfir(file: &str, text: &str) -> Result<Unit> {
    if !text.contains("module") {
        return Err(Error::new(format!("{file}: flang's HLFIR output holds no module")));
    }
    let aliases = loc_aliases(text);
    let mut unit = Unit::new(file, Compiler::Flang);
    let mut by_sym: HashMap<String, usize> = HashMap::new();
    // (from function or region, symbol, is call, loc) resolved once every function is known.
    let mut raw_refs: Vec<(Open, String, RefKind, Loc)> = Vec::new();
    let mut stack: Vec<(usize, Open)> = Vec::new();
    let mut get = |unit: &mut Unit, sym: &str| -> usize {
        *by_sym.entry(sym.to_string()).or_insert_with(|| {
            let mut f = Func::new(link_name(sym), display_name(sym), Loc::default());
            // `main` is flang's generated C entry point, not user code.
            f.system = sym.starts_with("_Fortran") || sym == "main" || sym.starts_with("_QQ") && sym != "_QQmain";
            unit.funcs.push(f);
            unit.funcs.len() - 1
        })
    };
    for line in text.lines() {
        let ind = indent(line);
        let t = line.trim_start();
        // Block labels (`^bb0(…)`) sit at the indentation of the op that owns the region.
        if t.starts_with('^') {
            continue;
        }
        while let Some(&(i, open)) = stack.last() {
            if ind > i {
                break;
            }
            stack.pop();
            if t.starts_with('}') {
                if let Some(l) = op_loc(t, &aliases) {
                    match open {
                        Open::Func(f) => unit.funcs[f].loc = l,
                        Open::Target(r) => unit.regions[r].loc = l,
                    }
                }
            }
        }
        if t.starts_with("func.func ") {
            let Some(at) = t.find('@') else { continue };
            let sym = symbol_at(t, at).to_string();
            let f = get(&mut unit, &sym);
            let defines = t.trim_end().ends_with('{');
            if t.contains("fir.runtime") {
                unit.funcs[f].system = true;
            }
            if let Some((dt, _)) = fir_mark(t) {
                unit.compiler_marks.push((link_name(&sym), dt));
            }
            if sym == "_QQmain" {
                if let Some(i) = t.find("fir.bindc_name = \"") {
                    let n: String = t[i + 18..].chars().take_while(|c| *c != '"').collect();
                    unit.funcs[f].name = format!("program {}", n.to_ascii_lowercase());
                }
            }
            if defines {
                unit.funcs[f].defined = true;
                if let Some(l) = t.find("loc(").and_then(|i| resolve_loc(&t[i + 4..], &aliases, 0)) {
                    unit.funcs[f].loc = l;
                }
                stack.push((ind, Open::Func(f)));
            } else if let Some(l) = op_loc(t, &aliases) {
                unit.funcs[f].loc = l;
            }
            continue;
        }
        if t.starts_with("fir.global ") {
            if let (Some(at), Some((dt, cap))) = (t.find('@'), fir_mark(t)) {
                let sym = symbol_at(t, at);
                let mut v = Func::new(sym, display_name(sym), op_loc(t, &aliases).unwrap_or_default());
                v.kind = SymKind::Variable;
                v.defined = true;
                v.marks.push(Mark { dt, cap, loc: v.loc.clone() });
                unit.funcs.push(v);
            }
            continue;
        }
        let Some(&(_, cur)) = stack.last() else { continue };
        let owner = stack.iter().rev().find_map(|&(_, o)| matches!(o, Open::Target(_)).then_some(o)).unwrap_or(cur);
        if (t.starts_with("omp.target ") || t.starts_with("omp.target{")) && t.trim_end().ends_with('{') {
            if !matches!(owner, Open::Target(_)) {
                let parent = stack.iter().rev().find_map(|&(_, o)| match o {
                    Open::Func(f) => Some(f),
                    Open::Target(_) => None,
                });
                if let Some(p) = parent {
                    unit.funcs[p].has_target = true;
                }
                unit.regions.push(Region { loc: Loc::new(file, 0), parent, refs: Vec::new() });
                stack.push((ind, Open::Target(unit.regions.len() - 1)));
            }
            continue;
        }
        // Every `@symbol` in an op names something it uses; `fir.call @f(` is a direct call.
        let loc = op_loc(t, &aliases).unwrap_or_default();
        let mut from = 0;
        while let Some(p) = t[from..].find('@') {
            let at = from + p;
            let sym = symbol_at(t, at);
            from = at + 1;
            if sym.is_empty() {
                continue;
            }
            let is_call = t[..at].trim_end().ends_with("fir.call");
            let kind = if is_call { RefKind::Call } else { RefKind::Address };
            raw_refs.push((owner, sym.to_string(), kind, loc.clone()));
        }
    }
    for (owner, sym, kind, loc) in raw_refs {
        // Only functions: globals and string literals are not edges.
        let Some(&to) = by_sym.get(&sym) else { continue };
        if unit.funcs[to].kind != SymKind::Function {
            continue;
        }
        let r = Ref { to, kind, loc };
        match owner {
            Open::Func(f) => unit.funcs[f].refs.push(r),
            Open::Target(i) => unit.regions[i].refs.push(r),
        }
    }
    super::clang_ast::dedup_refs(&mut unit);
    Ok(unit)
}

/// One `!$omp declare target` found in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// The names it lists (lower case), or the enclosing procedure for the bare form.
    pub names: Vec<String>,
    pub dt: DeviceType,
    pub cap: Capture,
    pub loc: Loc,
    /// The module whose specification part holds it, for names defined in several modules.
    pub module: Option<String>,
}

/// The text inside the parentheses after `key(` in `s`, if present.
fn clause<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(p) = s[from..].find(key) {
        let i = from + p;
        from = i + key.len();
        let before_ok = i == 0 || !s.as_bytes()[i - 1].is_ascii_alphanumeric() && s.as_bytes()[i - 1] != b'_';
        let rest = s[i + key.len()..].trim_start();
        if before_ok && rest.starts_with('(') {
            let end = rest.find(')')?;
            return Some(&rest[1..end]);
        }
    }
    None
}

fn names(list: &str) -> Vec<String> {
    list.split(',').map(|n| n.trim().to_string()).filter(|n| !n.is_empty() && !n.starts_with('/')).collect()
}

/// Finds the `declare target` directives of a Fortran source (free or fixed form).
pub fn scan_directives(file: &str, src: &str) -> Vec<Directive> {
    let mut out = Vec::new();
    let mut proc: Option<String> = None;
    let mut module: Option<String> = None;
    let lines: Vec<&str> = src.lines().collect();
    // Preprocessed text (`flang -E`) says where lines come from with `#line "file" N`.
    let mut nums = Vec::with_capacity(lines.len());
    let mut next = 1u32;
    for l in &lines {
        nums.push(next);
        next += 1;
        if let Some(rest) = l.strip_prefix("#line ").or_else(|| l.strip_prefix("# ")) {
            if let Some(n) = rest.split_whitespace().find_map(|w| w.parse::<u32>().ok()) {
                next = n;
            }
        }
    }
    let mut i = 0;
    while i < lines.len() {
        let lineno = nums[i];
        let raw = lines[i].to_ascii_lowercase();
        i += 1;
        let t = raw.trim_start();
        let fixed_sentinel = raw.starts_with("c$omp") || raw.starts_with("*$omp");
        if let Some(d) = t.strip_prefix("!$omp").or(if fixed_sentinel { Some(&raw[5..]) } else { None }) {
            let mut text = String::new();
            let mut cur = d.to_string();
            loop {
                let body = cur.split('!').next().unwrap_or("").trim_end().to_string();
                let Some(b) = body.strip_suffix('&') else {
                    text.push_str(&body);
                    break;
                };
                text.push_str(b);
                text.push(' ');
                let Some(next) = lines.get(i) else { break };
                i += 1;
                let n = next.trim_start().to_ascii_lowercase();
                let n = n.strip_prefix("!$omp").unwrap_or(&n).trim_start();
                cur = n.strip_prefix('&').unwrap_or(n).to_string();
            }
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let Some(rest) = text.strip_prefix("declare target").or_else(|| text.strip_prefix("declare_target")) else {
                continue;
            };
            let rest = rest.trim();
            let dt = clause(rest, "device_type").and_then(DeviceType::parse).unwrap_or(DeviceType::Any);
            let loc = Loc::new(file, lineno);
            let mut push = |names: Vec<String>, cap| {
                if !names.is_empty() {
                    out.push(Directive { names, dt, cap, loc: loc.clone(), module: module.clone() });
                }
            };
            if let Some(list) = rest.strip_prefix('(') {
                push(names(list.split(')').next().unwrap_or("")), Capture::To);
                continue;
            }
            let mut any_list = false;
            for (key, cap) in [("to", Capture::To), ("enter", Capture::Enter), ("link", Capture::Link)] {
                if let Some(list) = clause(rest, key) {
                    any_list = true;
                    push(names(list), cap);
                }
            }
            if !any_list {
                push(proc.iter().cloned().collect(), Capture::To);
            }
            continue;
        }
        if t.starts_with('!') {
            continue;
        }
        let words: Vec<&str> =
            t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty()).collect();
        match words.as_slice() {
            ["end", "module", ..] => module = None,
            ["end", ..] => {}
            ["module", w, ..] if !matches!(*w, "procedure" | "subroutine" | "function") => module = Some(w.to_string()),
            _ => {
                if let Some(k) = words.iter().position(|w| *w == "subroutine" || *w == "function") {
                    let prefix_ok = words[..k].iter().all(|w| {
                        matches!(
                            *w,
                            "recursive"
                                | "pure"
                                | "impure"
                                | "elemental"
                                | "module"
                                | "non_recursive"
                                | "integer"
                                | "real"
                                | "logical"
                                | "complex"
                                | "character"
                                | "double"
                                | "precision"
                                | "type"
                                | "class"
                                | "kind"
                                | "len"
                        ) || w.chars().all(|c| c.is_ascii_digit() || c == '_')
                    });
                    if let (true, Some(name)) = (prefix_ok, words.get(k + 1)) {
                        proc = Some(name.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Adds the source's explicit marks to the unit's functions (matched by name, preferring the
/// directive's module), and keeps flang's own result for any function the scan left unmarked.
pub fn apply_directives(unit: &mut Unit, dirs: &[Directive]) {
    let mut by_name: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, f) in unit.funcs.iter().enumerate() {
        if f.kind == SymKind::Function {
            let orig = f.sym.trim_end_matches('_');
            let key = if f.sym.starts_with("_Q") { last_component(&f.sym) } else { orig.to_ascii_lowercase() };
            by_name.entry(key).or_default().push(i);
        }
    }
    for d in dirs {
        for n in &d.names {
            let Some(cands) = by_name.get(n) else { continue };
            let pick = d
                .module
                .as_ref()
                .and_then(|m| cands.iter().find(|&&c| unit.funcs[c].sym.starts_with(&format!("_QM{m}P"))))
                .or_else(|| cands.first())
                .copied();
            if let Some(c) = pick {
                unit.funcs[c].marks.push(Mark { dt: d.dt, cap: d.cap, loc: d.loc.clone() });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HLFIR: &str = r#"#loc6 = loc("ex1.f90":8:1)
#loc10 = loc("ex1.f90":12:1)
module attributes {omp.is_target_device = false} {
  func.func @_QPleaf(%arg0: !fir.ref<i32> {fir.bindc_name = "x"} loc("ex1.f90":8:20)) attributes {omp.declare_target = #omp.declaretarget<device_type = (any), capture_clause = (enter)>} {
    %0 = fir.dummy_scope : !fir.dscope loc(#loc7)
    return loc(#loc9)
  } loc(#loc6)
  func.func @_QPmid(%arg0: !fir.ref<i32> {fir.bindc_name = "x"} loc("ex1.f90":12:1)) attributes {omp.declare_target = #omp.declaretarget<device_type = (any), capture_clause = (enter)>} {
    fir.call @_QPleaf(%1#0) fastmath<contract> : (!fir.ref<i32>) -> () loc(#loc11)
    return loc(#loc12)
  } loc(#loc10)
  func.func @_QQmain() attributes {fir.bindc_name = "P"} {
    %3 = fir.address_of(@_QFEx) : !fir.ref<i32> loc(#loc20)
    omp.target map_entries(%3 -> %arg0 : !fir.ref<i32>) {
      fir.call @_QPmid(%10#0) fastmath<contract> : (!fir.ref<i32>) -> () loc(#loc21)
      %5 = fir.address_of(@_QPcb) : (!fir.ref<i32>) -> i32 loc(#loc22)
      fir.call @_QMmPapply(%5) fastmath<contract> : ((!fir.ref<i32>) -> i32) -> () loc(#loc22)
      omp.terminator loc(#loc23)
    } loc(#loc24)
    return loc(#loc25)
  } loc(#loc26)
  func.func private @_QPcb(!fir.ref<i32>) -> i32 loc(#loc27)
  func.func private @_QMmPapply(!fir.ref<i32>) loc(#loc27)
  fir.global @_QMmEarr {omp.declare_target = #omp.declaretarget<device_type = (any), capture_clause = (link)>} : !fir.array<4xi32> loc(#loc28)
} loc(#loc)
#loc7 = loc("ex1.f90":9:3)
#loc11 = loc("ex1.f90":14:8)
#loc21 = loc("ex1.f90":45:3)
#loc22 = loc("ex1.f90":46:3)
#loc24 = loc("ex1.f90":44:9)
#loc26 = loc("ex1.f90":33:1)
#loc27 = loc("ex1.f90":50:1)
#loc28 = loc(fused[#loc29, #loc30])
#loc29 = loc("ex1.f90":3:14)
"#;

    #[test]
    fn reads_functions_regions_calls_and_addresses() {
        let u = parse_hlfir("ex1.f90", HLFIR).unwrap();
        let names: Vec<&str> = u.funcs.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["leaf", "mid", "program p", "cb", "m::apply", "m::arr"]);
        assert_eq!(u.funcs[0].sym, "leaf_");
        assert_eq!(u.funcs[1].loc, Loc::new("ex1.f90", 12));
        assert_eq!(u.funcs[1].refs, vec![Ref { to: 0, kind: RefKind::Call, loc: Loc::new("ex1.f90", 14) }]);
        assert_eq!(u.regions.len(), 1);
        let r = &u.regions[0];
        assert_eq!(r.loc, Loc::new("ex1.f90", 44));
        assert_eq!(r.parent, Some(2));
        let kinds: Vec<(usize, RefKind)> = r.refs.iter().map(|x| (x.to, x.kind)).collect();
        assert_eq!(kinds, [(1, RefKind::Call), (3, RefKind::Address), (4, RefKind::Call)]);
        assert!(!u.funcs[3].defined);
        assert_eq!(u.funcs[3].loc, Loc::new("ex1.f90", 50));
        assert_eq!(u.funcs[5].marks[0].cap, Capture::Link);
        assert_eq!(u.funcs[5].loc, Loc::new("ex1.f90", 3));
        assert_eq!(u.compiler_marks, vec![("leaf_".into(), DeviceType::Any), ("mid_".into(), DeviceType::Any)]);
    }

    #[test]
    fn scans_directives_in_their_forms() {
        let src = "\
module m
  !$omp declare target to(f) device_type(nohost)
contains
  integer function f(x)
  end function
end module
recursive subroutine s(x)
  !$omp declare target
end subroutine
subroutine t()
  !$OMP DECLARE TARGET ENTER(t, u) &
  !$omp& DEVICE_TYPE(host)
end subroutine
!$omp declare target (v)
";
        let d = scan_directives("a.f90", src);
        assert_eq!(d.len(), 4, "{d:?}");
        assert_eq!(d[0].names, ["f"]);
        assert_eq!((d[0].dt, d[0].cap, d[0].module.as_deref()), (DeviceType::NoHost, Capture::To, Some("m")));
        assert_eq!(d[1].names, ["s"]);
        assert_eq!((d[1].dt, d[1].cap, d[1].loc.line), (DeviceType::Any, Capture::To, 8));
        assert_eq!(d[2].names, ["t", "u"]);
        assert_eq!((d[2].dt, d[2].cap), (DeviceType::Host, Capture::Enter));
        assert_eq!(d[3].names, ["v"]);
    }

    #[test]
    fn names_and_bad_input() {
        assert_eq!(display_name("_QMmodPfun"), "mod::fun");
        assert_eq!(display_name("_QFhostPinner"), "host::inner");
        assert_eq!(link_name("_QPext_sub"), "ext_sub_");
        assert!(parse_hlfir("x.f90", "").is_err());
        assert!(parse_hlfir("x.f90", "module {\n  func.func @\n  func.func @f( {\n    fir.call @ loc(\n").is_ok());
        assert!(scan_directives("x.f90", "!$omp declare target to(\n!$omp declare target &\n").len() <= 1);
    }
}
