//! What a front end says about one translation unit (functions, their `declare target` marks,
//! target regions and references), and the program graph those facts merge into.

use std::collections::HashMap;
use std::fmt;

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
#[derive(Debug, Clone)]
pub struct Node {
    pub sym: String,
    pub name: String,
    pub kind: NodeKind,
    /// Where it is defined (unit index and place), if any unit defines it.
    pub def: Option<(usize, Loc)>,
    /// Where it is declared (first declaration seen) when not defined.
    pub decl: Loc,
    pub system: bool,
    /// Explicit marks from every unit, in order.
    pub marks: Vec<Mark>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub to: usize,
    pub kind: RefKind,
    pub loc: Loc,
    /// The unit whose code holds the reference.
    pub unit: usize,
}

/// Functions, variables and target regions of one or more units, with references as edges.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    /// Outgoing edges per node.
    pub edges: Vec<Vec<Edge>>,
    /// Per unit: node of each of its functions (same order as [`Unit::funcs`]).
    pub unit_nodes: Vec<Vec<usize>>,
    /// Per unit: node of each of its regions.
    pub unit_regions: Vec<Vec<usize>>,
}

impl Graph {
    /// Merges units into one graph; external symbols of the same name become one node, which is
    /// how a declaration in one file is resolved to the definition in another (deferred marking).
    pub fn build(units: &[Unit]) -> Graph {
        let mut g = Graph::default();
        let mut by_sym: HashMap<String, usize> = HashMap::new();
        for (u, unit) in units.iter().enumerate() {
            let mut ids = Vec::with_capacity(unit.funcs.len());
            for f in &unit.funcs {
                let key = if f.local { format!("{}#{}", unit.file, f.sym) } else { f.sym.clone() };
                let id = *by_sym.entry(key).or_insert_with(|| {
                    g.nodes.push(Node {
                        sym: f.sym.clone(),
                        name: f.name.clone(),
                        kind: match f.kind {
                            SymKind::Function => NodeKind::Function,
                            SymKind::Variable => NodeKind::Variable,
                        },
                        def: None,
                        decl: f.loc.clone(),
                        system: f.system,
                        marks: Vec::new(),
                        has_target: false,
                    });
                    g.edges.push(Vec::new());
                    g.nodes.len() - 1
                });
                let n = &mut g.nodes[id];
                if f.defined && n.def.is_none() {
                    n.def = Some((u, f.loc.clone()));
                    n.name = f.name.clone();
                }
                n.system &= f.system;
                n.has_target |= f.has_target;
                n.marks.extend(f.marks.iter().cloned());
                ids.push(id);
            }
            for (i, f) in unit.funcs.iter().enumerate() {
                let from = ids[i];
                for r in &f.refs {
                    if let Some(&to) = ids.get(r.to) {
                        g.edges[from].push(Edge { to, kind: r.kind, loc: r.loc.clone(), unit: u });
                    }
                }
            }
            let mut regs = Vec::with_capacity(unit.regions.len());
            for r in &unit.regions {
                let parent = r.parent.and_then(|p| ids.get(p).copied());
                let pname = parent.map_or_else(|| "?".to_string(), |p| g.nodes[p].name.clone());
                g.nodes.push(Node {
                    sym: String::new(),
                    name: format!("target region in {pname}"),
                    kind: NodeKind::Region(parent),
                    def: Some((u, r.loc.clone())),
                    decl: r.loc.clone(),
                    system: false,
                    marks: Vec::new(),
                    has_target: false,
                });
                let id = g.nodes.len() - 1;
                let edges = r
                    .refs
                    .iter()
                    .filter_map(|e| ids.get(e.to).map(|&to| Edge { to, kind: e.kind, loc: e.loc.clone(), unit: u }))
                    .collect();
                g.edges.push(edges);
                regs.push(id);
            }
            g.unit_nodes.push(ids);
            g.unit_regions.push(regs);
        }
        g
    }

    /// Where a node is: its definition, else its first declaration.
    pub fn loc(&self, n: usize) -> &Loc {
        self.nodes[n].def.as_ref().map_or(&self.nodes[n].decl, |(_, l)| l)
    }
}
