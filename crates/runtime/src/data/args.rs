//! The map arrays of one construct, and the components a `declare mapper` pushes.

use crate::{MapName, Runtime};

/// The map arrays of one construct, as the compiler laid them out. The addresses in them
/// are the program's: only [`MapArgs::new`], an `unsafe fn` called at the C boundary, makes
/// one, and the runtime reads and writes through them on the strength of its promise.
pub struct MapArgs<'a> {
    /// `ArgsBase`: written back for `use_device_ptr`/`use_device_addr` (RETURN_PARAM).
    pub(crate) bases: &'a mut [usize],
    pub(crate) begins: &'a [usize],
    pub(crate) sizes: &'a [i64],
    pub(crate) types: &'a [i64],
    /// Map-name strings, when compiled with debug information.
    pub(crate) names: Option<&'a [MapName]>,
    /// `declare mapper` functions, per entry (0 for none).
    pub(crate) mappers: Option<&'a [usize]>,
}

impl<'a> MapArgs<'a> {
    /// The map arrays of a construct.
    ///
    /// # Safety
    /// For each entry `i`, as clang lays them out for a construct that is running:
    /// `[begins[i], begins[i] + sizes[i])` is program memory the construct names, readable
    /// (and writable for a `from` map) until the construct ends; the base of a PTR_AND_OBJ
    /// or ATTACH entry is the address of a pointer variable; the begin of a non-contiguous
    /// entry points to `sizes[i]` dimension descriptors; each name is 0 or a map-name string
    /// constant of a registered binary, and each mapper 0 or a `declare mapper` function.
    pub unsafe fn new(
        bases: &'a mut [usize],
        begins: &'a [usize],
        sizes: &'a [i64],
        types: &'a [i64],
        names: Option<&'a [usize]>,
        mappers: Option<&'a [usize]>,
    ) -> Self {
        // SAFETY: `MapName` is a transparent `usize`; each name is one `MapName::from_raw`
        // accepts (the caller's promise).
        let names = names.map(|n| unsafe { std::slice::from_raw_parts(n.as_ptr().cast::<MapName>(), n.len()) });
        MapArgs { bases, begins, sizes, types, names, mappers }
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }
    pub fn name(&self, i: usize) -> MapName {
        self.names.and_then(|n| n.get(i).copied()).unwrap_or(MapName::NONE)
    }
    pub(crate) fn mapper(&self, i: usize) -> usize {
        self.mappers.and_then(|m| m.get(i).copied()).unwrap_or(0)
    }
}

/// Components a `declare mapper` function pushed (`__tgt_push_mapper_component`).
#[derive(Debug, Default)]
pub struct MapperComponents {
    bases: Vec<usize>,
    begins: Vec<usize>,
    sizes: Vec<i64>,
    types: Vec<i64>,
    names: Vec<MapName>,
}

impl MapperComponents {
    /// Adds the component a mapper pushed.
    ///
    /// # Safety
    /// The component is a map entry of the running construct, as [`MapArgs::new`] requires.
    pub unsafe fn push(&mut self, base: usize, begin: usize, size: i64, ty: i64, name: usize) {
        self.bases.push(base);
        self.begins.push(begin);
        self.sizes.push(size);
        self.types.push(ty);
        // SAFETY: a map entry's name, as `MapArgs::new` requires (the caller's promise).
        self.names.push(unsafe { MapName::from_raw(name) });
    }
    /// The components as a construct's map arrays: each came through [`MapperComponents::push`],
    /// whose caller vouched for it as [`MapArgs::new`] requires.
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
            args.name(i).addr(),
        )
    }
}
