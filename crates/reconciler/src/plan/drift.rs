//! Comparisons of the desired state with the cached one: whether a write is needed at all
//! (docs/design.md rule 10: steady state costs no write). Every desired label, annotation and
//! owner reference must be there with its value; keys others added are left alone. Caches keep
//! no `managedFields` ([`homestead_model::trim`]), so a key Homestead applied earlier and no longer wants
//! is not seen here: that happens only when the User's spec changes, and the Namespace is then
//! applied regardless (see [`crate::flows::provision`]). Quantities are compared exactly
//! ([`crate::plan::quantity`]), as the API server stores them.

use crate::plan::facts::Facts;
use crate::plan::quantity::{nano_value, round_up_to_milli};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, LimitRangeItem, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The position in `metadata.managedFields` of the fields `manager` set by a create request
/// (operation `Update`), if any. Server-side apply by `manager` never removes fields such an
/// entry still holds, so they must move to `manager`'s apply entry first (see
/// [`crate::Context`]'s `apply_over`).
pub fn created_fields_entry(meta: &ObjectMeta, manager: &str) -> Option<usize> {
    meta.managed_fields.iter().flatten().position(|m| {
        m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Update")
    })
}

/// Whether the cached metadata already has the desired labels, annotations and owner
/// references to Users, by the rule of [`Facts::include`].
pub fn metadata_matches(desired: &ObjectMeta, cached: &ObjectMeta) -> bool {
    Facts::of(cached).include(desired)
}

/// Whether a cached ResourceQuota has the desired hard limits, comparing quantities as the API
/// server stores them (see [`stored_as`]), and the desired metadata.
pub fn quota_matches(desired: &ResourceQuota, cached: &ResourceQuota) -> bool {
    let hard = |q: &ResourceQuota| {
        q.spec
            .as_ref()
            .and_then(|s| s.hard.clone())
            .unwrap_or_default()
    };
    let (want, have) = (hard(desired), hard(cached));
    want.len() == have.len()
        && want
            .iter()
            .all(|(k, v)| have.get(k).is_some_and(|h| stored_as(v, h)))
        && metadata_matches(&desired.metadata, &cached.metadata)
}

/// Whether a cached LimitRange has the desired items (in order, each resource map compared as
/// the API server stores quantities) and the desired metadata. `desired` comes from
/// [`crate::plan::desired::desired_limit_range`], which applies the server's defaulting.
pub fn limit_range_matches(desired: &LimitRange, cached: &LimitRange) -> bool {
    let items = |l: &LimitRange| {
        l.spec
            .as_ref()
            .map(|s| s.limits.clone())
            .unwrap_or_default()
    };
    let (want, have) = (items(desired), items(cached));
    want.len() == have.len()
        && want.iter().zip(&have).all(|(w, h)| item_matches(w, h))
        && metadata_matches(&desired.metadata, &cached.metadata)
}

fn item_matches(want: &LimitRangeItem, have: &LimitRangeItem) -> bool {
    let same = |w: &Option<BTreeMap<String, Quantity>>, h: &Option<BTreeMap<String, Quantity>>| {
        let (w, h) = (w.clone().unwrap_or_default(), h.clone().unwrap_or_default());
        w.len() == h.len()
            && w.iter()
                .all(|(k, v)| h.get(k).is_some_and(|stored| stored_as(v, stored)))
    };
    want.type_ == have.type_
        && same(&want.default, &have.default)
        && same(&want.default_request, &have.default_request)
        && same(&want.max, &have.max)
        && same(&want.min, &have.min)
        && same(&want.max_limit_request_ratio, &have.max_limit_request_ratio)
}

/// Whether a cached NetworkPolicy has exactly the desired spec and the desired metadata.
pub fn network_policy_matches(desired: &NetworkPolicy, cached: &NetworkPolicy) -> bool {
    desired.spec == cached.spec && metadata_matches(&desired.metadata, &cached.metadata)
}

/// Whether the API server stores the quantity `desired` as `stored`. It canonicalizes
/// (`1024Mi` is stored as `1Gi`) and rounds every resource quantity up to a multiple of `1m`
/// (`0.1m` is stored as `1m`; Kubernetes' `SetDefaults_ResourceList`), so `stored` must equal
/// `desired` rounded up: at least `desired`, and less than `1m` above it.
pub fn stored_as(desired: &Quantity, stored: &Quantity) -> bool {
    match (nano_value(&desired.0), nano_value(&stored.0)) {
        (Some(want), Some(have)) => round_up_to_milli(want) == have,
        _ => desired.0 == stored.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::desired::desired_quota;
    use homestead_api::User;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    #[test]
    fn quantities_compare_as_the_server_stores_them() {
        let q = |s: &str| Quantity(s.to_owned());
        for (desired, stored) in [
            ("0.1m", "1m"),
            ("1024Mi", "1Gi"),
            ("1", "1000m"),
            ("0.5", "500m"),
            ("1e3", "1k"),
            ("8Gi", "8589934592"),
            ("1.0004", "1001m"),
            ("5", "5"),
        ] {
            assert!(
                stored_as(&q(desired), &q(stored)),
                "{desired} is stored as {stored}"
            );
        }
        for (desired, stored) in [("2m", "1m"), ("1", "1001m"), ("0.1m", "2m"), ("1Gi", "1G")] {
            assert!(
                !stored_as(&q(desired), &q(stored)),
                "{desired} is not stored as {stored}"
            );
        }
        assert!(
            stored_as(&q("lots"), &q("lots")),
            "unparsable: compared as strings"
        );
        assert!(!stored_as(&q("lots"), &q("1")));
    }

    #[test]
    fn quota_compared_by_value() {
        let want = desired_quota(
            &User::test("alice")
                .with_spec(json!({ "quota": { "hard": { "memory": "1024Mi", "cpu": "1000m" } } })),
            "ns",
        )
        .unwrap();
        let mut have = want.clone();
        have.spec.as_mut().unwrap().hard = Some(
            [
                ("memory".into(), Quantity("1Gi".into())),
                ("cpu".into(), Quantity("1".into())),
            ]
            .into(),
        );
        assert!(quota_matches(&want, &have));
        have.spec
            .as_mut()
            .unwrap()
            .hard
            .as_mut()
            .unwrap()
            .insert("cpu".into(), Quantity("2".into()));
        assert!(!quota_matches(&want, &have));
    }

    #[test]
    fn the_entry_of_the_create_request_is_found() {
        let mut meta = ObjectMeta::default();
        assert_eq!(created_fields_entry(&meta, "homestead"), None);
        let entry = |manager: &str, operation: &str| ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            fields_v1: Some(FieldsV1(json!({}))),
            ..ManagedFieldsEntry::default()
        };
        meta.managed_fields = Some(vec![
            entry("kube-controller-manager", "Update"),
            entry("homestead", "Apply"),
            entry("homestead", "Update"),
        ]);
        assert_eq!(created_fields_entry(&meta, "homestead"), Some(2));
    }
}
