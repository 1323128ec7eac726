//! Comparisons of the desired state with the cached one: whether a write is needed at all
//! (docs/design.md rule 10: steady state costs no write). Every desired label, annotation and
//! owner reference must be there with its value; keys others added are left alone. Caches keep
//! no `managedFields` ([`homestead_model::trim`]), so a key Homestead applied earlier and no longer wants
//! is not seen here: that happens only when the User's spec changes, and the Namespace is then
//! applied regardless (see [`crate::flows::provision`]). Quantities are compared exactly
//! ([`crate::plan::quantity`]), as the API server stores them.

use crate::plan::facts::{Facts, print};
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

/// A guard whose cached form keeps a print of its spec instead of the spec ([`Facts`] for its
/// metadata): a LimitRange, a NetworkPolicy. At 10,000 isolated homes the whole objects were
/// 10,000 NetworkPolicies in the operator's memory, each some kilobytes as typed structs; their
/// prints are 8 bytes each. The print of the desired object equals the print of the cached one
/// exactly when the API server stores the desired spec as it is cached (a 64-bit keyed hash,
/// [`print`]: nobody can craft a collision).
pub trait GuardSpec {
    /// The print of the spec as the API server would store it, for a desired object.
    fn desired_print(&self) -> u64;

    /// The print of the spec as stored, for an object the watch delivered.
    fn stored_print(&self) -> u64;
}

/// The API server stores a NetworkPolicy's spec as Homestead sends it (every field it would
/// default is sent): a print of the spec's JSON on both sides.
impl GuardSpec for NetworkPolicy {
    fn desired_print(&self) -> u64 {
        self.stored_print()
    }

    fn stored_print(&self) -> u64 {
        print(&serde_json::to_vec(&self.spec).expect("a NetworkPolicy's spec encodes as JSON"))
    }
}

/// The items in order, each resource map compared as the API server stores quantities
/// ([`stored_as`]: a desired value rounded up to `1m`, a quantity that does not parse as its
/// string), a missing map as an empty one. `desired` comes from
/// [`crate::plan::desired::desired_limit_range`], which applies the server's defaulting.
impl GuardSpec for LimitRange {
    fn desired_print(&self) -> u64 {
        limit_range_print(self, true)
    }

    fn stored_print(&self) -> u64 {
        limit_range_print(self, false)
    }
}

/// A quantity as [`stored_as`] compares it.
#[derive(Hash)]
enum Stored<'a> {
    /// Its value in nano-units.
    Value(i128),
    /// A quantity that does not parse, as written.
    Text(&'a str),
}

/// [`GuardSpec`]'s print of a LimitRange; `desired` rounds each value up to `1m`, as the API
/// server will.
fn limit_range_print(limits: &LimitRange, desired: bool) -> u64 {
    fn stored(q: &Quantity, desired: bool) -> Stored<'_> {
        match nano_value(&q.0) {
            Some(nano) if desired => Stored::Value(round_up_to_milli(nano)),
            Some(nano) => Stored::Value(nano),
            None => Stored::Text(q.0.as_str()),
        }
    }
    fn map(m: &Option<BTreeMap<String, Quantity>>, desired: bool) -> Vec<(&str, Stored<'_>)> {
        m.iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), stored(v, desired)))
            .collect()
    }
    let items: Vec<_> = limits
        .spec
        .iter()
        .flat_map(|s| &s.limits)
        .map(|item: &LimitRangeItem| {
            (
                item.type_.as_str(),
                [
                    map(&item.default, desired),
                    map(&item.default_request, desired),
                    map(&item.max, desired),
                    map(&item.min, desired),
                    map(&item.max_limit_request_ratio, desired),
                ],
            )
        })
        .collect();
    print(&items)
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

    /// A LimitRange of `items`.
    fn limits(items: serde_json::Value) -> LimitRange {
        serde_json::from_value(json!({ "metadata": { "name": "l" }, "spec": { "limits": items } }))
            .unwrap()
    }

    #[test]
    fn a_limit_range_prints_alike_exactly_when_the_server_stores_what_is_desired() {
        let desired = limits(json!([{ "type": "Container",
            "default": { "memory": "1024Mi", "cpu": "0.1m" }, "max": { "cpu": "2" },
            "maxLimitRequestRatio": { "cpu": "lots" } }]));
        let stored = limits(json!([{ "type": "Container",
            "default": { "cpu": "1m", "memory": "1Gi" }, "max": { "cpu": "2000m" },
            "defaultRequest": {}, "maxLimitRequestRatio": { "cpu": "lots" } }]));
        assert_eq!(desired.desired_print(), stored.stored_print());
        for other in [
            json!([{ "type": "Container", "default": { "memory": "1Gi", "cpu": "2m" },
                "max": { "cpu": "2" }, "maxLimitRequestRatio": { "cpu": "lots" } }]),
            json!([{ "type": "Pod", "default": { "memory": "1Gi", "cpu": "1m" },
                "max": { "cpu": "2" }, "maxLimitRequestRatio": { "cpu": "lots" } }]),
            json!([{ "type": "Container", "default": { "memory": "1Gi", "cpu": "1m" },
                "min": { "cpu": "2" }, "maxLimitRequestRatio": { "cpu": "lots" } }]),
            json!([{ "type": "Container", "default": { "memory": "1Gi", "cpu": "1m" },
                "max": { "cpu": "2" }, "maxLimitRequestRatio": { "cpu": "many" } }]),
            json!([{ "type": "Container", "default": { "memory": "1Gi", "cpu": "1m" },
                "max": { "cpu": "2" } }]),
            json!([]),
        ] {
            assert_ne!(
                desired.desired_print(),
                limits(other.clone()).stored_print(),
                "{other}"
            );
        }
        // A stored value is compared as stored: `0.1m` is not what the server keeps of `0.1m`.
        let unrounded = limits(json!([{ "type": "Container", "default": { "cpu": "0.1m" } }]));
        assert_ne!(unrounded.desired_print(), unrounded.stored_print());
    }

    #[test]
    fn a_network_policy_prints_alike_exactly_when_its_spec_is_the_same() {
        let policy = |spec: serde_json::Value| -> NetworkPolicy {
            serde_json::from_value(json!({ "metadata": { "name": "p" }, "spec": spec })).unwrap()
        };
        let isolated = policy(json!({ "podSelector": {}, "policyTypes": ["Ingress"] }));
        assert_eq!(isolated.desired_print(), isolated.clone().stored_print());
        let open = policy(json!({ "podSelector": {}, "policyTypes": ["Ingress"],
            "ingress": [{}] }));
        assert_ne!(isolated.desired_print(), open.stored_print());
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
