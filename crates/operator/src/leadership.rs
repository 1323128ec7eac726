//! Leader election through a `coordination.k8s.io/v1` Lease, with kube-lease-manager: only the
//! holder reconciles; a standby waits. The Lease lasts 15 s and is renewed in the background;
//! on shutdown it is released, so a standby takes over at once rather than after expiry.

use anyhow::Context as _;
use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::Cli;

/// Lease duration, in seconds.
const LEASE_DURATION_SECONDS: u64 = 15;
/// How long before expiry the holder renews, in seconds.
const LEASE_GRACE_SECONDS: u64 = 5;

/// The leader-election Lease held by this replica.
pub struct Leadership {
    is_leader: watch::Receiver<bool>,
    manager: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
}

impl Leadership {
    /// Waits until this replica holds the Lease `--lease-name` in the operator's namespace as
    /// `identity`; `None` if `shutdown` is cancelled first (the manager has stopped then).
    ///
    /// # Errors
    /// When the Lease manager cannot be set up or stops while waiting.
    pub async fn acquire(
        cli: &Cli,
        client: Client,
        identity: &str,
        shutdown: &CancellationToken,
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
            () = shutdown.cancelled() => false,
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

    /// Cancels `token` when the Lease is lost (another replica took it over). The watcher
    /// stops when `token` is cancelled for any other reason, so [`Leadership::release`] can
    /// close the manager's channel.
    pub fn cancel_on_loss(&self, token: CancellationToken) {
        let mut is_leader = self.is_leader.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = is_leader.wait_for(|leader| !*leader) => token.cancel(),
                () = token.cancelled() => {}
            }
        });
    }

    /// Releases the Lease (if still held) and stops renewing it.
    pub async fn release(self) {
        drop(self.is_leader); // closing the channel makes the manager release and stop
        let _ = self.manager.await;
    }
}
