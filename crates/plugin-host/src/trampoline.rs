//! Calls a kernel with any number of pointer-sized arguments.
//!
//! On x86-64 System V the caller owns the argument area, so calling a function with more
//! integer arguments than it declares is harmless: the callee ignores the extra registers and
//! stack slots. One path serves every arity: six arguments in registers (padded with zeros),
//! the rest pushed on a 16-byte-aligned stack.

/// Calls `f` with `args`, padded with zeros to at least six.
///
/// # Safety
/// `f` must be the address of an `extern "C"` function whose parameters are all
/// pointer-sized integers or pointers, at most `args.len()` of them.
#[link_section = ".text.hot.omp_launch"]
pub unsafe fn call(f: usize, args: &[usize]) {
    if args.len() >= 6 {
        // SAFETY: this function's contract, and at least six arguments.
        return unsafe { call_any(f, args) };
    }
    let mut a = [0usize; 6];
    a[..args.len()].copy_from_slice(args);
    // SAFETY: padding with zeros only adds arguments the callee ignores.
    unsafe { call_any(f, &a) }
}

/// Calls `f` with any number (more than six) of integer arguments: six in registers, the rest
/// pushed on a 16-byte-aligned stack, as the System V ABI lays them out.
///
/// # Safety
/// As for [`call`]; `args.len()` must be at least 6.
unsafe fn call_any(f: usize, args: &[usize]) {
    debug_assert!(args.len() >= 6);
    let stack = &args[6..];
    // SAFETY: r12..r15 are callee-saved, so they survive the call; the stack is restored from
    // r12; every caller-saved register is declared clobbered through clobber_abi("C").
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "and rsp, -16",
            "test rax, 1",
            "jz 2f",
            "sub rsp, 8",
            "2:",
            "test rax, rax",
            "jz 3f",
            "dec rax",
            "push qword ptr [r15 + rax*8]",
            "jmp 2b",
            "3:",
            "mov rdi, [r14]",
            "mov rsi, [r14 + 8]",
            "mov rdx, [r14 + 16]",
            "mov rcx, [r14 + 24]",
            "mov r8, [r14 + 32]",
            "mov r9, [r14 + 40]",
            "call r13",
            "mov rsp, r12",
            in("r13") f,
            in("r14") args.as_ptr(),
            in("r15") stack.as_ptr(),
            inout("rax") stack.len() => _,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}
