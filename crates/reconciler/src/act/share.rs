//! A Share's access written: its one RoleBinding granted, repaired, replaced or revoked
//! ([`Cluster::keep_share_binding`], [`Cluster::remove_share_binding`]) and its status applied
//! ([`Cluster::apply_share_status`]). Every grant and revocation is one structured log line
//! (target `homestead::access`; docs/sharing.md, "The access log") and an Event on the Share.

use std::sync::Arc;

use crate::state::cache::CachedShare;
use homestead_api::{FIELD_MANAGER, Share, ShareStatus, Verb};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::Cluster;
use super::client::failed;
use crate::error::Result;
use crate::plan::share::status_print;
use crate::state::cache::CachedRoleBinding;

/// What [`Cluster::keep_share_binding`] did: the Event reason and note, if it wrote.
pub type Written = Option<(&'static str, String)>;

impl Cluster {
    /// Makes the Share's RoleBinding `desired` (from
    /// [`crate::plan::share::desired_binding`]) exist as desired, `cached` being what the
    /// RoleBinding cache shows under its name: nothing when it matches or this replica created
    /// the same one moments ago; a create when there is none (an apply if one appeared
    /// meanwhile); an apply when its subjects, labels or owner differ (a tenant's edit is undone:
    /// `Repaired`); a delete and create when its roleRef differs (immutable in Kubernetes).
    ///
    /// # Errors
    /// [`crate::Error::Kube`] when a request fails; [`crate::Error::NotLeader`] on a standby.
    pub async fn keep_share_binding(
        &self,
        share: &CachedShare,
        desired: &RoleBinding,
        cached: Option<Arc<CachedRoleBinding>>,
    ) -> Result<Written> {
        let namespace = desired.metadata.namespace.as_deref();
        let name = desired.metadata.name.clone().unwrap_or_default();
        let same = |binding: &CachedRoleBinding| binding.matches(desired);
        let subjects = subjects(desired);
        let (reason, note) = match cached {
            Some(cached) if cached.matches(desired) => return Ok(None),
            None if self
                .recent()
                .role_bindings
                .unconfirmed(namespace, &name, same)
                .is_some() =>
            {
                return Ok(None);
            }
            None => {
                if let Some(created) = self.create(desired).await? {
                    self.recent().role_bindings.remember(created);
                } else {
                    self.apply(desired).await?;
                }
                (
                    "Granted",
                    format!("granted {:?} to {subjects}", desired.role_ref.name),
                )
            }
            Some(cached) if !cached.binds_role_of(desired) => {
                let old =
                    ObjectRef::<RoleBinding>::new(&name).within(namespace.unwrap_or_default());
                self.delete(&old, &DeleteParams::default()).await?;
                if let Some(created) = self.create(desired).await? {
                    self.recent().role_bindings.remember(created);
                } else {
                    self.apply(desired).await?;
                }
                let note = format!(
                    "role changed from {:?} to {:?} for {subjects}",
                    cached.role, desired.role_ref.name
                );
                ("Granted", note)
            }
            Some(cached) if cached.binds_subjects_of(desired) => {
                self.apply(desired).await?;
                (
                    "Repaired",
                    format!("restored RoleBinding {name}'s labels and owner"),
                )
            }
            Some(_) => {
                self.apply(desired).await?;
                (
                    "Granted",
                    format!("{:?} now bound to {subjects}", desired.role_ref.name),
                )
            }
        };
        log_access(share, "grant", &desired.role_ref.name, &subjects, &note);
        self.publish_regarding(
            share.object_ref(&()),
            EventType::Normal,
            reason,
            note.clone(),
            None,
        );
        Ok(Some((reason, note)))
    }

    /// Deletes the Share's RoleBinding, if the cache shows one, because `why` (the Share's
    /// `Ready` message); logs the revocation and records a Normal Event `Revoked` on the Share.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] when the delete fails (but for 404).
    pub async fn remove_share_binding(
        &self,
        share: &CachedShare,
        cached: Option<Arc<CachedRoleBinding>>,
        why: &str,
    ) -> Result<Written> {
        let Some(cached) = cached else {
            return Ok(None);
        };
        let namespace = share.namespace().unwrap_or_default();
        let name = cached.metadata.name.clone().unwrap_or_default();
        let binding = ObjectRef::<RoleBinding>::new(&name).within(&namespace);
        self.delete(&binding, &DeleteParams::default()).await?;
        let note = format!("revoked {:?}: {why}", cached.role);
        log_access(share, "revoke", &cached.role, "", why);
        self.publish_regarding(
            share.object_ref(&()),
            EventType::Normal,
            "Revoked",
            note.clone(),
            None,
        );
        Ok(Some(("Revoked", note)))
    }

    /// Queues a Warning Event `Refused` on `share` with `note` (the `Ready` message).
    pub fn refuse_share(&self, share: &CachedShare, note: String) {
        self.publish_regarding(
            share.object_ref(&()),
            EventType::Warning,
            "Refused",
            note,
            None,
        );
    }

    /// Sets `share`'s status to `status` by server-side apply on its status subresource (field
    /// manager `homestead`), unless the cache shows it already or this replica wrote the same
    /// moments ago; returns whether it wrote.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`Verb::PatchStatus`] when the API server refuses;
    /// [`crate::Error::NotLeader`] on a standby.
    pub async fn apply_share_status(
        &self,
        share: &CachedShare,
        status: &ShareStatus,
    ) -> Result<bool> {
        let print = status_print(status);
        let uid = share.uid().unwrap_or_default();
        let recent = &self.recent().share_statuses;
        if share.status.as_ref().is_some_and(|s| s.print == print) {
            recent.forget(&uid);
            return Ok(false);
        }
        if recent.unconfirmed(&uid, print).is_some() {
            return Ok(false);
        }
        let namespace = share.namespace().unwrap_or_default();
        let name = share.name_any();
        let patch = serde_json::json!({
            "apiVersion": Share::api_version(&()),
            "kind": Share::kind(&()),
            "status": status,
        });
        Api::<Share>::namespaced(self.client.clone(), &namespace)
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(failed(Verb::PatchStatus, "Share".into(), &name))?;
        recent.remember(uid, print);
        Ok(true)
    }
}

/// The most subjects an Event note or access log line names; more are counted.
const NAMED_SUBJECTS: usize = 20;

/// The subjects of `binding` in one line: `bob@example.com, carol@example.com`, at most
/// [`NAMED_SUBJECTS`] of them, then `and N more`.
fn subjects(binding: &RoleBinding) -> String {
    let all = binding.subjects.as_deref().unwrap_or_default();
    let named: Vec<&str> = all
        .iter()
        .take(NAMED_SUBJECTS)
        .map(|s| s.name.as_str())
        .collect();
    match all.len().saturating_sub(NAMED_SUBJECTS) {
        0 => named.join(", "),
        more => format!("{} and {more} more", named.join(", ")),
    }
}

/// One line of the access log (target `homestead::access`, level INFO), its fields a stable
/// schema: `action` (`grant` or `revoke`), `namespace`, `share`, `role`, `subjects` (user
/// names, comma-separated, at most 20 then `and N more`; empty for a revocation),
/// `expires_at` (RFC 3339), `share_reason`
/// (the Share's `spec.reason`), `created_by` (the Share's `homestead.dev/created-by`) and
/// `detail` (what was done, or why it was revoked).
fn log_access(share: &CachedShare, action: &str, role: &str, subjects: &str, detail: &str) {
    let created_by = share.created_by.as_deref().unwrap_or_default();
    tracing::info!(
        target: "homestead::access",
        action,
        namespace = share.namespace().unwrap_or_default(),
        share = share.name_any(),
        role,
        subjects,
        expires_at = %share.spec.expires_at.0,
        share_reason = share.spec.reason,
        created_by,
        detail,
        "share {action}"
    );
}
