//! The runtime: every controller Homestead runs, wired to its watches and run until told to
//! stop, in one call ([`Runtime::new`], then [`Runtime::run`]; controller-rs's `run(state)` is
//! the shape). The operator binary keeps `main`, its flags, leader election and the HTTP server.
//!
//! - [`watches`]: what is watched, which watch events trigger which reconcile and which are
//!   echoes of Homestead's own writes, and the caches the watches fill.
//! - [`keyed`]: the Controller over keys that Users, Shares and Workspaces run on (their caches
//!   compact).
//! - [`Runtime`]: the [`Context`] built from those caches and the User, Share, Workspace,
//!   retained-Namespace, Profile-status and DirectoryGroup-status Controllers, the Controller
//!   over slices of total quotas, run with graceful shutdown; the
//!   count of retained namespaces; the Events drained on the way out.
//!
//! The runtime is the top layer: it may import every other, and nothing imports it
//! (docs/development.md, "Layers").

pub mod backlog;
pub mod keyed;
pub mod lists;
pub mod watches;
pub mod workspaces;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use homestead_api::User;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::act::Cluster;
use crate::act::fence::Fence;
use crate::act::recent::Recent;
use crate::context::Context;
use crate::flows::offboard::keep_retained_revoked;
use crate::flows::reconcile::{error_policy, reconcile};
use crate::flows::share::{reconcile_share, share_error};
use crate::flows::statuses::{
    group_status_error, profile_status_error, reconcile_group_status, reconcile_profile_status,
};
use crate::flows::total::{reconcile_total, total_error};
use crate::flows::workspace::{reconcile_workspace, workspace_error};
use crate::metrics::Metrics;
use crate::plan::config::Config;
use crate::runtime::backlog::Backlog;
use crate::runtime::keyed::Keyed;
use crate::state::cache::CachedShare;
use crate::state::index::ProfileIndex;
use homestead_model::store::CompactStore;

/// What the runtime is started with: everything the operator's flags and leader election
/// decide.
pub struct Settings {
    /// The client authenticated as the operator (fenced by [`Settings::fence`] here).
    pub client: Client,
    /// The operator's configuration.
    pub config: Config,
    /// This replica's identity (the Lease holder's name): the Event reporter's instance.
    pub identity: String,
    /// The operator's metrics.
    pub metrics: Metrics,
    /// Whether this replica may write ([`Fence::always`] without leader election).
    pub fence: Arc<Fence>,
    /// Reconciles of Users at once (`--concurrency`; 0: unbounded).
    pub concurrency: u16,
    /// How often the leader counts retained namespaces (`--retained-count-interval`).
    pub retained_count_interval: Duration,
}

/// Every controller Homestead runs, built and not yet running (see the module docs).
pub struct Runtime {
    ctx: Arc<Context>,
    users: Keyed<User>,
    retained: Controller<Namespace>,
    profile_statuses: Controller<homestead_api::Profile>,
    group_statuses: Controller<homestead_api::DirectoryGroup>,
    shares: Keyed<CachedShare>,
    workspaces: Keyed<homestead_api::Workspace>,
    totals: Controller<k8s_openapi::api::core::v1::ResourceQuota>,
    backlogs: (Backlog<User>, Backlog<CachedShare>),
    retained_count_interval: Duration,
}

