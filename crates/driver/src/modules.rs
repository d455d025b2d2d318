//! The order Fortran sources must compile in: a source that `use`s a module (or extends it with
//! a `submodule`) reads the module file another source writes, so it waits for that source.
//! Everything else still compiles in parallel.
//!
//! The scan is lexical, like a build system's (CMake's Fortran dependency scanner): `module m`,
//! `submodule (m[:parent]) s` and `use [, non_intrinsic ::] m` statements, comments and string
//! contents ignored, case-insensitive. Preprocessor conditionals are not evaluated, so a `use`
//! inside `#ifdef` counts: at worst an ordering that was not needed. Dependencies that would
//! form a cycle are dropped for those pointing forward on the command line (the order flang
//! itself needs when it compiles the files one by one).

use std::collections::HashMap;
use std::io::Read;

/// Files larger than this are not scanned (no dependencies recorded for them).
const MAX_SCAN: u64 = 64 << 20;

/// What one source declares and needs (lower-case names; a submodule is `ancestor:name`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Scan {
    pub provides: Vec<String>,
    pub needs: Vec<String>,
}

/// Reads `path` and scans it; an unreadable file scans as empty (the compiler will report it).
pub fn scan_file(path: &str) -> Scan {
    let mut text = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        if f.take(MAX_SCAN + 1).read_to_end(&mut text).is_err() || text.len() as u64 > MAX_SCAN {
            return Scan::default();
        }
    }
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    scan(&String::from_utf8_lossy(&text), matches!(ext, "f" | "F" | "for" | "FOR" | "ftn" | "FTN"))
}

/// Scans Fortran source text, in fixed form (`.f`, `.for`) or free form.
pub fn scan(text: &str, fixed: bool) -> Scan {
    let mut s = Scan::default();
    for line in text.lines() {
        // Fixed-form comment lines; a `!` outside strings starts a comment in both forms.
        if fixed && line.starts_with(['c', 'C', '*']) {
            continue;
        }
        for stmt in code(line).split(';') {
            statement(stmt.trim().to_ascii_lowercase().as_str(), &mut s);
        }
    }
    s.provides.dedup();
    s.needs.sort();
    s.needs.dedup();
    s
}

/// `line` up to a `!` comment, with string contents blanked.
fn code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut quote: Option<char> = None;
    for ch in line.chars() {
        match quote {
            Some(q) if ch == q => {
                quote = None;
                out.push(ch);
            }
            Some(_) => out.push(' '),
            None if ch == '!' => break,
            None => {
                if ch == '\'' || ch == '"' {
                    quote = Some(ch);
                }
                out.push(ch);
            }
        }
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn statement(st: &str, s: &mut Scan) {
    if let Some(rest) = word(st, "module") {
        // `module m`; not `module procedure p` nor `module function f()` (separate module procedures).
        if is_name(rest) && rest != "procedure" {
            s.provides.push(rest.to_string());
        }
    } else if let Some(rest) = word(st, "submodule") {
        // submodule (ancestor[:parent]) name
        let Some(rest) = rest.strip_prefix('(') else { return };
        let Some((parents, name)) = rest.split_once(')') else { return };
        let mut parts = parents.split(':').map(str::trim);
        let ancestor = parts.next().unwrap_or_default();
        let name = name.trim();
        if !is_name(ancestor) || !is_name(name) {
            return;
        }
        s.needs.push(ancestor.to_string());
        if let Some(parent) = parts.next().filter(|p| is_name(p)) {
            s.needs.push(format!("{ancestor}:{parent}"));
        }
        s.provides.push(format!("{ancestor}:{name}"));
    } else if let Some(rest) = word(st, "use").or_else(|| st.strip_prefix("use,").map(str::trim)) {
        // use m | use :: m | use, non_intrinsic :: m | use m, only: x   (not: use, intrinsic :: m)
        let rest = match rest.split_once("::") {
            Some((nature, name)) => {
                if nature.trim() == "intrinsic" {
                    return;
                }
                name.trim()
            }
            None => rest,
        };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if is_name(&name) {
            s.needs.push(name);
        }
    }
}

/// The rest of `st` after the keyword `kw` and at least one blank (or `(`, for submodule).
fn word<'a>(st: &'a str, kw: &str) -> Option<&'a str> {
    let rest = st.strip_prefix(kw)?;
    if rest.starts_with([' ', '\t']) || (kw == "submodule" && rest.starts_with('(')) {
        Some(rest.trim())
    } else {
        None
    }
}

/// For each of `scans` (in command-line order), the positions of the scans it must wait for.
pub fn order(scans: &[Scan]) -> Vec<Vec<usize>> {
    let mut provider: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, s) in scans.iter().enumerate() {
        for p in &s.provides {
            provider.entry(p.as_str()).or_default().push(i);
        }
    }
    let mut deps: Vec<Vec<usize>> = scans
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut d: Vec<usize> =
                s.needs.iter().flat_map(|n| provider.get(n.as_str()).into_iter().flatten().copied()).collect();
            d.retain(|&j| j != i);
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect();
    if has_cycle(&deps) {
        for (i, d) in deps.iter_mut().enumerate() {
            d.retain(|&j| j < i);
        }
    }
    deps
}

fn has_cycle(deps: &[Vec<usize>]) -> bool {
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); deps.len()];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            users[j].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..deps.len()).filter(|&i| indegree[i] == 0).collect();
    let mut seen = 0;
    while let Some(j) = ready.pop() {
        seen += 1;
        for &i in &users[j] {
            indegree[i] -= 1;
            if indegree[i] == 0 {
                ready.push(i);
            }
        }
    }
    seen != deps.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_modules_uses_and_submodules() {
        let s = scan(
            "MODULE Stream_Mod ! a comment: use fake\n  use, intrinsic :: iso_c_binding\n  USE types_mod, only: dp\n  use :: omp_lib\n  use, non_intrinsic :: helpers\ncontains\n  module procedure foo\n  module function bar() result(r)\n print *, 'use quoted'\nend module stream_mod\n",
            false,
        );
        assert_eq!(s.provides, ["stream_mod"]);
        assert_eq!(s.needs, ["helpers", "omp_lib", "types_mod"]);
        let s = scan("submodule (shapes:geometry) area_impl\nend submodule\n", false);
        assert_eq!(s.provides, ["shapes:area_impl"]);
        assert_eq!(s.needs, ["shapes", "shapes:geometry"]);
        let s = scan("      program main; use stream_mod; end program\nc use nothing (fixed-form comment)\n", true);
        assert_eq!(s.needs, ["stream_mod"]);
    }

    #[test]
    fn orders_producers_first_and_survives_cycles() {
        let sc = |p: &[&str], n: &[&str]| Scan {
            provides: p.iter().map(|s| s.to_string()).collect(),
            needs: n.iter().map(|s| s.to_string()).collect(),
        };
        // main uses stream, stream uses types; an unrelated file waits for nothing.
        let scans = [sc(&[], &["stream"]), sc(&["stream"], &["types"]), sc(&["types"], &[]), sc(&["x"], &[])];
        assert_eq!(order(&scans), vec![vec![1], vec![2], vec![], vec![]]);
        // a cycle (a uses b, b uses a): only backward edges stay.
        let scans = [sc(&["a"], &["b"]), sc(&["b"], &["a"])];
        assert_eq!(order(&scans), vec![vec![], vec![0]]);
    }
}
