//! Homestead's reconciler: everything between "a User changed" and "the cluster matches it",
//! in layers, so a walk reads watch -> flow -> plan -> act -> status (docs/development.md,
//! "Layers"):
//!
//! - [`plan`]: pure decisions (validation, Profiles, expiry, desired objects and status).
//! - [`state`]: what this replica knows from its watches (the caches and indexes).
//! - [`act`]: every write, through one fenced [`act::Cluster`] (access, namespace, guards,
//!   status, Events).
//! - [`context`]: what every flow shares ([`Context`]).
//! - [`flows`]: provision, offboard, Profile and DirectoryGroup status, and the kube-runtime
//!   entry points ([`reconcile()`], [`error_policy`]).
//! - [`runtime`]: the watches, their trigger and echo rules, and [`runtime::Runtime::run`], which runs
//!   every controller.
//!
//! Beside them, used by all: [`error`] (the [`Error`] type, metric labels, per-object backoff)
//! and [`metrics`] (the Prometheus metrics). The vocabulary of conditions, reasons and Events is
//! `homestead-api`'s ([`homestead_api::reasons`]). No module imports one that imports it back
//! (`tests/layers.rs` checks it).

pub mod act;
pub mod context;
pub mod error;
pub mod flows;
pub mod metrics;
pub mod plan;
pub mod runtime;
pub mod state;

#[cfg(test)]
mod mock_tests;

pub use context::Context;
pub use error::{Error, Result};
pub use flows::reconcile::{error_policy, reconcile};
pub use metrics::Metrics;
pub use plan::config::Config;
