//! C layouts clang emits (abi.md §2) and the unsafe conversions into runtime types.

use omp_format::parse_entry_table;
use omp_runtime::{BinaryImage, Descriptor, KernelLaunch, Loc, MapArgs};
use std::ffi::c_void;

/// `ident_t`: only `psource` is read.
#[repr(C)]
pub struct Ident {
    pub reserved_1: i32,
    pub flags: i32,
    pub reserved_2: i32,
    pub reserved_3: i32,
    pub psource: *const std::ffi::c_char,
}

/// `__tgt_device_image`.
#[repr(C)]
pub struct DeviceImage {
    pub image_start: *const u8,
    pub image_end: *const u8,
    pub entries_begin: *const u8,
    pub entries_end: *const u8,
}

/// `__tgt_bin_desc`.
#[repr(C)]
pub struct BinDesc {
    pub num_device_images: i32,
    pub device_images: *const DeviceImage,
    pub host_entries_begin: *const u8,
    pub host_entries_end: *const u8,
}

/// `KernelArgsTy` (104 bytes, version 3 from clang 19 and 22).
#[repr(C)]
pub struct KernelArgs {
    pub version: u32,
    pub num_args: u32,
    pub arg_base_ptrs: *mut *mut c_void,
    pub arg_ptrs: *mut *mut c_void,
    pub arg_sizes: *mut i64,
    pub arg_types: *mut i64,
    pub arg_names: *mut *mut c_void,
    pub arg_mappers: *mut *mut c_void,
    pub tripcount: u64,
    pub flags: u64,
    pub num_teams: [u32; 3],
    pub thread_limit: [u32; 3],
    pub dyn_cgroup_mem: u32,
}

impl KernelArgs {
    /// Its map arrays.
    #[inline(always)]
    fn map_arrays(&self) -> MapArrays {
        MapArrays {
            n: self.num_args as i32,
            bases: self.arg_base_ptrs,
            begins: self.arg_ptrs,
            sizes: self.arg_sizes,
            types: self.arg_types,
            names: self.arg_names,
            mappers: self.arg_mappers,
        }
    }
}

const _: () = assert!(std::mem::size_of::<KernelArgs>() == 104);
const _: () = assert!(std::mem::size_of::<BinDesc>() == 32);
const _: () = assert!(std::mem::size_of::<Ident>() == 24);

/// The location string of an `ident_t`, if any.
///
/// # Safety
/// `ident` is NULL or points to an `ident_t` clang emitted: a constant of a registered
/// binary whose `psource` is NULL or a constant string of it.
#[inline]
pub unsafe fn loc(ident: *const Ident) -> Loc {
    if ident.is_null() {
        return Loc::NONE;
    }
    // SAFETY: the caller's promise: a constant `ident_t` (non-null, checked) whose psource
    // string lives as long as its binary is registered.
    unsafe { Loc::from_raw((*ident).psource as usize) }
}

/// A slice from a C array, empty for NULL or a non-positive count.
///
/// # Safety
/// `ptr` must point to `n` valid elements when non-null, alive for `'a`.
#[inline]
pub unsafe fn slice<'a, T>(ptr: *const T, n: i32) -> &'a [T] {
    if ptr.is_null() || n <= 0 {
        return &[];
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, n as usize) }
}

/// The map arrays of a data or kernel entry point, as clang passes them.
#[derive(Clone, Copy)]
pub struct MapArrays {
    /// How many entries each array holds (none when not positive).
    pub n: i32,
    pub bases: *mut *mut c_void,
    pub begins: *mut *mut c_void,
    pub sizes: *const i64,
    pub types: *const i64,
    /// May be NULL (no names).
    pub names: *const *mut c_void,
    /// May be NULL (no mappers).
    pub mappers: *const *mut c_void,
}

impl MapArrays {
    /// Whether the arrays that `n` entries need are all there (names and mappers may not be).
    #[inline(always)]
    fn given(&self) -> bool {
        self.n <= 0 || !(self.bases.is_null() || self.begins.is_null() || self.sizes.is_null() || self.types.is_null())
    }

