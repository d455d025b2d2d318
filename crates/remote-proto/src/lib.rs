//! The remote offloading protocol: generated gRPC messages and stubs for
//! `proto/offload.proto`, plus the constants both ends agree on.

#[allow(clippy::all, clippy::pedantic, missing_docs)]
// Generated code need not be tidy, but it must build with `rust-version`.
#[warn(clippy::incompatible_msrv)]
pub mod pb {
    tonic::include_proto!("omp.remote.v1");
}

/// Bumped on any incompatible change to the protocol.
pub const PROTOCOL_VERSION: u32 = 2;

/// Metadata key carrying the client's token: `authorization: Bearer <token>`.
pub const AUTH_HEADER: &str = "authorization";

/// Metadata key carrying the session's secret on every call that names a session.
pub const SESSION_KEY_HEADER: &str = "omp-session-secret";

/// Largest gRPC message either end accepts (a chunk plus its header).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Largest chunk a client may send or ask for.
pub const MAX_CHUNK_BYTES: u32 = 32 << 20;

/// The environment variable the server sets in its device workers; a client plugin that
/// finds it refuses to offload further (no remote-to-remote offloading).
pub const WORKER_ENV: &str = "OFFLOAD_SERVER_WORKER";
