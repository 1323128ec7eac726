//! Comparisons of the desired state with the cached one: whether a write is needed at all
//! (DESIGN.md semantic 10: steady state costs no write). What Homestead applied earlier is read
//! from `metadata.managedFields`, so a key it no longer wants counts as drift while keys others
//! added are left alone. Quantities are compared by exact value with `kube_quantity`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_quantity::ParsedQuantity;

/// Labels the API server sets on every object of a kind itself; never Homestead's to remove.
const SERVER_SET_LABELS: [&str; 1] = ["kubernetes.io/metadata.name"];

/// The keys of `map_field` (`f:labels` or `f:annotations`) that field manager `manager` set,
/// read from `metadata.managedFields`: by server-side apply (operation `Apply`) or by the create
/// request that made the object (operation `Update`), less [`SERVER_SET_LABELS`].
fn applied_keys(meta: &ObjectMeta, manager: &str, map_field: &str) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(manager)
                && matches!(m.operation.as_deref(), Some("Apply" | "Update"))
        })
        .filter_map(|m| {
            m.fields_v1
                .as_ref()?
                .0
                .get("f:metadata")?
                .get(map_field)?
                .as_object()
        })
        .flat_map(|fields| {
            fields
                .keys()
                .filter_map(|k| k.strip_prefix("f:"))
                .filter(|k| !SERVER_SET_LABELS.contains(k))
                .map(str::to_owned)
        })
        .collect()
}

/// The position in `metadata.managedFields` of the fields `manager` set by a create request
/// (operation `Update`), if any. Server-side apply by `manager` never removes fields such an
/// entry still holds, so they must move to `manager`'s apply entry first (see
/// [`crate::Context`]'s `apply_over`).
pub fn created_fields_entry(meta: &ObjectMeta, manager: &str) -> Option<usize> {
    meta.managed_fields.iter().flatten().position(|m| {
        m.manager.as_deref() == Some(manager) && m.operation.as_deref() == Some("Update")
    })
}

/// Whether `map` in the cached object holds exactly what `desired` asks of it: every desired
/// entry present with the same value, and no key that `manager` applied earlier but no longer
/// wants (server-side apply would remove it).
fn map_matches(
    desired: Option<&BTreeMap<String, String>>,
    cached: Option<&BTreeMap<String, String>>,
    applied: &[String],
) -> bool {
    let empty = BTreeMap::new();
    let (desired, cached) = (desired.unwrap_or(&empty), cached.unwrap_or(&empty));
    desired.iter().all(|(k, v)| cached.get(k) == Some(v))
        && applied.iter().all(|k| desired.contains_key(k))
}

/// Whether the cached metadata already matches the desired labels, annotations and owner
/// references (by uid), as server-side apply by `manager` would leave them.
pub fn metadata_matches(desired: &ObjectMeta, cached: &ObjectMeta, manager: &str) -> bool {
    let owner_uids = |m: &ObjectMeta| -> Vec<String> {
        let mut uids: Vec<String> = m
            .owner_references
            .iter()
            .flatten()
            .map(|o| o.uid.clone())
            .collect();
        uids.sort();
        uids
    };
    map_matches(
        desired.labels.as_ref(),
        cached.labels.as_ref(),
        &applied_keys(cached, manager, "f:labels"),
    ) && map_matches(
        desired.annotations.as_ref(),
        cached.annotations.as_ref(),
        &applied_keys(cached, manager, "f:annotations"),
    ) && owner_uids(desired) == owner_uids(cached)
}

/// Whether a cached RoleBinding grants exactly what the desired one does (roleRef and
/// subjects) and carries the desired metadata.
pub fn role_binding_matches(desired: &RoleBinding, cached: &RoleBinding, manager: &str) -> bool {
    desired.role_ref == cached.role_ref
        && desired.subjects == cached.subjects
        && metadata_matches(&desired.metadata, &cached.metadata, manager)
}

