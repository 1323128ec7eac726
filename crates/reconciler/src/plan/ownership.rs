//! Every rule about what belongs to whom: when a Namespace is a User's (both managed labels and
//! the uid annotation; a name match alone never is), the labels and owner reference Homestead
//! puts on what it makes, and the mapping from a managed object back to its User that the
//! operator's watches use.

use std::collections::BTreeMap;

use homestead_api::{
    ANNOTATION_USER_UID, ANNOTATION_WORKSPACE_UID, LABEL_ADOPT_FOR, LABEL_MANAGED_BY, LABEL_USER,
    LABEL_WORKSPACE, MANAGED_BY, User, Workspace,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::plan::facts::Facts;

/// What a home's namespace can belong to: a User (its own home) or a Workspace. Each names
/// itself on what Homestead makes for it with a label of its own and its uid in an annotation
/// of its own, so a User and a Workspace of the same name never own each other's objects.
pub trait Holder: Resource<DynamicType = ()> {
    /// The label naming the holder (`metadata.name`): `homestead.dev/user` or
    /// `homestead.dev/workspace`.
    const LABEL: &'static str;
    /// The annotation on its Namespace holding its `metadata.uid`.
    const UID_ANNOTATION: &'static str;
}

impl Holder for User {
    const LABEL: &'static str = LABEL_USER;
    const UID_ANNOTATION: &'static str = ANNOTATION_USER_UID;
}

impl Holder for Workspace {
    const LABEL: &'static str = LABEL_WORKSPACE;
    const UID_ANNOTATION: &'static str = ANNOTATION_WORKSPACE_UID;
}

/// Whether an object with `facts` (from the cache, [`crate::state::cache`]) belongs to `holder`:
/// label `app.kubernetes.io/managed-by=homestead`, the holder's label ([`Holder::LABEL`], e.g.
/// `homestead.dev/user=<name>`) and its uid annotation ([`Holder::UID_ANNOTATION`], e.g.
/// `homestead.dev/user-uid=<uid>`) (docs/design.md rule 2). A name match alone is never
/// ownership.
pub fn is_owned_by<H: Holder>(facts: &Facts, holder: &H) -> bool {
    holder.uid().is_some_and(|uid| {
        facts.has_label(LABEL_MANAGED_BY, MANAGED_BY)
            && facts.has_label(H::LABEL, &holder.name_any())
            && facts.has_annotation(H::UID_ANNOTATION, &uid)
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

/// Whether a namespaced object carries the label of `holder` (`homestead.dev/user=<name>` for a
/// User; its Namespace's ownership is what is checked by uid).
pub fn labelled_for<H: Holder>(meta: &ObjectMeta, holder: &H) -> bool {
    label(meta, H::LABEL) == Some(holder.name_any().as_str())
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// The labels every object Homestead manages for `holder` carries:
/// `app.kubernetes.io/managed-by=homestead` and the holder's label (`homestead.dev/user=<name>`
/// for a User).
pub fn managed_labels<H: Holder>(holder: &H) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
        (H::LABEL.to_owned(), holder.name_any()),
    ])
}

/// The owner reference to `holder` (a User or a Workspace), as its controller, so garbage collection removes the object
/// once the User is gone (the safety net behind the finalizer; docs/design.md rule 8).
///
/// No `blockOwnerDeletion`: the finalizer `homestead.dev/cleanup` already keeps the User until
/// its objects are revoked or deleted, so blocking a foreground deletion adds nothing, and
/// setting it would cost an authorization check of `users/finalizers` on every write that adds
/// the reference (the OwnerReferencesPermissionEnforcement admission plugin) and that right in
/// the operator's ClusterRole.
///
/// # Panics
/// If `holder` has no name or uid, which an object read from the API server always has.
pub fn owner_reference<H: Holder>(holder: &H) -> OwnerReference {
    holder
        .controller_owner_ref(&())
        .expect("an object read from the API server has a name and uid")
}

/// The User a managed object belongs to, by its `homestead.dev/user` label; `None` for an
/// object without it. The operator maps watch events of managed kinds to reconciles with this.
pub fn user_of<K: Resource>(object: &K) -> Option<ObjectRef<User>> {
    holder_of(object)
}

/// The holder (`H`: a User or a Workspace) a managed object belongs to, by the holder's label;
/// `None` for an object without it.
pub fn holder_of<H: Holder, K: Resource>(object: &K) -> Option<ObjectRef<H>> {
    object
        .labels()
        .get(H::LABEL)
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
