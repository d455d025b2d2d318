//! What would not link or run on the GPU, found on the declare-target graph of the device
//! code: functions no unit defines and no GPU device library provides, calls through host
//! function pointers, and recursion. Each finding comes with the chain from the target region
//! that first reaches it (one breadth-first search for all of them: linear in the graph).

use super::frames::{self, Frames};
use super::ir::{Caller, DeviceCode};
use crate::declare_target::graph::{Graph, Loc, NodeKind, RefKind, Unit};
use crate::declare_target::marking::{self, Marking, Policy, Via};
use omp_gpu_libs::Family;
use std::collections::HashSet;

/// A unit's calls through pointers: in which function or region, at which place.
type IndirectCalls = Vec<(Caller, Loc)>;

/// A unit's frame sizes: of each function (as `Unit::funcs`) and each region's kernel (as
/// `Unit::regions`); both empty when the unit was not sized.
type UnitFrames = (Vec<Option<u64>>, Vec<Option<u64>>);

/// Most lines printed; the rest are counted.
pub const MAX_FINDINGS: usize = 100;

/// The problems found: the first [`MAX_FINDINGS`] as the text `ompcc: warning:` prints, and
/// how many there are in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    pub lines: Vec<String>,
    pub total: usize,
    /// What `-v` shows beside the findings (each target region's stack).
    pub notes: Vec<String>,
}

impl Findings {
    /// Counts a finding; builds its text (a chain walk) only while it will be printed.
    pub(super) fn push(&mut self, text: impl FnOnce() -> String) {
        self.total += 1;
        if self.lines.len() < MAX_FINDINGS {
            self.lines.push(text());
        }
    }
}

/// The check of a whole build: `code` of each source; `elsewhere` holds symbols that objects
/// on the command line define (resolved there, so not missing).
pub fn check(code: Vec<DeviceCode>, elsewhere: &HashSet<String>, family: Family, arch: &str) -> Findings {
    let mut units: Vec<Unit> = Vec::with_capacity(code.len());
    let mut calls: Vec<IndirectCalls> = Vec::with_capacity(code.len());
    let mut made_up: Vec<Vec<bool>> = Vec::with_capacity(code.len());
    let mut sized: Vec<UnitFrames> = Vec::with_capacity(code.len());
    for c in code {
        if let Frames::Sized(f) = &c.frames {
            let funcs = c.unit.funcs.iter().map(|x| frames::frame_of(f, &x.sym)).collect();
            sized.push((funcs, c.kernels.iter().map(|k| frames::frame_of(f, k)).collect()));
        } else {
            sized.push((Vec::new(), Vec::new()));
        }
        units.push(c.unit);
        calls.push(c.indirect);
        made_up.push(c.made_up);
    }
    let g = Graph::build(&units);
    let m = marking::mark(&g, Policy::ALL_REFS);
    let mut hidden = vec![false; g.nodes.len()];
    for (u, unit_made_up) in made_up.iter().enumerate() {
        for (i, &made_up) in unit_made_up.iter().enumerate() {
            hidden[g.unit_nodes[u][i]] |= made_up;
        }
    }
    let cx = Cx { g: &g, m: &m, hidden: &hidden };
    let target = format!("{} ({arch})", family.name());
    let mut out = Findings::default();
    missing(&cx, elsewhere, family, &target, &mut out);
    indirect(&cx, &calls, &target, &mut out);
    recursion(&cx, family.default_stack_size(), &mut out);
    if sized.iter().any(|(f, k)| !f.is_empty() || !k.is_empty()) {
        let mut own = vec![None; g.nodes.len()];
        for (u, (funcs, kernels)) in sized.iter().enumerate() {
            let nodes = g.unit_nodes[u].iter().zip(funcs).chain(g.unit_regions[u].iter().zip(kernels));
            for (&n, &f) in nodes {
                own[n] = own[n].max(f);
            }
        }
        let mut through_pointer = vec![false; g.nodes.len()];
        for (u, unit_calls) in calls.iter().enumerate() {
            for (caller, _) in unit_calls {
                through_pointer[match *caller {
                    Caller::Func(i) => g.unit_nodes[u][i],
                    Caller::Region(r) => g.unit_regions[u][r],
                }] = true;
            }
        }
        super::stack::check(&cx, &own, &through_pointer, family.default_stack_size(), &target, &mut out);
    }
    out
}

