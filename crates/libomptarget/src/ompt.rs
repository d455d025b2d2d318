//! OMPT device tracing: connect to libomp's tool interface, as LLVM's runtime does, and
//! forward the runtime's events to the callbacks the tool registered.

use omp_runtime::trace::{self, Direction, Event, EventCx, EventKind, Interest, Kinds, Observer, TargetKind};
use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

type Lookup = unsafe extern "C" fn(*const c_char) -> *const c_void;
type GetCallback = unsafe extern "C" fn(i32, *mut *const c_void) -> i32;
type Connect = unsafe extern "C" fn(*mut StartToolResult);

/// `ompt_start_tool_result_t`.
#[repr(C)]
pub struct StartToolResult {
    initialize: unsafe extern "C" fn(Lookup, i32, *mut u64) -> i32,
    finalize: unsafe extern "C" fn(*mut u64),
    tool_data: u64,
}

// `ompt_callbacks_t` codes.
const CB_TARGET: i32 = 8;
const CB_TARGET_DATA_OP: i32 = 9;
const CB_TARGET_SUBMIT: i32 = 10;
const CB_DEVICE_INITIALIZE: i32 = 12;
const CB_DEVICE_LOAD: i32 = 14;

/// The tool's callbacks (addresses), as libomp handed them over.
#[derive(Default, Debug)]
pub struct Callbacks {
    target: usize,
    data_op: usize,
    submit: usize,
    device_init: usize,
    device_load: usize,
}

static CALLBACKS: OnceLock<Callbacks> = OnceLock::new();

unsafe extern "C" fn initialize(lookup: Lookup, _initial_device: i32, _tool_data: *mut u64) -> i32 {
    // SAFETY: libomp's lookup takes a NUL-terminated name and returns NULL or the function.
    let get = unsafe { lookup(c"ompt_get_callback".as_ptr()) };
    if get.is_null() {
        return 0;
    }
    // SAFETY: "ompt_get_callback" has type `ompt_get_callback_t`.
    let get = unsafe { std::mem::transmute::<*const c_void, GetCallback>(get) };
    let fetch = |code: i32| {
        let mut f: *const c_void = std::ptr::null();
        // SAFETY: writes the registered callback, if any, into `f`.
        let ok = unsafe { get(code, &mut f) };
        if ok == 1 {
            f as usize
        } else {
            0
        }
    };
    let _ = CALLBACKS.set(Callbacks {
        target: fetch(CB_TARGET),
        data_op: fetch(CB_TARGET_DATA_OP),
        submit: fetch(CB_TARGET_SUBMIT),
        device_init: fetch(CB_DEVICE_INITIALIZE),
        device_load: fetch(CB_DEVICE_LOAD),
    });
    1
}

unsafe extern "C" fn finalize(_tool_data: *mut u64) {}

/// Connects to libomp when a tool is active; `None` when there is no tool or no device
/// callback registered.
pub fn connect() -> Option<Box<dyn Observer>> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ompt_libomp_connect".as_ptr()) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: libomp exports `void ompt_libomp_connect(ompt_start_tool_result_t *)`.
    let connect = unsafe { std::mem::transmute::<*mut c_void, Connect>(sym) };
    static RESULT: OnceLock<usize> = OnceLock::new();
    let result = *RESULT
        .get_or_init(|| Box::into_raw(Box::new(StartToolResult { initialize, finalize, tool_data: 0 })) as usize);
    // SAFETY: libomp keeps the pointer to call `finalize`; the box is never freed.
    unsafe { connect(result as *mut StartToolResult) };
    let cbs = CALLBACKS.get()?;
    let any = cbs.target | cbs.data_op | cbs.submit | cbs.device_init | cbs.device_load;
    (any != 0).then(|| Box::new(OmptObserver) as Box<dyn Observer>)
}

/// Forwards runtime events to the tool's callbacks.
struct OmptObserver;

fn cbs() -> &'static Callbacks {
    CALLBACKS.get().expect("set before the observer exists")
}

/// OMPT's `ompt_target_data_op_t` values.
const OP_ALLOC: i32 = 1;
const OP_TO_DEVICE: i32 = 2;
const OP_FROM_DEVICE: i32 = 3;
const OP_DELETE: i32 = 4;

