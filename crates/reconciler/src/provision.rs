//! Provisioning a live User, as small idempotent steps: decide the Namespace name and refuse
//! what is unsafe ([`crate::validate`]), check the existing Namespace's ownership, then bring
//! the Namespace, the person's access (RoleBinding, or none while suspended) and the quota to
//! the desired state, writing only what differs from the cache, and finally the status.

use std::time::Duration;

use homestead_api::{FIELD_MANAGER, User};
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};

use crate::client::cached;
use crate::context::Context;
use crate::desired::{
    QUOTA_NAME, ROLE_BINDING_NAME, desired_namespace, desired_quota, desired_role_binding,
};
use crate::drift::{metadata_matches, quota_matches, role_binding_matches};
use crate::error::{Error, Result, Verb};
use crate::ownership::{is_owned_by, labelled_for};
use crate::status::{Change, Outcome, Reason, terminating_message};
use crate::validate::{Refusal, namespace_name, validate};

/// Requeue interval of a User in its final state (converged or refused): a periodic check
/// that costs cache reads only.
pub const RESYNC: Duration = Duration::from_secs(300);
/// Requeue interval while a Namespace terminates; the Namespace watch usually triggers the
/// next reconcile sooner (on each status change and on deletion).
pub const TERMINATING_RECHECK: Duration = Duration::from_secs(30);

/// Brings the cluster to `user`'s desired state (see the module docs). A request that fails
/// is reported before the error is returned: `Ready=False` with a reason naming the step
/// (`Forbidden`, `ApplyFailed`, ...) and the API server's answer, and a Warning Event on the
/// transition, so no User is left without a condition while it backs off.
///
/// # Errors
/// [`crate::Error::Kube`] when a request fails; nothing already written is undone, and the
/// next reconcile continues from there.
pub async fn provision(user: &User, ctx: &Context) -> Result<Action> {
    let name = namespace_name(user, &ctx.config, |n| {
        ctx.cached_namespace(n)
            .is_some_and(|ns| is_owned_by(&ns.metadata, user))
    });
    if let Err(refusal) = validate(user, &name, &ctx.config) {
        return refuse(user, ctx, name, &refusal).await;
    }
    match converge(user, ctx, &name).await {
        Ok(Step::Done(outcome)) => {
            ctx.write_status(user, outcome).await?;
            Ok(Action::requeue(RESYNC))
        }
        Ok(Step::Wait(outcome)) => {
            ctx.write_status(user, outcome).await?;
            Ok(Action::requeue(TERMINATING_RECHECK))
        }
        Ok(Step::Refuse(refusal)) => refuse(user, ctx, name, &refusal).await,
        Err(error) => {
            let outcome = Outcome::new(name, failure_reason(&error), failure_message(&error));
            if let Err(status_error) = ctx.write_status(user, outcome).await {
                warn!(user = %user.name_any(), "reporting the failure failed: {status_error}");
            }
            Err(error)
        }
    }
}

/// Where a reconcile of a live User ends.
enum Step {
    /// Converged: the `Ready` outcome to write.
    Done(Outcome),
    /// The Namespace is terminating: report and check again later.
    Wait(Outcome),
    /// Found a reason to refuse (a Namespace that is not the User's).
    Refuse(Refusal),
}

/// Checks the existing Namespace's ownership, then converges the Namespace, access and quota.
async fn converge(user: &User, ctx: &Context, name: &str) -> Result<Step> {
    let existing = match ctx.namespace(name).await? {
        Some(ns) if !is_owned_by(&ns.metadata, user) => {
            return Ok(Step::Refuse(Refusal::NamespaceConflict(name.to_owned())));
        }
        Some(ns) if ns.metadata.deletion_timestamp.is_some() => {
            let message = terminating_message(&ns);
            let outcome = Outcome::new(name, Reason::NamespaceTerminating, message);
            return Ok(Step::Wait(outcome));
        }
        existing => existing,
    };
    if !ensure_namespace(user, ctx, name, existing.as_deref()).await? {
        return Ok(Step::Refuse(Refusal::NamespaceConflict(name.to_owned())));
    }
    let (reason, message) = if user.spec.suspended {
        revoke_access(user, ctx, name).await?;
        let message =
            format!("suspended: access revoked; namespace {name:?} and its contents are kept");
        (Reason::Suspended, message)
    } else {
        grant_access(user, ctx, name).await?;
        let message = format!(
            "namespace {name:?} provisioned; {:?} has ClusterRole {:?} there",
            user.spec.identity.username, user.spec.role
        );
        (Reason::Provisioned, message)
    };
    ensure_quota(user, ctx, name).await?;
    Ok(Step::Done(Outcome::new(name, reason, message)))
}

