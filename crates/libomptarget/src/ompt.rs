//! OMPT device tracing: connect to libomp's tool interface, as LLVM's runtime does, and
//! forward the runtime's events to the callbacks the tool registered.
//!
//! As in LLVM (`offload/libomptarget/OpenMP/OMPT/Callback.cpp`): a registered EMI form
//! (`target_emi`, `target_data_op_emi`, `target_submit_emi`) replaces its plain form; EMI
//! callbacks come in begin/end pairs around the operation, with the thread's `target_data`
//! (which the tool may set at the region's begin and gets back at every callback inside it)
//! and the thread's `host_op_id` (set by the tool at an operation's begin, passed back at its
//! end). LLVM dispatches no `target_map(_emi)`; neither do we.

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
const CB_TARGET_EMI: i32 = 33;
const CB_TARGET_DATA_OP_EMI: i32 = 34;
const CB_TARGET_SUBMIT_EMI: i32 = 35;

/// `ompt_scope_endpoint_t`.
const SCOPE_BEGIN: i32 = 1;
const SCOPE_END: i32 = 2;

/// The tool's callbacks (addresses), as libomp handed them over.
#[derive(Default, Debug)]
pub struct Callbacks {
    target: usize,
    data_op: usize,
    submit: usize,
    device_init: usize,
    device_load: usize,
    target_emi: usize,
    data_op_emi: usize,
    submit_emi: usize,
    /// libomp's `ompt_get_task_data` (the encountering task's data, for `target_emi`).
    get_task_data: usize,
}

impl Callbacks {
    /// Some EMI callback is registered: the tool gets operations' ends, so the runtime
    /// reports them (measured intervals).
    fn any_emi(&self) -> bool {
        self.target_emi | self.data_op_emi | self.submit_emi != 0
    }
}

/// `ompt_data_t`: a 64-bit value or a pointer, the tool's to set.
type OmptData = u64;

