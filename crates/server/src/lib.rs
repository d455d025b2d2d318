//! offload-server: serves this machine's offload devices (today the host CPU) to programs
//! elsewhere, over gRPC. Each client program gets a session whose kernels, images and
//! memory live in a worker process of their own.

#![forbid(unsafe_code)]

mod auth;
pub mod config;
pub mod relay;
pub mod service;
mod session;
mod sys;

use config::ServerConfig;
use omp_remote_proto::pb::offload_server::OffloadServer;
use std::sync::Arc;
use std::time::Duration;

/// Binds, prints `offload-server listening on ADDR` and serves until the process ends.
pub async fn serve(cfg: ServerConfig) -> Result<(), String> {
    let cfg = Arc::new(cfg);
    let listener =
        tokio::net::TcpListener::bind(cfg.listen).await.map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("offload-server listening on {local}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if !cfg.quiet {
        eprintln!(
            "offload-server: {} devices per session, {}, token {}, limits: {} sessions, {} bytes per session, {} bytes per image",
            cfg.devices,
            if cfg.tls.is_some() { "TLS" } else { "no TLS" },
            if cfg.token.is_some() { "required" } else { "not required (insecure loopback)" },
            cfg.max_sessions,
            cfg.max_session_memory,
            cfg.max_image_bytes
        );
    }
    let token = cfg.token.clone();
    let inner = OffloadServer::new(service::Handler(service::Service::new(cfg.clone())))
        .max_decoding_message_size(omp_remote_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(omp_remote_proto::MAX_MESSAGE_BYTES);
    let svc = tonic::service::interceptor::InterceptedService::new(inner, move |req: tonic::Request<()>| {
        auth::check_token(token.as_deref(), &req).map(|()| req)
    });
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
    let mut builder = tonic::transport::Server::builder();
    #[cfg(feature = "tls")]
    if let Some((cert, key)) = &cfg.tls {
        let read = |p: &std::path::PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
        let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| format!("TLS configuration: {e}"))?;
    }
    builder
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .initial_stream_window_size(8u32 << 20)
        .initial_connection_window_size(32u32 << 20)
        .max_frame_size(1u32 << 20)
        .add_service(svc)
        .serve_with_incoming(incoming)
        .await
        .map_err(|e| e.to_string())
}
