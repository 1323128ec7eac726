//! The User's Namespace: created with a request that fails if it exists ([`Cluster::create_namespace`]),
//! read through the cache and this replica's memory ([`Cluster::namespace`]), deleted under a uid
//! precondition ([`Cluster::delete_namespace`]), and the one read that tells an uninstall from an
//! offboarding ([`Cluster::crd_is_deleting`]).

use std::sync::Arc;
use std::time::Instant;

use homestead_api::{CRD_NAME, LABEL_ADOPT_FOR, LABEL_RETAINED_FROM};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::reflector::ObjectRef;

use super::Cluster;
use crate::error::Result;
use crate::plan::facts::print;
use crate::state::cache::CachedNamespace;

impl Cluster {
    /// The Namespace `name`: `cached` (from the cache of managed Namespaces) if the cache has
    /// it; `None` without a request when the Namespace watch reported it gone
    /// ([`Recent::namespaces_gone`](super::recent::Recent::namespaces_gone)); otherwise read
    /// from the API server (the cache may not have caught up with a create yet). `None` if it
    /// does not exist.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`homestead_api::Verb::Get`].
    pub async fn namespace(
        &self,
        name: &str,
        cached: Option<Arc<CachedNamespace>>,
    ) -> Result<Option<Arc<CachedNamespace>>> {
        if let Some(ns) = cached {
            return Ok(Some(ns));
        }
        if self.recent.namespaces_gone.take(name) {
            return Ok(None);
        }
        let namespace = self.get(&ObjectRef::<Namespace>::new(name)).await?;
        Ok(namespace.map(|ns| Arc::new(ns.into())))
    }

    /// Creates `desired` with a request that fails if it exists, remembering the create so its
    /// watch echo triggers no reconcile. `None` when a Namespace of that name exists.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`homestead_api::Verb::Create`].
    pub async fn create_namespace(&self, desired: &Namespace) -> Result<Option<Namespace>> {
        let created = self.create(desired).await?;
        if let Some(created) = &created {
            self.recent.namespaces.remember(created.clone());
        }
        Ok(created)
    }

    /// Adopts the existing Namespace `desired` names, which the platform labelled
    /// `homestead.dev/adopt-for=<User>` ([`crate::plan::ownership::is_handed_to`]): one JSON merge
    /// patch, under the uid `uid` and the resourceVersion it was read at, that adds `desired`'s
    /// labels and annotations (the ownership ones, Pod Security, ...); nothing else of the
    /// Namespace changes, nothing in it is deleted. The `adopt-for` label stays until the
    /// adoption is finished ([`Cluster::adopted`]), so a reconcile that fails in between
    /// finishes it next time. The admission policy `homestead-operator-bounds` admits this
    /// update only for the User the label names. Returns the adopted Namespace, or `None` when
    /// it is gone, has another uid, or is no longer labelled for `user`.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`homestead_api::Verb::Get`] or [`homestead_api::Verb::Apply`]
    /// (a 409 when the Namespace changed since it was read: the reconcile is retried).
    pub async fn adopt_namespace(
        &self,
        desired: &Namespace,
        uid: Option<&str>,
        user: &str,
    ) -> Result<Option<Namespace>> {
        let name = desired.name_any();
        let Some(live) = self.get(&ObjectRef::<Namespace>::new(&name)).await? else {
            return Ok(None);
        };
        let handed = live
            .labels()
            .get(LABEL_ADOPT_FOR)
            .is_some_and(|to| to == user);
        if live.metadata.uid.as_deref() != uid || uid.is_none() || !handed {
            return Ok(None);
        }
        // A namespace retained from a previous owner stops being retained: left in place, the
        // label would keep the retained-namespace controller removing every RoleBinding there,
        // the new owner's included.
        let mut labels = serde_json::json!(desired.labels());
        labels[LABEL_RETAINED_FROM] = serde_json::Value::Null;
        let patch = serde_json::json!({
            "metadata": {
                "uid": uid,
                "resourceVersion": live.metadata.resource_version,
                "labels": labels,
                "annotations": desired.annotations(),
            }
        });
        let adopted = self.merge_patch::<Namespace>(None, &name, &patch).await?;
        Ok(Some(adopted))
    }

    /// Finishes an adoption: removes the label `homestead.dev/adopt-for` from the Namespace
    /// `name` (uid `uid`, already the User's), so the handing-over is used once.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`homestead_api::Verb::Apply`].
    pub async fn adopted(&self, name: &str, uid: Option<&str>) -> Result<()> {
        let patch = serde_json::json!({
            "metadata": { "uid": uid, "labels": { LABEL_ADOPT_FOR: null } }
        });
        self.merge_patch::<Namespace>(None, name, &patch).await?;
        Ok(())
    }

    /// Deletes `namespace` (in the background), with its uid as precondition, so a namespace
    /// recreated by someone else under the same name is never deleted; remembers the delete
    /// until the watch shows it ([`Cluster::deleted_moments_ago`]).
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`homestead_api::Verb::Delete`] (a failed precondition too).
    pub async fn delete_namespace(&self, namespace: &CachedNamespace) -> Result<()> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: namespace.uid(),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        let name = namespace.name_any();
        self.delete(&ObjectRef::<Namespace>::new(&name), &params)
            .await?;
        let print = print(&namespace.uid());
        self.recent.namespace_deletes.remember(name, print);
        Ok(())
    }

    /// Whether this replica deleted `namespace` (this very one, by uid) moments ago and the
    /// Namespace watch has not shown the deletion yet.
    pub fn deleted_moments_ago(&self, namespace: &CachedNamespace) -> bool {
        let print = print(&namespace.uid());
        self.recent
            .namespace_deletes
            .unconfirmed(&namespace.name_any(), print)
            .is_some()
    }

    /// Whether the `users.homestead.dev` CRD itself is gone or being deleted (Homestead is being
    /// uninstalled), as read by a GET sent after `since` (when this reconcile began, after it saw
    /// the User deleted). The API server marks the CRD deleted before it deletes any User of it,
    /// so such a GET sees the mark of any uninstall that deleted this User; one GET serves every
    /// offboarding that began before it was sent, and offboardings arriving meanwhile wait for it
    /// rather than sending their own. A bulk offboarding reads the CRD a few times, not once per
    /// User.
    ///
    /// # Errors
    /// [`crate::Error::Kube`] with [`homestead_api::Verb::Get`].
    pub async fn crd_is_deleting(&self, since: Instant) -> Result<bool> {
        let mut last = self.uninstall.0.lock().await;
        if let Some((sent, deleting)) = *last
            && sent >= since
        {
            return Ok(deleting);
        }
        let sent = Instant::now();
        let crd = self
            .get(&ObjectRef::<CustomResourceDefinition>::new(CRD_NAME))
            .await?;
        let deleting = crd.is_none_or(|crd| crd.metadata.deletion_timestamp.is_some());
        *last = Some((sent, deleting));
        Ok(deleting)
    }
}
