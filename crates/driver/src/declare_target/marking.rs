//! Marking for `declare target`: explicit marking (directives, merged), implicit marking
//! (everything a target region or a declare-target function references, transitively), deferred
//! marking across units (done by [`Graph::build`] merging symbols), the checks that turn late
//! failures into errors, and the list of functions the device can do without.
//!
//! Implicit marking is two breadth-first searches over the reference graph, one for "reached
//! from device code" (target regions, explicit `nohost`/`any`) and one for "reached from host
//! declare-target code" (explicit `host`/`any`). A node's type is the join of its explicit type
//! and the bits it received, which is what flang's per-path walk computes, in O(V+E) instead
//! of once per path. The search tree gives each implicit node its chain back to a root.

use super::graph::{Capture, Compiler, DeviceType, Graph, Loc, NodeKind, RefKind, Unit};
use std::collections::VecDeque;

/// Which references count as edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Follow address-taken functions (clang does; flang does not).
    pub follow_address: bool,
}

impl Policy {
    /// What the program needs: every reference.
    pub const ALL_REFS: Policy = Policy { follow_address: true };

    /// What a compiler itself follows when it decides what to emit for the device.
    pub fn of(compiler: Compiler) -> Policy {
        Policy { follow_address: compiler == Compiler::Clang }
    }

    fn follows(self, kind: RefKind) -> bool {
        kind == RefKind::Call || self.follow_address
    }
}

/// How a node was reached in a search: as a root, or over edge `edge` of node `from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Root,
    Edge { from: usize, edge: usize },
}

/// The explicit mark of a node after merging its directives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Explicit<'u> {
    pub dt: DeviceType,
    pub cap: Capture,
    pub loc: &'u Loc,
}

/// Two directives gave one symbol different device types (merged to `any`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict<'u> {
    pub node: usize,
    pub first: (DeviceType, &'u Loc),
    pub second: (DeviceType, &'u Loc),
}

/// The result of marking.
#[derive(Debug, Clone)]
pub struct Marking<'u> {
    pub explicit: Vec<Option<Explicit<'u>>>,
    pub conflicts: Vec<Conflict<'u>>,
    /// Reached from device code (target regions, explicit nohost/any functions).
    pub device: Vec<Option<Via>>,
    /// Reached from explicit host/any functions.
    pub host: Vec<Option<Via>>,
    /// Capture clause inherited along the search (first root that reached the node).
    inherited_cap: Vec<Option<Capture>>,
}

impl Marking<'_> {
    /// The final device type of a node (`None`: unmarked, which the device treats as host).
    pub fn device_type(&self, n: usize) -> Option<DeviceType> {
        let mut dt = self.explicit[n].as_ref().map(|e| e.dt);
        for (bit, t) in [(self.device[n].is_some(), DeviceType::NoHost), (self.host[n].is_some(), DeviceType::Host)] {
            if bit {
                dt = Some(dt.map_or(t, |d| d.join(t)));
            }
        }
        dt
    }

    /// The capture clause: the explicit one, else the one inherited from the root.
    pub fn capture(&self, n: usize) -> Option<Capture> {
        self.explicit[n].as_ref().map(|e| e.cap).or(self.inherited_cap[n])
    }

    /// True when the device build must contain node `n`.
    pub fn on_device(&self, n: usize) -> bool {
        self.device_type(n).is_some_and(DeviceType::on_device)
    }
}

/// Phase 1: merges each node's directives as flang's lowering does: the first sets the type and
/// clause; a later one with another type makes it `any` (with that directive's clause).
pub fn explicit<'u>(g: &Graph<'u>) -> (Vec<Option<Explicit<'u>>>, Vec<Conflict<'u>>) {
    let mut out = Vec::with_capacity(g.nodes.len());
    let mut conflicts = Vec::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let mut cur: Option<Explicit> = None;
        for m in &n.marks {
            cur = Some(match cur {
                None => Explicit { dt: m.dt, cap: m.cap, loc: &m.loc },
                Some(c) if c.dt == m.dt => c,
                Some(c) => {
                    conflicts.push(Conflict { node: i, first: (c.dt, c.loc), second: (m.dt, &m.loc) });
                    Explicit { dt: DeviceType::Any, cap: m.cap, loc: c.loc }
                }
            });
        }
        out.push(cur);
    }
    (out, conflicts)
}

