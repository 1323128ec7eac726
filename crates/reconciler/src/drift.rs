//! Comparisons of the desired state with the cached one: whether a write is needed at all
//! (DESIGN.md semantic 10: steady state costs no write). Every desired label, annotation and
//! owner reference must be there with its value; keys others added are left alone. Caches keep
//! no `managedFields` ([`crate::trim`]), so a key Homestead applied earlier and no longer wants
//! is not seen here: that happens only when the User's spec changes, and the Namespace is then
//! applied regardless (see [`crate::provision`]). Quantities are compared exactly
//! ([`crate::quantity`]), as the API server stores them.

use std::collections::BTreeMap;

use crate::quantity::{nano_value, round_up_to_milli};
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Owner references Homestead makes point to Users of this API group (`homestead.dev/...`).
const USER_API_GROUP: &str = "homestead.dev/";

/// The position in `metadata.managedFields` of the fields `manager` set by a create request
/// (operation `Update`), if any. Server-side apply by `manager` never removes fields such an
/// entry still holds, so they must move to `manager`'s apply entry first (see
/// [`crate::Context`]'s `apply_over`).
pub fn created_fields_entry(meta: &ObjectMeta, manager: &str) -> Option<usize> {
    meta.managed_fields.iter().flatten().position(|m| {
        m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Update")
    })
}

/// Whether `map` in the cached object holds what `desired` asks of it: every desired entry
/// present with the same value.
fn map_matches(
    desired: Option<&BTreeMap<String, String>>,
    cached: Option<&BTreeMap<String, String>>,
) -> bool {
    let empty = BTreeMap::new();
    let (desired, cached) = (desired.unwrap_or(&empty), cached.unwrap_or(&empty));
    desired.iter().all(|(k, v)| cached.get(k) == Some(v))
}

/// Whether the cached metadata already has the desired labels, annotations and owner
/// references to Users (by uid). Owner references to anything else were added by another
/// writer; apply leaves them, and so does this comparison.
pub fn metadata_matches(desired: &ObjectMeta, cached: &ObjectMeta) -> bool {
    let owner_uids = |m: &ObjectMeta| -> Vec<String> {
        let mut uids: Vec<String> = m
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.api_version.starts_with(USER_API_GROUP))
            .map(|o| o.uid.clone())
            .collect();
        uids.sort();
        uids
    };
    map_matches(desired.labels.as_ref(), cached.labels.as_ref())
        && map_matches(desired.annotations.as_ref(), cached.annotations.as_ref())
        && owner_uids(desired) == owner_uids(cached)
}

/// Whether a cached RoleBinding grants exactly what the desired one does (roleRef and
/// subjects) and carries the desired metadata.
pub fn role_binding_matches(desired: &RoleBinding, cached: &RoleBinding) -> bool {
    desired.role_ref == cached.role_ref
        && desired.subjects == cached.subjects
        && metadata_matches(&desired.metadata, &cached.metadata)
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
    use crate::desired::{desired_namespace, desired_quota};
    use crate::test_fixtures::user;
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
            &user(
                "alice",
                json!({ "quota": { "hard": { "memory": "1024Mi", "cpu": "1000m" } } }),
            ),
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
    fn metadata_matches_sees_drift_and_leaves_others_keys_alone() {
        let u = user(
            "alice",
            json!({ "namespace": { "labels": { "team": "a" } } }),
        );
        let desired = desired_namespace(&u, "user-alice", Default::default()).metadata;
        let mut cached = desired.clone();
        assert!(metadata_matches(&desired, &cached));
        cached
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "b".into());
        assert!(
            !metadata_matches(&desired, &cached),
            "changed value is drift"
        );
        let mut cached = desired.clone();
        cached.labels.as_mut().unwrap().remove("team");
        assert!(
            !metadata_matches(&desired, &cached),
            "a removed label is drift"
        );
        // A label someone else added is not ours to remove.
        let mut cached = desired.clone();
        cached
            .labels
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        assert!(metadata_matches(&desired, &cached));
        let mut orphaned = desired.clone();
        orphaned.owner_references = None;
        assert!(!metadata_matches(&desired, &orphaned));
        // An owner reference another writer added is theirs: no drift.
        let mut adopted = desired.clone();
        adopted.owner_references.as_mut().unwrap().push(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "example.com/v1".into(),
                kind: "Team".into(),
                name: "a".into(),
                uid: "team-uid".into(),
                ..Default::default()
            },
        );
        assert!(metadata_matches(&desired, &adopted));
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