    /// The runtime's view of the arrays, once [`MapArrays::given`] said they are there.
    ///
    /// # Safety
    /// Each non-null pointer points to `n` elements, as clang emits them, alive and not
    /// otherwise borrowed for `'a`; `bases` writable; and `given()` is true.
    #[inline(always)]
    unsafe fn map_args<'a>(self) -> MapArgs<'a> {
        let MapArrays { n, bases, begins, sizes, types, names, mappers } = self;
        let count = n.max(0) as usize;
        // SAFETY: the arrays hold `count` pointer-sized elements (caller's contract); usize
        // and pointers share a layout. Their entries are the running construct's map clauses,
        // as clang emits them (the caller's contract), which is what `MapArgs::new` asks.
        unsafe {
            MapArgs::new(
                if count == 0 { &mut [] } else { std::slice::from_raw_parts_mut(bases.cast::<usize>(), count) },
                slice(begins.cast::<usize>(), n),
                slice(sizes, n),
                slice(types, n),
                (!names.is_null() && count > 0).then(|| slice(names.cast::<usize>(), n)),
                (!mappers.is_null() && count > 0).then(|| slice(mappers.cast::<usize>(), n)),
            )
        }
    }
}

/// The map arrays of a data or kernel entry point; `None` (said) when one is missing.
///
/// # Safety
/// Each non-null pointer must point to `n` elements, as clang emits them; `bases` writable.
#[inline]
pub unsafe fn map_args<'a>(arrays: MapArrays) -> Option<MapArgs<'a>> {
    if !arrays.given() {
        return refuse(format_args!("invalid map arguments: {} entries but a NULL array", arrays.n.max(0)));
    }
    // SAFETY: the caller's promise, and the arrays are there (checked).
    Some(unsafe { arrays.map_args() })
}

/// Says why arguments are refused, off the path of every launch.
#[cold]
#[inline(never)]
fn refuse<T>(why: std::fmt::Arguments) -> Option<T> {
    omp_runtime::info::error(why);
    None
}

/// A launch's `KernelArgsTy`, once checked: `None` (said) when it or one of the map arrays
/// its count needs is missing.
///
/// # Safety
/// `args` is NULL or points to a `KernelArgsTy` clang laid out, alive for `'a`.
#[inline(always)]
pub unsafe fn kernel_args<'a>(args: *mut KernelArgs) -> Option<&'a KernelArgs> {
    if args.is_null() {
        return refuse(format_args!("__tgt_target_kernel called with NULL kernel arguments"));
    }
    // SAFETY: non-null and laid out by clang (caller's contract).
    let a = unsafe { &*args };
    if !a.map_arrays().given() {
        return refuse(format_args!("invalid map arguments: {} entries but a NULL array", (a.num_args as i32).max(0)));
    }
    Some(a)
}

/// The launch a checked `KernelArgsTy` ([`kernel_args`]) describes. Returned by value, not
/// in an `Option`, and inlined into `__tgt_target_kernel`: the launch is built in place,
/// not moved through a temporary (a 150-byte copy on every launch).
///
/// # Safety
/// `a` came from [`kernel_args`]; its arrays hold `num_args` elements, alive and not
/// otherwise borrowed for `'a`.
#[inline(always)]
pub unsafe fn kernel_launch<'a>(a: &'a KernelArgs, num_teams: i32, thread_limit: i32) -> KernelLaunch<'a> {
    let teams = if a.version >= 2 { a.num_teams[0] } else { num_teams as u32 };
    let threads = if a.version >= 2 { a.thread_limit[0] } else { thread_limit as u32 };
    KernelLaunch {
        version: a.version,
        // SAFETY: the arrays come from the same struct, with `num_args` elements, and
        // `kernel_args` checked that those a count needs are there (the caller's promise).
        args: unsafe { a.map_arrays().map_args() },
        num_teams: if teams == u32::MAX { 1 } else { teams },
        thread_limit: threads,
        tripcount: a.tripcount,
        nowait: a.flags & 1 != 0,
        teams_yz: if a.version >= 2 { [a.num_teams[1], a.num_teams[2]] } else { [0, 0] },
        threads_yz: if a.version >= 2 { [a.thread_limit[1], a.thread_limit[2]] } else { [0, 0] },
        dyn_group_mem: if a.version >= 2 { a.dyn_cgroup_mem } else { 0 },
    }
}

/// Why a `__tgt_bin_desc` cannot be read (`__tgt_register_lib` says so and ignores it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescriptorError {
    Null,
    EntryTableReversed,
    EntryTable(omp_format::FormatError),
    ImageReversed,
}