/// Phases 1 and 2 on a graph: explicit marks, then implicit marking along the edges `policy`
/// follows. Linear in nodes plus edges.
pub fn mark<'u>(g: &Graph<'u>, policy: Policy) -> Marking<'u> {
    let (explicit, conflicts) = explicit(g);
    let n = g.nodes.len();
    let mut inherited_cap = vec![None; n];
    let dev_roots = (0..n)
        .filter(|&i| matches!(g.nodes[i].kind, NodeKind::Region(_)) || explicit[i].is_some_and(|e| e.dt.on_device()));
    let device = search(g, policy, dev_roots, &explicit, &mut inherited_cap);
    let host_roots = (0..n).filter(|&i| explicit[i].is_some_and(|e| e.dt != DeviceType::NoHost));
    let host = search(g, policy, host_roots, &explicit, &mut inherited_cap);
    Marking { explicit, conflicts, device, host, inherited_cap }
}

/// Breadth-first search from `roots`; records how each node was first reached.
fn search(
    g: &Graph,
    policy: Policy,
    roots: impl Iterator<Item = usize>,
    explicit: &[Option<Explicit>],
    cap: &mut [Option<Capture>],
) -> Vec<Option<Via>> {
    // Plain vectors indexed by node, one pass over each edge list: no lookups by name.
    let mut via: Vec<Option<Via>> = vec![None; g.nodes.len()];
    let mut root_cap: Vec<Capture> = vec![Capture::To; g.nodes.len()];
    let mut queue = VecDeque::new();
    for r in roots {
        via[r] = Some(Via::Root);
        root_cap[r] = explicit[r].map_or(Capture::To, |e| e.cap);
        queue.push_back(r);
    }
    while let Some(u) = queue.pop_front() {
        for (k, e) in g.out(u).iter().enumerate() {
            if !policy.follows(e.kind) || via[e.to].is_some() {
                continue;
            }
            via[e.to] = Some(Via::Edge { from: u, edge: k });
            root_cap[e.to] = root_cap[u];
            if cap[e.to].is_none() && explicit[e.to].is_none() {
                cap[e.to] = Some(root_cap[u]);
            }
            queue.push_back(e.to);
        }
    }
    via
}

