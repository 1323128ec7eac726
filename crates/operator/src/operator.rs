//! The operator's lifecycle: bind the HTTP server, connect, win the Lease, start the watches
//! and the Controller, and shut down gracefully on SIGTERM / SIGINT or on a lost Lease.

use std::sync::Arc;

use anyhow::Context as _;
use homestead_reconciler::act::fence::Fence;
use homestead_reconciler::act::requests::CountRequests;
use homestead_reconciler::runtime::{Runtime, Settings, lists};
use homestead_reconciler::{Config, Metrics};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::cli::OperatorCli;
use crate::leadership::Leadership;
use crate::server::{Health, Server};

/// Runs the operator until SIGTERM / SIGINT (then `Ok`) or a lost Lease (then an error, so the
/// Pod restarts with fresh state rather than reconcile beside a new leader).
///
/// # Errors
/// Bad flags, the metrics address already in use, no reachable API server, a failed Lease
/// manager, or lost leadership.
pub async fn run(cli: OperatorCli) -> anyhow::Result<()> {
    let config = cli.policy.config()?;
    let registry = crate::server::process_registry()?;
    let metrics = Metrics::new(&registry)?;
    let health = Health::new(registry, metrics.clone());
    let server = Server::bind(cli.runtime.metrics_address).await?;
    let identity = cli
        .election
        .lease_identity
        .clone()
        .unwrap_or_else(default_identity);
    let client = client(&identity, &metrics).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let server = tokio::spawn(server.serve(health.clone(), shutdown.clone()));

    let stop = shutdown.child_token();
    let leadership = if cli.election.leader_election {
        health.set_ready(true); // a healthy standby is ready: it serves and waits
        let leadership = Leadership::acquire(&cli, client.clone(), &identity, &shutdown).await?;
        health.set_ready(false);
        let Some(leadership) = leadership else {
            return server.await?.context("serving /metrics");
        };
        leadership.cancel_on_loss(stop.clone());
        Some(leadership)
    } else {
        None
    };

    let fence = leadership.as_ref().map(Leadership::fence);
    let parts = (client, config, identity, metrics, fence);
    let mut leadership = leadership;
    let controllers = reconcile_users(parts, &cli, &health, stop.clone());
    tokio::pin!(controllers);
    tokio::select! {
        () = &mut controllers => {}
        () = stop.cancelled() => {
            if !shutdown.is_cancelled() && let Some(lost) = leadership.take() {
                // Another replica leads: stop renewing the Lease at once, so a shutdown that
                // takes long can never take it back while this replica writes nothing.
                lost.release().await;
            }
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut controllers).await.is_err() {
                tracing::warn!(
                    grace = ?SHUTDOWN_GRACE,
                    "the controllers did not stop within the grace period; stopping without them"
                );
            }
        }
    }
    health.set_ready(false);
    let lost = !shutdown.is_cancelled();
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    shutdown.cancel();
    server.await?.context("serving /metrics")?;
    anyhow::ensure!(
        !lost,
        "lost the leader-election Lease; exiting so a fresh replica takes over"
    );
    tracing::info!("stopped");
    Ok(())
}

/// How long the controllers may take to stop once told to (the end of in-flight reconciles and
/// the publishing of queued Events, 5 s of it): past it the process stops without them, so a
/// reconcile stuck on a request can never keep a replica that no longer leads from exiting.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// What the runtime is started with: the client, the configuration, this replica's
/// identity, the metrics, and the leader-election fence (`None`: no leader election).
type ContextParts = (Client, Config, String, Metrics, Option<Arc<Fence>>);

/// A client from the in-cluster or kubeconfig configuration whose requests carry the user agent
/// `homestead/<version> (<identity>)`, so audit logs tell the replicas apart, each counted in
/// `homestead_api_requests_total{verb, code}` of `metrics`.
///
/// # Errors
/// When no configuration is found or the client cannot be built.
async fn client(identity: &str, metrics: &Metrics) -> anyhow::Result<Client> {
    let mut config = kube::Config::infer()
        .await
        .context("loading the Kubernetes client configuration")?;
    let agent = format!("homestead/{} ({identity})", env!("CARGO_PKG_VERSION"));
    let agent = axum::http::HeaderValue::from_str(&agent).context("user agent")?;
    config.headers.push((axum::http::header::USER_AGENT, agent));
    let counted = CountRequests::new(metrics.api_requests.clone());
    Ok(crate::client::builder(&config)
        .context("connecting to the Kubernetes API server")?
        .with_layer(&counted)
        .build())
}

/// Runs every controller ([`Runtime`]) until `stop` is cancelled, marking the operator ready
/// once every cache has listed.
async fn reconcile_users(
    (client, config, identity, metrics, fence): ContextParts,
    cli: &OperatorCli,
    health: &Health,
    stop: CancellationToken,
) {
    // Before any watch starts: how they receive their initial state (docs/performance.md).
    let profiles = kube::Api::<homestead_api::Profile>::all(client.clone());
    lists::log(lists::probe(profiles).await);
    let runtime = Runtime::new(Settings {
        client,
        config,
        identity,
        metrics,
        fence: fence.unwrap_or_else(|| Arc::new(Fence::always())),
        concurrency: cli.runtime.concurrency,
        retained_count_interval: cli.runtime.retained_count_interval,
    });
    health.set_user_store(runtime.users());
    health.set_share_metrics(runtime.share_metrics());
    health.set_fence(runtime.fence());
    let ready = health.clone();
    runtime.run(stop, move || ready.set_ready(true)).await;
}

/// This replica's Lease identity when `POD_NAME` is not set: `<hostname>-<pid>`.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

/// Cancels `shutdown` on SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C).
pub async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
}