pub(super) struct Cx<'a, 'u> {
    pub(super) g: &'a Graph<'u>,
    m: &'a Marking<'u>,
    pub(super) hidden: &'a [bool],
}

impl Cx<'_, '_> {
    /// `target region in main (a.c:19) -> log_value (call at a.c:22)`, without the functions
    /// the compiler made up (outlined regions), which the user never wrote.
    fn chain(&self, n: usize) -> String {
        let steps = marking::chain(self.g, &self.m.device, n);
        let mut parts: Vec<String> = Vec::new();
        for (node, edge) in &steps {
            if self.hidden[*node] {
                continue;
            }
            let name = &self.g.nodes[*node].name;
            parts.push(match edge {
                None => format!("{name} ({})", self.g.loc(*node)),
                Some((RefKind::Call, l)) => format!("{name} (call at {l})"),
                Some((RefKind::Address, l)) => format!("{name} (address taken at {l})"),
            });
        }
        joined_chain(parts)
    }

    /// The place of the reference that reached `n` in the search (its call), else its own.
    fn reached_at(&self, n: usize) -> Loc {
        match self.m.device[n] {
            Some(Via::Edge { from, edge }) => self.g.out(from)[edge].loc.clone(),
            _ => self.g.loc(n).clone(),
        }
    }
}

/// True for code from a system or compiler header (the C++ library's templates): a finding
/// below such code is reported where the user's code enters it.
fn in_system_header(file: &str) -> bool {
    file.starts_with("/usr/include") || file.starts_with("/usr/lib") || file.contains("/include/c++/")
}

/// A library whose missing functions are reported together, once per function of the user's
/// that calls into it (one `std::string` or one `write` statement needs several).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Library {
    FortranIo,
    FortranRuntime,
    Cxx,
    /// Reached through a function defined in a system header.
    Headers,
}

impl Library {
    fn of(sym: &str, name: &str) -> Option<Library> {
        const CXX: [&str; 8] = ["_ZNSt", "_ZNKSt", "_ZSt", "_Znw", "_Zna", "_Zdl", "_Zda", "__cxa_"];
        if sym.starts_with("_FortranAio") {
            Some(Library::FortranIo)
        } else if sym.starts_with("_FortranA") {
            Some(Library::FortranRuntime)
        } else if name.starts_with("std::") || CXX.iter().any(|p| sym.starts_with(p)) {
            Some(Library::Cxx)
        } else {
            None
        }
    }

    fn what(self) -> &'static str {
        match self {
            Library::FortranIo => "flang's I/O runtime",
            Library::FortranRuntime => "flang's runtime",
            Library::Cxx => "the C++ library",
            Library::Headers => "code from system headers",
        }
    }
}

/// Functions device code calls that no unit defines and no GPU library provides: one line per
/// function, except for the libraries of [`Library`], one line per caller.
fn missing(cx: &Cx, elsewhere: &HashSet<String>, family: Family, target: &str, out: &mut Findings) {
    let g = cx.g;
    let entry = Entries::new(cx);
    // (caller or the function itself, library) → index into `groups`
    let mut index: std::collections::HashMap<(usize, Option<Library>), usize> = std::collections::HashMap::new();
    // (entry node, first missing function, library, how many)
    let mut groups: Vec<(usize, usize, Option<Library>, usize)> = Vec::new();
    for (n, node) in g.nodes.iter().enumerate() {
        let reached = cx.m.device[n].is_some();
        if node.kind != NodeKind::Function || node.def.is_some() || !reached || node.sym.is_empty() {
            continue;
        }
        if omp_gpu_libs::provides(family, node.sym) || elsewhere.contains(node.sym) {
            continue;
        }
        let e = entry.of(n);
        let lib = Library::of(node.sym, &node.name).or((e != n).then_some(Library::Headers));
        let caller = match (lib, cx.m.device[e]) {
            (Some(_), Some(Via::Edge { from, .. })) => from,
            _ => n,
        };
        match index.get(&(caller, lib)) {
            Some(&k) => groups[k].3 += 1,
            None => {
                index.insert((caller, lib), groups.len());
                groups.push((e, n, lib, 1));
            }
        }
    }
    for (e, first, lib, count) in groups {
        out.push(|| {
            let (at, chain) = (cx.reached_at(e), cx.chain(e));
            let hint = omp_gpu_libs::what_to_do(g.nodes[first].sym);
            let name = &g.nodes[e].name;
            match lib {
                None => format!("{at}: '{name}' is not available on {target}: {chain}; {hint}"),
                Some(lib) => {
                    let needs = &g.nodes[first].name;
                    let what = if e == first { format!("'{name}'") } else { format!("'{name}' (it needs '{needs}')") };
                    let more = match count {
                        1 => String::new(),
                        2 => " and 1 more function".to_string(),
                        n => format!(" and {} more functions", n - 1),
                    };
                    format!("{at}: {} is not available on {target}: {what}{more}: {chain}; {hint}", lib.what())
                }
            }
        });
    }
}

