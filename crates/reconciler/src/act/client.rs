//! The reconciler's door to the API server: typed get / create / apply / delete of the objects
//! Homestead manages, with the `Api` derived from the object's kind and namespace, and the
//! queueing of Events. Every failure becomes an [`Error::Kube`] naming the verb, kind and object. No
//! write leaves a replica that may have lost the leader-election Lease: [`Cluster`]'s client is
//! fenced ([`super::fence`]), and such a write fails with [`Error::NotLeader`].

use std::fmt::Debug;

use homestead_api::{Change, FIELD_MANAGER, User, Verb};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Cluster;
use super::fence::is_fence_closed;
use crate::error::{Error, Result};
use crate::plan::drift::created_fields_entry;

/// How to address objects of one scope: implemented for namespaced and cluster-scoped kinds, so
/// [`Cluster`] can build the right `Api` for any [`Object`].
pub trait Scope {
    /// The `Api` for `K` in `namespace` (ignored for cluster-scoped kinds).
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

impl Scope for NamespaceResourceScope {
    fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        match namespace {
            Some(ns) => Api::namespaced(client, ns),
            None => Api::all(client),
        }
    }
}

impl Scope for ClusterResourceScope {
    fn api<K>(client: Client, _namespace: Option<&str>) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::all(client)
    }
}

/// A Kubernetes kind Homestead reads and writes: a static type of either scope that
/// serializes to and from JSON.
pub trait Object: Resource<DynamicType = (), Scope: Scope> + Json {}
impl<K: Resource<DynamicType = (), Scope: Scope> + Json> Object for K {}

/// What the client needs to send and receive an object: JSON both ways, cloning, debugging.
pub trait Json: Clone + Serialize + DeserializeOwned + Debug {}
impl<K: Clone + Serialize + DeserializeOwned + Debug> Json for K {}

/// Turns a failed request for `verb` on the object `name` of kind `kind` into an
/// [`Error::Kube`], or [`Error::NotLeader`] when the fenced client refused to send it
/// ([`super::fence::FenceClosed`]).
pub(crate) fn failed(
    verb: Verb,
    kind: std::borrow::Cow<'static, str>,
    name: &str,
) -> impl FnOnce(kube::Error) -> Error + use<> {
    let name = name.to_owned();
    move |source| {
        if is_fence_closed(&source) {
            Error::NotLeader
        } else {
            Error::kube(verb, kind, &name, source)
        }
    }
}

/// `namespace/name`, or `name` for a cluster-scoped object, for messages.
fn display_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

impl Cluster {
    /// The `Api` for `K` in `namespace` (`None`: cluster-scoped, or all namespaces).
    fn api<K: Object>(&self, namespace: Option<&str>) -> Api<K> {
        K::Scope::api(self.client.clone(), namespace)
    }

    fn error<K: Object>(
        verb: Verb,
        namespace: Option<&str>,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> Error + use<K> {
        failed(verb, K::kind(&()), &display_name(namespace, name))
    }

    /// GETs the object `reference`; `None` if it does not exist.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Get`] for any other failure.
    pub(crate) async fn get<K: Object>(&self, reference: &ObjectRef<K>) -> Result<Option<K>> {
        let ns = reference.namespace.as_deref();
        self.api::<K>(ns)
            .get_opt(&reference.name)
            .await
            .map_err(Self::error::<K>(Verb::Get, ns, &reference.name))
    }

    /// Lists every `K` (in every namespace) whose labels match `selector` (a label selector),
    /// from the API server, never a cache; `what` names them in an error.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Get`] when the list fails.
    pub(crate) async fn list_labelled<K: Object>(
        &self,
        selector: &str,
        what: &str,
    ) -> Result<Vec<K>> {
        let params = kube::api::ListParams::default().labels(selector);
        let listed = self
            .api::<K>(None)
            .list(&params)
            .await
            .map_err(Self::error::<K>(Verb::Get, None, what))?;
        Ok(listed.items)
    }

    /// Creates `object` with a request that fails if it already exists (field manager
    /// `homestead`); returns `None` when it does exist (HTTP 409 Conflict), so nothing is ever
    /// taken over by a create.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Create`] for any failure but a conflict.
    pub(crate) async fn create<K: Object>(&self, object: &K) -> Result<Option<K>> {
        let (ns, name) = (object.namespace(), object.name_any());
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match self.api::<K>(ns.as_deref()).create(&params, object).await {
            Ok(created) => Ok(Some(created)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(source) => Err(Self::error::<K>(Verb::Create, ns.as_deref(), &name)(source)),
        }
    }

    /// Sends a server-side dry-run create of `object`: the API server runs authorization and
    /// admission (RBAC escalation checks, admission policies, webhooks) and persists nothing.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Create`] when the API server would refuse it.
    pub(crate) async fn dry_run_create<K: Object>(&self, object: &K) -> Result<()> {
        let (ns, name) = (object.namespace(), object.name_any());
        let params = PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.to_owned()),
        };
        self.api::<K>(ns.as_deref())
            .create(&params, object)
            .await
            .map(drop)
            .map_err(Self::error::<K>(Verb::Create, ns.as_deref(), &name))
    }