impl std::fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DescriptorError::Null => f.write_str("NULL binary descriptor"),
            DescriptorError::EntryTableReversed => f.write_str("offload entry table has its end before its start"),
            DescriptorError::EntryTable(e) => write!(f, "{e}"),
            DescriptorError::ImageReversed => f.write_str("device image has its end before its start"),
        }
    }
}

/// Unpacks `__tgt_bin_desc`, detecting the entry layout from the whole table.
///
/// # Safety
/// `desc` must point to a descriptor the compiler's registration code built.
pub unsafe fn descriptor(desc: *const BinDesc) -> Result<Descriptor, DescriptorError> {
    if desc.is_null() {
        return Err(DescriptorError::Null);
    }
    // SAFETY: non-null, built by the registration constructor.
    let d = unsafe { &*desc };
    // SAFETY: registration code points both ends into one constant of the binary, which
    // stays mapped while it is registered (parsed here, never touched after
    // `__tgt_unregister_lib`).
    let table =
        unsafe { byte_range(d.host_entries_begin, d.host_entries_end) }.ok_or(DescriptorError::EntryTableReversed)?;
    let (layout, entries) = parse_entry_table(table).map_err(DescriptorError::EntryTable)?;
    // SAFETY: the image array holds `num_device_images` elements.
    let imgs = unsafe { slice(d.device_images, d.num_device_images) };
    let mut images = Vec::with_capacity(imgs.len());
    for img in imgs {
        // SAFETY: as for the entry table: one constant of the binary, copied at once.
        let bytes = unsafe { byte_range(img.image_start, img.image_end) }.ok_or(DescriptorError::ImageReversed)?;
        // Copied: the runtime keeps images as long as it needs them, whatever the program
        // unloads meanwhile.
        images.push(BinaryImage { bytes: bytes.into() });
    }
    let layout = omp_runtime::compose::entry_layout(layout, &entries, &images);
    Ok(Descriptor { key: desc as usize, images, entries, layout })
}

/// Bytes between two pointers into the program's data; `None` when `end` is before `start`.
///
/// # Safety
/// Unless one is null or they are equal, both point into one object of the program that
/// stays mapped and unchanged while the slice is used.
unsafe fn byte_range<'a>(start: *const u8, end: *const u8) -> Option<&'a [u8]> {
    if start.is_null() || end.is_null() || start == end {
        return Some(&[]);
    }
    let len = (end as usize).checked_sub(start as usize)?;
    // SAFETY: the caller's promise: `[start, end)` is one object of the program.
    Some(unsafe { std::slice::from_raw_parts(start, len) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(entries: &[u8], images: &[DeviceImage]) -> BinDesc {
        BinDesc {
            num_device_images: images.len() as i32,
            device_images: images.as_ptr(),
            host_entries_begin: entries.as_ptr(),
            host_entries_end: entries.as_ptr().wrapping_add(entries.len()),
        }
    }

    #[test]
    fn unreadable_descriptors_say_why_as_values() {
        // SAFETY: a null descriptor is checked before anything is read.
        assert_eq!(unsafe { descriptor(std::ptr::null()) }.err(), Some(DescriptorError::Null));
        let table = [0u8; 32];
        let mut reversed = desc(&table, &[]);
        std::mem::swap(&mut reversed.host_entries_begin, &mut reversed.host_entries_end);
        // SAFETY: both ends point into `table`; no image.
        let err = unsafe { descriptor(&reversed) }.err();
        assert_eq!(err, Some(DescriptorError::EntryTableReversed));
        assert_eq!(err.unwrap().to_string(), "offload entry table has its end before its start");
        let odd = [0u8; 7];
        // SAFETY: the entry table is `odd`, 7 bytes; no image.
        let err = unsafe { descriptor(&desc(&odd, &[])) }.err();
        assert!(matches!(err, Some(DescriptorError::EntryTable(_))), "{err:?}");
        let image = [1u8; 4];
        let backwards = DeviceImage {
            image_start: image.as_ptr().wrapping_add(4),
            image_end: image.as_ptr(),
            entries_begin: std::ptr::null(),
            entries_end: std::ptr::null(),
        };
        // SAFETY: no entries; one image whose ends point into `image`.
        let err = unsafe { descriptor(&desc(&[], std::slice::from_ref(&backwards))) }.err();
        assert_eq!(err, Some(DescriptorError::ImageReversed));
    }
}
