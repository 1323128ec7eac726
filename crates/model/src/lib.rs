//! Homestead's model of people, groups and homes (docs/development.md, "Layers"): one answer,
//! read by the reconciler, the homes API and `homestead access` alike, to "who is this person and
//! what may they use".
//!
//! - [`identity`]: which User holds each identity (one person, one User).
//! - [`owner`]: who a home belongs to: a User or a DirectoryGroup.
//! - [`homes`]: the homes a person can use, each with its role and its way in ([`homes::Via`]).
//! - [`roles`]: what a ClusterRole grants, compared.
//! - [`index`]: objects by key, kept from watch events (a person's Shares, a User by identity).
//! - [`trim`]: what a cache keeps of an object; [`watched`]: what a watched kind must be.
//!
//! Pure: no client, no `async`, no controller. Imports only `homestead-api` and the Kubernetes
//! types.

pub mod homes;
pub mod identity;
pub mod index;
pub mod owner;
pub mod roles;
pub mod trim;
pub mod watched;
