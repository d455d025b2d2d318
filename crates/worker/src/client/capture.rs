//! A worker's output pipes, made here: the worker forwards what its code writes to fd 1 and 2
//! as frames, in order with its replies, but a worker that dies (a kernel's fault) takes with
//! it what it had not forwarded yet. This process keeps the pipes' read ends too, never reads
//! them while the worker lives, and drains them once it has ended ([`Kept::drain`]).

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};

/// What is taken from the pipes of a dead worker, at most (a process the worker started may
/// still hold a write end and keep writing).
const MAX_LEFT: usize = 1 << 20;

/// This process's read ends of a worker's stdout and stderr pipes (non-blocking).
pub(super) struct Kept {
    ends: [File; 2],
}

/// The worker's ends, at 10 or above and closed on exec here; [`crate::wire::CAPTURE_FDS`] in the
/// worker.
pub(super) struct ForWorker {
    fds: [File; 4],
}

/// Makes the two pipes.
pub(super) fn pipes() -> std::io::Result<(Kept, ForWorker)> {
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for _ in 0..2 {
        let mut p = [0i32; 2];
        // SAFETY: pipe2 writes two descriptors into `p`; the result is checked.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors are fresh and owned here from now on.
        unsafe {
            reads.push(File::from_raw_fd(p[0]));
            writes.push(File::from_raw_fd(p[1]));
        }
    }
    let high = |f: &File| -> std::io::Result<File> {
        // SAFETY: fcntl on a descriptor we own; the new one is checked and then owned here.
        let fd = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        Ok(unsafe { File::from_raw_fd(fd) })
    };
    let fds = [high(&reads[0])?, high(&reads[1])?, high(&writes[0])?, high(&writes[1])?];
    for r in &reads {
        // SAFETY: fcntl on a descriptor we own. The read ends share one file status with the
        // worker's copies, which it reads without blocking too.
        if unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    let [out, err]: [File; 2] = reads.try_into().map_err(|_| std::io::Error::other("two pipes"))?;
    Ok((Kept { ends: [out, err] }, ForWorker { fds }))
}

impl ForWorker {
    /// The descriptors to place at [`crate::wire::CAPTURE_FDS`] in the child.
    pub(super) fn raw(&self) -> [i32; 4] {
        self.fds.each_ref().map(|f| f.as_raw_fd())
    }
}

impl Kept {
    /// Passes what the pipes still hold to `out` (`true`: stderr), once the worker ended.
    pub(super) fn drain(&mut self, out: &mut dyn FnMut(bool, &[u8])) {
        let mut buf = vec![0u8; 64 << 10];
        for (i, end) in self.ends.iter_mut().enumerate() {
            let mut taken = 0;
            while taken < MAX_LEFT {
                match end.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        out(i == 1, &buf[..n]);
                        taken += n;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break, // WouldBlock: nothing more
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn what_is_left_in_the_pipes_is_taken_in_order_per_stream() {
        let (mut kept, child) = pipes().unwrap();
        // SAFETY: the write ends are ours; each File takes one of its own duplicates.
        let (mut out, mut err) =
            unsafe { (File::from_raw_fd(libc::dup(child.raw()[2])), File::from_raw_fd(libc::dup(child.raw()[3]))) };
        out.write_all(b"one ").unwrap();
        err.write_all(b"warn").unwrap();
        out.write_all(b"two").unwrap();
        let mut got = Vec::new();
        kept.drain(&mut |is_err, b: &[u8]| got.push((is_err, b.to_vec())));
        assert_eq!(got, vec![(false, b"one two".to_vec()), (true, b"warn".to_vec())]);
        // Nothing left: a second drain returns at once with nothing.
        let mut again = 0;
        kept.drain(&mut |_, _| again += 1);
        assert_eq!(again, 0);
    }
}
