//! Sections that are not contiguous in memory (`b(2,1:3)`: one row across three columns).
//! OpenMP requires a mapped section to be contiguous; flang accepts such a section and maps
//! the run of elements that starts at its first one, as many as it names, so the device gets
//! other elements than the ones named. Judged from the bounds alone, only where it is certain:
//! a dimension with several elements (both bounds constants) after one that holds a single
//! element (a scalar subscript) or, for arrays of constant shape, a partial range.

use super::hlfir::{Bound, Values};

/// The dimensions to write as `:` for a contiguous section that covers `list` (first
/// dimension first), or `None` when `list` is contiguous or not certainly otherwise.
pub(super) fn widen(list: &[&Bound], v: &Values) -> Option<Vec<usize>> {
    let last_multi = (1..list.len()).rev().find(|&k| length(list[k], v).is_some_and(|n| n > 1))?;
    let dims: Vec<usize> = (0..last_multi).filter(|&d| partial(list[d], v)).collect();
    (!dims.is_empty()).then_some(dims)
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
        assert_eq!(widen(&[&row, &cols], &v), Some(vec![0]));
        // e(1:2,1:3) of an explicit-shape e(4,5): a partial range, then three elements.
        let (part, cols) = (bound("%c0", "%c1", "%c4"), bound("%c0", "%c2", "%c5"));
        assert_eq!(widen(&[&part, &cols], &v), Some(vec![0]));
    }

    #[test]
    fn contiguous_or_uncertain_sections_are_left_alone() {
        let v = values();
        let single = bound("%s", "%s", "%c1");
        // e(:,1:3): the first dimension whole.
        assert_eq!(widen(&[&bound("%c0", "%c3", "%c4"), &bound("%c0", "%c2", "%c5")], &v), None);
        // b(2:3,j): the last dimension a single element.
        assert_eq!(widen(&[&bound("%l", "%u", "%b#1"), &single], &v), None);
        // b(2,j1:j2): how many columns is not known.
        assert_eq!(widen(&[&single, &bound("%j1", "%j2", "%b#1")], &v), None);
        // b(1:3,2:3) of an allocatable: whether 1:3 is the whole column is not known.
        assert_eq!(widen(&[&bound("%l", "%u", "%b#1"), &bound("%c1", "%c2", "%b#1")], &v), None);
        assert_eq!(widen(&[], &v), None);
    }
}