/// Whether a cached ResourceQuota has the desired hard limits, comparing quantities by value
/// (the API server canonicalizes them: `1024Mi` is stored as `1Gi`), and the desired metadata.
pub fn quota_matches(desired: &ResourceQuota, cached: &ResourceQuota, manager: &str) -> bool {
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
            .all(|(k, v)| have.get(k).is_some_and(|h| quantities_equal(v, h)))
        && metadata_matches(&desired.metadata, &cached.metadata, manager)
}

/// Compares two Kubernetes quantities by exact value (`"1Gi"` equals `"1024Mi"`, `"1"` equals
/// `"1000m"`); quantities that do not parse compare as strings. See
/// <https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/>.
pub fn quantities_equal(a: &Quantity, b: &Quantity) -> bool {
    match (ParsedQuantity::try_from(a), ParsedQuantity::try_from(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a.0 == b.0,
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
    fn quantities_compare_by_exact_value() {
        let q = |s: &str| Quantity(s.to_owned());
        for (a, b) in [
            ("1Gi", "1024Mi"),
            ("1", "1000m"),
            ("0.5", "500m"),
            ("1e3", "1k"),
            ("8Gi", "8589934592"),
        ] {
            assert!(quantities_equal(&q(a), &q(b)), "{a} == {b}");
        }
        for (a, b) in [("1Gi", "1G"), ("1", "1001m"), ("100", "100.000000001")] {
            assert!(!quantities_equal(&q(a), &q(b)), "{a} != {b}");
        }
        assert!(quantities_equal(&q("lots"), &q("lots")));
        assert!(!quantities_equal(&q("lots"), &q("1")));
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
        assert!(quota_matches(&want, &have, "homestead"));
        have.spec
            .as_mut()
            .unwrap()
            .hard
            .as_mut()
            .unwrap()
            .insert("cpu".into(), Quantity("2".into()));
        assert!(!quota_matches(&want, &have, "homestead"));
    }

    #[test]
    fn metadata_matches_sees_drift_and_keys_to_remove() {
        let u = user(
            "alice",
            json!({ "namespace": { "labels": { "team": "a" } } }),
        );
        let desired = desired_namespace(&u, "user-alice", Default::default()).metadata;
        let mut cached = desired.clone();
        assert!(metadata_matches(&desired, &cached, "homestead"));
        cached
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "b".into());
        assert!(
            !metadata_matches(&desired, &cached, "homestead"),
            "changed value is drift"
        );
        // A label someone else added is not ours to remove...
        let mut cached = desired.clone();
        cached
            .labels
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        assert!(metadata_matches(&desired, &cached, "homestead"));
        // ...but one Homestead applied earlier and no longer wants must go.
        cached.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("homestead".into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(
                json!({ "f:metadata": { "f:labels": { "f:extra": {} } } }),
            )),
            ..ManagedFieldsEntry::default()
        }]);
        assert!(!metadata_matches(&desired, &cached, "homestead"));
        // What the create request set counts as Homestead's too; the server's own label never.
        let mut created = desired.clone();
        created.labels.as_mut().unwrap().extend([
            ("old".to_owned(), "x".to_owned()),
            (
                "kubernetes.io/metadata.name".to_owned(),
                "user-alice".to_owned(),
            ),
        ]);
        created.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("homestead".into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({ "f:metadata": { "f:labels": {
                ".": {}, "f:kubernetes.io/metadata.name": {}, "f:team": {}
            } } }))),
            ..ManagedFieldsEntry::default()
        }]);
        assert!(metadata_matches(&desired, &created, "homestead"));
        assert_eq!(created_fields_entry(&created, "homestead"), Some(0));
        created.managed_fields.as_mut().unwrap()[0].fields_v1 = Some(FieldsV1(
            json!({ "f:metadata": { "f:labels": { "f:old": {}, "f:team": {} } } }),
        ));
        assert!(
            !metadata_matches(&desired, &created, "homestead"),
            "old must go"
        );
        let mut orphaned = desired.clone();
        orphaned.owner_references = None;
        assert!(!metadata_matches(&desired, &orphaned, "homestead"));
    }
}
