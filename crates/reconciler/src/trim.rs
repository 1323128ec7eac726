//! What the reflector caches keep of each object: what reconciles read, and nothing more, so
//! memory stays flat per User (the kube.rs optimization guide's "pruning fields",
//! <https://kube.rs/controllers/optimization/>). Applied to every watch event before the
//! reflector stores it.
//!
//! The largest parts of a cached object are `metadata.managedFields` (a tree of maps per field
//! manager) and kubectl's `last-applied-configuration` annotation (a whole copy of the object).
//! Of these, drift detection ([`crate::drift`]) reads only which labels and annotations
//! Homestead itself set, and the position of the entry Homestead's create request made.

use homestead_api::User;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::{Map, Value};

/// kubectl's client-side apply keeps a full copy of the object in this annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The parts of a field manager's `fieldsV1` that [`crate::drift`] reads.
const KEPT_FIELDS: [&str; 2] = ["f:labels", "f:annotations"];

/// Trims the metadata of an object Homestead manages before it is cached: drops
/// [`LAST_APPLIED`]; keeps every `managedFields` entry in place (an entry's position is named
/// in the JSON patch that upgrades a created object to server-side apply) but empties the
/// entries of other field managers, and keeps of `manager`'s own entries only their operation
/// and the label and annotation keys they set.
pub fn trim_managed(meta: &mut ObjectMeta, manager: &str) {
    remove_last_applied(meta);
    for entry in meta.managed_fields.iter_mut().flatten() {
        *entry = if entry.manager.as_deref() == Some(manager) {
            ManagedFieldsEntry {
                manager: entry.manager.take(),
                operation: entry.operation.take(),
                fields_v1: entry.fields_v1.take().map(|f| FieldsV1(kept_fields(f.0))),
                ..ManagedFieldsEntry::default()
            }
        } else {
            ManagedFieldsEntry::default()
        };
    }
}

/// Trims a User before it is cached: reconciles read its spec, status, finalizers and
/// identity, never its `managedFields` or [`LAST_APPLIED`].
pub fn trim_user(user: &mut User) {
    user.metadata.managed_fields = None;
    remove_last_applied(&mut user.metadata);
}

fn remove_last_applied(meta: &mut ObjectMeta) {
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// `{"f:metadata": {"f:labels": {...}, "f:annotations": {...}}}` of `fields`, with the keys of
/// those two maps only (their values emptied).
fn kept_fields(fields: Value) -> Value {
    let Value::Object(mut root) = fields else {
        return Value::Null;
    };
    let Some(Value::Object(mut metadata)) = root.remove("f:metadata") else {
        return Value::Object(Map::new());
    };
    let mut kept = Map::new();
    for field in KEPT_FIELDS {
        if let Some(Value::Object(keys)) = metadata.remove(field) {
            let keys = keys
                .into_iter()
                .map(|(k, _)| (k, Value::Object(Map::new())))
                .collect();
            kept.insert(field.to_owned(), Value::Object(keys));
        }
    }
    let mut root = Map::new();
    root.insert("f:metadata".to_owned(), Value::Object(kept));
    Value::Object(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::{created_fields_entry, metadata_matches};
    use serde_json::json;

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.to_owned()),
            operation: Some(operation.to_owned()),
            api_version: Some("v1".to_owned()),
            fields_type: Some("FieldsV1".to_owned()),
            fields_v1: Some(FieldsV1(fields)),
            ..ManagedFieldsEntry::default()
        }
    }

    fn namespace_meta() -> ObjectMeta {
        serde_json::from_value(json!({
            "name": "user-ada",
            "labels": { "homestead.dev/user": "ada", "team": "x" },
            "annotations": { LAST_APPLIED: "{\"a whole\": \"copy\"}", "note": "kept" },
        }))
        .unwrap()
    }

    #[test]
    fn keeps_what_drift_detection_reads_and_nothing_else() {
        let mut meta = namespace_meta();
        meta.managed_fields = Some(vec![
            entry(
                "kubectl",
                "Update",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {}}),
            ),
            entry(
                "homestead",
                "Update",
                json!({"f:metadata": {
                    "f:labels": {".": {}, "f:homestead.dev/user": {}},
                    "f:annotations": {"f:note": {}},
                    "f:ownerReferences": {"k:{\"uid\":\"1\"}": {".": {}, "f:kind": {}}},
                }}),
            ),
        ]);
        let untrimmed = meta.clone();
        trim_managed(&mut meta, "homestead");

        let annotations = meta.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations["note"], "kept");
        let entries = meta.managed_fields.as_ref().unwrap();
        assert_eq!(
            entries[0],
            ManagedFieldsEntry::default(),
            "others' entries emptied"
        );
        assert_eq!(
            entries[1].fields_v1.as_ref().unwrap().0,
            json!({"f:metadata": {
                "f:labels": {".": {}, "f:homestead.dev/user": {}},
                "f:annotations": {"f:note": {}},
            }})
        );
        // Every decision drift detection makes is the same on the trimmed metadata.
        assert_eq!(created_fields_entry(&meta, "homestead"), Some(1));
        assert_eq!(
            created_fields_entry(&meta, "homestead"),
            created_fields_entry(&untrimmed, "homestead")
        );
        let mut desired = namespace_meta();
        desired.annotations = Some([("note".to_owned(), "kept".to_owned())].into());
        desired.labels = Some([("homestead.dev/user".to_owned(), "ada".to_owned())].into());
        assert!(metadata_matches(&desired, &meta, "homestead"));
        assert!(metadata_matches(&desired, &untrimmed, "homestead"));
        desired.annotations = None; // Homestead no longer wants `note`: drift, trimmed or not.
        assert!(!metadata_matches(&desired, &meta, "homestead"));
        assert!(!metadata_matches(&desired, &untrimmed, "homestead"));
    }

    #[test]
    fn users_lose_managed_fields_and_last_applied() {
        let mut user: User = serde_json::from_value(json!({
            "apiVersion": "homestead.dev/v1alpha1", "kind": "User",
            "metadata": {
                "name": "ada",
                "annotations": { LAST_APPLIED: "{}" },
                "managedFields": [{ "manager": "kubectl", "operation": "Update" }],
            },
            "spec": { "identity": { "username": "ada@example.com" } },
        }))
        .unwrap();
        trim_user(&mut user);
        assert_eq!(user.metadata.managed_fields, None);
        assert_eq!(user.metadata.annotations, Some(Default::default()));
        assert_eq!(user.spec.identity.username, "ada@example.com");
    }
}
