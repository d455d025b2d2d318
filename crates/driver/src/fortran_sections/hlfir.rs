//! Reads the `map` entries of flang's HLFIR for sections of arrays reached through a descriptor
//! (allocatable, pointer and assumed-shape arrays), decides which ones flang's own lowering
//! would start at the wrong element, and corrects those it can.
//!
//! Each such entry is an `omp.map.info` with `var_ptr_ptr` (the descriptor's base address) and
//! one `omp.map.bounds` per dimension, first dimension first:
//!
//! ```text
//! %29 = omp.map.bounds lower_bound(%25 : index) upper_bound(%26 : index) extent(%28#1 : index) stride(%24#2 : index) …
//! %37 = omp.map.bounds lower_bound(%36 : index) upper_bound(%36 : index) extent(%c1 : index) stride(%32#2 : index) …
//! ```
//!
//! Lower bounds are zero-based; `extent` is the array's extent (`fir.box_dims …#1`) for a
//! subscript range, but 1 for a scalar subscript. LLVM's translation of these entries computes
//! the section's first element as `Σ lb[k] · Π extent[d<k]`, so a scalar subscript before a
//! later subscript that is not at its lower bound shortens every later stride (flang 20–22).
//! flang 19 uses the first dimension's lower bound only. Giving a scalar subscript's bound the
//! array's extent (from the `fir.box_dims` whose stride the bound already uses) is exactly what
//! flang emits for the range `i:i`, which both lower correctly.

use std::collections::{HashMap, HashSet};

/// Which of flang's lowerings compiled the HLFIR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lowering {
    /// flang 19 and older: the start is the first dimension's lower bound alone.
    FirstDimOnly,
    /// flang 20–22: the start multiplies the bounds' extents, 1 for a scalar subscript.
    BoundExtents,
}

impl Lowering {
    /// The lowering a flang major version uses; `None` for versions not known to be affected.
    pub fn of_flang(major: u32) -> Option<Lowering> {
        match major {
            0..=19 => Some(Lowering::FirstDimOnly),
            20..=22 => Some(Lowering::BoundExtents),
            _ => None,
        }
    }
}

/// A source place: file, line, column.
pub type Place = (String, u32, u32);

/// What is wrong with a map entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// flang would start it at the wrong element.
    WrongStart,
    /// It is not contiguous in memory: flang maps the run of elements from its first one.
    NotContiguous,
    /// The same unless a dimension given a single subscript has extent 1 (not known here):
    /// said as a warning.
    ProbablyNotContiguous,
}

/// A map entry flang would map wrongly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub problem: Problem,
    /// Where the section is named (the map clause), when flang recorded it.
    pub place: Option<Place>,
    /// The section as flang records it for the runtime, e.g. `c(2:3,i,j)`.
    pub name: String,
    /// The map type as the clause says it (`to`, `from`, `tofrom`, `alloc`), or empty.
    pub map_type: String,
    /// Can the HLFIR be corrected (every shortened stride has the array's extent at hand)?
    pub fixable: bool,
    /// The same section written so that flang lowers it right, when there is one (flang 20–22:
    /// each scalar subscript before the last as a range, `c(2:3,i:i,j)`); for a section that is
    /// not contiguous, the contiguous one that covers it (`b(:,1:3)`).
    pub rewrite: Option<String>,
}

/// What [`scan`] found, and the corrected HLFIR when every finding could be corrected.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    pub findings: Vec<Finding>,
    pub corrected: Option<String>,
}

/// One `omp.map.bounds`.
#[derive(Debug, Clone)]
pub(super) struct Bound {
    pub line: usize,
    pub lb: String,
    pub ub: String,
    pub extent: String,
    pub stride: String,
    pub place: Option<Place>,
}

/// A wrong entry, named once its parent (the descriptor's map, which follows it) is seen.
struct Pending {
    result: String,
    named: bool,
    finding: Finding,
    /// The dimensions the rewrite changes: to ranges (`i:i`), or to `:` (not contiguous).
    dims: Vec<usize>,
    rank: usize,
}

