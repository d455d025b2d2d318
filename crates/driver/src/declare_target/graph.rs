//! What a front end says about one translation unit (functions, their `declare target` marks,
//! target regions and references), and the program graph those facts merge into.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// `device_type` of a `declare target` mark. The join of `Host` and `NoHost` is `Any`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceType {
    Host,
    NoHost,
    Any,
}

impl DeviceType {
    /// The lattice join (`host ⊔ nohost = any`).
    pub fn join(self, other: DeviceType) -> DeviceType {
        if self == other {
            self
        } else {
            DeviceType::Any
        }
    }

    /// True when code of this type exists on the device.
    pub fn on_device(self) -> bool {
        self != DeviceType::Host
    }

    /// The spelling in `device_type(...)`.
    pub fn name(self) -> &'static str {
        match self {
            DeviceType::Host => "host",
            DeviceType::NoHost => "nohost",
            DeviceType::Any => "any",
        }
    }

    /// Parses `host`, `nohost`, `any` (any case; also clang's `DT_Host` …).
    pub fn parse(s: &str) -> Option<DeviceType> {
        match s.trim_start_matches("DT_").to_ascii_lowercase().as_str() {
            "host" => Some(DeviceType::Host),
            "nohost" => Some(DeviceType::NoHost),
            "any" => Some(DeviceType::Any),
            _ => None,
        }
    }
}

/// The capture clause of a `declare target` mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capture {
    To,
    Enter,
    Link,
}

impl Capture {
    /// The clause name.
    pub fn name(self) -> &'static str {
        match self {
            Capture::To => "to",
            Capture::Enter => "enter",
            Capture::Link => "link",
        }
    }

    /// Parses `to`, `enter`, `link` (any case; also clang's `MT_To` …).
    pub fn parse(s: &str) -> Option<Capture> {
        match s.trim_start_matches("MT_").to_ascii_lowercase().as_str() {
            "to" => Some(Capture::To),
            "enter" => Some(Capture::Enter),
            "link" => Some(Capture::Link),
            _ => None,
        }
    }
}

/// Which front end produced a unit: it decides which references the compiler follows when it
/// emits device code (clang: calls and addresses; flang: direct calls only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compiler {
    Clang,
    Flang,
}

/// A source position (file and line).
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Loc {
    pub file: String,
    pub line: u32,
}

impl Loc {
    /// A location.
    pub fn new(file: impl Into<String>, line: u32) -> Loc {
        Loc { file: file.into(), line }
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.file.is_empty() {
            f.write_str("<unknown>")
        } else if self.line == 0 {
            f.write_str(&self.file)
        } else {
            write!(f, "{}:{}", self.file, self.line)
        }
    }
}

/// One `declare target` directive applied to a symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub dt: DeviceType,
    pub cap: Capture,
    /// Where the directive is.
    pub loc: Loc,
}

/// How a function is referenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefKind {
    /// A direct call.
    Call,
    /// The function's address is taken (function pointer, `c_funloc`, actual argument).
    Address,
}

/// A reference from a function body or target region to a function of the same unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ref {
    /// Index into [`Unit::funcs`].
    pub to: usize,
    pub kind: RefKind,
    pub loc: Loc,
}

/// Whether a symbol is code or data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymKind {
    Function,
    Variable,
}

/// A function or variable as one unit sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Func {
    /// The link-time name (`foo`, `foo_`, `_QMmPf`); units share a node when these match.
    pub sym: String,
    /// The name a user wrote.
    pub name: String,
    pub kind: SymKind,
    pub loc: Loc,
    /// A definition (body), not only a declaration.
    pub defined: bool,
    /// Internal linkage: never resolved across units.
    pub local: bool,
    /// Declared in a system header or runtime (left out of reports).
    pub system: bool,
    pub marks: Vec<Mark>,
    pub refs: Vec<Ref>,
    /// The body contains a target region.
    pub has_target: bool,
}

