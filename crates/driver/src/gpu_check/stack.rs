//! The stack a GPU thread of each target region needs: its kernel's frame plus the deepest
//! chain of frames below it ([`super::frames`] sizes each function on its own), and a finding
//! when that is more than the GPU gives a thread by default.
//!
//! One depth-first search for all regions, each function finished once (linear in the graph).
//! A call back into a function still being searched (recursion) or a call through a pointer
//! makes the size a lower bound ("at least"); the recursion itself is reported elsewhere.
//! Calls into functions no unit defines (the OpenMP device runtime) count as no frame.

use super::findings::{Cx, Findings};
use crate::declare_target::graph::{Edge, NodeKind, RefKind};

/// What the search found for one node.
#[derive(Debug, Clone, Copy, Default)]
struct Need {
    /// Bytes: own frame plus the deepest callee's need.
    bytes: u64,
    /// The edge (index into the node's edges) to that callee.
    deepest: Option<usize>,
    /// A cycle or a call through a pointer below: `bytes` is a lower bound.
    unbounded: bool,
}

/// The stack of every target region of `cx`'s graph: `own[n]` is node `n`'s frame (regions:
/// their kernel's), `indirect[n]` whether it calls through a pointer. `limit`: the GPU's
/// default in bytes; `target`: `nvptx64 (sm_90)`. One `-v` note per region, one finding per
/// region above the limit.
pub fn check(cx: &Cx, own: &[Option<u64>], indirect: &[bool], limit: u64, target: &str, out: &mut Findings) {
    let g = cx.g;
    let follows = |e: &Edge| matches!(e.kind, RefKind::Call | RefKind::Address) && g.nodes[e.to].def.is_some();
    let n = g.nodes.len();
    // 0: not seen, 1: on the search stack, 2: finished.
    let mut state = vec![0u8; n];
    let mut need = vec![Need::default(); n];
    let regions: Vec<usize> = (0..n).filter(|&v| matches!(g.nodes[v].kind, NodeKind::Region(_))).collect();
    for &root in &regions {
        if state[root] != 0 {
            continue;
        }
        state[root] = 1;
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&mut (v, ref mut pos)) = work.last_mut() {
            let edges = g.out(v);
            if let Some(e) = edges.get(*pos) {
                *pos += 1;
                if follows(e) {
                    match state[e.to] {
                        0 => {
                            state[e.to] = 1;
                            work.push((e.to, 0));
                        }
                        1 => need[v].unbounded = true,
                        _ => {}
                    }
                }
                continue;
            }
            work.pop();
            let mut done = Need { unbounded: need[v].unbounded || indirect[v], ..Need::default() };
            for (i, e) in edges.iter().enumerate() {
                if !follows(e) || state[e.to] != 2 {
                    continue;
                }
                let below = need[e.to];
                done.unbounded |= below.unbounded;
                if done.deepest.is_none() || below.bytes > done.bytes {
                    done.bytes = below.bytes;
                    done.deepest = Some(i);
                }
            }
            done.bytes += own[v].unwrap_or(0);
            need[v] = done;
            state[v] = 2;
        }
    }
    for &r in &regions {
        let total = need[r];
        let steps = deepest_chain(cx, own, &need, r);
        let at_least = if total.unbounded { "at least " } else { "" };
        out.notes.push(format!(
            "--gpu-check: stack per thread on {target}: {} ({}): {at_least}{} bytes",
            g.nodes[r].name,
            g.loc(r),
            total.bytes
        ));
        if total.bytes <= limit {
            continue;
        }
        out.push(|| {
            let biggest = steps.iter().max_by_key(|s| s.bytes).expect("a region's chain starts at the region");
            let at = g.loc(biggest.node);
            let region = &g.nodes[r].name;
            let what = match g.nodes[biggest.node].kind {
                NodeKind::Region(_) => "of the target region".to_string(),
                _ => format!("of '{}'", g.nodes[biggest.node].name),
            };
            format!(
                "{at}: the {region} ({}) needs {at_least}{} bytes of stack per GPU thread on {target}, more than the {limit} bytes a thread gets by default: {}; run it with LIBOMPTARGET_STACK_SIZE={} or more, or give the large local variables {what} heap memory (malloc in the region) or mapped memory",
                g.loc(r),
                total.bytes,
                shown(&steps),
                total.bytes.div_ceil(1024) * 1024,
            )
        });
    }
}

/// One printed step of a chain: a node the user wrote and the bytes it stands for (its frame
/// and those of the compiler-made functions right below it).
struct Step {
    node: usize,
    text: String,
    bytes: u64,
}

fn deepest_chain(cx: &Cx, own: &[Option<u64>], need: &[Need], r: usize) -> Vec<Step> {
    let g = cx.g;
    let mut steps: Vec<Step> = Vec::new();
    let mut cur = r;
    let mut via: Option<&Edge> = None;
    for _ in 0..g.nodes.len() {
        let bytes = own[cur].unwrap_or(0);
        if cx.hidden[cur] && !steps.is_empty() {
            steps.last_mut().expect("not empty").bytes += bytes;
        } else {
            let name = &g.nodes[cur].name;
            let text = match via {
                Some(e) if e.kind == RefKind::Call => format!("{name} (call at {}", e.loc),
                Some(e) => format!("{name} (address taken at {}", e.loc),
                None => format!("{name} ({}", g.loc(cur)),
            };
            steps.push(Step { node: cur, text, bytes });
        }
        let Some(i) = need[cur].deepest else { break };
        let e = &g.out(cur)[i];
        via = Some(e);
        cur = e.to;
    }
    steps
}

/// `target region in main (a.c:18, 24 bytes) -> smooth (call at a.c:19, 65544 bytes)`; a long
/// chain keeps its first two and last three steps.
fn shown(steps: &[Step]) -> String {
    super::findings::joined_chain(steps.iter().map(|s| format!("{}, {} bytes)", s.text, s.bytes)).collect())
}
