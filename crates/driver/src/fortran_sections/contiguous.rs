//! Sections that are not contiguous in memory (`b(2,1:3)`: one row across three columns).
//! OpenMP requires a mapped section to be contiguous; flang accepts such a section and maps
//! the run of elements that starts at its first one, as many as it names, so the device gets
//! other elements than the ones named. Judged from the bounds alone, only where it is certain:
//! a dimension with several elements (both bounds constants) after one that holds a single
//! element (a scalar subscript) or, for arrays of constant shape, a partial range.

use super::hlfir::{Bound, Values};

/// The dimensions to write as `:` for a contiguous section that covers `list` (first
/// dimension first), and whether that is certain, or `None` when `list` is contiguous or not
/// certainly otherwise. `shape` is the array's extents where its type gives them: a scalar
/// subscript in a dimension of extent 1 leaves nothing out; where the extent is not known
/// (allocatable, pointer, assumed-shape arrays) the section is only probably not contiguous.
pub(super) fn widen(list: &[&Bound], v: &Values, shape: &[Option<i64>]) -> Option<(Vec<usize>, bool)> {
    let last_multi = (1..list.len()).rev().find(|&k| length(list[k], v).is_some_and(|n| n > 1))?;
    let extent = |d: usize| shape.get(d).copied().flatten();
    let dims: Vec<usize> = (0..last_multi).filter(|&d| partial(list[d], v) && extent(d) != Some(1)).collect();
    let certain = dims.iter().all(|&d| list[d].lb != list[d].ub || extent(d).is_some_and(|n| n > 1));
    (!dims.is_empty()).then_some((dims, certain))
}

/// The extents in an op's first `!fir.array<AxBx…xT>` type (`None` for `?`).
pub(super) fn shape(op: &str) -> Vec<Option<i64>> {
    let Some(i) = op.find("!fir.array<") else { return Vec::new() };
    op[i + 11..].split('x').map_while(|d| if d == "?" { Some(None) } else { d.parse().ok().map(Some) }).collect()
}

/// How many elements a bound certainly holds: both bounds constants, or both a constant minus
/// the same lower bound (`2:4` of an allocatable array).
fn length(b: &Bound, v: &Values) -> Option<i64> {
    if b.lb == b.ub {
        return Some(1);
    }
    let n = match (v.consts.get(&b.lb), v.consts.get(&b.ub)) {
        (Some(lb), Some(ub)) => ub.checked_sub(*lb)?,
        _ => {
            let (a, base_a) = v.subi.get(&b.lb)?;
            let (c, base_c) = v.subi.get(&b.ub)?;
            if base_a != base_c {
                return None;
            }
            v.consts.get(c)?.checked_sub(*v.consts.get(a)?)?
        }
    };
    n.checked_add(1)
}

/// A dimension that certainly leaves elements out: a single element (an array with one
/// element there is the only exception), or a constant range shorter than a constant extent.
fn partial(b: &Bound, v: &Values) -> bool {
    if b.lb == b.ub {
        return true;
    }
    let (Some(&lb), Some(&ub), Some(&extent)) = (v.consts.get(&b.lb), v.consts.get(&b.ub), v.consts.get(&b.extent))
    else {
        return false;
    };
    lb > 0 || ub.checked_add(1).is_some_and(|end| end < extent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound(lb: &str, ub: &str, extent: &str) -> Bound {
        Bound { line: 0, lb: lb.into(), ub: ub.into(), extent: extent.into(), stride: String::new(), place: None }
    }

    fn values() -> Values {
        let mut v = Values::default();
        for (k, c) in [("%c0", 0), ("%c1", 1), ("%c2", 2), ("%c3", 3), ("%c4", 4), ("%c5", 5)] {
            v.consts.insert(k.into(), c);
        }
        v.box_dims.insert("%b".into());
        v.subi.insert("%l".into(), ("%c1".into(), "%b#0".into()));
        v.subi.insert("%u".into(), ("%c3".into(), "%b#0".into()));
        v
    }

    #[test]
    fn a_row_across_columns_is_not_contiguous() {
        let v = values();
        // b(2,1:3) of an allocatable: a scalar, then three elements.
        let (row, cols) = (bound("%s", "%s", "%c1"), bound("%l", "%u", "%b#1"));
        assert_eq!(widen(&[&row, &cols], &v, &[None, None]), Some((vec![0], false)));
        // The same in an explicit-shape e(4,5): certain.
        assert_eq!(widen(&[&row, &cols], &v, &[Some(4), Some(5)]), Some((vec![0], true)));
        // e(1:2,1:3) of an explicit-shape e(4,5): a partial range, then three elements.
        let (part, cols) = (bound("%c0", "%c1", "%c4"), bound("%c0", "%c2", "%c5"));
        assert_eq!(widen(&[&part, &cols], &v, &[]), Some((vec![0], true)));
    }

    #[test]
    fn a_dimension_of_extent_one_leaves_nothing_out() {
        // b(1,1:3) of b(1,5): contiguous.
        let (row, cols) = (bound("%s", "%s", "%c1"), bound("%c0", "%c2", "%c5"));
        assert_eq!(widen(&[&row, &cols], &values(), &[Some(1), Some(5)]), None);
        assert_eq!(shape("var_ptr(%3 : !fir.ref<!fir.array<1x5xi32>>, !fir.array<1x5xi32>)"), [Some(1), Some(5)]);
        assert_eq!(shape("var_ptr(%3 : !fir.ref<!fir.box<!fir.heap<!fir.array<?x?xf64>>>>"), [None, None]);
        assert_eq!(shape("no type"), []);
    }

    #[test]
    fn contiguous_or_uncertain_sections_are_left_alone() {
        let v = values();
        let single = bound("%s", "%s", "%c1");
        // e(:,1:3): the first dimension whole.
        assert_eq!(widen(&[&bound("%c0", "%c3", "%c4"), &bound("%c0", "%c2", "%c5")], &v, &[]), None);
        // b(2:3,j): the last dimension a single element.
        assert_eq!(widen(&[&bound("%l", "%u", "%b#1"), &single], &v, &[]), None);
        // b(2,j1:j2): how many columns is not known.
        assert_eq!(widen(&[&single, &bound("%j1", "%j2", "%b#1")], &v, &[]), None);
        // b(1:3,2:3) of an allocatable: whether 1:3 is the whole column is not known.
        assert_eq!(widen(&[&bound("%l", "%u", "%b#1"), &bound("%c1", "%c2", "%b#1")], &v, &[]), None);
        assert_eq!(widen(&[], &v, &[]), None);
    }
}
