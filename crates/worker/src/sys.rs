//! Direct copies into and out of a worker's memory (`process_vm_writev`/`readv`): the
//! server writes each received chunk straight into device memory, without a trip through
//! the worker's pipe and without waiting for a kernel the worker is running. Only for
//! devices whose addresses are the worker's own (the host plugin's).

use std::io;

/// Copies `data` to `addr` in process `pid`.
pub fn write_to(pid: i32, addr: u64, data: &[u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < data.len() {
        let local = libc::iovec { iov_base: data[done..].as_ptr() as *mut libc::c_void, iov_len: data.len() - done };
        let remote = libc::iovec { iov_base: (addr as usize + done) as *mut libc::c_void, iov_len: data.len() - done };
        // SAFETY: `local` describes readable memory we borrow for the call; the kernel checks
        // `remote` against the target process's mappings and never touches ours through it.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(if n == 0 {
                io::Error::new(io::ErrorKind::WriteZero, "no progress")
            } else {
                io::Error::last_os_error()
            });
        }
        done += n as usize;
    }
    Ok(())
}

/// Reads `len` bytes at `addr` in process `pid` into a new buffer (not zeroed first).
pub fn read_vec(pid: i32, addr: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(len);
    let spare = buf.spare_capacity_mut();
    let local = libc::iovec { iov_base: spare.as_mut_ptr().cast(), iov_len: len };
    let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: len };
    // SAFETY: `local` is the buffer's unused capacity (`len` bytes, ours); the kernel writes
    // at most `len` bytes there and checks `remote` against the target process.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel initialised the first `n` bytes.
    unsafe { buf.set_len(n as usize) };
    if buf.len() < len {
        // A partial read (range ending at an unmapped page): finish it the careful way.
        let done = buf.len();
        buf.resize(len, 0);
        read_from(pid, addr + done as u64, &mut buf[done..])?;
    }
    Ok(buf)
}

/// Copies `buf.len()` bytes at `addr` in process `pid` into `buf`.
pub fn read_from(pid: i32, addr: u64, buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0usize;
    while done < buf.len() {
        let local = libc::iovec { iov_base: buf[done..].as_mut_ptr().cast(), iov_len: buf.len() - done };
        let remote = libc::iovec { iov_base: (addr as usize + done) as *mut libc::c_void, iov_len: buf.len() - done };
        // SAFETY: `local` is writable memory we own for the call; `remote` is checked by the
        // kernel against the target process.
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(if n == 0 {
                io::Error::new(io::ErrorKind::UnexpectedEof, "no progress")
            } else {
                io::Error::last_os_error()
            });
        }
        done += n as usize;
    }
    Ok(())
}

/// Keeps allocations of up to `mmap_threshold` bytes on glibc's heap (instead of a fresh `mmap`,
/// and its page faults, for each) and lets the heap hold `trim_threshold` free bytes before it
/// gives memory back. glibc's `mallopt` changes settings that `malloc` reads without a lock, so
/// this does it only while the calling thread is the process's only one; it returns whether the
/// settings were applied (call it first thing in `main`).
pub fn keep_large_buffers_on_heap(mmap_threshold: usize, trim_threshold: usize) -> bool {
    let threads = std::fs::read_dir("/proc/self/task").map(Iterator::count).unwrap_or(0);
    if threads != 1 {
        return false;
    }
    let as_int = |n: usize| libc::c_int::try_from(n).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only changes glibc's allocator settings and touches no memory of ours.
    // The process has one thread (counted just now), this one, and no other can start while
    // it is here, so no `malloc` runs concurrently with the change.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, as_int(mmap_threshold));
        libc::mallopt(libc::M_TRIM_THRESHOLD, as_int(trim_threshold));
    }
    true
}

/// Describes how a child ended, naming the signal.
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let name = match sig {
            libc::SIGSEGV => "SIGSEGV",
            libc::SIGBUS => "SIGBUS",
            libc::SIGILL => "SIGILL",
            libc::SIGFPE => "SIGFPE",
            libc::SIGABRT => "SIGABRT",
            libc::SIGKILL => "SIGKILL",
            libc::SIGTERM => "SIGTERM",
            _ => "signal",
        };
        format!("killed by signal {sig} ({name})")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}
