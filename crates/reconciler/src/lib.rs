//! Homestead's reconciler: everything between "a User changed" and "the cluster matches it".
//! One module per concern:
//!
//! - [`context`]: the operator [`Config`] and the shared [`Context`] (client, Event queue,
//!   metrics, caches, backoff).
//! - [`error`]: the [`Error`] type with typed verbs, metric labels and per-User backoff.
//! - [`client`]: typed get / create / apply / delete and queueing Events.
//! - [`events`]: the queue that publishes Events off the reconcile path.
//! - [`fence`]: the leader's write fence and the client that enforces it on every write.
//! - [`validate`]: refusals and the Namespace name.
//! - [`identity`]: one person, one User (which User holds each identity).
//! - [`ownership`]: what belongs to whom, and the watch-event-to-User mapping.
//! - [`desired`]: pure builders of the desired Namespace, RoleBinding and ResourceQuota.
//! - [`drift`]: comparisons of desired and cached state (no write when they match).
//! - [`quantity`]: exact values of resource quantities.
//! - [`recent`]: writes made moments ago that the caches may not show yet.
//! - [`status`]: condition reasons, Event reasons, the pure desired status and its write.
//! - [`statuses`]: the Profile and DirectoryGroup status controllers' reconciles.
//! - [`expiry`]: access that ends on a date (`validUntil`, `onExpiry`).
//! - [`profile`]: applying a User's Profile (precedence, overrides, what only Profiles set).
//! - [`provision`]: the live-User path (namespace, access, quota).
//! - [`cache`]: the compact forms Namespaces and RoleBindings are cached in.
//! - [`store`]: the caches that keep those forms as records, without `ObjectMeta`.
//! - [`trim`]: what the caches keep of each object.
//! - [`offboard`]: the finalizer's cleanup (Delete, Retain, uninstall).
//! - [`reconcile()`] / [`error_policy`]: the kube-runtime entry points.
//! - [`metrics`]: the Prometheus metrics.

pub mod cache;
pub mod client;
pub mod context;
pub mod desired;
pub mod drift;
pub mod error;
pub mod events;
pub mod expiry;
pub mod fence;
pub mod identity;
pub mod metrics;
pub mod offboard;
pub mod ownership;
pub mod profile;
pub mod provision;
pub mod quantity;
pub mod recent;
mod reconcile;
pub mod status;
pub mod statuses;
pub mod store;
pub mod trim;
pub mod validate;

#[cfg(test)]
mod mock_tests;
#[cfg(test)]
mod test_fixtures;

pub use context::{Caches, Config, Context};
pub use error::{Error, Result};
pub use metrics::Metrics;
pub use reconcile::{error_policy, reconcile};
