//! The operator's lifecycle: bind the HTTP server, connect, win the Lease, start the watches
//! and the Controller, and shut down gracefully on SIGTERM / SIGINT or on a lost Lease.

use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt;
use homestead_api::User;
use homestead_reconciler::context::Fence;
use homestead_reconciler::error::Backoffs;
use homestead_reconciler::offboard::keep_retained_revoked;
use homestead_reconciler::profile::ProfileIndex;
use homestead_reconciler::recent::Recent;
use homestead_reconciler::statuses::{
    StatusContext, group_status_error, profile_status_error, reconcile_group_status,
    reconcile_profile_status,
};
use homestead_reconciler::{Config, Context, Metrics, error_policy, reconcile};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::controller;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use prometheus::Registry;
use tokio_util::sync::CancellationToken;

use crate::cli::Cli;
use crate::leadership::Leadership;
use crate::server::{Health, Server};
use crate::watches;

/// Runs the operator until SIGTERM / SIGINT (then `Ok`) or a lost Lease (then an error, so the
/// Pod restarts with fresh state rather than reconcile beside a new leader).
///
/// # Errors
/// Bad flags, the metrics address already in use, no reachable API server, a failed Lease
/// manager, or lost leadership.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = cli.policy.config()?;
    let registry = Registry::new();
    // process_resident_memory_bytes, process_cpu_seconds_total, open file descriptors.
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    let metrics = Metrics::new(&registry)?;
    let health = Health::new(registry, metrics.clone());
    let server = Server::bind(cli.runtime.metrics_address).await?;
    let identity = cli
        .election
        .lease_identity
        .clone()
        .unwrap_or_else(default_identity);
    let client = client(&identity).await?;
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
    reconcile_users(parts, &cli, &health, stop).await;
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

/// What the reconcile [`Context`] is made of: the client, the configuration, this replica's
/// identity, the metrics, and the leader-election fence (`None`: no leader election).
type ContextParts = (Client, Config, String, Metrics, Option<Arc<Fence>>);

/// A client from the in-cluster or kubeconfig configuration whose requests carry the user agent
/// `homestead/<version> (<identity>)`, so audit logs tell the replicas apart.
///
/// # Errors
/// When no configuration is found or the client cannot be built.
async fn client(identity: &str) -> anyhow::Result<Client> {
    let mut config = kube::Config::infer()
        .await
        .context("loading the Kubernetes client configuration")?;
    let agent = format!("homestead/{} ({identity})", env!("CARGO_PKG_VERSION"));
    let agent = axum::http::HeaderValue::from_str(&agent).context("user agent")?;
    config.headers.push((axum::http::header::USER_AGENT, agent));
    Client::try_from(config).context("connecting to the Kubernetes API server")
}

/// Runs the Controller over Users (`--concurrency` at once) until `stop` is cancelled, marking
/// the operator ready once every cache has listed. Events are reported as controller
/// `homestead`, instance `identity`.
async fn reconcile_users(
    (client, config, identity, metrics, fence): ContextParts,
    cli: &Cli,
    health: &Health,
    stop: CancellationToken,
) {
    let index = ProfileIndex::default();
    let recent = Recent::default();
    let watches::Controllers {
        users: controller,
        retained,
        profile_statuses,
        group_statuses,
        caches,
    } = watches::controllers(&client, cli.runtime.concurrency, &config, &index, &recent);
    let users = controller.store();
    health.set_user_store(users.clone());
    let reporter = Reporter {
        controller: "homestead".into(),
        instance: Some(identity),
    };
    let fence = fence.unwrap_or_else(|| Arc::new(Fence::always()));
    let ctx = Context::new(client, config, reporter, metrics, caches, recent, fence);
    health.set_fence(ctx.fence.clone());
    let ctx = Arc::new(ctx);
    tokio::spawn(mark_ready_when_synced(
        health.clone(),
        users.clone(),
        ctx.clone(),
    ));
    tokio::spawn(keep_retained_count(
        ctx.clone(),
        cli.runtime.retained_count_interval,
        stop.clone(),
    ));
    let statuses = Arc::new(StatusContext {
        ctx: ctx.clone(),
        users,
        index,
        profile_backoffs: Backoffs::default(),
        group_backoffs: Backoffs::default(),
    });
    let profile_statuses = profile_statuses
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(
            reconcile_profile_status,
            profile_status_error,
            statuses.clone(),
        )
        .for_each(|result| async move { log_controller_error(result) });
    let group_statuses = group_statuses
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(reconcile_group_status, group_status_error, statuses)
        .for_each(|result| async move { log_controller_error(result) });
    let events = ctx.events.clone();
    let retained = retained
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(
            |namespace, ctx| async move { keep_retained_revoked(&namespace, &ctx).await },
            |_, error, _| {
                tracing::warn!("revoking access in a retained namespace failed: {error}");
                controller::Action::requeue(RETAINED_RETRY)
            },
            ctx.clone(),
        )
        .for_each(|result| async move { log_controller_error(result) });
    let users = controller
        .graceful_shutdown_on(stop.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move { log_controller_error(result) });
    futures::join!(users, retained, profile_statuses, group_statuses);
    // Still the leader (unless the Lease was lost, when the fence drops what is left).
    if !events.drained(EVENT_DRAIN).await {
        tracing::warn!(
            pending = events.pending(),
            "stopping with Events not yet published"
        );
    }
}

