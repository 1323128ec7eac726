//! Wiring: the client, leader election, the reflector caches of managed objects, the
//! kube-runtime Controller, the HTTP server, and graceful shutdown on SIGTERM / SIGINT.

use std::sync::Arc;

use anyhow::Context as _;
use futures::{FutureExt, StreamExt};
use homestead_api::{LABEL_MANAGED_BY, LABEL_USER, MANAGED_BY, User};
use homestead_reconciler::{Context, Metrics, error_policy, reconcile};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use prometheus::Registry;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::cli::Cli;
use crate::server::{self, Health};

/// Lease duration and renewal grace, in seconds.
const LEASE_DURATION_SECONDS: u64 = 15;
const LEASE_GRACE_SECONDS: u64 = 5;

/// Runs the operator until SIGTERM / SIGINT (exit 0) or a lost Lease (error, so the Pod restarts
/// with fresh state rather than reconcile beside a new leader).
///
/// # Errors
/// Bad flags, no reachable API server, a port already in use, or lost leadership.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let config = cli.config()?;
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API server")?;
    let registry = Registry::new();
    let metrics = Metrics::new(&registry)?;
    let health = Health::new(registry, metrics.clone());

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = {
        let rx = stop_rx.clone();
        move || {
            let mut rx = rx.clone();
            async move {
                let _ = rx.wait_for(|stop| *stop).await;
            }
        }
    };
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    let server = tokio::spawn(server::serve(
        cli.metrics_address,
        health.clone(),
        stopped(),
    ));

    let identity = cli.lease_identity.clone().unwrap_or_else(default_identity);
    let leadership = if cli.leader_election {
        // A healthy standby is ready: it serves metrics and waits for the Lease.
        health.set_ready(true);
        let leadership = Leadership::acquire(&cli, client.clone(), &identity, stopped()).await?;
        health.set_ready(false);
        let Some(leadership) = leadership else {
            let _ = server.await; // shut down while standing by
            return Ok(());
        };
        Some(leadership)
    } else {
        None
    };

    let reporter = Reporter {
        controller: "homestead".into(),
        instance: Some(identity),
    };
    let managed = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let (namespaces, namespace_events) =
        cached_watch::<Namespace>(Api::all(client.clone()), managed.clone());
    let (role_bindings, role_binding_events) =
        cached_watch::<RoleBinding>(Api::all(client.clone()), managed.clone());
    let (quotas, quota_events) = cached_watch::<ResourceQuota>(Api::all(client.clone()), managed);
    let ctx = Arc::new(Context {
        client: client.clone(),
        config,
        recorder: Recorder::new(client.clone(), reporter),
        metrics,
        namespaces: namespaces.clone(),
        role_bindings: role_bindings.clone(),
        quotas: quotas.clone(),
    });

    let lost_leadership = match &leadership {
        Some(leadership) => leadership.lost().boxed().shared(),
        None => futures::future::pending().boxed().shared(),
    };
    let controller = Controller::new(
        Api::<User>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .with_config(controller::Config::default().concurrency(cli.concurrency))
    .watches_stream(namespace_events, owner_of)
    .watches_stream(role_binding_events, owner_of)
    .watches_stream(quota_events, owner_of);
    let users = controller.store();
    health.set_user_store(users.clone());

    // Readiness: every cache has listed once.
    let synced = {
        let health = health.clone();
        async move {
            wait_until_ready(&users).await;
            wait_until_ready(&namespaces).await;
            wait_until_ready(&role_bindings).await;
            wait_until_ready(&quotas).await;
            tracing::info!("caches synced");
            health.set_ready(true);
        }
    };
    tokio::spawn(synced);

    let shutdown = {
        let stopped = stopped();
        let lost = lost_leadership.clone();
        async move {
            tokio::select! {
                () = stopped => {}
                () = lost => {}
            }
        }
    };
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((user, _)) => tracing::debug!(user = %user.name, "reconciled"),
                Err(e) => tracing::debug!("reconcile error: {e}"),
            }
        })
        .await;
    health.set_ready(false);

    let lost = lost_leadership.now_or_never().is_some() && !*stop_rx.borrow();
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    let _ = server.await;
    anyhow::ensure!(
        !lost,
        "lost the leader-election Lease; exiting so a fresh replica takes over"
    );
    tracing::info!("stopped");
    Ok(())
}

/// The leader-election Lease held by this replica (kube-lease-manager renews it in the
/// background).
struct Leadership {
    is_leader: watch::Receiver<bool>,
    manager: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Leadership {
    /// Waits until this replica holds the Lease `--lease-name` in the operator's namespace, or
    /// until `stopped` resolves (then `None`, and the manager has stopped).
    async fn acquire(
        cli: &Cli,
        client: Client,
        identity: &str,
        stopped: impl Future<Output = ()>,
    ) -> anyhow::Result<Option<Self>> {
        let manager = LeaseManagerBuilder::new(client, &cli.lease_name)
            .with_namespace(&cli.operator_namespace)
            .with_identity(identity)
            .with_duration(LEASE_DURATION_SECONDS)
            .with_grace(LEASE_GRACE_SECONDS)
            .build()
            .await
            .context("setting up leader election")?;
        let (mut is_leader, manager) = manager.watch().await;
        tracing::info!(%identity, lease = %cli.lease_name, "waiting for leadership");
        let leading = tokio::select! {
            changed = is_leader.wait_for(|leader| *leader) => {
                changed.map(drop).context("leader election stopped")?;
                true
            }
            () = stopped => false,
        };
        let leadership = Self { is_leader, manager };
        if leading {
            tracing::info!(%identity, "became leader");
            Ok(Some(leadership))
        } else {
            leadership.release().await;
            Ok(None)
        }
    }

    /// Resolves when the Lease is lost (another replica took it over).
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut is_leader = self.is_leader.clone();
        async move {
            let _ = is_leader.wait_for(|leader| !*leader).await;
        }
    }

    /// Releases the Lease (if held) so a standby takes over at once, not after expiry.
    async fn release(self) {
        drop(self.is_leader); // closing the channel makes the manager release and stop
        let _ = self.manager.await;
    }
}

/// A reflector cache of `K` objects matching `config`, and the stream of touched objects that
/// feeds both the cache and the controller's triggers (one watch per kind).
fn cached_watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects();
    (store, stream)
}

/// Waits until `store` has seen its first complete list.
///
/// `Store::wait_until_ready` wakes only the most recent of several concurrent waiters (its
/// oneshot receiver keeps one waker), and the Controller waits on the User store too; so this
/// polls again every 250 ms instead of relying on a wake-up. Once ready, it returns at once.
async fn wait_until_ready<K>(store: &Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let poll = std::time::Duration::from_millis(250);
    while tokio::time::timeout(poll, store.wait_until_ready())
        .await
        .is_err()
    {}
}

/// Maps a managed object back to its User by the `homestead.dev/user` label.
fn owner_of<K: Resource>(object: K) -> Option<ObjectRef<User>> {
    object
        .labels()
        .get(LABEL_USER)
        .map(|name| ObjectRef::new(name))
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}

/// Resolves on SIGTERM (what the kubelet sends) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
