//! What the reflector caches keep of each object: what reconciles read, and nothing more, so
//! memory stays flat per User (the kube.rs optimization guide's "pruning fields",
//! <https://kube.rs/controllers/optimization/>). Applied to every watch event before the
//! reflector stores it.
//!
//! The largest parts of a cached object are `metadata.managedFields` (a tree of maps per field
//! manager) and kubectl's `last-applied-configuration` annotation (a whole copy of the object).
//! Reconciles read neither: drift detection ([`crate::drift`]) compares values, and the one
//! write that needs `managedFields` (upgrading a created object to server-side apply, in
//! `apply_over`) reads the live object.

use homestead_api::User;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// kubectl's client-side apply keeps a full copy of the object in this annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Trims an object's metadata before it is cached: drops `managedFields` and [`LAST_APPLIED`].
pub fn trim(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// Trims a User before it is cached: no reconcile reads a User's own labels, annotations or
/// `managedFields`; spec, status, finalizers and identity stay.
pub fn trim_user(user: &mut User) {
    let meta = &mut user.metadata;
    meta.managed_fields = None;
    meta.labels = None;
    meta.annotations = None;
}

/// Trims a Namespace before it is cached (see [`trim`]): its spec (the `kubernetes`
/// finalizer) is never read, and its status only while it terminates (what still blocks it).
pub fn trim_namespace(namespace: &mut Namespace) {
    trim(&mut namespace.metadata);
    namespace.spec = None;
    if namespace.metadata.deletion_timestamp.is_none() {
        namespace.status = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn managed_fields_and_last_applied_go_the_rest_stays() {
        let mut user: User = serde_json::from_value(json!({
            "apiVersion": "homestead.dev/v1alpha1", "kind": "User",
            "metadata": {
                "name": "ada",
                "labels": { "team": "x" },
                "annotations": { LAST_APPLIED: "{}", "note": "kept" },
                "finalizers": ["homestead.dev/cleanup"],
                "managedFields": [{ "manager": "kubectl", "operation": "Update" }],
            },
            "spec": { "identity": { "username": "ada@example.com" } },
        }))
        .unwrap();
        trim_user(&mut user);
        assert_eq!(user.metadata.managed_fields, None);
        assert_eq!(user.metadata.annotations, None);
        assert_eq!(user.metadata.labels, None);
        assert_eq!(user.metadata.finalizers.as_ref().unwrap().len(), 1);
        assert_eq!(user.spec.identity.username, "ada@example.com");
    }

    #[test]
    fn a_namespace_keeps_its_metadata_and_its_status_only_while_terminating() {
        let namespace = |deleting: bool| -> Namespace {
            let mut ns: Namespace = serde_json::from_value(json!({
                "metadata": {
                    "name": "user-ada",
                    "labels": { "homestead.dev/user": "ada" },
                    "annotations": { LAST_APPLIED: "{}", "homestead.dev/user-uid": "1" },
                    "managedFields": [{ "manager": "homestead", "operation": "Update" }],
                },
                "spec": { "finalizers": ["kubernetes"] },
                "status": { "phase": "Terminating", "conditions": [
                    { "type": "NamespaceContentRemaining", "status": "True" }
                ] },
            }))
            .unwrap();
            if deleting {
                ns.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            trim_namespace(&mut ns);
            ns
        };
        let live = namespace(false);
        assert_eq!((live.spec, live.status), (None, None));
        assert_eq!(live.metadata.managed_fields, None);
        let annotations = live.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["homestead.dev/user-uid"]
        );
        assert_eq!(
            live.metadata.labels.as_ref().unwrap()["homestead.dev/user"],
            "ada"
        );
        let terminating = namespace(true);
        assert_eq!(terminating.status.unwrap().conditions.unwrap().len(), 1);
    }
}