impl Pending {
    fn name(&mut self, name: &str, lowering: Lowering) {
        self.named = true;
        self.finding.name = name.to_string();
        self.finding.rewrite = match self.finding.problem {
            Problem::WrongStart if lowering == Lowering::BoundExtents => as_ranges(name, &self.dims, self.rank),
            Problem::WrongStart => None,
            Problem::NotContiguous | Problem::ProbablyNotContiguous => widened(name, &self.dims, self.rank),
        };
    }
}

/// The values the rules need, by SSA name. MLIR reuses names in sibling regions, so every entry
/// is judged where it appears, against the most recent definition of each name: the one in scope.
#[derive(Default)]
pub(super) struct Values {
    pub consts: HashMap<String, i64>,
    pub box_dims: HashSet<String>,
    pub subi: HashMap<String, (String, String)>,
}

impl Values {
    /// `%X#k` where `%X` is a `fir.box_dims` (k: 0 lower bound, 1 extent, 2 byte stride).
    fn box_field(&self, v: &str, k: char) -> Option<String> {
        let (base, field) = v.split_once('#')?;
        (field.len() == 1 && field.starts_with(k) && self.box_dims.contains(base)).then(|| base.to_string())
    }

    /// A zero-based lower bound that is zero: a constant 0 (a `:` subscript), or the literal 1
    /// minus the array's lower bound (taken as 1, the default).
    fn is_zero(&self, v: &str) -> bool {
        self.consts.get(v) == Some(&0)
            || self.subi.get(v).is_some_and(|(a, b)| self.consts.get(a) == Some(&1) && self.box_field(b, '0').is_some())
    }
}

/// `%name` of `%name = …` or `%name:3 = …`, and the text after ` = `.
fn definition(line: &str) -> Option<(&str, &str)> {
    let t = line.trim_start();
    if !t.starts_with('%') {
        return None;
    }
    let (lhs, rhs) = t.split_once(" = ")?;
    Some((lhs.split(':').next().unwrap_or(lhs), rhs))
}

/// The first operand of `key(%v : type)`.
fn operand<'a>(op: &'a str, key: &str) -> Option<&'a str> {
    let i = op.find(&format!("{key}("))? + key.len() + 1;
    let rest = &op[i..];
    let end = rest.find([' ', ':', ')', ','])?;
    Some(&rest[..end])
}

/// The `%names` inside `key(…)` up to the first `:` or `)`.
fn operand_list(op: &str, key: &str) -> Vec<String> {
    let Some(i) = op.find(&format!("{key}(")) else { return Vec::new() };
    let rest = &op[i + key.len() + 1..];
    let end = rest.find([':', ')']).unwrap_or(rest.len());
    rest[..end].split(',').map(str::trim).filter(|s| s.starts_with('%')).map(str::to_string).collect()
}

/// The `{name = "…"}` attribute of an op.
fn name_attr(op: &str) -> Option<&str> {
    let i = op.find("name = \"")? + 8;
    let rest = &op[i..];
    Some(&rest[..rest.find('"')?])
}

