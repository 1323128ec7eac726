//! Act: every write Homestead makes, and what a replica must remember of them. The one door to
//! the API server is [`Cluster`]: the client fenced by the leader-election Lease ([`fence`]),
//! the memory of this replica's recent writes ([`recent`]) and the Event queue ([`events`]),
//! all private to it. On top of it, one module per kind of write a flow asks for:
//!
//! - [`client`]: typed get / create / apply / delete of any kind Homestead manages.
//! - [`access`]: granting, replacing and revoking a person's access (RoleBindings), which
//!   provisioning and offboarding both call.
//! - [`namespace`]: the User's Namespace: creating, reading through the cache, deleting,
//!   releasing.
//! - [`guards`]: the objects that bound a namespace before access is granted (quota,
//!   LimitRange, network isolation).
//! - [`status`]: the one server-side-apply status writer (User, Profile, DirectoryGroup) and the
//!   Events that report a User's transitions.
//! - [`requests`]: the layer under the client that counts every request by verb and code.
//!
//! Act imports [`crate::plan`] (what to write), [`crate::state`] (what the caches show),
//! [`crate::error`] and [`crate::metrics`]; never a flow or the context (docs/development.md,
//! "Layers").

pub mod access;
pub mod client;
pub mod events;
pub mod fence;
pub mod guards;
pub mod namespace;
pub mod recent;
pub mod requests;
pub mod share;
pub mod status;
pub mod total;

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::Reporter;

use crate::metrics::Metrics;
use events::EventQueue;
use fence::Fence;
use recent::Recent;

/// This replica's door to the API server (see the module docs). Cheap to share by reference;
/// one per replica.
pub struct Cluster {
    /// The client authenticated as the operator, fenced: no request that writes leaves while
    /// `fence` is not held ([`fence::fenced`]).
    client: Client,
    /// Whether this replica may write (it holds the leader-election Lease).
    fence: Arc<Fence>,
    /// Writes this replica made moments ago that the caches may not show yet.
    recent: Recent,
    /// Publishes Events on Users off the reconcile path.
    events: EventQueue,
    /// The operator's metrics (Ready transitions, status writes).
    metrics: Metrics,
    /// Whether Homestead is being uninstalled, as last read ([`Cluster::crd_is_deleting`]).
    uninstall: recent::UninstallCheck,
}

impl Cluster {
    /// A Cluster writing through `client` only while `fence` is held ([`Fence::always`]
    /// without leader election), remembering its writes in `recent` (whose creates the watches
    /// also read), reporting Events as `reporter` (controller `homestead` and this replica's
    /// identity). Starts the [`EventQueue`]'s publisher.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn new(
        client: Client,
        reporter: &Reporter,
        fence: Arc<Fence>,
        recent: Recent,
        metrics: Metrics,
    ) -> Self {
        let client = fence::fenced(client, fence.clone());
        Self {
            events: EventQueue::start(&client, reporter, fence.clone(), metrics.clone()),
            client,
            fence,
            recent,
            metrics,
            uninstall: recent::UninstallCheck::default(),
        }
    }

    /// Whether this replica may write now (it holds the leader-election Lease); reconciles
    /// skip work a refused write would waste.
    pub fn may_write(&self) -> bool {
        self.fence.is_held()
    }

    /// The leader-election fence (for `/readyz`).
    pub fn fence(&self) -> &Arc<Fence> {
        &self.fence
    }

    /// The Event queue (how many Events wait; draining it on shutdown).
    pub fn events(&self) -> &EventQueue {
        &self.events
    }

    /// The operator's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The fenced client, for the finalizer helper and for reads with no typed verb here (a
    /// paged list).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The memory of this replica's recent writes.
    pub(crate) fn recent(&self) -> &Recent {
        &self.recent
    }
}