    /// Server-side applies `object` with field manager `homestead`, forcing ownership of the
    /// fields Homestead manages (drift repair). Only call it for an object proven to be the
    /// User's, or one that must not exist yet.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Apply`].
    pub(crate) async fn apply<K: Object>(&self, object: &K) -> Result<()> {
        let (ns, name) = (object.namespace(), object.name_any());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api::<K>(ns.as_deref())
            .patch(&name, &params, &Patch::Apply(object))
            .await
            .map(drop)
            .map_err(Self::error::<K>(Verb::Apply, ns.as_deref(), &name))
    }

    /// Sends `patch` as a JSON merge patch (RFC 7386) of the object `name` in `namespace`, with
    /// field manager `homestead`; its preconditions are its own `metadata.uid` and
    /// `metadata.resourceVersion`, if it sets them. Returns the object as patched.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Apply`] (a 409 when the resourceVersion is stale).
    pub(crate) async fn merge_patch<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<K> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        self.api::<K>(namespace)
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map_err(Self::error::<K>(Verb::Apply, namespace, name))
    }

    /// Server-side applies `desired` over the live object with uid `uid` (one proven to be the
    /// User's; nothing happens if the live object is another one or gone by now). The live
    /// object is read first, since caches keep no `managedFields` ([`homestead_model::trim`]): if it still
    /// has the fields Homestead set when it created the object (operation `Update` in
    /// `managedFields`), they move to Homestead's apply entry with a JSON patch that tests the
    /// entry is unchanged (as kubectl does when it upgrades client-side to server-side apply):
    /// otherwise the apply could never remove a label or owner reference Homestead set at
    /// creation. See
    /// <https://kubernetes.io/docs/reference/using-api/server-side-apply/#upgrading-from-client-side-apply-to-server-side-apply>.
    /// Only repairs, spec changes and releases take this path, never a steady state. Returns
    /// whether the object's labels, annotations or owner references changed.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Get`] or [`Verb::Apply`] when a request fails.
    pub(crate) async fn apply_over<K: Object>(
        &self,
        desired: &K,
        uid: Option<&str>,
    ) -> Result<bool> {
        self.apply_over_inner(desired, uid, |_| true, false).await
    }

    /// [`Cluster::apply_over`], only while the live object, as read, is still one `still`
    /// accepts (say, still the holder's: a cache a moment behind may not have seen a handover
    /// move it), and with that read's `resourceVersion` as the apply's precondition, so a
    /// change in between fails it (HTTP 409) rather than being overwritten.
    ///
    /// # Errors
    /// As [`Cluster::apply_over`]; a 409 when the object changed after it was read.
    pub(crate) async fn apply_over_if<K: Object>(
        &self,
        desired: &K,
        uid: Option<&str>,
        still: impl Fn(&K) -> bool,
    ) -> Result<bool> {
        self.apply_over_inner(desired, uid, still, true).await
    }

    /// [`Cluster::apply_over_if`], with the read's `resourceVersion` as precondition only when
    /// `precondition`.
    async fn apply_over_inner<K: Object>(
        &self,
        desired: &K,
        uid: Option<&str>,
        still: impl Fn(&K) -> bool,
        precondition: bool,
    ) -> Result<bool> {
        let (ns, name) = (desired.namespace(), desired.name_any());
        let reference = match ns.as_deref() {
            Some(ns) => ObjectRef::<K>::new(&name).within(ns),
            None => ObjectRef::<K>::new(&name),
        };
        let Some(live) = self.get(&reference).await? else {
            return Ok(false);
        };
        if live.meta().uid.as_deref() != uid || !still(&live) {
            return Ok(false);
        }
        let mut read_at = live.meta().resource_version.clone();
        if let Some(i) = created_fields_entry(live.meta(), FIELD_MANAGER) {
            let entry = format!("/metadata/managedFields/{i}");
            let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                { "op": "test", "path": "/metadata/uid", "value": uid },
                { "op": "test", "path": format!("{entry}/manager"), "value": FIELD_MANAGER },
                { "op": "test", "path": format!("{entry}/operation"), "value": "Update" },
                { "op": "replace", "path": format!("{entry}/operation"), "value": "Apply" },
                { "op": "remove", "path": format!("{entry}/time") },
            ]))
            .expect("a well-formed JSON patch");
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            let moved = self
                .api::<K>(ns.as_deref())
                .patch(&name, &params, &Patch::Json::<()>(patch))
                .await
                .map_err(Self::error::<K>(Verb::Apply, ns.as_deref(), &name))?;
            read_at = moved.meta().resource_version.clone();
        }
        let mut desired = desired.clone();
        desired.meta_mut().uid = uid.map(str::to_owned);
        if precondition {
            desired.meta_mut().resource_version = read_at;
        }
        let applied = self
            .api::<K>(ns.as_deref())
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await
            .map_err(Self::error::<K>(Verb::Apply, ns.as_deref(), &name))?;
        let (before, after) = (live.meta(), applied.meta());
        Ok(before.labels != after.labels
            || before.annotations != after.annotations
            || before.owner_references != after.owner_references)
    }

    /// Deletes every `K` in `namespace` with one `deletecollection` request: the API server
    /// removes whatever exists at that moment, including objects created a moment ago that no
    /// cache shows yet (revoking access on offboarding and on a role change). Admission runs
    /// on each object as a DELETE, so the admission policy judges each one. Returns the names
    /// of the objects deleted, sorted.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::DeleteCollection`].
    pub(crate) async fn delete_all<K: Object>(&self, namespace: &str) -> Result<Vec<String>> {
        let deleted = self
            .api::<K>(Some(namespace))
            .delete_collection(&DeleteParams::default(), &kube::api::ListParams::default())
            .await
            .map_err(Self::error::<K>(
                Verb::DeleteCollection,
                Some(namespace),
                "*",
            ))?;
        // A list of what is being deleted, or (for a kind deleted at once) a bare Status.
        let mut names: Vec<String> = deleted
            .left()
            .map(|list| list.items.iter().map(ResourceExt::name_any).collect())
            .unwrap_or_default();
        names.sort();
        Ok(names)
    }

    /// Deletes the object `reference` with `params`; an object already gone (HTTP 404) counts
    /// as deleted.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::Delete`] for any other failure (a failed precondition too).
    pub(crate) async fn delete<K: Object>(
        &self,
        reference: &ObjectRef<K>,
        params: &DeleteParams,
    ) -> Result<()> {
        let ns = reference.namespace.as_deref();
        match self.api::<K>(ns).delete(&reference.name, params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(Self::error::<K>(Verb::Delete, ns, &reference.name)(source)),
        }
    }

    /// Queues a Normal Event about `user` reporting `change`, with `note` saying what exactly
    /// was done.
    pub(crate) fn record(&self, user: &User, change: Change, note: String) {
        self.publish(user, EventType::Normal, change.as_str(), note);
    }

    /// Queues an Event about `user` with `reason` and `note` on the [`super::events::EventQueue`],
    /// which publishes it in the background: Events are best effort and never hold up a
    /// reconcile. Nothing is queued while this replica may not write.
    pub(crate) fn publish(&self, user: &User, type_: EventType, reason: &str, note: String) {
        self.publish_related(user, type_, reason, note, None);
    }

    /// [`Cluster::publish`] with `related` as the Event's related object (`secondary`). The
    /// Recorder folds Events that differ only in their note into one series that keeps the
    /// first note, so a related object is what tells, say, a move to one Profile from a move
    /// back.
    pub(crate) fn publish_related(
        &self,
        user: &User,
        type_: EventType,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        self.publish_regarding(user.object_ref(&()), type_, reason, note, related);
    }

    /// [`Cluster::publish_related`] about the User `regarding`, which may be known by name and
    /// uid only (another User than the one reconciled).
    pub(crate) fn publish_regarding(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        if !self.fence.is_held() {
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Reconcile".to_owned(),
            secondary: related,
        };
        self.events.publish_regarding(regarding, event);
    }
}
