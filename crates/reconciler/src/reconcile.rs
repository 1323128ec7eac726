//! The reconcile loop: finalizer first, then validate, check ownership, apply the Namespace,
//! RoleBinding and ResourceQuota (only what differs from the cache), and write status (only when
//! it changed). Cleanup offboards per `deletionPolicy`. Every step is idempotent and safe to
//! cancel: a reconcile that stops half-way is finished by the next one.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{
    CONDITION_READY, CRD_NAME, DeletionPolicy, FIELD_MANAGER, FINALIZER, User, UserStatus,
};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, instrument, warn};

use crate::desired::{
    self, QUOTA_NAME, ROLE_BINDING_NAME, Refusal, desired_namespace, desired_quota,
    desired_role_binding, is_owned_by, namespace_name, retained_namespace,
};
use crate::{Context, Error, Result};

/// Requeue interval of a converged User: a periodic check that costs reads only.
const RESYNC: Duration = Duration::from_secs(300);
/// Requeue interval while a Namespace is terminating.
const TERMINATING_RETRY: Duration = Duration::from_secs(2);

/// Reconciles one User: the kube-runtime finalizer helper adds `homestead.dev/cleanup` before
/// anything is created, runs [`apply`] while the User lives and [`cleanup`] once it is deleted,
/// and removes the finalizer when cleanup succeeds.
///
/// Returns the next [`Action`] (a resync after 300 s when converged).
///
/// # Errors
/// [`Error`] when an API request fails or a Namespace is still terminating; the controller then
/// calls [`error_policy`].
#[instrument(skip_all, fields(user = %user.name_any()))]
pub async fn reconcile(user: Arc<User>, ctx: Arc<Context>) -> Result<Action> {
    let timer = ctx.metrics.duration.start_timer();
    let users: Api<User> = Api::all(ctx.client.clone());
    let result = finalizer(&users, FINALIZER, user, |event| async {
        match event {
            Finalizer::Apply(user) => apply(&user, &ctx).await,
            Finalizer::Cleanup(user) => cleanup(&user, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    timer.observe_duration();
    let label = if result.is_ok() { "success" } else { "error" };
    ctx.metrics
        .reconciliations
        .with_label_values(&[label])
        .inc();
    result
}

/// Decides the requeue after a failed reconcile: 2 s while a Namespace terminates (expected,
/// logged at info), 15 s for API errors (logged as warnings). Counts the error by reason.
pub fn error_policy(user: Arc<User>, error: &Error, ctx: Arc<Context>) -> Action {
    let reason = error.metric_label();
    ctx.metrics.errors.with_label_values(&[reason]).inc();
    if reason == "namespace_terminating" {
        info!(user = %user.name_any(), "{error}");
        Action::requeue(TERMINATING_RETRY)
    } else {
        warn!(user = %user.name_any(), %reason, "reconcile failed: {error}");
        Action::requeue(Duration::from_secs(15))
    }
}

/// The outcome of a reconcile, written into the `Ready` condition.
struct Outcome {
    namespace: String,
    ready: bool,
    reason: &'static str,
    message: String,
}

impl Context {
    fn cached_namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.get(&ObjectRef::new(name))
    }

    /// The Namespace `name` from the cache, or from the API server when the cache does not have
    /// it (the cache holds only Namespaces labelled as Homestead's); `None` if it does not exist.
    async fn lookup_namespace(&self, name: &str) -> Result<Option<Arc<Namespace>>> {
        if let Some(ns) = self.cached_namespace(name) {
            return Ok(Some(ns));
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.get_opt(name)
            .await
            .map(|ns| ns.map(Arc::new))
            .map_err(|source| kube_error("get", "Namespace", name, source))
    }

    /// Server-side applies `object` with field manager `homestead`, forcing ownership of the
    /// fields Homestead manages (drift repair).
    async fn apply<K>(&self, api: &Api<K>, object: &K, kind: &'static str) -> Result<()>
    where
        K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    {
        let name = object.name_any();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &params, &Patch::Apply(object))
            .await
            .map(drop)
            .map_err(|source| kube_error("apply", kind, &name, source))
    }

    /// Deletes `name`; already gone counts as success.
    async fn delete<K>(
        &self,
        api: &Api<K>,
        name: &str,
        kind: &'static str,
        params: &DeleteParams,
    ) -> Result<()>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    {
        match api.delete(name, params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(kube_error("delete", kind, name, source)),
        }
    }

    /// Publishes an Event on `user`; failures are logged, never fatal (Events are best effort).
    async fn event(&self, user: &User, type_: EventType, reason: &str, note: String) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &user.object_ref(&())).await {
            warn!(user = %user.name_any(), %reason, "publishing Event failed: {e}");
        }
    }

    /// Writes `outcome` into the status (server-side apply on the status subresource) if it
    /// differs from the current status, and emits an Event when the `Ready` condition's status
    /// or reason changes. `lastTransitionTime` moves only when the condition's status does.
    async fn set_status(&self, user: &User, outcome: Outcome) -> Result<()> {
        let previous = user.ready_condition();
        let status = if outcome.ready { "True" } else { "False" };
        let last_transition_time = match previous {
            Some(c) if c.status == status => c.last_transition_time.clone(),
            _ => Time(Timestamp::now()),
        };
        let desired = UserStatus {
            namespace: Some(outcome.namespace),
            observed_generation: user.metadata.generation,
            conditions: vec![Condition {
                type_: CONDITION_READY.to_owned(),
                status: status.to_owned(),
                reason: outcome.reason.to_owned(),
                message: outcome.message.clone(),
                observed_generation: user.metadata.generation,
                last_transition_time,
            }],
        };
        if user.status.as_ref() == Some(&desired) {
            return Ok(());
        }
        let name = user.name_any();
        let patch = serde_json::json!({
            "apiVersion": User::api_version(&()),
            "kind": User::kind(&()),
            "status": desired,
        });
        Api::<User>::all(self.client.clone())
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|source| kube_error("patch status of", "User", &name, source))?;
        let transition = previous.is_none_or(|c| c.status != status || c.reason != outcome.reason);
        if transition {
            let type_ = if outcome.ready {
                EventType::Normal
            } else {
                EventType::Warning
            };
            self.event(user, type_, outcome.reason, outcome.message)
                .await;
        }
        Ok(())
    }
}

/// The object `namespace/name` from a reflector cache.
fn cached<K>(store: &Store<K>, name: &str, namespace: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

fn kube_error(verb: &'static str, kind: &'static str, name: &str, source: kube::Error) -> Error {
    Error::Kube {
        verb,
        kind,
        name: name.to_owned(),
        source,
    }
}

/// Refuses to provision: `Ready=False` with the refusal's reason, a Warning Event on the
/// transition, and no write to anything but the User's status.
async fn refuse(
    user: &User,
    ctx: &Context,
    namespace: String,
    refusal: &Refusal,
) -> Result<Action> {
    info!(user = %user.name_any(), reason = refusal.reason(), "refusing to provision");
    let outcome = Outcome {
        namespace,
        ready: false,
        reason: refusal.reason(),
        message: refusal.message(&ctx.config),
    };
    ctx.set_status(user, outcome).await?;
    Ok(Action::requeue(RESYNC))
}

/// Brings the cluster to the User's desired state (see the module docs).
async fn apply(user: &User, ctx: &Context) -> Result<Action> {
    let owned = |ns: &Namespace| is_owned_by(&ns.metadata, user);
    let ns_name = namespace_name(user, &ctx.config, |n| {
        ctx.cached_namespace(n).is_some_and(|ns| owned(&ns))
    });
    if let Err(refusal) = desired::validate(user, &ns_name, &ctx.config) {
        return refuse(user, ctx, ns_name, &refusal).await;
    }
    let existing = ctx.lookup_namespace(&ns_name).await?;
    if let Some(ns) = &existing {
        if !owned(ns) {
            return refuse(
                user,
                ctx,
                ns_name.clone(),
                &Refusal::NamespaceConflict(ns_name),
            )
            .await;
        }
        if ns.metadata.deletion_timestamp.is_some() {
            let message = desired::terminating_message(ns);
            let outcome = Outcome {
                namespace: ns_name.clone(),
                ready: false,
                reason: "NamespaceTerminating",
                message,
            };
            ctx.set_status(user, outcome).await?;
            return Err(Error::NamespaceTerminating(ns_name));
        }
    }

    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let namespace = desired_namespace(user, &ns_name);
    let ns_matches = existing.as_ref().is_some_and(|ns| {
        desired::metadata_matches(&namespace.metadata, &ns.metadata, FIELD_MANAGER)
    });
    if !ns_matches {
        ctx.apply(&namespaces, &namespace, "Namespace").await?;
        let (reason, note) = match existing {
            None => ("NamespaceCreated", format!("created namespace {ns_name:?}")),
            Some(_) => (
                "NamespaceUpdated",
                format!("updated labels, annotations or owner of namespace {ns_name:?}"),
            ),
        };
        ctx.event(user, EventType::Normal, reason, note).await;
    }

    let role_bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &ns_name);
    let cached_binding = cached(&ctx.role_bindings, ROLE_BINDING_NAME, &ns_name)
        .filter(|rb| labelled_for(&rb.metadata, user));
    let message = if user.spec.suspended {
        if cached_binding.is_some() {
            ctx.delete(
                &role_bindings,
                ROLE_BINDING_NAME,
                "RoleBinding",
                &DeleteParams::default(),
            )
            .await?;
            ctx.event(
                user,
                EventType::Normal,
                "AccessRevoked",
                format!("suspended: removed RoleBinding {ns_name}/{ROLE_BINDING_NAME}"),
            )
            .await;
        }
        format!("suspended: access revoked; namespace {ns_name:?} and its contents are kept")
    } else {
        let binding = desired_role_binding(user, &ns_name);
        match cached_binding {
            Some(cached) if desired::role_binding_matches(&binding, &cached, FIELD_MANAGER) => {}
            Some(cached) if cached.role_ref != binding.role_ref => {
                // roleRef is immutable: replace the RoleBinding.
                ctx.delete(
                    &role_bindings,
                    ROLE_BINDING_NAME,
                    "RoleBinding",
                    &DeleteParams::default(),
                )
                .await?;
                ctx.apply(&role_bindings, &binding, "RoleBinding").await?;
                let note = format!(
                    "role changed from {:?} to {:?}: recreated RoleBinding {ns_name}/{ROLE_BINDING_NAME}",
                    cached.role_ref.name, binding.role_ref.name
                );
                ctx.event(user, EventType::Normal, "RoleChanged", note)
                    .await;
            }
            cached => {
                ctx.apply(&role_bindings, &binding, "RoleBinding").await?;
                let reason = if cached.is_some() {
                    "RoleBindingRepaired"
                } else {
                    "AccessGranted"
                };
                let note = format!(
                    "bound ClusterRole {:?} to {:?} in namespace {ns_name:?}",
                    user.spec.role, user.spec.identity.username
                );
                ctx.event(user, EventType::Normal, reason, note).await;
            }
        }
        format!(
            "namespace {ns_name:?} provisioned; {:?} has ClusterRole {:?} there",
            user.spec.identity.username, user.spec.role
        )
    };

    let quotas: Api<ResourceQuota> = Api::namespaced(ctx.client.clone(), &ns_name);
    let cached_quota =
        cached(&ctx.quotas, QUOTA_NAME, &ns_name).filter(|q| labelled_for(&q.metadata, user));
    match (desired_quota(user, &ns_name), cached_quota) {
        (Some(quota), Some(cached)) if desired::quota_matches(&quota, &cached, FIELD_MANAGER) => {}
        (Some(quota), _) => {
            ctx.apply(&quotas, &quota, "ResourceQuota").await?;
            ctx.event(
                user,
                EventType::Normal,
                "QuotaApplied",
                format!("applied ResourceQuota {ns_name}/{QUOTA_NAME}"),
            )
            .await;
        }
        (None, Some(_)) => {
            ctx.delete(
                &quotas,
                QUOTA_NAME,
                "ResourceQuota",
                &DeleteParams::default(),
            )
            .await?;
            ctx.event(
                user,
                EventType::Normal,
                "QuotaRemoved",
                format!("removed ResourceQuota {ns_name}/{QUOTA_NAME}"),
            )
            .await;
        }
        (None, None) => {}
    }

    let reason = if user.spec.suspended {
        "Suspended"
    } else {
        "Provisioned"
    };
    ctx.set_status(
        user,
        Outcome {
            namespace: ns_name,
            ready: true,
            reason,
            message,
        },
    )
    .await?;
    Ok(Action::requeue(RESYNC))
}

/// Whether a namespaced object carries the managed labels naming `user` (its Namespace's
/// ownership is what is checked by uid).
fn labelled_for(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    user: &User,
) -> bool {
    let labels = meta.labels.as_ref();
    labels.and_then(|l| l.get(homestead_api::LABEL_USER)) == Some(&user.name_any())
}

/// Whether the `users.homestead.dev` CRD itself is being deleted (Homestead is being
/// uninstalled): then every User is offboarded as `Retain`.
async fn crd_is_deleting(ctx: &Context) -> Result<bool> {
    let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
    let crd = crds
        .get_opt(CRD_NAME)
        .await
        .map_err(|source| kube_error("get", "CustomResourceDefinition", CRD_NAME, source))?;
    Ok(crd.is_none_or(|crd| crd.metadata.deletion_timestamp.is_some()))
}

/// Offboards a deleted User. `Delete`: deletes its Namespace (only if it is the User's, checked
/// by uid precondition) and keeps the finalizer, reporting what blocks it, until the Namespace is
/// gone. `Retain` (or uninstall): removes the RoleBinding, the owner reference and the managed
/// labels, labels the Namespace `homestead.dev/retained-from`, and releases the User.
async fn cleanup(user: &User, ctx: &Context) -> Result<Action> {
    let uninstalling = crd_is_deleting(ctx).await?;
    let policy = if uninstalling {
        DeletionPolicy::Retain
    } else {
        user.spec.deletion_policy
    };
    let owned = |ns: &Namespace| is_owned_by(&ns.metadata, user);
    let ns_name = namespace_name(user, &ctx.config, |n| {
        ctx.cached_namespace(n).is_some_and(|ns| owned(&ns))
    });
    let namespace = ctx.lookup_namespace(&ns_name).await?.filter(|ns| owned(ns));
    let Some(namespace) = namespace else {
        ctx.event(
            user,
            EventType::Normal,
            "Offboarded",
            format!(
                "offboarding complete: no namespace of this User remains (looked for {ns_name:?})"
            ),
        )
        .await;
        return Ok(Action::await_change());
    };
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    match policy {
        DeletionPolicy::Delete => {
            if namespace.metadata.deletion_timestamp.is_none() {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: namespace.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::background()
                };
                ctx.delete(&namespaces, &ns_name, "Namespace", &params)
                    .await?;
                ctx.event(
                    user,
                    EventType::Normal,
                    "NamespaceDeleting",
                    format!("offboarding: deleting namespace {ns_name:?} (deletionPolicy Delete)"),
                )
                .await;
            }
            let message = desired::terminating_message(&namespace);
            ctx.set_status(
                user,
                Outcome {
                    namespace: ns_name.clone(),
                    ready: false,
                    reason: "Terminating",
                    message,
                },
            )
            .await?;
            Err(Error::NamespaceTerminating(ns_name))
        }
        DeletionPolicy::Retain => {
            let role_bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &ns_name);
            ctx.delete(
                &role_bindings,
                ROLE_BINDING_NAME,
                "RoleBinding",
                &DeleteParams::default(),
            )
            .await?;
            ctx.apply(
                &namespaces,
                &retained_namespace(user, &ns_name),
                "Namespace",
            )
            .await?;
            let why = if uninstalling {
                "Homestead is being uninstalled"
            } else {
                "deletionPolicy Retain"
            };
            ctx.event(
                user,
                EventType::Normal,
                "NamespaceRetained",
                format!(
                    "offboarding ({why}): access revoked, namespace {ns_name:?} and its data kept"
                ),
            )
            .await;
            Ok(Action::await_change())
        }
    }
}
