//! Map-type bits (`ArgTypes[i]`), as clang 19 and 22 emit them.

pub const TO: i64 = 0x1;
pub const FROM: i64 = 0x2;
pub const ALWAYS: i64 = 0x4;
pub const DELETE: i64 = 0x8;
pub const PTR_AND_OBJ: i64 = 0x10;
pub const TARGET_PARAM: i64 = 0x20;
pub const RETURN_PARAM: i64 = 0x40;
pub const PRIVATE: i64 = 0x80;
pub const LITERAL: i64 = 0x100;
pub const IMPLICIT: i64 = 0x200;
pub const CLOSE: i64 = 0x400;
pub const PRESENT: i64 = 0x1000;
pub const OMPX_HOLD: i64 = 0x2000;
/// clang 22: attach pointer and pointee after all other entries of the construct.
pub const ATTACH: i64 = 0x4000;
pub const NON_CONTIG: i64 = 0x1000_0000_0000;
pub const MEMBER_OF: i64 = 0xFFFF_0000_0000_0000u64 as i64;

/// The index of the parent ("combined") entry, if this entry is a member of a struct.
pub fn member_of(t: i64) -> Option<usize> {
    let field = ((t as u64) >> 48) as usize;
    (field != 0).then(|| field - 1)
}

/// True when `t` has every bit of `bits`.
#[inline]
pub fn has(t: i64, bits: i64) -> bool {
    t & bits == bits
}

/// The word LLVM's INFO output uses for a map type.
pub fn describe(t: i64, size: i64) -> &'static str {
    if has(t, ATTACH) {
        if has(t, ALWAYS) {
            "attach:always"
        } else {
            "attach"
        }
    } else if has(t, TO | FROM) {
        "tofrom"
    } else if has(t, TO) {
        "to"
    } else if has(t, FROM) {
        "from"
    } else if has(t, PRIVATE) {
        "private"
    } else if has(t, LITERAL) {
        "firstprivate"
    } else if size != 0 {
        "alloc"
    } else {
        "use_address"
    }
}