impl Func {
    /// A declared function with no marks or references.
    pub fn new(sym: impl Into<String>, name: impl Into<String>, loc: Loc) -> Func {
        Func {
            sym: sym.into(),
            name: name.into(),
            kind: SymKind::Function,
            loc,
            defined: false,
            local: false,
            system: false,
            marks: Vec::new(),
            refs: Vec::new(),
            has_target: false,
        }
    }
}

/// A target region (`omp target …` construct).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub loc: Loc,
    /// The function containing it (index into [`Unit::funcs`]).
    pub parent: Option<usize>,
    pub refs: Vec<Ref>,
}

/// The facts of one translation unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The source file.
    pub file: String,
    pub compiler: Compiler,
    pub funcs: Vec<Func>,
    pub regions: Vec<Region>,
    /// Device types the compiler itself computed, when its output says (flang's FIR), by symbol.
    pub compiler_marks: Vec<(String, DeviceType)>,
}

impl Unit {
    /// An empty unit.
    pub fn new(file: impl Into<String>, compiler: Compiler) -> Unit {
        Unit { file: file.into(), compiler, funcs: Vec::new(), regions: Vec::new(), compiler_marks: Vec::new() }
    }
}

/// A node of the program graph: a function (or variable) merged across units, or a region.
/// It borrows names and places from the units, so building the graph copies no strings.
#[derive(Debug, Clone)]
pub struct Node<'u> {
    pub sym: &'u str,
    /// The name a user wrote (regions: `target region in <function>`).
    pub name: Cow<'u, str>,
    pub kind: NodeKind,
    /// Where it is defined (unit index and place), if any unit defines it.
    pub def: Option<(usize, &'u Loc)>,
    /// Where it is declared (first declaration seen) when not defined.
    pub decl: &'u Loc,
    pub system: bool,
    /// Explicit marks from every unit, in order.
    pub marks: Vec<&'u Mark>,
    pub has_target: bool,
}

/// What a node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Function,
    Variable,
    /// A target region; its parent function node.
    Region(Option<usize>),
}

/// An edge of the program graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edge<'u> {
    pub to: usize,
    pub kind: RefKind,
    pub loc: &'u Loc,
    /// The unit whose code holds the reference.
    pub unit: usize,
}

/// Functions, variables and target regions of one or more units, with references as edges.
#[derive(Debug, Clone, Default)]
pub struct Graph<'u> {
    pub nodes: Vec<Node<'u>>,
    /// Every edge, grouped by source node: node `n`'s are `edges[first[n]..first[n + 1]]`.
    edges: Vec<Edge<'u>>,
    first: Vec<usize>,
    /// Per unit: node of each of its functions (same order as [`Unit::funcs`]).
    pub unit_nodes: Vec<Vec<usize>>,
    /// Per unit: node of each of its regions.
    pub unit_regions: Vec<Vec<usize>>,
}

/// FxHash (rustc's): symbol keys are short and trusted, SipHash's cost buys nothing here.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Fx {
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Key of a symbol: external ones merge across units; internal ones carry their unit.
type SymKey<'u> = (usize, &'u str);
const EXTERNAL: usize = usize::MAX;

