//! Homestead's model of people, groups and homes (docs/development.md, "Layers"): "who is this
//! person and what may they use", answered once.
//!
//! - [`identity`]: which User holds each identity (one person, one User): the reconciler's
//!   refusal of duplicates and the homes API's caller alike.
//! - [`homes`]: the homes a person can use, each with its role and its way in ([`homes::Via`],
//!   [`homes::ways_in`]): the homes API and `homestead access` alike.
//! - [`via`]: the ways in ([`via::Via`]) and their kinds ([`via::Source`]).
//! - [`roles`]: what a ClusterRole grants, compared (Share limits, the homes API's merge).
//! - [`names`]: which Shares, DirectoryGroups and Workspaces name each User and group (and
//!   which Shares each namespace holds), kept from their watches: the reconciler's triggers
//!   and the homes API's caller alike.
//! - [`workspace`]: who may use a workspace, and how: its owner (a User or a DirectoryGroup).
//! - [`trim`]: what a cache keeps of an object; [`watched`]: what a watched kind must be.
//! - [`store`]: a cache that keeps a compact record of each object ([`store::CompactStore`]);
//!   [`packed`]: Users and Shares kept as their JSON in one: the operator's User cache and the
//!   homes API's caches of Users and Shares; [`dense`]: the B-tree under the store, and under
//!   [`names`], kept with full nodes.
//!
//! No client, no controller; the one `async` is a cache's wait for its first list. Imports
//! `homestead-api`, the Kubernetes types, kube-runtime's watch events and tokio's `watch`
//! channel.

pub mod dense;
pub mod homes;
pub mod identity;
pub mod names;
pub mod packed;
pub mod roles;
pub mod store;
pub mod trim;
pub mod via;
pub mod watched;
pub mod workspace;
