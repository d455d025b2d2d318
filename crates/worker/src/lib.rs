//! A device worker: a process that hosts a plugin's devices and executes what its parent
//! relays over a pipe pair, and the parent's synchronous client for it.
//!
//! The worker's heap is the device memory of whoever drives it, so a kernel that
//! dereferences a pointer nobody mapped faults in the worker, not in the parent. The parent
//! (offload-server, or an isolated local device) talks to it with [`client::Worker`]:
//! typed requests, replies checked against what each request expects, frames capped, the
//! worker's death turned into an error for every pending call. No async runtime: the client
//! uses one reader thread per worker and completion callbacks, which an async caller can
//! bridge to its own futures.
//!
//! Device memory is reached only through the [`omp_plugin::Device`] trait (`submit`,
//! `retrieve`, `copy_within`), so any backend can sit behind a worker. Data moves with
//! [`Worker::write`] and [`Worker::read_into`] (one transport for every parent: straight
//! into the worker's memory where allowed, relayed in pieces otherwise). What must happen
//! in the worker around each kernel (check mode's page protections) is a function given to
//! [`serve::main_around_launches`], not a device wrapper.

pub mod capture;
pub mod client;
pub mod forks;
pub mod serve;
pub mod slice;
pub mod spin;
pub mod sys;
pub mod wire;

pub use client::{symbol_name, with_launch_request, CallError, Request, RequestPeer, Response, SpawnOptions, Worker};
