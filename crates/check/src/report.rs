//! The words of a finding: variables, places and the directive that fixes it, in the
//! program's language.

use omp_format::SourceLocation;
use omp_runtime::info;
use omp_runtime::trace::TargetKind;
use omp_runtime::{Loc, MapName};

/// Prints one finding: a single line that starts with `omptarget check:`.
pub(super) fn finding(kind: &str, text: std::fmt::Arguments) {
    info::emit(&format!("omptarget check: {kind}: {text}\n"));
}

/// Said once per program when names or places are missing.
pub(super) fn hint_debug_info() -> &'static str {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        ""
    } else {
        " (variable names and source places need debug information: build with -g or -gline-tables-only)"
    }
}

/// A map name's fields: clang writes `;name;file;line;col;;`, flang `;file;name;line;col;;`.
/// flang 22 writes a location from an included file as MLIR text
/// (`loc(fused<…>["/src/inc.F90":236:18, …])`): its first quoted path is the file.
fn parse_name(name: MapName) -> Option<SourceLocation<'static>> {
    let mut l = SourceLocation::from_map_name(info::map_name(name)?);
    for field in [&mut l.name, &mut l.file] {
        if let Some(path) = field.strip_prefix("loc(").and_then(|t| t.split('"').nth(1)) {
            *field = path;
        }
    }
    if source_file(l.name) && !source_file(l.file) {
        std::mem::swap(&mut l.name, &mut l.file);
    }
    Some(l)
}

/// Whether a map-name field is a source file's path.
fn source_file(s: &str) -> bool {
    let lower = s.to_ascii_lowercase();
    s.contains('/') && !s.contains(['[', '(', ' '])
        || [".c", ".cc", ".cpp", ".cxx", ".f", ".f90", ".f95", ".f03", ".f08"].iter().any(|e| lower.ends_with(e))
}

/// A map name's variable spelling (`A[0:N]`, `a(1:n)`), if the compiler passed names.
pub(super) fn var(name: MapName) -> Option<&'static str> {
    let n = parse_name(name)?.name;
    (!n.is_empty() && n != "unknown").then_some(n)
}

/// A name for a mapping the compiler left unnamed (flang's data of an allocatable): the
/// construct's map name declared at the same place, if one has a variable.
pub(super) fn named_like(name: MapName, names: &[MapName]) -> MapName {
    if var(name).is_some() {
        return name;
    }
    let Some(me) = parse_name(name) else { return name };
    names
        .iter()
        .copied()
        .find(|&n| var(n).is_some() && parse_name(n).is_some_and(|l| (l.line, l.column) == (me.line, me.column)))
        .unwrap_or(name)
}

/// The source file a construct's map names mention (flang's constructs carry no file).
pub(super) fn file_of(names: &[MapName]) -> Option<&'static str> {
    names.iter().filter_map(|&n| parse_name(n)).map(|l| l.file).find(|f| source_file(f))
}

/// `file:line:col` of a construct, completed from what else is known when the compiler
/// left it out: flang names no file (`FIRModule`) and gives target regions no line, which
/// the kernel's name (`…_l11`) carries.
pub(super) fn place_in(loc: Loc, file: Option<&str>, kernel: Option<&str>) -> String {
    let l = if loc.is_none() { SourceLocation::from_ident(";unknown;unknown;0;0;;") } else { loc.parse() };
    let file_known = l.file != "unknown" && l.file != "FIRModule";
    let name = |f: &str| f.rsplit('/').next().unwrap_or(f).to_string();
    match (l.is_known(), file_known, file) {
        (true, true, _) => l.to_string(),
        (true, false, Some(f)) => format!("{}:{}:{}", name(f), l.line, l.column),
        (false, _, f) => {
            let line = kernel.and_then(|k| k.rsplit_once("_l")).and_then(|(_, n)| n.parse::<u32>().ok());
            match (line, f.or(file_known.then_some(l.file))) {
                (Some(line), Some(f)) => format!("{}:{line}", name(f)),
                (Some(line), None) => format!("line {line}"),
                _ => "an unknown place".into(),
            }
        }
        (true, false, None) => format!("line {}", l.line),
    }
}

/// `` `A[0:N]` `` or a description of an unnamed mapping.
pub(super) fn var_or(name: MapName, size: usize) -> String {
    match var(name) {
        Some(v) => format!("`{v}`"),
        None => format!("an unnamed mapping of {size} bytes"),
    }
}