/// Where the user's code enters code it did not write on the way to a node: the first node of
/// its chain that is defined in a system header. Memoized along the search tree, so finding
/// it for every node is linear.
struct Entries<'c, 'a, 'u> {
    cx: &'c Cx<'a, 'u>,
    /// Per node: unknown, or the first system-header node on its chain (if any).
    memo: std::cell::RefCell<Vec<Option<Option<usize>>>>,
}

impl<'c, 'a, 'u> Entries<'c, 'a, 'u> {
    fn new(cx: &'c Cx<'a, 'u>) -> Self {
        Entries { cx, memo: std::cell::RefCell::new(vec![None; cx.g.nodes.len()]) }
    }

    fn system(&self, n: usize) -> bool {
        self.cx.g.nodes[n].def.is_some_and(|(_, l)| in_system_header(&l.file))
    }

    /// The entry for `n`, or `n` itself when its chain enters no system header.
    fn of(&self, n: usize) -> usize {
        let mut memo = self.memo.borrow_mut();
        // Walk up to a known node (or the root), then fill in on the way down.
        let mut path = Vec::new();
        let mut cur = n;
        let mut known: Option<usize> = None;
        for _ in 0..=self.cx.g.nodes.len() {
            if let Some(k) = memo[cur] {
                known = k;
                break;
            }
            path.push(cur);
            match self.cx.m.device[cur] {
                Some(Via::Edge { from, .. }) => cur = from,
                _ => break,
            }
        }
        for &v in path.iter().rev() {
            if known.is_none() && self.system(v) {
                known = Some(v);
            }
            memo[v] = Some(known);
        }
        known.unwrap_or(n)
    }
}

/// Calls through a pointer in device code where device code takes no function's address: the
/// pointer then came from the host, and a host function's address is no function on the GPU.
fn indirect(cx: &Cx, calls: &[IndirectCalls], target: &str, out: &mut Findings) {
    let g = cx.g;
    let device_takes_addresses = (0..g.nodes.len()).filter(|&n| cx.m.device[n].is_some()).any(|n| {
        g.out(n).iter().any(|e| e.kind == RefKind::Address && g.nodes[e.to].def.is_some() && !cx.hidden[e.to])
    });
    if device_takes_addresses {
        return;
    }
    let lookup = |n: usize| g.out(n).iter().any(|e| g.nodes[e.to].sym == "__llvm_omp_indirect_call_lookup");
    let mut seen = HashSet::new();
    for (u, unit_calls) in calls.iter().enumerate() {
        for (caller, loc) in unit_calls {
            let n = match *caller {
                Caller::Func(i) => g.unit_nodes[u][i],
                Caller::Region(r) => g.unit_regions[u][r],
            };
            if cx.m.device[n].is_none() || lookup(n) || !seen.insert(n) {
                continue;
            }
            out.push(|| {
                format!(
                    "{loc}: device code calls through a function pointer that comes from the host, and a host function's address is not callable on {target}: {}; call the function directly, or mark the functions it may point to 'declare target indirect'",
                    cx.chain(n)
                )
            });
        }
    }
}

