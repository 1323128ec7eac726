//! The observed state of an owner's total quota (docs/quota.md): what `status.total` of a
//! [`crate::User`] or a [`crate::DirectoryGroup`] says of the total across its homes.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An owner's total quota and how its homes use it, as the slices (ResourceQuota
/// `homestead-total` in each home) last showed. Written by the operator under its own field
/// manager (`homestead-total`) whenever a slice's `spec.hard` or `status.used` moves; absent
/// while the owner's Profile has no `totalQuota`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TotalQuotaStatus {
    /// The total: the Profile's `totalQuota.hard` (resource names to quantities).
    #[serde(default)]
    pub hard: BTreeMap<String, Quantity>,
    /// What all homes use together, for each resource of `hard`: the sum of their slices'
    /// `status.used`.
    #[serde(default)]
    pub used: BTreeMap<String, Quantity>,
    /// Each home's slice, by namespace: at most `hard` all together, at every moment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["namespace"]))]
    pub homes: Vec<HomeSlice>,
}

/// One home's slice of an owner's total.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HomeSlice {
    /// The home's namespace.
    pub namespace: String,
    /// The slice: the home's ResourceQuota `homestead-total` `spec.hard`.
    #[serde(default)]
    pub hard: BTreeMap<String, Quantity>,
    /// What the home uses of it: that ResourceQuota's `status.used`.
    #[serde(default)]
    pub used: BTreeMap<String, Quantity>,
}

/// The field manager of `status.total`: apart from `homestead`, whose status applies leave it
/// alone (server-side apply removes only the fields a manager owned and left out).
pub const TOTAL_FIELD_MANAGER: &str = "homestead-total";