/// The bare variable of a spelling: `A` of `A[0:N]`, `a` of `a(1:n)`, `s.p` of `s.p[:n]`.
pub(super) fn base_var(spelling: &str) -> &str {
    let end = spelling.find(['[', '(']).unwrap_or(spelling.len());
    spelling[..end].trim()
}

/// `file:line:col`, or `an unknown place` without debug information.
pub(super) fn place(loc: Loc) -> String {
    place_in(loc, None, None)
}

/// [`place`], completed from a mapping's name and the kernel's.
pub(super) fn place_for(loc: Loc, name: MapName, kernel: Option<&str>) -> String {
    place_in(loc, file_of(&[name]), kernel)
}

/// The program is Fortran: the construct's file, or the mapping's, says so.
pub(super) fn is_fortran(loc: Loc, name: MapName) -> bool {
    fortran(loc) || file_of(&[name]).is_some_and(fortran_file)
}

fn fortran_file(f: &str) -> bool {
    let f = f.to_ascii_lowercase();
    [".f", ".f90", ".f95", ".f03", ".f08", ".for", ".ftn"].iter().any(|ext| f.ends_with(ext))
}

/// The program is Fortran (the construct's file says so; flang's say `FIRModule`).
pub(super) fn fortran(loc: Loc) -> bool {
    if loc.is_none() {
        return false;
    }
    let l = loc.parse();
    l.file == "FIRModule" || fortran_file(l.file)
}

/// A directive in the program's language: `#pragma omp target update to(a[0:N])` or
/// `!$omp target update to(a)`.
pub(super) fn directive(fortran: bool, text: &str) -> String {
    if fortran {
        format!("`!$omp {text}`")
    } else {
        format!("`#pragma omp {text}`")
    }
}

/// The spelling of a section for a fix: the map name's own when it has one, else a
/// placeholder in the program's language.
pub(super) fn section(name: MapName, fortran: bool) -> String {
    match var(name) {
        Some(v) if v.contains(['[', '(']) => v.to_string(),
        Some(v) if fortran => v.to_string(),
        Some(v) => format!("{v}[0:N]"),
        None if fortran => "<array>".into(),
        None => "<pointer>[0:N]".into(),
    }
}

/// The fix for an access past a section: the same section with its outermost extent (C's
/// first subscript range, Fortran's last, each the one that grows the memory contiguously)
/// made larger, `M` (`m` in Fortran; another name when the section uses that one). A
/// section of one subscript, or a bare variable, becomes `a[0:M]` / `a(1:m)`.
pub(super) fn widened(spelling: &str, fortran: bool) -> String {
    let base = base_var(spelling);
    let subscripts = subscripts(spelling, fortran);
    if subscripts.len() < 2 {
        return if fortran { format!("{base}(1:m)") } else { format!("{base}[0:M]") };
    }
    let grown = if fortran {
        subscripts.iter().rposition(|s| s.contains(':'))
    } else {
        subscripts.iter().position(|s| s.contains(':'))
    };
    let Some(grown) = grown else {
        return if fortran { format!("{base}(1:m)") } else { format!("{base}[0:M]") };
    };
    let used: Vec<String> = spelling
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map(|w| if fortran { w.to_ascii_lowercase() } else { w.to_string() })
        .collect();
    let stem = if fortran { "m" } else { "M" };
    let extent = std::iter::once(stem.to_string())
        .chain((2..).map(|k| format!("{stem}{k}")))
        .find(|c| !used.contains(c))
        .expect("an unused name");
    let parts: Vec<String> = subscripts
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i == grown {
                format!("{}:{extent}", s.split(':').next().unwrap_or("").trim())
            } else {
                s.trim().to_string()
            }
        })
        .collect();
    if fortran {
        format!("{base}({})", parts.join(","))
    } else {
        format!("{base}{}", parts.iter().map(|p| format!("[{p}]")).collect::<String>())
    }
}