/// When a failed revocation in a retained Namespace is tried again.
const RETAINED_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stopping operator waits for its queued Events to be published (seconds); well
/// within the 30 s a kubelet grants before SIGKILL.
const EVENT_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Logs what the Controller reports besides reconcile results: a failed reconcile was already
/// logged once by `error_policy`; watch and queue errors (the API server unreachable, a
/// forbidden list) are warnings, since they stall every User.
fn log_controller_error<T>(
    result: Result<T, controller::Error<homestead_reconciler::Error, watcher::Error>>,
) {
    match result {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(controller::Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, "object gone before its reconcile");
        }
        Err(error) => tracing::warn!("watch or queue failed: {error}"),
    }
}

/// Lets reconciles proceed and marks the operator ready once every cache has listed.
async fn mark_ready_when_synced(health: Health, users: Store<User>, ctx: Arc<Context>) {
    watches::synced(&users, &ctx.caches).await;
    tracing::info!("caches synced");
    ctx.mark_synced();
    health.set_ready(true);
}

/// Keeps `homestead_retained_namespaces` current until `stop`: while this replica leads, every
/// `period` (`--retained-count-interval`) it counts the namespaces labelled
/// `homestead.dev/retained-from` with metadata-only lists of [`RETAINED_PAGE`] at a time (the
/// API server leaves `remainingItemCount` unset for a list with a label selector, so the pages
/// must be walked). A standby reports 0.
async fn keep_retained_count(
    ctx: Arc<Context>,
    period: std::time::Duration,
    stop: CancellationToken,
) {
    ctx.wait_synced().await;
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let params = ListParams::default()
        .labels(homestead_api::LABEL_RETAINED_FROM)
        .limit(RETAINED_PAGE);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        if !ctx.fence.is_held() {
            ctx.metrics.retained.set(0);
            continue;
        }
        match count_pages(&namespaces, params.clone()).await {
            Ok(count) => ctx.metrics.retained.set(count),
            Err(error) => tracing::warn!("counting retained namespaces failed: {error}"),
        }
    }
}

/// Namespaces per page when counting retained ones.
const RETAINED_PAGE: u32 = 500;

/// How many namespaces `params` selects, walking its pages (metadata only).
///
/// # Errors
/// The first failed list.
async fn count_pages(namespaces: &Api<Namespace>, mut params: ListParams) -> kube::Result<i64> {
    let mut count = 0_i64;
    loop {
        let page = namespaces.list_metadata(&params).await?;
        count = count.saturating_add(i64::try_from(page.items.len()).unwrap_or(i64::MAX));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params.continue_token = Some(token),
            _ => return Ok(count),
        }
    }
}

/// This replica's Lease identity when `POD_NAME` is not set: `<hostname>-<pid>`.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

/// Cancels `shutdown` on SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C).
async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutdown requested");
    shutdown.cancel();
}
