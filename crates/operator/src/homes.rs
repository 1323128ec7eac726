//! `homestead homes-api`: serves the aggregated API `homes.homestead.dev/v1alpha1`
//! (docs/homes.md; the `homestead-homes-api` crate) within the connection bounds every server
//! that faces the network has, beside the health and metrics server.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum_server::tls_rustls::RustlsConfig;
use homestead_directory::scim::metrics::Connections;
use homestead_reconciler::runtime::lists;
use prometheus::{IntCounter, IntGauge, Registry};
use tokio_util::sync::CancellationToken;

use crate::cli::HomesApiArgs;
use crate::server::{Health, Server};

/// The homes API's connection metrics, registered in `registry`: what bounds a client before
/// the API server's client certificate is checked (`--max-connections`).
///
/// # Errors
/// When `registry` already holds metrics of these names.
pub fn connections(registry: &Registry) -> prometheus::Result<Connections> {
    let connections = Connections {
        open: IntGauge::new(
            "homestead_homes_api_connections_open",
            "TCP connections the homes API has accepted and not yet closed.",
        )?,
        refused: IntCounter::new(
            "homestead_homes_api_connections_refused_total",
            "Connections the homes API closed at once because --max-connections were open.",
        )?,
    };
    registry.register(Box::new(connections.open.clone()))?;
    registry.register(Box::new(connections.refused.clone()))?;
    Ok(connections)
}

/// Serves the homes API until the process is stopped.
///
/// # Errors
/// No reachable API server, front-proxy settings missing from
/// `kube-system/extension-apiserver-authentication` or unusable, an unreadable certificate or
/// key, or an address that cannot be bound.
pub async fn run(args: HomesApiArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let registry = crate::server::process_registry()?;
    let connections = connections(&registry)?;
    let health = Health::serving(registry.clone());
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::operator::cancel_on_signal(shutdown.clone()));
    let server = Server::bind(args.metrics_address).await?;
    let server = tokio::spawn(server.serve(health.clone(), shutdown.clone()));

    let client = crate::client::infer()
        .await
        .context("connecting to the Kubernetes API server")?;
    let auth = homestead_homes_api::authentication(&client).await?;
    let config = homestead_homes_api::tls_config(&auth, &args.tls_cert, &args.tls_key)?;
    // Before any watch starts: how they receive their initial state (docs/performance.md).
    let workspaces = kube::Api::<homestead_api::Workspace>::all(client.clone());
    lists::log(lists::probe(workspaces).await);
    let proxy = auth.clone();
    let homes = homestead_homes_api::start((&client, lists::config()), auth).await?;
    health.set_ready(true);
    tracing::info!(address = %args.address, "serving homes.homestead.dev/v1alpha1");
    let handle = axum_server::Handle::new();
    let stopping = handle.clone();
    let stopped = shutdown.clone();
    tokio::spawn(async move {
        stopped.cancelled().await;
        // Watches end, so their clients (the API server, for people) list again elsewhere.
        stopping.graceful_shutdown(Some(Duration::from_secs(10)));
    });
    let app = homestead_homes_api::app(homes, &registry)?;
    let tls = RustlsConfig::from_config(Arc::new(config));
    let front_proxy: crate::connections::FrontProxy =
        Arc::new(move |leaf: &[u8]| proxy.front_proxy(leaf).is_ok());
    crate::connections::bind_bounded_http2(
        args.address,
        (tls, front_proxy),
        &args.bounds,
        connections,
        handle,
    )
    .serve(app.into_make_service())
    .await
    .context("serving the homes API")?;
    shutdown.cancel();
    server.await?.context("serving /metrics")
}