/// A section's spelling split into what is subscripted and its last parenthesised list of
/// subscripts: `t%c(2:3,f(i,2),j)` → (`t%c`, [`2:3`, `f(i,2)`, `j`]).
pub fn split_section(name: &str) -> Option<(&str, Vec<&str>)> {
    let body = name.strip_suffix(')')?;
    let mut depth = 0i32;
    let open = body.char_indices().rev().find_map(|(i, c)| {
        match c {
            ')' | ']' => depth += 1,
            '(' | '[' if depth > 0 => depth -= 1,
            '(' => return Some(i),
            _ => {}
        }
        None
    })?;
    let mut subs = Vec::new();
    let (mut depth, mut start) = (0i32, open + 1);
    for (i, c) in body.char_indices().skip_while(|&(i, _)| i <= open) {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                subs.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    subs.push(&body[start..]);
    Some((&body[..open], subs))
}

/// `name` (`c(2:3,i,j)`) with the subscripts at `dims` written as ranges (`c(2:3,i:i,j)`), when
/// its last parenthesised list has `rank` subscripts.
fn as_ranges(name: &str, dims: &[usize], rank: usize) -> Option<String> {
    let (base, subs) = split_section(name)?;
    if subs.len() != rank || dims.iter().any(|&d| d >= rank || subs[d].contains(':')) {
        return None;
    }
    let subs: Vec<String> = subs
        .iter()
        .enumerate()
        .map(|(d, s)| if dims.contains(&d) { format!("{s}:{s}") } else { s.to_string() })
        .collect();
    Some(format!("{base}({})", subs.join(",")))
}

/// `name` (`b(2,1:3)`) with the subscripts at `dims` written as `:` (`b(:,1:3)`), when its
/// last parenthesised list has `rank` subscripts.
fn widened(name: &str, dims: &[usize], rank: usize) -> Option<String> {
    let (base, subs) = split_section(name)?;
    if subs.len() != rank || dims.iter().any(|&d| d >= rank) {
        return None;
    }
    let subs: Vec<&str> = subs.iter().enumerate().map(|(d, s)| if dims.contains(&d) { ":" } else { s }).collect();
    Some(format!("{base}({})", subs.join(",")))
}

/// The user's map type from `map_clauses(…)` (flang's names for alloc included).
fn map_type(op: &str) -> String {
    let Some(i) = op.find("map_clauses(") else { return String::new() };
    let rest = &op[i + 12..];
    let words: Vec<&str> = rest[..rest.find(')').unwrap_or(0)].split(',').map(str::trim).collect();
    let has = |w: &str| words.contains(&w);
    match (has("to") || has("tofrom"), has("from") || has("tofrom")) {
        (true, true) => "tofrom",
        (true, false) => "to",
        (false, true) => "from",
        _ if has("storage") || has("exit_release_or_enter_alloc") => "alloc",
        _ => "",
    }
    .to_string()
}

/// Scans HLFIR printed with `-mlir-print-debuginfo` for map entries that `lowering` would start
/// at the wrong element, and for sections that are not contiguous.
pub fn scan(text: &str, lowering: Lowering) -> Scan {
    let aliases = crate::declare_target::fortran::loc_aliases(text);
    let mut values = Values::default();
    let mut bounds: HashMap<String, Bound> = HashMap::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut patches: HashMap<usize, String> = HashMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let Some((result, op)) = definition(line) else { continue };
        // A name defined again (in a sibling region) means only what it means now.
        values.consts.remove(result);
        values.box_dims.remove(result);
        values.subi.remove(result);
        bounds.remove(result);
        if let Some(v) = op.strip_prefix("arith.constant ") {
            if let Ok(c) = v.split(" : ").next().unwrap_or("").trim().parse::<i64>() {
                values.consts.insert(result.to_string(), c);
            }
        } else if op.starts_with("fir.box_dims ") {
            values.box_dims.insert(result.to_string());
        } else if let Some(v) = op.strip_prefix("arith.subi ") {
            let args: Vec<&str> = v.split(" : ").next().unwrap_or("").split(',').map(str::trim).collect();
            if let [a, b] = args[..] {
                values.subi.insert(result.to_string(), (a.to_string(), b.to_string()));
            }
        } else if op.starts_with("omp.map.bounds ") {
            let place = op
                .rfind(" loc(")
                .and_then(|i| crate::declare_target::fortran::resolve_place(&op[i + 5..], &aliases, 0));
            let get = |k| operand(op, k).unwrap_or("").to_string();
            let b = Bound {
                line: n,
                lb: get("lower_bound"),
                ub: get("upper_bound"),
                extent: get("extent"),
                stride: get("stride"),
                place,
            };
            bounds.insert(result.to_string(), b);
        } else if op.starts_with("omp.map.info ") {
            let names = operand_list(op, "bounds");
            let list: Vec<&Bound> = names.iter().filter_map(|b| bounds.get(b)).collect();
            if list.len() == names.len() && list.len() >= 2 {
                let place = list[0].place.clone();
                let shape = super::contiguous::shape(op);
                let found = match super::contiguous::widen(&list, &values, &shape) {
                    Some((dims, true)) => Some((Problem::NotContiguous, false, dims)),
                    Some((dims, false)) => Some((Problem::ProbablyNotContiguous, false, dims)),
                    None if op.contains("var_ptr_ptr(") => judge(&list, &values, lowering, &lines, &mut patches)
                        .filter(|j| j.2)
                        .map(|(fixable, dims, _)| (Problem::WrongStart, fixable, dims)),
                    None => None,
                };
                if let Some((problem, fixable, dims)) = found {
                    let name = "an array section".to_string();
                    let finding = Finding { problem, place, name, map_type: map_type(op), fixable, rewrite: None };
                    let mut p = Pending { result: result.to_string(), named: false, finding, dims, rank: list.len() };
                    // An entry with no descriptor is named by itself; one with, by its parent.
                    if let Some(own) = name_attr(op).filter(|s| !s.is_empty() && !op.contains("var_ptr_ptr(")) {
                        p.name(own, lowering);
                    }
                    pending.push(p);
                }
            }
            if let Some(name) = name_attr(op).filter(|s| !s.is_empty()) {
                for m in operand_list(op, "members") {
                    if let Some(p) = pending.iter_mut().rev().find(|p| p.result == m && !p.named) {
                        p.name(name, lowering);
                    }
                }
            }
        }
    }

    let mut out = Scan::default();
    let mut seen = HashSet::new();
    for p in pending {
        if seen.insert((p.finding.place.clone(), p.finding.name.clone())) {
            out.findings.push(p.finding);
        }
    }
    let to_correct = out.findings.iter().filter(|f| f.problem != Problem::ProbablyNotContiguous);
    if !patches.is_empty() && to_correct.clone().all(|f| f.fixable) {
        let mut s = String::with_capacity(text.len() + 64);
        for (n, line) in lines.iter().enumerate() {
            s.push_str(patches.get(&n).map_or(line, String::as_str));
            s.push('\n');
        }
        out.corrected = Some(s);
    }
    out
}