impl Observer for OmptObserver {
    /// The events OMPT has callbacks for; no intervals (the tool times what it wants).
    fn interest(&self) -> Interest {
        use EventKind::*;
        Interest {
            kinds: Kinds::of(&[DeviceInit, ImageLoaded, Construct, Alloc, Free, Transfer, Kernel]),
            ..Interest::NONE
        }
    }

    fn event(&self, ev: &Event, _cx: &EventCx) {
        let host = || crate::rt().initial_device();
        match *ev {
            Event::DeviceInit { device } => device_init(device),
            Event::ImageLoaded { device, image, module_id, .. } => device_load(device, image, module_id),
            Event::Construct { kind, begin, device, target_id, codeptr, .. } => {
                target(kind, begin, device, target_id, codeptr)
            }
            Event::Alloc { device, host: hp, tgt, bytes, .. } => data_op(OP_ALLOC, hp, host(), tgt, device, bytes),
            Event::Free { device, tgt, bytes, .. } => data_op(OP_DELETE, tgt, device, 0, host(), bytes),
            Event::Transfer { device, dir: Direction::ToDevice, host: hp, tgt, bytes, done: None, .. } => {
                data_op(OP_TO_DEVICE, hp, host(), tgt, device, bytes)
            }
            Event::Transfer { device, dir: Direction::FromDevice, host: hp, tgt, bytes, done: None, .. } => {
                data_op(OP_FROM_DEVICE, tgt, device, hp, host(), bytes)
            }
            Event::Kernel { teams, done: None, .. } => submit(teams),
            _ => {}
        }
    }
}

fn device_init(device: i32) {
    type F = unsafe extern "C" fn(i32, *const c_char, *mut c_void, *const c_void, *const c_char);
    if cbs().device_init != 0 {
        // SAFETY: registered for ompt_callback_device_initialize, whose type is F.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().device_init)(
                device,
                c"x86_64".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
    }
}

fn device_load(device: i32, image: &[u8], module_id: u64) {
    type F = unsafe extern "C" fn(i32, *const c_char, i64, *const c_void, usize, *const c_void, *const c_void, u64);
    if cbs().device_load != 0 {
        // SAFETY: registered for ompt_callback_device_load, whose type is F.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().device_load)(
                device,
                std::ptr::null(),
                -1,
                std::ptr::null(),
                image.len(),
                image.as_ptr().cast(),
                std::ptr::null(),
                module_id,
            )
        };
    }
}

fn target(kind: TargetKind, begin: bool, device: i32, target_id: u64, codeptr: usize) {
    type F = unsafe extern "C" fn(i32, i32, i32, *mut c_void, u64, *const c_void);
    if cbs().target != 0 {
        let endpoint = if begin { 1 } else { 2 };
        // SAFETY: registered for ompt_callback_target, whose type is F.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().target)(
                kind as i32,
                endpoint,
                device,
                std::ptr::null_mut(),
                target_id,
                codeptr as *const c_void,
            )
        };
    }
}

fn data_op(op: i32, src: usize, src_device: i32, dst: usize, dst_device: i32, bytes: usize) {
    type F = unsafe extern "C" fn(u64, u64, i32, *mut c_void, i32, *mut c_void, i32, usize, *const c_void);
    if cbs().data_op != 0 {
        let (target_id, codeptr) = trace::current();
        // SAFETY: registered for ompt_callback_target_data_op, whose type is F.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().data_op)(
                target_id,
                trace::next_id(),
                op,
                src as *mut c_void,
                src_device,
                dst as *mut c_void,
                dst_device,
                bytes,
                codeptr as *const c_void,
            )
        };
    }
}

fn submit(num_teams: u32) {
    type F = unsafe extern "C" fn(u64, u64, u32);
    if cbs().submit != 0 {
        let (target_id, _) = trace::current();
        // SAFETY: registered for ompt_callback_target_submit, whose type is F.
        unsafe { std::mem::transmute::<usize, F>(cbs().submit)(target_id, trace::next_id(), num_teams) };
    }
}

/// Records the caller's return address for `codeptr_ra`.
#[macro_export]
macro_rules! record_caller {
    () => {{
        let ra: usize;
        // SAFETY: the workspace builds with frame pointers (.cargo/config.toml), so in this
        // exported function [rbp + 8] holds its return address into the program.
        unsafe { core::arch::asm!("mov {}, [rbp + 8]", out(reg) ra, options(nostack, readonly, preserves_flags)) };
        omp_runtime::trace::set_return_address(ra);
    }};
}