/// The `Ready=False` reason for a failed request: `Forbidden` when the API server (RBAC, an
/// admission policy or webhook) refused it with 403, else the step that failed.
pub fn failure_reason(error: &Error) -> Reason {
    match error {
        Error::Kube {
            source: kube::Error::Api(status),
            ..
        } if status.code == 403 => Reason::Forbidden,
        Error::Kube { verb, .. } => match verb {
            Verb::Get | Verb::List => Reason::ReadFailed,
            Verb::Create => Reason::CreateFailed,
            Verb::Apply | Verb::PatchStatus => Reason::ApplyFailed,
            Verb::Delete => Reason::DeleteFailed,
        },
        _ => Reason::ApplyFailed,
    }
}

/// The `Ready=False` message for a failed request: what failed, the API server's answer, and
/// that Homestead retries.
fn failure_message(error: &Error) -> String {
    format!("{error}; retrying with backoff")
}

/// Refuses to provision: `Ready=False` with the refusal's reason, a Warning Event on the
/// transition, and no write to anything but the User's status.
pub(crate) async fn refuse(
    user: &User,
    ctx: &Context,
    namespace: String,
    refusal: &Refusal,
) -> Result<Action> {
    let reason = refusal.reason();
    info!(user = %user.name_any(), %reason, "refusing to provision");
    // A refusal never keeps a suspended person's access in a namespace that is theirs.
    if user.spec.suspended
        && ctx
            .cached_namespace(&namespace)
            .is_some_and(|ns| is_owned_by(&ns.metadata, user))
    {
        revoke_access(user, ctx, &namespace).await?;
    }
    ctx.write_status(
        user,
        Outcome::new(namespace, reason, refusal.message(&ctx.config)),
    )
    .await?;
    Ok(Action::requeue(RESYNC))
}

/// Creates the Namespace `name` when `owned` (the User's existing one) is `None`, with a
/// request that fails if it exists, or brings `owned` back to the desired labels, annotations
/// and owner reference. Returns `false` when a Namespace of that name appeared, not the User's,
/// between the check and the create: it is left untouched.
async fn ensure_namespace(
    user: &User,
    ctx: &Context,
    name: &str,
    owned: Option<&Namespace>,
) -> Result<bool> {
    let desired = desired_namespace(user, name, ctx.config.pod_security);
    match owned {
        None => {
            if ctx.create(&desired).await?.is_none() {
                // Someone created it meanwhile; only a fresh read can say whose it is.
                let ns = ctx.get(&ObjectRef::<Namespace>::new(name)).await?;
                return Ok(ns.is_some_and(|ns| is_owned_by(&ns.metadata, user)));
            }
            let note = format!("created namespace {name:?}");
            ctx.record(user, Change::NamespaceCreated, note).await;
        }
        Some(ns) if metadata_matches(&desired.metadata, &ns.metadata, FIELD_MANAGER) => {}
        Some(ns) => {
            ctx.apply_over(&desired, &ns.metadata).await?;
            let note = format!("updated labels, annotations or owner of namespace {name:?}");
            ctx.record(user, Change::NamespaceUpdated, note).await;
        }
    }
    Ok(true)
}

/// Homestead's RoleBinding in the User's `namespace`, from the cache. It is known by its name in
/// a Namespace proven to be the User's, not by labels the person could edit.
fn cached_binding(ctx: &Context, namespace: &str) -> Option<RoleBinding> {
    cached(&ctx.caches.role_bindings, namespace, ROLE_BINDING_NAME).map(|rb| rb.as_ref().clone())
}