thread_local! {
    /// The target region this thread is in: the tool's `target_data` (LLVM's per-thread
    /// `TargetData`), zeroed at each region's begin.
    static TARGET_DATA: std::cell::Cell<OmptData> = const { std::cell::Cell::new(0) };
    /// The data operation or submission in progress: the tool's `host_op_id`.
    static HOST_OP_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// `target_task_data` (no deferred target tasks yet: always none).
    static TARGET_TASK_DATA: std::cell::Cell<OmptData> = const { std::cell::Cell::new(0) };
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
    // SAFETY: as above.
    let get_task_data = unsafe { lookup(c"ompt_get_task_data".as_ptr()) } as usize;
    let _ = CALLBACKS.set(Callbacks {
        target: fetch(CB_TARGET),
        data_op: fetch(CB_TARGET_DATA_OP),
        submit: fetch(CB_TARGET_SUBMIT),
        device_init: fetch(CB_DEVICE_INITIALIZE),
        device_load: fetch(CB_DEVICE_LOAD),
        target_emi: fetch(CB_TARGET_EMI),
        data_op_emi: fetch(CB_TARGET_DATA_OP_EMI),
        submit_emi: fetch(CB_TARGET_SUBMIT_EMI),
        get_task_data,
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
    let any = any | cbs.target_emi | cbs.data_op_emi | cbs.submit_emi;
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
    /// The events OMPT has callbacks for; intervals only for EMI callbacks (whose end
    /// endpoints come with the events that report an operation done).
    fn interest(&self) -> Interest {
        use EventKind::*;
        Interest {
            kinds: Kinds::of(&[DeviceInit, ImageLoaded, Construct, Alloc, Free, Transfer, Kernel]),
            timing: cbs().any_emi(),
            ..Interest::NONE
        }
    }

    fn event(&self, ev: &Event, cx: &EventCx) {
        let host = || crate::rt().initial_device();
        match *ev {
            Event::DeviceInit { device } => device_init(device),
            Event::ImageLoaded { device, image, module_id, .. } => device_load(device, image, module_id),
            Event::Construct { kind, begin, device, target_id, codeptr, .. } => {
                target(kind, begin, device, target_id, codeptr)
            }
            // Allocations and frees are reported once done: their EMI begin and end come
            // together.
            Event::Alloc { device, host: hp, tgt, bytes, .. } => {
                for endpoint in [SCOPE_BEGIN, SCOPE_END] {
                    data_op(cx, endpoint, OP_ALLOC, hp, host(), tgt, device, bytes);
                }
            }
            Event::Free { device, tgt, bytes, .. } => {
                // LLVM's EMI delete says 0 bytes; the plain form keeps the size it always had.
                let bytes = if cbs().data_op_emi != 0 { 0 } else { bytes };
                for endpoint in [SCOPE_BEGIN, SCOPE_END] {
                    data_op(cx, endpoint, OP_DELETE, tgt, device, 0, host(), bytes);
                }
            }
            Event::Transfer { device, dir: Direction::ToDevice, host: hp, tgt, bytes, done, .. } => {
                data_op(cx, endpoint_of(done.is_none()), OP_TO_DEVICE, hp, host(), tgt, device, bytes)
            }
            Event::Transfer { device, dir: Direction::FromDevice, host: hp, tgt, bytes, done, .. } => {
                data_op(cx, endpoint_of(done.is_none()), OP_FROM_DEVICE, tgt, device, hp, host(), bytes)
            }
            Event::Kernel { teams, done, .. } => submit(cx, endpoint_of(done.is_none()), teams),
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

fn endpoint_of(begin: bool) -> i32 {
    if begin {
        SCOPE_BEGIN
    } else {
        SCOPE_END
    }
}

/// The encountering task's `ompt_data_t`, from libomp (null if it has none).
fn task_data() -> *mut OmptData {
    type F = unsafe extern "C" fn() -> *mut OmptData;
    if cbs().get_task_data == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: "ompt_get_task_data" has type `ompt_get_task_data_t`.
    unsafe { std::mem::transmute::<usize, F>(cbs().get_task_data)() }
}

fn target(kind: TargetKind, begin: bool, device: i32, target_id: u64, codeptr: usize) {
    let endpoint = endpoint_of(begin);
    if cbs().target_emi != 0 {
        type F = unsafe extern "C" fn(i32, i32, i32, *mut OmptData, *mut OmptData, *mut OmptData, *const c_void);
        if begin {
            TARGET_DATA.with(|d| d.set(0));
        }
        // SAFETY: registered for ompt_callback_target_emi, whose type is F; the data
        // pointers are this thread's and live as long as it.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().target_emi)(
                kind as i32,
                endpoint,
                device,
                task_data(),
                TARGET_TASK_DATA.with(|d| d.as_ptr()),
                TARGET_DATA.with(|d| d.as_ptr()),
                codeptr as *const c_void,
            )
        };
    } else if cbs().target != 0 {
        type F = unsafe extern "C" fn(i32, i32, i32, *mut OmptData, u64, *const c_void);
        // SAFETY: registered for ompt_callback_target, whose type is F.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().target)(
                kind as i32,
                endpoint,
                device,
                task_data(),
                target_id,
                codeptr as *const c_void,
            )
        };
    }
}

/// Tells the tool of an endpoint of a data operation of the construct `cx` names: `bytes`
/// bytes from `src` on `src_device` to `dst` on `dst_device`.
#[allow(clippy::too_many_arguments)]
fn data_op(
    cx: &EventCx,
    endpoint: i32,
    op: i32,
    src: usize,
    src_device: i32,
    dst: usize,
    dst_device: i32,
    bytes: usize,
) {
    let (target_id, codeptr) = (cx.construct(), cx.codeptr());
    if cbs().data_op_emi != 0 {
        type F = unsafe extern "C" fn(
            i32,
            *mut OmptData,
            *mut OmptData,
            *mut u64,
            i32,
            *mut c_void,
            i32,
            *mut c_void,
            i32,
            usize,
            *const c_void,
        );
        // SAFETY: registered for ompt_callback_target_data_op_emi, whose type is F; the
        // data pointers are this thread's and live as long as it.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().data_op_emi)(
                endpoint,
                TARGET_TASK_DATA.with(|d| d.as_ptr()),
                TARGET_DATA.with(|d| d.as_ptr()),
                HOST_OP_ID.with(|d| d.as_ptr()),
                op,
                src as *mut c_void,
                src_device,
                dst as *mut c_void,
                dst_device,
                bytes,
                codeptr as *const c_void,
            )
        };
    } else if cbs().data_op != 0 && endpoint == SCOPE_BEGIN {
        type F = unsafe extern "C" fn(u64, u64, i32, *mut c_void, i32, *mut c_void, i32, usize, *const c_void);
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

/// Tells the tool of a kernel launch of the construct `cx` names.
fn submit(cx: &EventCx, endpoint: i32, num_teams: u32) {
    if cbs().submit_emi != 0 {
        type F = unsafe extern "C" fn(i32, *mut OmptData, *mut u64, u32);
        // SAFETY: registered for ompt_callback_target_submit_emi, whose type is F; the data
        // pointers are this thread's and live as long as it.
        unsafe {
            std::mem::transmute::<usize, F>(cbs().submit_emi)(
                endpoint,
                TARGET_DATA.with(|d| d.as_ptr()),
                HOST_OP_ID.with(|d| d.as_ptr()),
                num_teams,
            )
        };
    } else if cbs().submit != 0 && endpoint == SCOPE_BEGIN {
        type F = unsafe extern "C" fn(u64, u64, u32);
        // SAFETY: registered for ompt_callback_target_submit, whose type is F.
        unsafe { std::mem::transmute::<usize, F>(cbs().submit)(cx.construct(), trace::next_id(), num_teams) };
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
