//! The `--declare-target-report` text and the error and warning lines of the analysis.

use super::graph::{Compiler, Graph, NodeKind, RefKind, Unit};
use super::marking::{chain, Analysis, Problem, Via};
use std::fmt::Write;

/// Longest chain printed in full; longer ones keep both ends.
const CHAIN_MAX: usize = 8;

/// `target region in main (a.c:18) -> mid (call at a.c:19) -> leaf (call at a.c:9)`.
pub fn chain_text(g: &Graph, via: &[Option<Via>], n: usize) -> String {
    let ch = chain(g, via, n);
    let step = |(node, edge): &(usize, Option<(RefKind, &super::graph::Loc)>)| -> String {
        let name = &g.nodes[*node].name;
        match edge {
            None => format!("{name} ({})", g.loc(*node)),
            Some((RefKind::Call, l)) => format!("{name} (call at {l})"),
            Some((RefKind::Address, l)) => format!("{name} (address taken at {l})"),
        }
    };
    if ch.len() <= CHAIN_MAX {
        return ch.iter().map(step).collect::<Vec<_>>().join(" -> ");
    }
    let head: Vec<String> = ch[..2].iter().map(step).collect();
    let tail: Vec<String> = ch[ch.len() - 3..].iter().map(step).collect();
    format!("{} -> … ({} more) -> {}", head.join(" -> "), ch.len() - 5, tail.join(" -> "))
}

/// What to add where, so the defining file puts a function on the device.
fn directive_hint(unit: &Unit, name: &str, def: &super::graph::Loc) -> String {
    match unit.compiler {
        Compiler::Clang => format!(
            "add '#pragma omp declare target' / '#pragma omp end declare target' around its definition at {def} (or 'declare target enter({name})' after it)"
        ),
        Compiler::Flang => {
            format!("add '!$omp declare target' to the specification part of '{name}' at {def}")
        }
    }
}

/// One line per problem, without the `ompcc: error:` prefix.
pub fn problem_text(a: &Analysis, units: &[Unit], p: &Problem) -> String {
    let g = &a.graph;
    let n = p.node();
    let name = &g.nodes[n].name;
    let why = match (a.marking.device[n], a.dev_pred[n]) {
        (Some(Via::Root), Some((from, k))) => {
            let e = &g.out(from)[k];
            let how = if e.kind == RefKind::Call { "call" } else { "address taken" };
            format!("{} -> {name} ({how} at {})", chain_text(g, &a.marking.device, from), e.loc)
        }
        _ => chain_text(g, &a.marking.device, n),
    };
    match p {
        Problem::HostOnlyOnDevice { mark, .. } => format!(
            "{}: '{name}' is device_type(host) (marked at {mark}) but device code uses it: {why}; remove it from the device code or mark it device_type(any)",
            g.loc(n)
        ),
        Problem::NotOnDevice { def_unit, def, .. } => {
            let unit = &units[*def_unit];
            format!(
                "{def}: '{name}' is called from device code but {} does not compile it for the device (no declare target there): {why}; {}",
                unit.file,
                directive_hint(unit, name, def)
            )
        }
        Problem::AddressNotOnDevice { def_unit, def, .. } => {
            let unit = &units[*def_unit];
            let fate = match unit.compiler {
                Compiler::Flang => "flang leaves it out of the device code and the address becomes undef (a crash at run time)",
                Compiler::Clang => "its compiler leaves it out of the device code",
            };
            format!("{def}: the address of '{name}' is used on the device but {fate}: {why}; {}", directive_hint(unit, name, def))
        }
        Problem::Deferred { .. } => {
            format!("{}: '{name}' is only declared here; its definition is resolved at link: {why}", g.loc(n))
        }
    }
}