impl<'u> Graph<'u> {
    /// Merges units into one graph; external symbols of the same name become one node, which is
    /// how a declaration in one file is resolved to the definition in another (deferred marking).
    /// Linear in functions plus references; nothing is copied but region names.
    pub fn build(units: &'u [Unit]) -> Graph<'u> {
        let nfuncs: usize = units.iter().map(|u| u.funcs.len() + u.regions.len()).sum();
        let nrefs: usize = units
            .iter()
            .map(|u| {
                u.funcs.iter().map(|f| f.refs.len()).sum::<usize>()
                    + u.regions.iter().map(|r| r.refs.len()).sum::<usize>()
            })
            .sum();
        let mut g = Graph { nodes: Vec::with_capacity(nfuncs), ..Graph::default() };
        let mut by_sym: HashMap<SymKey<'u>, usize, BuildHasherDefault<Fx>> =
            HashMap::with_capacity_and_hasher(nfuncs, BuildHasherDefault::default());
        // (from, edge) in unit and reference order; grouped by `from` below.
        let mut raw: Vec<(usize, Edge<'u>)> = Vec::with_capacity(nrefs);
        for (u, unit) in units.iter().enumerate() {
            let mut ids = Vec::with_capacity(unit.funcs.len());
            for f in &unit.funcs {
                let key = (if f.local { u } else { EXTERNAL }, f.sym.as_str());
                let next = g.nodes.len();
                let id = *by_sym.entry(key).or_insert(next);
                if id == next {
                    g.nodes.push(Node {
                        sym: &f.sym,
                        name: Cow::Borrowed(&f.name),
                        kind: match f.kind {
                            SymKind::Function => NodeKind::Function,
                            SymKind::Variable => NodeKind::Variable,
                        },
                        def: None,
                        decl: &f.loc,
                        system: f.system,
                        marks: Vec::new(),
                        has_target: false,
                    });
                }
                let n = &mut g.nodes[id];
                if f.defined && n.def.is_none() {
                    n.def = Some((u, &f.loc));
                    n.name = Cow::Borrowed(&f.name);
                }
                n.system &= f.system;
                n.has_target |= f.has_target;
                n.marks.extend(f.marks.iter());
                ids.push(id);
            }
            for (i, f) in unit.funcs.iter().enumerate() {
                let from = ids[i];
                for r in &f.refs {
                    if let Some(&to) = ids.get(r.to) {
                        raw.push((from, Edge { to, kind: r.kind, loc: &r.loc, unit: u }));
                    }
                }
            }
            let mut regs = Vec::with_capacity(unit.regions.len());
            for r in &unit.regions {
                let parent = r.parent.and_then(|p| ids.get(p).copied());
                let pname = parent.map_or("?", |p| &*g.nodes[p].name);
                g.nodes.push(Node {
                    sym: "",
                    name: Cow::Owned(format!("target region in {pname}")),
                    kind: NodeKind::Region(parent),
                    def: Some((u, &r.loc)),
                    decl: &r.loc,
                    system: false,
                    marks: Vec::new(),
                    has_target: false,
                });
                let id = g.nodes.len() - 1;
                for e in &r.refs {
                    if let Some(&to) = ids.get(e.to) {
                        raw.push((id, Edge { to, kind: e.kind, loc: &e.loc, unit: u }));
                    }
                }
                regs.push(id);
            }
            g.unit_nodes.push(ids);
            g.unit_regions.push(regs);
        }
        // Group by source node, keeping each node's edges in reference order: one unit whose
        // functions are all distinct is already grouped; otherwise a counting sort.
        let n = g.nodes.len();
        let mut first = vec![0usize; n + 1];
        for &(from, _) in &raw {
            first[from + 1] += 1;
        }
        for i in 0..n {
            first[i + 1] += first[i];
        }
        if raw.windows(2).all(|w| w[0].0 <= w[1].0) {
            g.edges = raw.into_iter().map(|(_, e)| e).collect();
        } else if let Some(&(_, fill)) = raw.first() {
            let mut next = first.clone();
            let mut edges = vec![fill; raw.len()];
            for (from, e) in raw {
                edges[next[from]] = e;
                next[from] += 1;
            }
            g.edges = edges;
        }
        g.first = first;
        g
    }

    /// The outgoing edges of node `n`, in reference order.
    pub fn out(&self, n: usize) -> &[Edge<'u>] {
        &self.edges[self.first[n]..self.first[n + 1]]
    }

    /// The number of edges.
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// Where a node is: its definition, else its first declaration.
    pub fn loc(&self, n: usize) -> &'u Loc {
        self.nodes[n].def.map_or(self.nodes[n].decl, |(_, l)| l)
    }
}
