//! Locks that do not poison: the one lock policy of the runtime and its plugins.
//!
//! The C entry points catch panics (`catch_unwind`) and report them as failures. With std's
//! locks, a panic caught while a lock was held would poison it and turn every later call
//! into a second, unrelated failure. Every lock here recovers instead: the data a panicking
//! thread left is still the runtime's best knowledge (each critical section leaves its
//! structure consistent before it calls anything that can panic), and the panic itself was
//! already reported once.

#![forbid(unsafe_code)]

use std::sync::{self, Condvar, PoisonError};

pub use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

/// A mutex whose `lock` never fails.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(sync::Mutex<T>);

impl<T> Mutex<T> {
    pub const fn new(value: T) -> Self {
        Self(sync::Mutex::new(value))
    }
    pub fn into_inner(self) -> T {
        self.0.into_inner().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: ?Sized> Mutex<T> {
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
    pub fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
    /// The lock if nobody holds it now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(g),
            Err(sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A reader-writer lock whose `read` and `write` never fail.
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(sync::RwLock<T>);

impl<T> RwLock<T> {
    pub const fn new(value: T) -> Self {
        Self(sync::RwLock::new(value))
    }
}

impl<T: ?Sized> RwLock<T> {
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A condition variable for [`Mutex`]; waiting never fails either.
#[derive(Debug, Default)]
pub struct Signal(Condvar);

impl Signal {
    pub const fn new() -> Self {
        Self(Condvar::new())
    }
    /// Releases the guard, waits for a notification, and takes the lock again.
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }
    /// As [`Signal::wait`], for at most `limit`.
    pub fn wait_timeout<'a, T>(&self, guard: MutexGuard<'a, T>, limit: std::time::Duration) -> MutexGuard<'a, T> {
        self.0.wait_timeout(guard, limit).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0)
    }
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
    pub fn notify_one(&self) {
        self.0.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_under_the_lock_does_not_poison_it() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let r = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("inside");
        })
        .join();
        assert!(r.is_err());
        *m.lock() += 1;
        assert_eq!(*m.lock(), 2);
    }

    #[test]
    fn rwlock_recovers_too() {
        let l = std::sync::Arc::new(RwLock::new(vec![1]));
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            let _g = l2.write();
            panic!("inside");
        })
        .join();
        l.write().push(2);
        assert_eq!(l.read().len(), 2);
    }
}
