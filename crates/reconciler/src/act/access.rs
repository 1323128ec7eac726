//! A person's access: Homestead's RoleBinding granted, repaired or replaced ([`grant`]), and
//! every RoleBinding in a namespace revoked ([`revoke`] what the cache shows, [`revoke_all`]
//! what exists). Provisioning and offboarding both call it; the standing revocation rule
//! (docs/security.md, "Revocation is a standing rule") is these functions called from every
//! path that finds access that should not be.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{Change, User};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::DeleteParams;
use kube::runtime::reflector::ObjectRef;

use super::Cluster;
use crate::error::Result;
use crate::plan::desired::{ROLE_BINDING_NAME, desired_role_binding};
use crate::state::cache::CachedRoleBinding;

/// Deletes the RoleBindings `names` in `namespace`; returns the `AccessRevoked` change that
/// names them (`why` says why), or `None` for an empty list.
pub async fn revoke(
    cluster: &Cluster,
    namespace: &str,
    mut names: Vec<String>,
    why: &str,
) -> Result<Option<(Change, String)>> {
    names.sort();
    for name in &names {
        let binding = ObjectRef::<RoleBinding>::new(name).within(namespace);
        cluster.delete(&binding, &DeleteParams::default()).await?;
    }
    Ok(revoked(namespace, &names, why))
}

/// Deletes every RoleBinding in `namespace` with one `deletecollection`, including any created
/// a moment ago that the cache does not show yet; returns the `AccessRevoked` change that names
/// them (`why` says why), or `None` when there were none.
pub async fn revoke_all(
    cluster: &Cluster,
    namespace: &str,
    why: &str,
) -> Result<Option<(Change, String)>> {
    let names = cluster.delete_all::<RoleBinding>(namespace).await?;
    Ok(revoked(namespace, &names, why))
}

/// The `AccessRevoked` change naming the RoleBindings `names` removed from `namespace`.
fn revoked(namespace: &str, names: &[String], why: &str) -> Option<(Change, String)> {
    (!names.is_empty()).then(|| {
        let note = format!(
            "{why}: removed every RoleBinding in namespace {namespace:?}: {}",
            names.join(", ")
        );
        (Change::AccessRevoked, note)
    })
}

/// What [`grant`] did.
pub enum Grant {
    /// The cache shows the binding as desired: nothing written.
    Unchanged,
    /// Created, repaired or replaced the binding; the change and its note for the Event.
    Changed(Change, String),
    /// This replica created the binding moments ago and the RoleBinding watch has not
    /// delivered it yet: nothing written; look again after this long, in case the binding was
    /// deleted again before the cache caught up.
    Unconfirmed(Duration),
}

/// Grants `spec.role` in `namespace` (`cached`: Homestead's RoleBinding there, as the cache
/// shows it): creates, repairs or replaces Homestead's RoleBinding;
/// writes nothing when the cache already matches, nor when this replica created the same
/// binding moments ago and the RoleBinding watch has not delivered it yet
/// ([`Recent::role_bindings`](super::recent::Recent::role_bindings)).
///
/// A binding with another roleRef (a role change; roleRef is immutable) or other subjects (an
/// identity change, or someone rewrote Homestead's binding) is replaced by `replace`:
/// every RoleBinding in the Namespace goes first, so neither the old identity nor what the person
/// granted themselves under the old role outlives the change.
pub async fn grant(
    cluster: &Cluster,
    user: &User,
    namespace: &str,
    cached: Option<Arc<CachedRoleBinding>>,
) -> Result<Grant> {
    let desired = desired_role_binding(user, namespace);
    let (change, note) = match cached {
        Some(cached) if cached.matches(&desired) => return Ok(Grant::Unchanged),
        Some(cached) if !cached.binds_role_of(&desired) || !cached.binds_subjects_of(&desired) => {
            return replace(cluster, user, &cached, desired).await;
        }
        cached => {
            let note = format!(
                "bound ClusterRole {:?} to {:?} in namespace {namespace:?}",
                user.spec.role(),
                user.spec.identity.username
            );
            if cached.is_none() {
                let created = &cluster.recent().role_bindings;
                let same = |binding: &CachedRoleBinding| binding.matches(&desired);
                if let Some(left) = created.unconfirmed(Some(namespace), ROLE_BINDING_NAME, same) {
                    return Ok(Grant::Unconfirmed(left));
                }
                // A binding the cache does not know is created with a request that fails if
                // it exists (cheaper for the API server than an apply); one that exists is
                // applied.
                if let Some(created) = cluster.create(&desired).await? {
                    cluster.recent().role_bindings.remember(created);
                    return Ok(Grant::Changed(Change::AccessGranted, note));
                }
            }
            (Change::RoleBindingRepaired, note)
        }
    };
    cluster.apply(&desired).await?;
    Ok(Grant::Changed(change, note))
}

/// Replaces Homestead's binding `cached` with `desired` after a role or identity change: first
/// a dry-run create under a generated name (so a binding someone named `homestead-user-next`
/// cannot block it) proves the API server accepts the new one, and a refusal keeps the old
/// access; then every RoleBinding in the Namespace is removed with one `deletecollection`
/// (what exists, not what the cache shows) ("a role downgrade removes what grants more than the new role"; the old identity's
/// own grants go with it), and the new binding is created.
async fn replace(
    cluster: &Cluster,
    user: &User,
    cached: &CachedRoleBinding,
    desired: RoleBinding,
) -> Result<Grant> {
    let namespace = desired.metadata.namespace.clone().unwrap_or_default();
    let mut trial = desired.clone();
    trial.metadata.name = None;
    trial.metadata.generate_name = Some(format!("{ROLE_BINDING_NAME}-"));
    cluster.dry_run_create(&trial).await?;
    let (change, why, what) = if cached.binds_role_of(&desired) {
        let note = format!(
            "identity changed to {:?}: recreated RoleBinding {namespace}/{ROLE_BINDING_NAME}",
            user.spec.identity.username
        );
        (Change::IdentityChanged, "identity changed", note)
    } else {
        let note = format!(
            "role changed from {:?} to {:?}: recreated RoleBinding {namespace}/{ROLE_BINDING_NAME}",
            cached.role, desired.role_ref.name
        );
        (Change::RoleChanged, "role changed", note)
    };
    let revoked = revoke_all(cluster, &namespace, why).await?;
    match cluster.create(&desired).await? {
        Some(created) => cluster.recent().role_bindings.remember(created),
        // Someone created one under Homestead's name between the removal and the create.
        None => cluster.apply(&desired).await?,
    }
    let removed = revoked
        .map(|(_, note)| format!("; {note}"))
        .unwrap_or_default();
    Ok(Grant::Changed(change, format!("{what}{removed}")))
}