impl Runtime {
    /// Builds the watches, the caches, the [`Context`] and the Controllers from `settings`;
    /// nothing runs until [`Runtime::run`]. Events are reported as controller `homestead`,
    /// instance `settings.identity`.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(settings: Settings) -> Self {
        let index = ProfileIndex::default();
        let recent = Recent::default();
        let watches::Controllers {
            users,
            retained,
            profile_statuses,
            group_statuses,
            shares,
            workspaces,
            totals,
            caches,
            backlogs,
        } = watches::controllers(
            &settings.client,
            settings.concurrency,
            &settings.config,
            &index,
            &recent,
        );
        let reporter = Reporter {
            controller: "homestead".into(),
            instance: Some(settings.identity),
        };
        let cluster = Cluster::new(
            settings.client,
            &reporter,
            settings.fence,
            recent,
            settings.metrics.clone(),
        );
        let ctx = Arc::new(Context::new(
            cluster,
            settings.config,
            caches,
            settings.metrics,
        ));
        Self {
            ctx,
            users,
            retained,
            profile_statuses,
            group_statuses,
            shares,
            workspaces,
            totals,
            backlogs,
            retained_count_interval: settings.retained_count_interval,
        }
    }

    /// The cache of Users (for `/readyz` and the metrics of Users).
    pub fn users(&self) -> CompactStore<User> {
        self.users.store()
    }

    /// Sets the gauges of Shares (`homestead_shares`, `homestead_shares_expiring`) from the
    /// Share cache, and of Workspaces (`homestead_workspaces`) from theirs; the operator's
    /// `/metrics` calls it before each scrape.
    pub fn share_metrics(&self) -> impl Fn() + Send + Sync + 'static {
        let (store, metrics) = (self.shares.store(), self.ctx.metrics().clone());
        let workspaces = self.workspaces.store();
        move || {
            // What the gauges read of each Workspace, not the Workspace: one is decoded at a time.
            let mut all: Vec<(&'static str, Option<String>)> = Vec::new();
            workspaces.for_each(|w| {
                let owner = if w.spec.owner.group.is_some() {
                    "group"
                } else {
                    "user"
                };
                let ready = w.status.and_then(|s| {
                    s.conditions
                        .into_iter()
                        .find(|c| c.type_ == homestead_api::CONDITION_READY)
                });
                all.push((owner, ready.map(|c| c.reason)));
            });
            metrics.observe_workspaces(
                all.iter()
                    .map(|(owner, reason)| (*owner, reason.as_deref())),
            );
            let mut shares = metrics.share_tally();
            store.for_each(|share| {
                let ready = share.status.as_ref().and_then(|s| s.ready.as_ref());
                shares.count(ready.map(|c| &*c.reason), share.spec.expires_at.0);
            });
            metrics.observe_shares(shares);
        }
    }

    /// The leader-election fence every write goes through.
    pub fn fence(&self) -> Arc<Fence> {
        self.ctx.cluster().fence().clone()
    }

    /// Runs every Controller until `stop` is cancelled, letting reconciles proceed, and calling
    /// `synced`, once every cache has listed; then waits up to 5 s for the queued
    /// Events to be published.
    pub async fn run(self, stop: CancellationToken, synced: impl FnOnce() + Send + 'static) {
        let ctx = self.ctx;
        tokio::spawn(mark_synced(ctx.clone(), synced));
        tokio::spawn(keep_retained_count(
            ctx.clone(),
            self.retained_count_interval,
            stop.clone(),
        ));
        let shutdown = || stop.clone().cancelled_owned();
        let profile_statuses = self
            .profile_statuses
            .graceful_shutdown_on(shutdown())
            .run(reconcile_profile_status, profile_status_error, ctx.clone())
            .for_each(|result| async move { log_controller_error(result) });
        let group_statuses = self
            .group_statuses
            .graceful_shutdown_on(shutdown())
            .run(reconcile_group_status, group_status_error, ctx.clone())
            .for_each(|result| async move { log_controller_error(result) });
        let retained = run_retained(self.retained, shutdown(), ctx.clone());
        let (user_backlog, share_backlog) = self.backlogs;
        // Every reconcile first waits for this (Context::ready_to_write): none starts before.
        let synced = || {
            let ctx = ctx.clone();
            async move { ctx.wait_synced().await }
        };
        let shares = self.shares.starts_after(synced()).run(
            reconcile_share,
            share_error,
            ctx.clone(),
            move |key| share_backlog.started(key),
            shutdown(),
        );
        let users = self.users.starts_after(synced()).run(
            reconcile,
            error_policy,
            ctx.clone(),
            move |name| user_backlog.started(name),
            shutdown(),
        );
        let workspaces = self.workspaces.starts_after(synced()).run(
            reconcile_workspace,
            workspace_error,
            ctx.clone(),
            |_| {},
            shutdown(),
        );
        let totals = run_totals(self.totals, shutdown(), ctx.clone());
        futures::join!(
            users,
            retained,
            profile_statuses,
            group_statuses,
            shares,
            workspaces,
            totals
        );
        // Still the leader (unless the Lease was lost, when the fence drops what is left).
        let events = ctx.cluster().events();
        if !events.drained(EVENT_DRAIN).await {
            tracing::warn!(
                pending = events.pending(),
                "stopping with Events not yet published"
            );
        }
    }
}

/// Runs the Controller over retained Namespaces until `shutdown` resolves: it keeps every
/// RoleBinding out of them, retrying a failure after [`RETAINED_RETRY`].
async fn run_retained(
    retained: Controller<Namespace>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ctx: Arc<Context>,
) {
    retained
        .graceful_shutdown_on(shutdown)
        .run(
            |namespace, ctx| async move { keep_retained_revoked(&namespace, &ctx).await },
            |_, error, _| {
                tracing::warn!("revoking access in a retained namespace failed: {error}");
                controller::Action::requeue(RETAINED_RETRY)
            },
            ctx,
        )
        .for_each(|result| async move { log_controller_error(result) })
        .await;
}

/// Runs the Controller over the slices of total quotas until `shutdown` resolves, each
/// reconcile reading the owner's slices from that Controller's own cache.
async fn run_totals(
    totals: Controller<k8s_openapi::api::core::v1::ResourceQuota>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ctx: Arc<Context>,
) {
    let slices = totals.store();
    totals
        .graceful_shutdown_on(shutdown)
        .run(
            move |quota, ctx| reconcile_total(quota, ctx, slices.clone()),
            total_error,
            ctx,
        )
        .for_each(|result| async move { log_controller_error(result) })
        .await;
}

/// Lets reconciles proceed once every cache has listed, then calls `synced`.
async fn mark_synced(ctx: Arc<Context>, synced: impl FnOnce()) {
    ctx.caches().synced().await;
    tracing::info!("caches synced");
    ctx.mark_synced();
    synced();
}

/// When a failed revocation in a retained Namespace is tried again.
const RETAINED_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a stopping operator waits for its queued Events to be published (seconds); well
/// within the 30 s a kubelet grants before SIGKILL.
const EVENT_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Logs what the Controller reports besides reconcile results: a failed reconcile was already
/// logged once by `error_policy`; watch and queue errors (the API server unreachable, a
/// forbidden list) are warnings, since they stall that Controller's objects.
fn log_controller_error<T>(result: Result<T, controller::Error<crate::Error, watcher::Error>>) {
    match result {
        Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(controller::Error::ObjectNotFound(object)) => {
            tracing::debug!(%object, "object gone before its reconcile");
        }
        Err(error) => tracing::warn!("watch or queue failed: {error}"),
    }
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
    let namespaces: Api<Namespace> = Api::all(ctx.cluster().client().clone());
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
        if !ctx.cluster().may_write() {
            ctx.metrics().retained.set(0);
            continue;
        }
        match count_pages(&namespaces, params.clone()).await {
            Ok(count) => ctx.metrics().retained.set(count),
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