/// Judges the start of one descriptor entry's section (bounds first dimension first): `None`
/// when `lowering` gets it right; else whether it can be corrected (the corrections of its
/// bounds added to `patches`), its scalar subscripts before the last, and whether to report
/// it (a literal subscript `1` is taken as the lower bound there: corrected, not reported).
fn judge(
    list: &[&Bound],
    values: &Values,
    lowering: Lowering,
    lines: &[&str],
    patches: &mut HashMap<usize, String>,
) -> Option<(bool, Vec<usize>, bool)> {
    let array_extent = |b: &Bound| values.box_field(&b.extent, '1').is_some();
    let shortened = |zero: &dyn Fn(&str) -> bool| {
        (1..list.len()).any(|k| !zero(&list[k].lb) && list[..k].iter().any(|d| !array_extent(d)))
    };
    // Reported when wrong for an array whose lower bounds are 1; corrected whenever the
    // correction could matter at all (it changes nothing where the start was right).
    let (wrong, correct) = match lowering {
        Lowering::FirstDimOnly => (list.iter().skip(1).any(|b| !values.is_zero(&b.lb)), false),
        Lowering::BoundExtents => (shortened(&|v| values.is_zero(v)), shortened(&|v| values.consts.get(v) == Some(&0))),
    };
    if !wrong && !correct {
        return None;
    }
    let last = list.len() - 1;
    let scalars: Vec<usize> = (0..last).filter(|&d| list[d].lb == list[d].ub && !array_extent(list[d])).collect();
    let mut fixable = lowering == Lowering::BoundExtents;
    if correct {
        for d in list[..last].iter().filter(|d| !array_extent(d)) {
            match values.box_field(&d.stride, '2') {
                Some(bx) if d.lb == d.ub => {
                    let line = patches.get(&d.line).cloned().unwrap_or_else(|| lines[d.line].to_string());
                    let fixed = line.replacen(&format!("extent({} :", d.extent), &format!("extent({bx}#1 :"), 1);
                    patches.insert(d.line, fixed);
                }
                _ => fixable = false,
            }
        }
    }
    Some((fixable, scalars, wrong))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of flang 22's HLFIR for `map(from: c(2:3,i,j))` of an allocatable `c(:,:,:)`.
    fn hlfir(dim2: &str, dim3_lb: &str) -> String {
        format!(
            r#"    %c0 = arith.constant 0 : index loc(#loc1)
    %c1 = arith.constant 1 : index loc(#loc1)
    %c2 = arith.constant 2 : index loc(#loc1)
    %23:3 = fir.box_dims %22, %c0 : (!fir.box<!fir.heap<!fir.array<?x?x?xi32>>>, index) -> (index, index, index) loc(#loc2)
    %25 = arith.subi %c2, %23#0 : index loc(#loc2)
    %29 = omp.map.bounds lower_bound(%25 : index) upper_bound(%25 : index) extent(%23#1 : index) stride(%23#2 : index) start_idx(%23#0 : index) {{stride_in_bytes = true}} loc(#loc2)
    %31:3 = fir.box_dims %22, %c1 : (!fir.box<!fir.heap<!fir.array<?x?x?xi32>>>, index) -> (index, index, index) loc(#loc2)
    %36 = arith.subi %35, %31#0 : index loc(#loc2)
    %37 = omp.map.bounds lower_bound(%36 : index) upper_bound(%36 : index) extent({dim2} : index) stride(%31#2 : index) start_idx(%31#0 : index) {{stride_in_bytes = true}} loc(#loc2)
    %39:3 = fir.box_dims %22, %c2 : (!fir.box<!fir.heap<!fir.array<?x?x?xi32>>>, index) -> (index, index, index) loc(#loc2)
    %44 = arith.subi %43, %39#0 : index loc(#loc2)
    %50 = arith.subi %c1, %39#0 : index loc(#loc2)
    %45 = omp.map.bounds lower_bound({dim3_lb} : index) upper_bound({dim3_lb} : index) extent(%c1 : index) stride(%39#2 : index) start_idx(%39#0 : index) {{stride_in_bytes = true}} loc(#loc2)
    %47 = omp.map.info var_ptr(%2#1 : !fir.ref<!fir.box<!fir.heap<!fir.array<?x?x?xi32>>>>, i32) map_clauses(from) capture(ByRef) var_ptr_ptr(%46 : !fir.llvm_ptr<!fir.ref<!fir.array<?x?x?xi32>>>) bounds(%29, %37, %45) -> !fir.llvm_ptr<!fir.ref<!fir.array<?x?x?xi32>>> {{name = ""}} loc(#loc3)
    %48 = omp.map.info var_ptr(%2#1 : !fir.ref<!fir.box<!fir.heap<!fir.array<?x?x?xi32>>>>, !fir.box<!fir.heap<!fir.array<?x?x?xi32>>>) map_clauses(always, to) capture(ByRef) members(%47 : [0] : !fir.llvm_ptr<!fir.ref<!fir.array<?x?x?xi32>>>) -> !fir.ref<!fir.box<!fir.heap<!fir.array<?x?x?xi32>>>> {{name = "c(2:3,i,j)"}} loc(#loc3)
#loc1 = loc("/src/c.f90":3:3)
#loc2 = loc("/src/c.f90":9:21)
#loc3 = loc("/src/c.f90":4:27)
"#
        )
    }

    #[test]
    fn a_scalar_subscript_before_a_moving_one_is_found_and_corrected() {
        let s = scan(&hlfir("%c1", "%44"), Lowering::BoundExtents);
        assert_eq!(
            s.findings,
            vec![Finding {
                problem: Problem::WrongStart,
                place: Some(("/src/c.f90".into(), 9, 21)),
                name: "c(2:3,i,j)".into(),
                map_type: "from".into(),
                fixable: true,
                rewrite: Some("c(2:3,i:i,j)".into()),
            }]
        );
        let fixed = s.corrected.unwrap();
        assert!(fixed.contains("extent(%31#1 : index) stride(%31#2"), "{fixed}");
        // The last dimension's extent is never a stride: left as flang wrote it.
        assert!(fixed.contains("extent(%c1 : index) stride(%39#2"), "{fixed}");
        assert_eq!(fixed.lines().count(), hlfir("%c1", "%44").lines().count());
        // Corrected HLFIR is clean.
        assert!(scan(&fixed, Lowering::BoundExtents).findings.is_empty());
    }

    #[test]
    fn a_name_defined_again_means_only_its_new_value() {
        // `%31` was a `fir.box_dims` in an earlier region; here it is something else, so
        // `extent(%31#1)` is not the array's extent.
        let text = hlfir("%31#1", "%44").replace(
            "    %36 = arith.subi %35, %31#0",
            "    %31:2 = hlfir.declare %9 : (index) -> (index, index)\n    %36 = arith.subi %35, %31#0",
        );
        assert_eq!(scan(&text, Lowering::BoundExtents).findings.len(), 1);
        assert!(scan(&hlfir("%31#1", "%44"), Lowering::BoundExtents).findings.is_empty());
    }

    #[test]
    fn sections_flang_lowers_correctly_are_left_alone() {
        // `c(2:3,i:i,j)`: the range gives dimension 2 its extent.
        assert!(scan(&hlfir("%31#1", "%44"), Lowering::BoundExtents).findings.is_empty());
        // `c(2:3,i,1)`: the last subscript is at the lower bound; and `c(2:3,i,:)`'s zero.
        assert!(scan(&hlfir("%c1", "%50"), Lowering::BoundExtents).findings.is_empty());
        assert!(scan(&hlfir("%c1", "%c0"), Lowering::BoundExtents).findings.is_empty());
    }

    #[test]
    fn flang_19_uses_the_first_dimension_only_and_cannot_be_corrected() {
        let s = scan(&hlfir("%31#1", "%44"), Lowering::FirstDimOnly);
        assert_eq!(s.findings.len(), 1);
        assert!(!s.findings[0].fixable && s.corrected.is_none());
        // A section whose later subscripts are all at their lower bounds is right there too.
        let one = hlfir("%31#1", "%50")
            .replace("lower_bound(%36 : index) upper_bound(%36", "lower_bound(%c0 : index) upper_bound(%c0");
        assert!(scan(&one, Lowering::FirstDimOnly).findings.is_empty());
    }

    #[test]
    fn unreadable_or_foreign_text_finds_nothing() {
        for t in ["", "%", "% = ", "%1 = omp.map.info bounds(", "%1 = omp.map.bounds extent(", "%x:3 = fir.box_dims"] {
            let s = scan(t, Lowering::BoundExtents);
            assert!(s.findings.is_empty() && s.corrected.is_none());
        }
        // Bounds the entry names but that were never defined: not judged.
        let t = hlfir("%c1", "%44").replace("%29 = omp.map.bounds", "%99 = omp.map.bounds");
        assert!(scan(&t, Lowering::BoundExtents).findings.is_empty());
    }

    #[test]
    fn rewrites_name_scalar_subscripts_as_ranges() {
        assert_eq!(as_ranges("c(2:3,i,j)", &[1], 3).as_deref(), Some("c(2:3,i:i,j)"));
        assert_eq!(as_ranges("t%c(:,f(i,2),j)", &[1], 3).as_deref(), Some("t%c(:,f(i,2):f(i,2),j)"));
        assert_eq!(as_ranges("a(1)%c(i,2:3,k)", &[0], 3).as_deref(), Some("a(1)%c(i:i,2:3,k)"));
        assert_eq!(as_ranges("c(2:3,i,j)", &[1], 2), None);
        assert_eq!(as_ranges("c(2:3,i,j)", &[0], 3), None);
        for bad in ["", ")", "c", "c(", "(((", "c)i,j("] {
            assert_eq!(as_ranges(bad, &[0], 1), None, "{bad}");
        }
        let (base, subs) = split_section("y(2:int(size(y,dim=1),kind=4)-1,i,j)").unwrap();
        assert_eq!((base, subs.len()), ("y", 3));
    }

    #[test]
    fn versions() {
        assert_eq!(Lowering::of_flang(19), Some(Lowering::FirstDimOnly));
        assert_eq!(Lowering::of_flang(22), Some(Lowering::BoundExtents));
        assert_eq!(Lowering::of_flang(23), None);
    }
}
