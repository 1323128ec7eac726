//! What the reflector caches keep of each object: what reconciles read, and nothing more, so
//! memory stays flat per User (the kube.rs optimization guide's "pruning fields",
//! <https://kube.rs/controllers/optimization/>). Applied to every watch event before the
//! reflector stores it.
//!
//! The largest parts of a cached object are `metadata.managedFields` (a tree of maps per field
//! manager) and kubectl's `last-applied-configuration` annotation (a whole copy of the object).
//! Reconciles read neither: the reconciler's drift detection compares values, and the one
//! write that needs `managedFields` (upgrading a created object to server-side apply, in
//! `apply_over`) reads the live object. Namespaces and RoleBindings, cached at one or more per
//! User, are cut down further, to the reconciler's compact forms.

use homestead_api::{LABEL_WRITER, User};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// kubectl's client-side apply keeps a full copy of the object in this annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Trims an object's metadata before it is cached: drops `managedFields`, [`LAST_APPLIED`]
/// and the resourceVersion (which the watch has read by then; no reconcile does).
pub fn trim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.resource_version = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// Trims a User before it is cached: no reconcile reads a User's annotations, `managedFields`
/// or resourceVersion, nor any label but its writer (`homestead.dev/writer`, which decides the
/// directory groups it counts in), nor the person's names and e-mail (`displayName`,
/// `givenName`, `familyName`, `email`: for people and the directory, never for access); the
/// rest of the spec, the status, finalizers and identity stay.
pub fn trim_user(user: &mut User) {
    let spec = &mut user.spec;
    spec.display_name = None;
    spec.given_name = None;
    spec.family_name = None;
    spec.email = None;
    let meta = &mut user.metadata;
    meta.managed_fields = None;
    meta.resource_version = None;
    meta.labels = meta
        .labels
        .take()
        .and_then(|mut labels| labels.remove_entry(LABEL_WRITER))
        .map(|(key, value)| [(key, value)].into());
    meta.annotations = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn managed_fields_and_last_applied_go_the_rest_stays() {
        let mut user: User = serde_json::from_value(json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "User",
            "metadata": {
                "name": "ada",
                "labels": { "team": "x", LABEL_WRITER: "scim" },
                "annotations": { LAST_APPLIED: "{}", "note": "kept" },
                "finalizers": ["homestead.dev/cleanup"],
                "managedFields": [{ "manager": "kubectl", "operation": "Update" }],
                "resourceVersion": "7",
            },
            "spec": { "identity": { "username": "ada@example.com" },
                      "displayName": "Ada Lovelace", "givenName": "Ada",
                      "familyName": "Lovelace", "email": "ada@example.com",
                      "role": "edit" },
        }))
        .unwrap();
        trim_user(&mut user);
        let spec = &user.spec;
        assert_eq!(
            (
                &spec.display_name,
                &spec.given_name,
                &spec.family_name,
                &spec.email
            ),
            (&None, &None, &None, &None),
            "a person's names and e-mail go"
        );
        assert_eq!(
            spec.role.as_deref(),
            Some("edit"),
            "what reconciles read stays"
        );
        assert_eq!(user.metadata.managed_fields, None);
        assert_eq!(user.metadata.resource_version, None);
        assert_eq!(user.metadata.annotations, None);
        assert_eq!(
            user.metadata.labels,
            Some([(LABEL_WRITER.to_owned(), "scim".to_owned())].into()),
            "the writer label alone stays"
        );
        assert_eq!(user.metadata.finalizers.as_ref().unwrap().len(), 1);
        assert_eq!(user.spec.identity.username, "ada@example.com");
    }
}
