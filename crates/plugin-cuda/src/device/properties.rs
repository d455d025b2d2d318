//! What a CUDA device tells about itself at open (`cuDeviceGetAttribute` and friends).

use super::DeviceProps;
use crate::driver::*;
use crate::launch_rules::GridLimits;
use omp_plugin::Result;
use std::ffi::CStr;

/// The device's name, compute capability, memory and limits.
pub(super) fn read(driver: &Driver, device: CuDevice) -> Result<DeviceProps> {
    let get = |attribute: i32| -> Result<i32> {
        let mut v = 0;
        // SAFETY: writes one int for a valid device and attribute.
        driver.check(unsafe { (driver.device_get_attribute)(&mut v, attribute, device) }, "cuDeviceGetAttribute")?;
        Ok(v)
    };
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the driver writes a NUL-terminated name of at most `len` bytes.
    let r = unsafe { (driver.device_get_name)(name.as_mut_ptr(), name.len() as i32, device) };
    driver.check(r, "cuDeviceGetName")?;
    name[255] = 0;
    // SAFETY: `name` is NUL-terminated (its last byte was just set).
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    let mut total_memory = 0usize;
    // SAFETY: writes one size_t.
    driver.check(unsafe { (driver.device_total_mem)(&mut total_memory, device) }, "cuDeviceTotalMem")?;
    let mut driver_version = 0;
    // SAFETY: writes one int.
    driver.check(unsafe { (driver.driver_get_version)(&mut driver_version) }, "cuDriverGetVersion")?;
    let (major, minor) = (get(attr::COMPUTE_CAPABILITY_MAJOR)?, get(attr::COMPUTE_CAPABILITY_MINOR)?);
    let positive = |v: i32| v.max(1) as u32;
    Ok(DeviceProps {
        name,
        sm: (major * 10 + minor) as u32,
        total_memory,
        multiprocessors: get(attr::MULTIPROCESSOR_COUNT)?,
        max_threads_per_block: get(attr::MAX_THREADS_PER_BLOCK)?,
        max_threads_per_multiprocessor: get(attr::MAX_THREADS_PER_MULTIPROCESSOR)?,
        shared_memory_per_block: get(attr::MAX_SHARED_MEMORY_PER_BLOCK)?,
        clock_khz: get(attr::CLOCK_RATE)?,
        driver_version,
        limits: GridLimits::nvptx(
            positive(get(attr::MAX_GRID_DIM_X)?),
            positive(get(attr::MAX_BLOCK_DIM_X)?),
            positive(get(attr::WARP_SIZE)?),
        ),
    })
}