/// Warnings: directives that merged to `any`.
pub fn warnings(a: &Analysis) -> Vec<String> {
    a.marking
        .conflicts
        .iter()
        .map(|c| {
            format!(
                "{}: '{}' is marked device_type({}) at {} and device_type({}) at {}; merged to device_type(any)",
                a.graph.loc(c.node),
                a.graph.nodes[c.node].name,
                c.first.0.name(),
                c.first.1,
                c.second.0.name(),
                c.second.1
            )
        })
        .collect()
}

/// The report: one line per function or variable on the device or marked, then what is left
/// out of the device and what was removed.
pub fn render(a: &Analysis, units: &[Unit], removed: &[(String, String)]) -> String {
    let g = &a.graph;
    let m = &a.marking;
    let mut out = String::new();
    let files: Vec<&str> = units.iter().map(|u| u.file.as_str()).collect();
    let regions = g.nodes.iter().filter(|n| matches!(n.kind, NodeKind::Region(_))).count();
    let _ = writeln!(
        out,
        "declare target report for {} ({} target region{})",
        files.join(" "),
        regions,
        if regions == 1 { "" } else { "s" }
    );
    let mut rows: Vec<[String; 6]> = Vec::new();
    let mut vars: Vec<[String; 6]> = Vec::new();
    let mut deferred = vec![false; g.nodes.len()];
    for p in a.problems.iter().filter(|p| !p.is_error()) {
        deferred[p.node()] = true;
    }
    for (i, node) in g.nodes.iter().enumerate() {
        if node.system || matches!(node.kind, NodeKind::Region(_)) {
            continue;
        }
        let Some(dt) = m.device_type(i) else { continue };
        let cap = m.capture(i).map_or("-", |c| c.name()).to_string();
        let (how, why) = match (&m.explicit[i], m.device[i], m.host[i]) {
            (Some(e), Some(Via::Edge { .. }), _) if !e.dt.on_device() => (
                "explicit".to_string(),
                format!("directive at {}; used on the device: {}", e.loc, chain_text(g, &m.device, i)),
            ),
            (Some(e), _, _) => ("explicit".to_string(), format!("directive at {}", e.loc)),
            (None, Some(_), _) => ("implicit".to_string(), chain_text(g, &m.device, i)),
            (None, None, Some(_)) => ("implicit".to_string(), chain_text(g, &m.host, i)),
            (None, None, None) => ("-".to_string(), String::new()),
        };
        let how = if deferred[i] { format!("{how}, deferred") } else { how };
        let row = [node.name.to_string(), dt.name().to_string(), cap, how, g.loc(i).to_string(), why];
        if node.kind == NodeKind::Variable {
            vars.push(row);
        } else {
            rows.push(row);
        }
    }
    let table = |out: &mut String, title: &str, rows: &[[String; 6]]| {
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(out, "{title}");
        let w: Vec<usize> = (0..5).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
        for r in rows {
            let _ = writeln!(
                out,
                "  {:w0$}  {:w1$}  {:w2$}  {:w3$}  {:w4$}  {}",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                w0 = w[0],
                w1 = w[1],
                w2 = w[2],
                w3 = w[3],
                w4 = w[4]
            );
        }
    };
    table(&mut out, "functions (name, device_type, clause, how, where, why):", &rows);
    table(&mut out, "variables:", &vars);
    if !a.host_only.is_empty() {
        let _ = writeln!(out, "host only (not needed on the device):");
        for &n in &a.host_only {
            let note = if g.nodes[n].has_target { " (contains target regions; they are kernels)" } else { "" };
            let _ = writeln!(out, "  {}  {}{note}", g.nodes[n].name, g.loc(n));
        }
    }
    if !removed.is_empty() {
        let _ = writeln!(out, "removed from device images:");
        for (sym, from) in removed {
            let _ = writeln!(out, "  {sym}  from {from}");
        }
    }
    for p in &a.problems {
        let _ = writeln!(out, "{}: {}", if p.is_error() { "error" } else { "note" }, problem_text(a, units, p));
    }
    out
}
