//! Flows: what Homestead does for one object, from the watch event that triggered it to its
//! status. Each flow reads the [`crate::context::Context`], asks [`crate::plan`] what should be
//! and [`crate::act`] to make it so:
//!
//! - [`reconcile()`](reconcile::reconcile): the User Controller's entry point (the finalizer
//!   helper) and its error policy.
//! - [`requeue`]: when a User, a Share or a Workspace is reconciled again, as its flows answer.
//! - [`provision`]: a live User (namespace, guards, access, status).
//! - [`offboard`]: a deleted User (Delete, Retain, uninstall) and retained namespaces.
//! - [`statuses`]: the Profile and DirectoryGroup status controllers.
//! - [`share`]: the Share Controller's reconcile and error policy.
//! - [`workspace`]: the Workspace Controller's reconcile (namespace, guards, access, status;
//!   Delete or Retain) and error policy.
//!
//! Flows sit above everything but the runtime; nothing below imports a flow
//! (docs/development.md, "Layers").

pub mod handover;
pub mod offboard;
pub mod provision;
pub mod reconcile;
pub mod requeue;
pub mod share;
pub mod statuses;
pub mod total;
pub mod workspace;