/// Suspension: removes every RoleBinding in the User's `namespace` that the cache knows of,
/// Homestead's and any the person (or anyone) made, so the person, their groups and their
/// ServiceAccounts lose all access there. The RoleBinding watch covers every namespace, so one
/// created later triggers this again.
async fn revoke_access(user: &User, ctx: &Context, namespace: &str) -> Result<()> {
    let bindings: Vec<String> = ctx
        .caches
        .role_bindings
        .state()
        .iter()
        .filter(|rb| rb.namespace().as_deref() == Some(namespace))
        .map(|rb| rb.name_any())
        .collect();
    revoke(user, ctx, namespace, bindings, "suspended").await
}

/// Deletes the RoleBindings `names` in `namespace` and reports them in one `AccessRevoked`
/// Event (`why` says why); does nothing for an empty list.
pub(crate) async fn revoke(
    user: &User,
    ctx: &Context,
    namespace: &str,
    mut names: Vec<String>,
    why: &str,
) -> Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    names.sort();
    for name in &names {
        let binding = ObjectRef::<RoleBinding>::new(name).within(namespace);
        ctx.delete(&binding, &DeleteParams::default()).await?;
    }
    let note = format!(
        "{why}: removed every RoleBinding in namespace {namespace:?}: {}",
        names.join(", ")
    );
    ctx.record(user, Change::AccessRevoked, note).await;
    Ok(())
}

/// Grants `spec.role` in `namespace`: creates, repairs or (on a role change, since roleRef is
/// immutable) replaces Homestead's RoleBinding; writes nothing when the cache already matches.
async fn grant_access(user: &User, ctx: &Context, namespace: &str) -> Result<()> {
    let desired = desired_role_binding(user, namespace);
    let (change, note) = match cached_binding(ctx, namespace) {
        Some(cached) if role_binding_matches(&desired, &cached, FIELD_MANAGER) => return Ok(()),
        Some(cached) if cached.role_ref != desired.role_ref => {
            // roleRef is immutable, so the binding is replaced; first make sure the API server
            // accepts the new one (RBAC, admission), so a refusal keeps the old access.
            let mut trial = desired.clone();
            trial.metadata.name = Some(format!("{ROLE_BINDING_NAME}-next"));
            ctx.dry_run_create(&trial).await?;
            let binding = ObjectRef::<RoleBinding>::new(ROLE_BINDING_NAME).within(namespace);
            ctx.delete(&binding, &DeleteParams::default()).await?;
            let note = format!(
                "role changed from {:?} to {:?}: recreated RoleBinding {namespace}/{ROLE_BINDING_NAME}",
                cached.role_ref.name, desired.role_ref.name
            );
            (Change::RoleChanged, note)
        }
        cached => {
            let change = if cached.is_some() {
                Change::RoleBindingRepaired
            } else {
                Change::AccessGranted
            };
            let note = format!(
                "bound ClusterRole {:?} to {:?} in namespace {namespace:?}",
                user.spec.role, user.spec.identity.username
            );
            (change, note)
        }
    };
    ctx.apply(&desired).await?;
    ctx.record(user, change, note).await;
    Ok(())
}

/// Applies, or removes, Homestead's ResourceQuota in `namespace` per `spec.quota`.
async fn ensure_quota(user: &User, ctx: &Context, namespace: &str) -> Result<()> {
    let cached = cached(&ctx.caches.quotas, namespace, QUOTA_NAME)
        .filter(|q| labelled_for(&q.metadata, user));
    let change = match (desired_quota(user, namespace), cached) {
        (Some(quota), Some(cached)) if quota_matches(&quota, &cached, FIELD_MANAGER) => {
            return Ok(());
        }
        (Some(quota), _) => {
            ctx.apply(&quota).await?;
            Change::QuotaApplied
        }
        (None, Some(_)) => {
            let quota = ObjectRef::<ResourceQuota>::new(QUOTA_NAME).within(namespace);
            ctx.delete(&quota, &DeleteParams::default()).await?;
            Change::QuotaRemoved
        }
        (None, None) => return Ok(()),
    };
    let verb = if change == Change::QuotaApplied {
        "applied"
    } else {
        "removed"
    };
    let note = format!("{verb} ResourceQuota {namespace}/{QUOTA_NAME}");
    ctx.record(user, change, note).await;
    Ok(())
}
