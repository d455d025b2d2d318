//! The map arrays of one construct, and the components a `declare mapper` pushes.

use crate::Runtime;

/// The map arrays of one construct, as the compiler laid them out.
pub struct MapArgs<'a> {
    /// `ArgsBase`: written back for `use_device_ptr`/`use_device_addr` (RETURN_PARAM).
    pub bases: &'a mut [usize],
    pub begins: &'a [usize],
    pub sizes: &'a [i64],
    pub types: &'a [i64],
    /// Map-name strings, when compiled with debug information.
    pub names: Option<&'a [usize]>,
    /// `declare mapper` functions, per entry (0 for none).
    pub mappers: Option<&'a [usize]>,
}

impl MapArgs<'_> {
    pub fn len(&self) -> usize {
        self.types.len()
    }
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
    pub fn name(&self, i: usize) -> usize {
        self.names.and_then(|n| n.get(i).copied()).unwrap_or(0)
    }
    pub(super) fn mapper(&self, i: usize) -> usize {
        self.mappers.and_then(|m| m.get(i).copied()).unwrap_or(0)
    }
}

/// Components a `declare mapper` function pushed (`__tgt_push_mapper_component`).
#[derive(Debug, Default)]
pub struct MapperComponents {
    pub bases: Vec<usize>,
    pub begins: Vec<usize>,
    pub sizes: Vec<i64>,
    pub types: Vec<i64>,
    pub names: Vec<usize>,
}

impl MapperComponents {
    pub fn push(&mut self, base: usize, begin: usize, size: i64, ty: i64, name: usize) {
        self.bases.push(base);
        self.begins.push(begin);
        self.sizes.push(size);
        self.types.push(ty);
        self.names.push(name);
    }
    pub(super) fn args(&mut self) -> MapArgs<'_> {
        MapArgs {
            bases: &mut self.bases,
            begins: &self.begins,
            sizes: &self.sizes,
            types: &self.types,
            names: Some(&self.names),
            mappers: None,
        }
    }
}

impl Runtime {
    /// Runs a `declare mapper` function and returns the components it pushed.
    pub(super) fn expand_mapper(&self, args: &MapArgs, i: usize) -> MapperComponents {
        self.host().call_mapper(
            args.mapper(i),
            args.bases[i],
            args.begins[i],
            args.sizes[i],
            args.types[i],
            args.name(i),
        )
    }
}
