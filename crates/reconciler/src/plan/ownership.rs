//! Every rule about what belongs to whom: when a Namespace is a User's (both managed labels and
//! the uid annotation; a name match alone never is), the labels and owner reference Homestead
//! puts on what it makes, and the mapping from a managed object back to its User that the
//! operator's watches use.

use std::collections::BTreeMap;

use homestead_api::{
    ANNOTATION_USER_UID, LABEL_ADOPT_FOR, LABEL_MANAGED_BY, LABEL_USER, MANAGED_BY, User,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::plan::facts::Facts;

/// Whether an object with `facts` (from the cache, [`crate::state::cache`]) belongs to `user`: label
/// `app.kubernetes.io/managed-by=homestead`, label `homestead.dev/user=<name>` and annotation
/// `homestead.dev/user-uid=<uid>` (docs/design.md rule 2). A name match alone is never ownership.
pub fn is_owned_by(facts: &Facts, user: &User) -> bool {
    user.uid().is_some_and(|uid| {
        facts.has_label(LABEL_MANAGED_BY, MANAGED_BY)
            && facts.has_label(LABEL_USER, &user.name_any())
            && facts.has_annotation(ANNOTATION_USER_UID, &uid)
    })
}

/// Whether a Namespace with `facts` that is not `user`'s ([`is_owned_by`]) is one the platform
/// handed to `user` for adoption: labelled `homestead.dev/adopt-for=<name>`, and not Homestead's
/// (no `app.kubernetes.io/managed-by=homestead`: another User's home, or one retained from a
/// User of the same name, is never adopted). Only whoever may update Namespaces can set the
/// label; tenants, HR and the SCIM service cannot (docs/adoption.md).
pub fn is_handed_to(facts: &Facts, user: &User) -> bool {
    facts.has_label(LABEL_ADOPT_FOR, &user.name_any())
        && !facts.has_label(LABEL_MANAGED_BY, MANAGED_BY)
}

/// Whether a namespaced object carries the label `homestead.dev/user=<name of user>` (its
/// Namespace's ownership is what is checked by uid).
pub fn labelled_for(meta: &ObjectMeta, user: &User) -> bool {
    label(meta, LABEL_USER) == Some(user.name_any().as_str())
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// The labels every object Homestead manages for `user` carries:
/// `app.kubernetes.io/managed-by=homestead` and `homestead.dev/user=<name>`.
pub fn managed_labels(user: &User) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
        (LABEL_USER.to_owned(), user.name_any()),
    ])
}

/// The owner reference to `user`, as its controller, so garbage collection removes the object
/// once the User is gone (the safety net behind the finalizer; docs/design.md rule 8).
///
/// No `blockOwnerDeletion`: the finalizer `homestead.dev/cleanup` already keeps the User until
/// its objects are revoked or deleted, so blocking a foreground deletion adds nothing, and
/// setting it would cost an authorization check of `users/finalizers` on every write that adds
/// the reference (the OwnerReferencesPermissionEnforcement admission plugin) and that right in
/// the operator's ClusterRole.
///
/// # Panics
/// If `user` has no name or uid, which a User read from the API server always has.
pub fn owner_reference(user: &User) -> OwnerReference {
    user.controller_owner_ref(&())
        .expect("a User read from the API server has a name and uid")
}

/// The User a managed object belongs to, by its `homestead.dev/user` label; `None` for an
/// object without it. The operator maps watch events of managed kinds to reconciles with this.
pub fn user_of<K: Resource>(object: &K) -> Option<ObjectRef<User>> {
    object
        .labels()
        .get(LABEL_USER)
        .map(|name| ObjectRef::new(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::desired::{Traits, desired_namespace};
    use homestead_api::User;
    use k8s_openapi::api::core::v1::Namespace;

    #[test]
    fn ownership_needs_both_labels_and_the_uid() {
        let u = User::test("alice");
        let ns = desired_namespace(&u, "user-alice", Default::default(), Traits::default());
        let owned = |meta: &ObjectMeta, user: &User| is_owned_by(&Facts::of(meta), user);
        assert!(owned(&ns.metadata, &u));
        let mut by_name_only = ns.metadata.clone();
        by_name_only.annotations = None;
        assert!(!owned(&by_name_only, &u));
        let mut other_uid = ns.metadata.clone();
        other_uid
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANNOTATION_USER_UID.into(), "uid-older-alice".into());
        assert!(!owned(&other_uid, &u));
        assert!(!owned(&ns.metadata, &User::test("bob")));
    }

    #[test]
    fn watch_events_map_to_the_labelled_user() {
        let ns = desired_namespace(
            &User::test("alice"),
            "user-alice",
            Default::default(),
            Traits::default(),
        );
        assert_eq!(user_of(&ns), Some(ObjectRef::new("alice")));
        assert_eq!(user_of(&Namespace::default()), None);
    }
}