/// Recursion among the functions device code reaches (strongly connected components of the
/// call edges, Tarjan's algorithm without recursion): one line per cycle.
fn recursion(cx: &Cx, stack_bytes: u64, out: &mut Findings) {
    let g = cx.g;
    let n = g.nodes.len();
    let on = |v: usize| cx.m.device[v].is_some() && g.nodes[v].def.is_some();
    let is_call = |e: &crate::declare_target::graph::Edge| e.kind == RefKind::Call && on(e.to);
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0usize; n]);
    let mut on_stack = vec![false; n];
    let (mut stack, mut next) = (Vec::new(), 0usize);
    let mut cycles: Vec<Vec<usize>> = Vec::new();
    for root in (0..n).filter(|&v| on(v)) {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, position in its edge list)
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = work.last_mut() {
            if let Some(e) = g.out(v).get(*pos) {
                *pos += 1;
                if !is_call(e) {
                    continue;
                }
                let w = e.to;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp.push(w);
                    if w == v {
                        break;
                    }
                }
                let self_call = comp.len() == 1 && g.out(v).iter().any(|e| e.to == v && e.kind == RefKind::Call);
                if comp.len() > 1 || self_call {
                    cycles.push(comp);
                }
            }
        }
    }
    let mut member = vec![false; n];
    for mut comp in cycles {
        comp.iter().for_each(|&v| member[v] = true);
        // Named from where device code enters the cycle.
        let entered = |v: usize| match cx.m.device[v] {
            Some(Via::Edge { from, .. }) => !member[from],
            _ => true,
        };
        if let Some(k) = comp.iter().position(|&v| entered(v)) {
            comp.swap(0, k);
        }
        comp[1..].sort_unstable();
        comp.iter().for_each(|&v| member[v] = false);
        out.push(|| {
            let head = comp[0];
            let name = &g.nodes[head].name;
            let what = if comp.len() == 1 {
                let at = g.out(head).iter().find(|e| e.to == head && e.kind == RefKind::Call).map(|e| e.loc.clone());
                format!("'{name}' calls itself (at {})", at.unwrap_or_else(|| g.loc(head).clone()))
            } else {
                let mut others: Vec<String> = comp[1..].iter().take(3).map(|&v| format!("'{}'", g.nodes[v].name)).collect();
                if comp.len() > 4 {
                    others.push(format!("{} more", comp.len() - 4));
                }
                format!("'{name}' and {} call each other", others.join(", "))
            };
            format!(
                "{}: {what}: {}; a GPU thread's stack is small (about {} KiB unless LIBOMPTARGET_STACK_SIZE raises it) and a recursion's depth is not known when the kernel is built: make it a loop, or bound its depth",
                g.loc(head),
                cx.chain(head),
                stack_bytes.div_ceil(1024)
            )
        });
    }
}