/// The chain of nodes and edges from a root to `n` in a search: `[(root, None), (a, Some(edge)), …]`.
pub fn chain<'u>(g: &Graph<'u>, via: &[Option<Via>], n: usize) -> Vec<(usize, Option<(RefKind, &'u Loc)>)> {
    let mut out = Vec::new();
    let mut cur = n;
    // A search tree has no cycles; the bound only guards against a corrupt `via`.
    for _ in 0..=g.nodes.len() {
        match via[cur] {
            Some(Via::Edge { from, edge }) => {
                let e = &g.out(from)[edge];
                out.push((cur, Some((e.kind, e.loc))));
                cur = from;
            }
            _ => {
                out.push((cur, None));
                break;
            }
        }
    }
    out.reverse();
    out
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem<'u> {
    /// A `device_type(host)` function is reached from device code.
    HostOnlyOnDevice { node: usize, mark: &'u Loc },
    /// A function reached from device code is defined in another unit that does not put it on
    /// the device (no `declare target` there).
    NotOnDevice { node: usize, def_unit: usize, def: &'u Loc },
    /// A function whose address is used on the device, which its compiler leaves out of the
    /// device code (flang turns the address into undef).
    AddressNotOnDevice { node: usize, def_unit: usize, def: &'u Loc },
    /// A function reached from device code is only declared in this unit; resolved at link.
    Deferred { node: usize },
}

impl Problem<'_> {
    /// The node the problem is about.
    pub fn node(&self) -> usize {
        match *self {
            Problem::HostOnlyOnDevice { node, .. }
            | Problem::NotOnDevice { node, .. }
            | Problem::AddressNotOnDevice { node, .. }
            | Problem::Deferred { node } => node,
        }
    }

    /// True for problems that stop the build.
    pub fn is_error(&self) -> bool {
        !matches!(self, Problem::Deferred { .. })
    }
}

/// The whole analysis of a program (or of one unit, when `complete` is false).
#[derive(Debug, Clone)]
pub struct Analysis<'u> {
    pub graph: Graph<'u>,
    pub marking: Marking<'u>,
    pub problems: Vec<Problem<'u>>,
    /// Functions defined in the sources that the device does not need (host only).
    pub host_only: Vec<usize>,
    /// For each node, one reference to it from device code (node, edge index), if any.
    pub dev_pred: Vec<Option<(usize, usize)>>,
}

/// Runs every phase. `complete`: the units are the whole program (link), so a function no
/// unit defines is external rather than deferred.
pub fn analyze(units: &[Unit], complete: bool) -> Analysis<'_> {
    let graph = Graph::build(units);
    let marking = mark(&graph, Policy::ALL_REFS);
    let g = &graph;
    // What each defining compiler emits for the device, by node, from its own unit and its own
    // rules (a definition in unit u is emitted when u's compiler, alone, puts it on the device).
    let mut emitted = vec![false; g.nodes.len()];
    for (u, unit) in units.iter().enumerate() {
        let policy = Policy::of(unit.compiler);
        // One unit: its graph is the program's, and with clang's policy so is its marking.
        let (own_graph, own_marking);
        let (local, m) = if units.len() == 1 {
            if policy == Policy::ALL_REFS {
                (g, &marking)
            } else {
                own_marking = mark(g, policy);
                (g, &own_marking)
            }
        } else {
            own_graph = Graph::build(std::slice::from_ref(unit));
            own_marking = mark(&own_graph, policy);
            (&own_graph, &own_marking)
        };
        for (i, f) in unit.funcs.iter().enumerate() {
            let n = g.unit_nodes[u][i];
            if !f.defined || g.nodes[n].def.is_none_or(|(du, _)| du != u) {
                continue;
            }
            let l = local.unit_nodes[0][i];
            let dt = m.device_type(l);
            emitted[n] = match unit.compiler {
                // clang declares, but does not emit, device_type(host) functions.
                Compiler::Clang => {
                    dt.is_some_and(DeviceType::on_device)
                        && !matches!(m.explicit[l], Some(e) if e.dt == DeviceType::Host)
                }
                Compiler::Flang => dt.is_some_and(DeviceType::on_device),
            };
        }
    }
    // Who refers to each node from device code (explicit roots may also be referenced), and
    // whether any device reference calls it (rather than only taking its address).
    let mut dev_pred: Vec<Option<(usize, usize)>> = vec![None; g.nodes.len()];
    let (mut dev_called, mut dev_addressed) = (vec![false; g.nodes.len()], vec![false; g.nodes.len()]);
    for u in 0..g.nodes.len() {
        if marking.device[u].is_none() {
            continue;
        }
        for (k, e) in g.out(u).iter().enumerate() {
            if dev_pred[e.to].is_none() && e.to != u {
                dev_pred[e.to] = Some((u, k));
            }
            dev_called[e.to] |= e.kind == RefKind::Call;
            dev_addressed[e.to] |= e.kind == RefKind::Address;
        }
    }
    let mut problems = Vec::new();
    let mut host_only = Vec::new();
    for (n, node) in g.nodes.iter().enumerate() {
        if node.kind != NodeKind::Function {
            continue;
        }
        let Some(via) = marking.device[n] else {
            if node.def.is_some() && !node.system && !marking.on_device(n) {
                host_only.push(n);
            }
            continue;
        };
        if node.system {
            continue;
        }
        if let Some(e) = &marking.explicit[n] {
            if e.dt == DeviceType::Host {
                problems.push(Problem::HostOnlyOnDevice { node: n, mark: e.loc });
                continue;
            }
        }
        if via == Via::Root && dev_pred[n].is_none() {
            continue;
        }
        match node.def {
            None => {
                if !complete {
                    problems.push(Problem::Deferred { node: n });
                }
            }
            Some((u, def)) => {
                if emitted[n] {
                    continue;
                }
                // Device code only takes its address, never calls it.
                let by_address = dev_addressed[n] && !dev_called[n];
                problems.push(if by_address {
                    Problem::AddressNotOnDevice { node: n, def_unit: u, def }
                } else {
                    Problem::NotOnDevice { node: n, def_unit: u, def }
                });
            }
        }
    }
    Analysis { graph, marking, problems, host_only, dev_pred }
}

#[cfg(test)]
mod tests {
    use super::super::graph::{Func, Mark, Ref, Region};
    use super::*;

    fn l(line: u32) -> Loc {
        Loc::new("t.c", line)
    }

    fn f(name: &str, defined: bool) -> Func {
        let mut f = Func::new(name, name, l(1));
        f.defined = defined;
        f
    }

    fn call(to: usize) -> Ref {
        Ref { to, kind: RefKind::Call, loc: l(2) }
    }

    fn mark_of(dt: DeviceType, cap: Capture, line: u32) -> Mark {
        Mark { dt, cap, loc: l(line) }
    }

    fn unit(funcs: Vec<Func>, regions: Vec<Region>) -> Unit {
        let mut u = Unit::new("t.c", Compiler::Clang);
        u.funcs = funcs;
        u.regions = regions;
        u
    }

    fn region(refs: Vec<Ref>) -> Region {
        Region { loc: l(9), parent: None, refs }
    }

    #[test]
    fn host_and_nohost_marks_merge_to_any_with_a_conflict() {
        let mut a = f("a", true);
        a.marks = vec![mark_of(DeviceType::Host, Capture::Enter, 3), mark_of(DeviceType::NoHost, Capture::To, 4)];
        let u = unit(vec![a], vec![]);
        let units = [u];
        let an = analyze(&units, true);
        assert_eq!(an.marking.device_type(0), Some(DeviceType::Any));
        assert_eq!(an.marking.capture(0), Some(Capture::To));
        assert_eq!(an.marking.conflicts.len(), 1);
        assert_eq!(an.marking.conflicts[0].first, (DeviceType::Host, &l(3)));
    }

    #[test]
    fn implicit_through_three_deep_chain_with_chain_and_capture() {
        // region -> a -> b -> c ; host-explicit h -> b
        let mut a = f("a", true);
        a.refs = vec![call(1)];
        let mut b = f("b", true);
        b.refs = vec![call(2)];
        let c = f("c", true);
        let mut h = f("h", true);
        h.marks = vec![mark_of(DeviceType::Host, Capture::Enter, 7)];
        h.refs = vec![call(1)];
        let u = unit(vec![a, b, c, h], vec![region(vec![call(0)])]);
        let units = [u];
        let an = analyze(&units, true);
        let m = &an.marking;
        assert_eq!(m.device_type(0), Some(DeviceType::NoHost));
        assert_eq!(m.device_type(1), Some(DeviceType::Any));
        assert_eq!(m.device_type(2), Some(DeviceType::Any));
        assert_eq!(m.device_type(3), Some(DeviceType::Host));
        assert_eq!(m.capture(2), Some(Capture::To));
        let ch = chain(&an.graph, &m.device, 2);
        let names: Vec<&str> = ch.iter().map(|(n, _)| &*an.graph.nodes[*n].name).collect();
        assert_eq!(names, ["target region in ?", "a", "b", "c"]);
        assert!(an.problems.is_empty(), "{:?}", an.problems);
        assert_eq!(an.host_only, vec![3], "h is device_type(host) and nothing on the device uses it");
    }

    #[test]
    fn recursion_terminates_and_marks_both() {
        let mut a = f("rec_a", true);
        a.refs = vec![call(1)];
        let mut b = f("rec_b", true);
        b.refs = vec![call(0), call(1)];
        let u = unit(vec![a, b], vec![region(vec![call(0)])]);
        let units = [u];
        let an = analyze(&units, true);
        assert_eq!(an.marking.device_type(0), Some(DeviceType::NoHost));
        assert_eq!(an.marking.device_type(1), Some(DeviceType::NoHost));
    }

    #[test]
    fn host_only_function_reached_is_an_error_and_unreached_is_filtered() {
        let mut h = f("hostfn", true);
        h.marks = vec![mark_of(DeviceType::Host, Capture::To, 3)];
        let other = f("unused", true);
        let u = unit(vec![h, other], vec![region(vec![call(0)])]);
        let units = [u];
        let an = analyze(&units, true);
        assert_eq!(an.problems, vec![Problem::HostOnlyOnDevice { node: 0, mark: &l(3) }]);
        assert_eq!(an.host_only, vec![1]);
    }

    #[test]
    fn deferred_resolution_across_units() {
        // a.c: region calls ext (declared only). b.c defines ext, with or without declare target.
        let mut ua = unit(vec![f("ext", false)], vec![region(vec![call(0)])]);
        ua.file = "a.c".into();
        let mut ub = unit(vec![f("ext", true)], vec![]);
        ub.file = "b.c".into();
        let single = analyze(std::slice::from_ref(&ua), false);
        assert_eq!(single.problems, vec![Problem::Deferred { node: 0 }]);
        let units = [ua.clone(), ub.clone()];
        let an = analyze(&units, true);
        assert!(matches!(an.problems[..], [Problem::NotOnDevice { node: 0, def_unit: 1, .. }]), "{:?}", an.problems);
        ub.funcs[0].marks = vec![mark_of(DeviceType::Any, Capture::To, 1)];
        let units = [ua.clone(), ub];
        let an = analyze(&units, true);
        assert!(an.problems.is_empty(), "{:?}", an.problems);
        assert_eq!(an.marking.device_type(0), Some(DeviceType::Any));
        // A mark on the declaration in a.c also reaches the definition in b.c (one node) but
        // clang does not emit b.c's unmarked definition: still an error.
        let mut ua2 = ua;
        ua2.funcs[0].marks = vec![mark_of(DeviceType::Any, Capture::To, 1)];
        let units = [ua2, unit(vec![f("ext", true)], vec![])];
        let an = analyze(&units, true);
        assert!(matches!(an.problems[..], [Problem::NotOnDevice { .. }]), "{:?}", an.problems);
    }

    #[test]
    fn flang_drops_address_taken_functions() {
        // region passes cb's address to apply.
        let apply = f("apply", true);
        let cb = f("cb", true);
        let refs = vec![call(0), Ref { to: 1, kind: RefKind::Address, loc: l(5) }];
        let mut u = unit(vec![apply, cb], vec![region(refs)]);
        let clang = analyze(std::slice::from_ref(&u), true);
        assert!(clang.problems.is_empty(), "{:?}", clang.problems);
        u.compiler = Compiler::Flang;
        let units = [u];
        let flang = analyze(&units, true);
        assert!(matches!(flang.problems[..], [Problem::AddressNotOnDevice { node: 1, .. }]), "{:?}", flang.problems);
    }

    /// A DAG of `n` functions where f_i calls f_{i+1} and f_{i+2}: exponentially many paths.
    fn wide_dag(n: usize) -> Unit {
        let funcs = (0..n)
            .map(|i| {
                let mut x = f(&format!("f{i}"), true);
                x.refs = [i + 1, i + 2].into_iter().filter(|&j| j < n).map(call).collect();
                x
            })
            .collect();
        unit(funcs, vec![region(vec![call(0)])])
    }

    #[test]
    fn linear_on_a_10000_node_dag() {
        // A per-path walk would never finish (Fibonacci(10000) paths); breadth-first marking
        // visits each edge once.
        let units = [wide_dag(10_000)];
        let an = analyze(&units, true);
        assert!((0..10_000).all(|i| an.marking.device_type(i) == Some(DeviceType::NoHost)));
        let ch = chain(&an.graph, &an.marking.device, 9_999);
        assert_eq!(ch.len(), 1 + 5_001, "BFS gives the shortest chain: region, f0, f2, …, f9998, f9999");
    }

    #[test]
    fn a_large_graph_is_analyzed_whole() {
        // 40,000 functions in a wide DAG: every edge is found and every function reached.
        // (How the time grows with the graph is measured by the benchmark, not asserted here.)
        let n = 40_000;
        let units = [wide_dag(n)];
        let an = analyze(&units, true);
        assert_eq!(an.graph.edge_count(), 2 * n - 2);
    }
}
