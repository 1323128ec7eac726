//! Plan: what should be, decided without a client, a cache or a clock of its own. Every function
//! here is pure (inputs in, decisions out; no `async`, no [`crate::context::Context`]) and
//! depends only on `homestead-api` and the Kubernetes types:
//!
//! - [`config`]: the operator's configuration, from its flags.
//! - [`validate`]: refusals and the Namespace name.
//! - [`profile`]: choosing and applying a User's Profile; Profile and DirectoryGroup statuses.
//! - [`expiry`]: access that ends on a date; [`revocation`]: why a live User has no access.
//! - [`desired`]: the desired Namespace, RoleBinding, quota, LimitRange and NetworkPolicy.
//! - [`ownership`] and [`facts`]: what belongs to whom, from labels, annotations and owners.
//! - [`drift`] and [`quantity`]: whether what is cached already is what is desired.
//! - [`status`]: the desired status and the Events that report it.
//! - [`share`]: whether a Share grants anything now, to whom, and its RoleBinding.
//!
//! Plan imports nothing else of this crate (docs/development.md, "Layers").

pub mod config;
pub mod desired;
pub mod drift;
pub mod expiry;
pub mod facts;
pub mod handover;
pub mod ownership;
pub mod profile;
pub mod quantity;
pub mod revocation;
pub mod share;
pub mod status;
pub mod total;
pub mod validate;
pub mod workspace;
