//! Leader election through a `coordination.k8s.io/v1` Lease, with kube-lease-manager: only the
//! holder reconciles; a standby waits. The Lease lasts 15 s and is renewed in the background;
//! on shutdown it is released (no holder), so the standby's next look finds it free: that look
//! comes when the old Lease would have expired (kube-lease-manager's standby sleeps until
//! then), so a take-over waits at most the Lease's 15 s either way.
//!
//! kube-lease-manager reports a lost Lease only once it reaches the API server again, so a
//! leader that was paused, or cut off from the API server, would go on writing. Homestead
//! therefore also fences its writes ([`Fence`]): every 2 s it reads the Lease, and while it sees
//! itself as the holder it may write for the next 5 s (the renewal grace: the Lease is renewed
//! at least that long before it expires). A paused leader wakes up with the fence closed,
//! writes nothing, and exits when it sees the new holder.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use homestead_reconciler::act::fence::Fence;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::OperatorCli;

/// Lease duration, in seconds.
const LEASE_DURATION_SECONDS: u64 = 15;
/// How long before expiry the holder renews, in seconds.
const LEASE_GRACE_SECONDS: u64 = 5;

/// How often the holder reads its Lease to confirm it still holds it.
const CONFIRM_EVERY: Duration = Duration::from_secs(2);

/// The leader-election Lease held by this replica.
pub struct Leadership {
    is_leader: watch::Receiver<bool>,
    manager: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
    fence: Arc<Fence>,
    leases: Api<Lease>,
    lease_name: String,
    identity: String,
}

impl Leadership {
    /// Waits until this replica holds the Lease `--lease-name` in the operator's namespace as
    /// `identity`; `None` if `shutdown` is cancelled first (the manager has stopped then).
    ///
    /// # Errors
    /// When the Lease manager cannot be set up or stops while waiting.
    pub async fn acquire(
        cli: &OperatorCli,
        client: Client,
        identity: &str,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<Option<Self>> {
        let leases = Api::namespaced(client.clone(), &cli.policy.operator_namespace);
        let manager = LeaseManagerBuilder::new(client, &cli.election.lease_name)
            .with_namespace(&cli.policy.operator_namespace)
            .with_identity(identity)
            .with_duration(LEASE_DURATION_SECONDS)
            .with_grace(LEASE_GRACE_SECONDS)
            .build()
            .await
            .context("setting up leader election")?;
        let (mut is_leader, manager) = manager.watch().await;
        tracing::info!(%identity, lease = %cli.election.lease_name, "waiting for leadership");
        let leading = tokio::select! {
            changed = is_leader.wait_for(|leader| *leader) => {
                changed.map(drop).context("leader election stopped")?;
                true
            }
            () = shutdown.cancelled() => false,
        };
        let fence = Arc::new(Fence::closed());
        fence.hold_until(Instant::now() + Duration::from_secs(LEASE_GRACE_SECONDS));
        let leadership = Self {
            is_leader,
            manager,
            fence,
            leases,
            lease_name: cli.election.lease_name.clone(),
            identity: identity.to_owned(),
        };
        if leading {
            tracing::info!(%identity, "became leader");
            Ok(Some(leadership))
        } else {
            leadership.release().await;
            Ok(None)
        }
    }

    /// The fence of this replica's writes, kept open while it confirms it holds the Lease.
    pub fn fence(&self) -> Arc<Fence> {
        self.fence.clone()
    }

    /// Cancels `token` when the Lease is lost (another replica took it over), as the Lease
    /// manager reports it or as this replica's own reads of the Lease show it, and keeps the
    /// [`Fence`] open meanwhile. Both watchers stop when `token` is cancelled for any other
    /// reason, so [`Leadership::release`] can close the manager's channel.
    pub fn cancel_on_loss(&self, token: CancellationToken) {
        let mut is_leader = self.is_leader.clone();
        let lost = token.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = is_leader.wait_for(|leader| !*leader) => lost.cancel(),
                () = lost.cancelled() => {}
            }
        });
        let (leases, name) = (self.leases.clone(), self.lease_name.clone());
        let (identity, fence) = (self.identity.clone(), self.fence.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = confirm(leases, name, identity, fence) => token.cancel(),
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

/// Reads the Lease every [`CONFIRM_EVERY`]: while `identity` holds it, keeps `fence` open for
/// [`LEASE_GRACE_SECONDS`] past each read's start; returns once another replica holds it. A
/// failed read changes nothing: the fence then closes by itself.
async fn confirm(leases: Api<Lease>, name: String, identity: String, fence: Arc<Fence>) {
    loop {
        let sent = Instant::now();
        match leases.get(&name).await {
            Ok(lease) => {
                let holder = lease.spec.and_then(|s| s.holder_identity);
                if holder.as_deref() != Some(identity.as_str()) {
                    tracing::warn!(%identity, ?holder, "the leader-election Lease has another holder");
                    return;
                }
                fence.hold_until(sent + Duration::from_secs(LEASE_GRACE_SECONDS));
            }
            Err(e) => tracing::warn!("confirming the leader-election Lease failed: {e}"),
        }
        tokio::time::sleep_until((sent + CONFIRM_EVERY).into()).await;
    }
}