/// The steps of a chain joined by ` -> `; a long chain keeps its first two and last three.
pub(super) fn joined_chain(mut parts: Vec<String>) -> String {
    if parts.len() > 8 {
        let n = parts.len();
        let tail = parts.split_off(n - 3);
        parts.truncate(2);
        return format!("{} -> … ({} more) -> {}", parts.join(" -> "), n - 5, tail.join(" -> "));
    }
    parts.join(" -> ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::declare_target::graph::Compiler;

    fn run(file: &str, ir: &str, family: Family) -> Vec<String> {
        let code = vec![super::super::ir::parse(file, Compiler::Clang, ir)];
        check(code, &HashSet::new(), family, "sm_90").lines
    }

    const IR: &str = r#"
define hidden void @log_value(double %0) !dbg !13 {
  %3 = call ptr @fopen(ptr @.str, ptr @.str.1), !dbg !16
  %4 = call i32 @printf(ptr @.str), !dbg !16
  ret void
}
declare ptr @fopen(ptr, ptr)
declare i32 @printf(ptr, ...)
define hidden i32 @fact(i32 %0) !dbg !24 {
  %5 = call i32 @fact(i32 %4), !dbg !25
  ret i32 %5
}
define weak_odr protected void @__omp_offloading_fe00_98e1d5_main_l19(ptr %0) !dbg !33 {
  call void @__omp_offloading_fe00_98e1d5_main_l19_omp_outlined(ptr %0), !dbg !33
}
define internal void @__omp_offloading_fe00_98e1d5_main_l19_omp_outlined(ptr %0) !dbg !33 {
  call void @log_value(double 1.0), !dbg !34
  %6 = call i32 @fact(i32 3), !dbg !34
  %37 = call double %36(double 2.0), !dbg !35
  call void @abort(), !dbg !35
  call double @__nv_sin(double 1.0), !dbg !35
}
declare void @abort()
declare double @__nv_sin(double)
define hidden void @unreached() !dbg !36 {
  call void @exit(i32 1), !dbg !36
}
declare void @exit(i32)
!1 = !DIFile(filename: "a.c", directory: "/tmp")
!13 = distinct !DISubprogram(name: "log_value", scope: !1, file: !1, line: 6, unit: !0)
!16 = !DILocation(line: 7, column: 13, scope: !13)
!24 = distinct !DISubprogram(name: "fact", scope: !1, file: !1, line: 13, unit: !0)
!25 = !DILocation(line: 13, column: 40, scope: !24)
!33 = distinct !DISubprogram(name: "__omp_offloading_fe00_98e1d5_main_l19", scope: !1, file: !1, line: 19, unit: !0)
!34 = !DILocation(line: 22, column: 5, scope: !33)
!35 = !DILocation(line: 23, column: 12, scope: !33)
!36 = distinct !DISubprogram(name: "unreached", scope: !1, file: !1, line: 30, unit: !0)
"#;

    #[test]
    fn missing_functions_pointers_and_recursion_with_their_chains() {
        let lines = run("a.c", IR, Family::Nvptx);
        assert_eq!(lines, [
            "a.c:7: 'fopen' is not available on nvptx64 (sm_90): target region in main (a.c:19) -> log_value (call at a.c:22) -> fopen (call at a.c:7); do the I/O on the host, after the target region (printf works on the device)",
            "a.c:23: 'abort' is not available on nvptx64 (sm_90): target region in main (a.c:19) -> abort (call at a.c:23); a kernel cannot end the program: set a flag the host checks after the region (or __builtin_trap())",
            "a.c:23: device code calls through a function pointer that comes from the host, and a host function's address is not callable on nvptx64 (sm_90): target region in main (a.c:19); call the function directly, or mark the functions it may point to 'declare target indirect'",
            "a.c:13: 'fact' calls itself (at a.c:13): target region in main (a.c:19) -> fact (call at a.c:22); a GPU thread's stack is small (about 1 KiB unless LIBOMPTARGET_STACK_SIZE raises it) and a recursion's depth is not known when the kernel is built: make it a loop, or bound its depth",
        ]);
        // On AMD GPUs __nv_sin is as missing as fopen.
        assert!(run("a.c", IR, Family::Amdgpu)
            .iter()
            .any(|l| l.starts_with("a.c:23: '__nv_sin' is not available on amdgcn")));
    }

    #[test]
    fn a_function_pointer_taken_on_the_device_and_a_definition_elsewhere_are_fine() {
        let ir = IR.replace("call void @abort(), !dbg !35", "store ptr @fact, ptr %9, !dbg !35");
        let lines = run("a.c", &ir, Family::Nvptx);
        assert!(!lines.iter().any(|l| l.contains("function pointer")), "{lines:#?}");
        let code = vec![super::super::ir::parse("a.c", Compiler::Clang, IR)];
        let elsewhere: HashSet<String> = ["fopen".to_string(), "abort".to_string()].into();
        let lines = check(code, &elsewhere, Family::Nvptx, "sm_90");
        assert!(!lines.lines.iter().any(|l| l.contains("not available")), "{lines:#?}");
    }

    #[test]
    fn the_deepest_chain_of_frames_is_summed_and_compared_with_the_default() {
        let ir = "define void @__omp_offloading_1_2_main_l5(ptr %0) !dbg !5 {\n  call void @a(), !dbg !6\n  call void @b(), !dbg !7\n}\n\
                  define void @a() !dbg !8 {\n  call void @leaf(), !dbg !9\n}\n\
                  define void @b() !dbg !10 {\n  ret void\n}\n\
                  define void @leaf() !dbg !11 {\n  ret void\n}\n\
                  !1 = !DIFile(filename: \"s.c\", directory: \"/tmp\")\n\
                  !5 = distinct !DISubprogram(name: \"k\", scope: !1, file: !1, line: 5, unit: !0)\n\
                  !6 = !DILocation(line: 6, column: 1, scope: !5)\n!7 = !DILocation(line: 7, column: 1, scope: !5)\n\
                  !8 = distinct !DISubprogram(name: \"a\", scope: !1, file: !1, line: 1, unit: !0)\n\
                  !9 = !DILocation(line: 2, column: 1, scope: !8)\n\
                  !10 = distinct !DISubprogram(name: \"b\", scope: !1, file: !1, line: 3, unit: !0)\n\
                  !11 = distinct !DISubprogram(name: \"leaf\", scope: !1, file: !1, line: 4, unit: !0)\n";
        let sized = |frames: &[(&str, u64)]| {
            let mut code = super::super::ir::parse("s.c", Compiler::Clang, ir);
            code.frames = Frames::Sized(frames.iter().map(|&(s, n)| (s.to_string(), n)).collect());
            check(vec![code], &HashSet::new(), Family::Nvptx, "sm_90")
        };
        // 16 + max(a 100 + leaf 2000, b 1000) = 2116: through a, to leaf, where the big frame is.
        let f = sized(&[("__omp_offloading_1_2_main_l5", 16), ("a", 100), ("b", 1000), ("leaf", 2000)]);
        assert_eq!(
            f.notes,
            ["--gpu-check: stack per thread on nvptx64 (sm_90): target region in main (s.c:5): 2116 bytes"]
        );
        assert_eq!(f.lines, ["s.c:4: the target region in main (s.c:5) needs 2116 bytes of stack per GPU thread on nvptx64 (sm_90), more than the 1024 bytes a thread gets by default: target region in main (s.c:5, 16 bytes) -> a (call at s.c:6, 100 bytes) -> leaf (call at s.c:2, 2000 bytes); run it with LIBOMPTARGET_STACK_SIZE=3072 or more, or give the large local variables of 'leaf' heap memory (malloc in the region) or mapped memory"]);
        // At the limit: no finding, the note stays.
        let f = sized(&[("__omp_offloading_1_2_main_l5", 24), ("b", 1000)]);
        assert_eq!((f.lines.len(), f.notes.len()), (0, 1), "{f:#?}");
        assert!(f.notes[0].ends_with(": 1024 bytes"), "{f:#?}");
        // Not sized (no ptxas): no note, no finding.
        let code = super::super::ir::parse("s.c", Compiler::Clang, ir);
        assert_eq!(check(vec![code], &HashSet::new(), Family::Nvptx, "sm_90"), Findings::default());
    }

    #[test]
    fn a_long_call_chain_is_linear_and_mutual_recursion_is_one_line() {
        // f0 -> f1 -> … -> f9999 -> fopen, and f9999 -> f0: one cycle of 10,000 functions.
        let n = 10_000;
        let mut ir =
            String::from("define void @__omp_offloading_1_2_main_l5(ptr %0) {\n  call void @f0(), !dbg !9\n}\n");
        for i in 0..n {
            let next = if i + 1 == n { "f0".to_string() } else { format!("f{}", i + 1) };
            ir.push_str(&format!("define void @f{i}() {{\n  call void @{next}()\n  call ptr @fopen()\n}}\n"));
        }
        ir.push_str("declare ptr @fopen()\n!9 = !DILocation(line: 6, column: 1, scope: !8)\n");
        let lines = run("big.c", &ir, Family::Nvptx);
        assert_eq!(lines.len(), 2, "{lines:#?}");
        assert!(lines[0].contains("'fopen' is not available"), "{}", lines[0]);
        assert!(lines[1].starts_with("big.c: 'f0' and 'f1', 'f2', 'f3', 9996 more call each other: target region in main (big.c:5) -> f0 (call at big.c:6); "), "{}", lines[1]);
    }
}