/// The subscripts of a section, outermost bracket level only: `a[0:n][0:m]` → `0:n`, `0:m`;
/// `a(1:n,f(1,2):3)` → `1:n`, `f(1,2):3`. Empty when the spelling has none.
fn subscripts(spelling: &str, fortran: bool) -> Vec<&str> {
    let Some(open) = spelling.find(if fortran { '(' } else { '[' }) else { return Vec::new() };
    let mut out = Vec::new();
    // C: groups `[…]` one after another; Fortran: one `(…)` split at its top-level commas.
    let mut depth = 0i32;
    let mut start = open + 1;
    for (i, c) in spelling[open..].char_indices().map(|(i, c)| (i + open, c)) {
        match c {
            '[' if !fortran && depth == 0 => {
                start = i + 1;
                depth = 1;
            }
            '(' if fortran && depth == 0 && i == open => depth = 1,
            '(' | '[' => depth += 1,
            ')' | ']' if depth > 1 => depth -= 1,
            ')' | ']' if depth == 1 => {
                out.push(&spelling[start..i]);
                depth = 0;
                if fortran {
                    return out;
                }
            }
            ',' if fortran && depth == 1 => {
                out.push(&spelling[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// A Fortran section with more than one subscript (`a(3:10,i,j)`): one that flang 19–22 may
/// start at the wrong element when the array is reached through a descriptor.
pub(super) fn multi_dim_section(spelling: &str) -> bool {
    let Some(open) = spelling.find('(') else { return false };
    let mut depth = 0i32;
    spelling[open + 1..].chars().any(|c| {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            _ => {}
        }
        c == ',' && depth == 0
    })
}

/// How a construct kind is spelled in messages.
pub(super) fn construct(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Target => "target",
        TargetKind::EnterData => "target enter data (or target data)",
        TargetKind::ExitData => "target exit data",
        TargetKind::Update => "target update",
    }
}

/// Bytes in words: `4096 bytes`, `1.5 MiB`.
pub(super) fn bytes(n: usize) -> String {
    if n < 10 << 10 {
        format!("{n} bytes")
    } else if n < 10 << 20 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_dimensional_sections() {
        for yes in ["a(3:10,i,j)", "t%b(:,k)", "a(f(1,2):3,j)"] {
            assert!(multi_dim_section(yes), "{yes}");
        }
        for no in ["a", "a(3:10)", "a(f(1,2):3)", "a[0:n]", "a(", "a()"] {
            assert!(!multi_dim_section(no), "{no}");
        }
    }

    #[test]
    fn a_fix_keeps_the_sections_rank_and_grows_its_outermost_extent() {
        assert_eq!(widened("a[0:1024]", false), "a[0:M]");
        assert_eq!(widened("a(1:1024)", true), "a(1:m)");
        assert_eq!(widened("a", true), "a(1:m)");
        assert_eq!(widened("a[0:N]", false), "a[0:M]");
        assert_eq!(widened("a[0:n][0:m][0:k]", false), "a[0:M][0:m][0:k]");
        assert_eq!(widened("a[0:N][0:M][0:K]", false), "a[0:M2][0:M][0:K]");
        assert_eq!(widened("a[i][0:n]", false), "a[i][0:M]");
        assert_eq!(widened("a(1:n,1:m,1:k)", true), "a(1:n,1:m,1:m2)");
        assert_eq!(widened("a(2:n, f(1,2):3, j)", true), "a(2:n,f(1,2):m,j)");
        assert_eq!(widened("a(i,j)", true), "a(1:m)");
    }

    #[test]
    fn flang_names_with_mlir_locations() {
        let leak = |s: &str| {
            let c = Box::leak(std::ffi::CString::new(s).unwrap().into_boxed_c_str());
            // SAFETY: a leaked string lives, unchanged, to the end of the process.
            unsafe { MapName::from_raw(c.as_ptr() as usize) }
        };
        let name =
            leak(";loc(fused<#fir<loc_kind_array[ base]>>[\"/src/inc.F90\":236:18, \"/src/t.F90\":9:1]);probe;244;9;;");
        assert_eq!(var(name), Some("probe"));
        assert_eq!(file_of(&[name]), Some("/src/inc.F90"));
        let plain = leak(";/src/t.f90;a(1:n);12;3;;");
        assert_eq!((var(plain), file_of(&[plain])), (Some("a(1:n)"), Some("/src/t.f90")));
    }

    #[test]
    fn variables_and_sizes() {
        assert_eq!(base_var("A[0:N]"), "A");
        assert_eq!(base_var("a(1:n)"), "a");
        assert_eq!(base_var("s.p[:n]"), "s.p");
        assert_eq!(base_var("x"), "x");
        assert_eq!(bytes(4096), "4096 bytes");
        assert_eq!(bytes(3 << 20), "3072.0 KiB");
        assert_eq!(bytes(64 << 20), "64.0 MiB");
    }
}
