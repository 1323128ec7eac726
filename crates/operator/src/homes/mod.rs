//! `homestead homes-api`: the aggregated API `homes.homestead.dev/v1alpha1`, which tells every
//! person the homes they can use (docs/homes.md; in progress).

pub mod auth;
pub mod resource;
pub mod routes;
