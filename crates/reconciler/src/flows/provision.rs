//! Provisioning a live User, as small idempotent steps: decide the Namespace name and refuse
//! what is unsafe ([`crate::plan::validate`]), check the existing Namespace's ownership, then bring
//! the Namespace, the person's access (RoleBinding, or none while suspended) and the quota to
//! the desired state, writing only what differs from the cache, and finally the status.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{
    AppliedProfile, Change, LABEL_ADOPT_FOR, OnExpiry, Reason, RefusalKind, SHARE_BINDING_PREFIX,
    TenantRoleBindings, User,
};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::DeleteParams;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use crate::act::access::{self, Grant};
use crate::act::guards::{Managed, ensure};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::flows::requeue::Requeue;
use crate::flows::total::ensure_slice;
use crate::plan::desired::{
    LIMIT_RANGE_NAME, NETWORK_POLICY_NAME, QUOTA_NAME, ROLE_BINDING_NAME, desired_limit_range,
    desired_namespace, desired_network_policy, desired_quota,
};
use crate::plan::drift::quota_matches;
use crate::plan::expiry::Expiry;
use crate::plan::ownership::{is_handed_to, is_owned_by};
use crate::plan::profile::Resolved;
use crate::plan::revocation::revocation;
use crate::plan::share::share_of_binding;
use crate::plan::status::{Outcome, terminating_message};
use crate::plan::validate::{Refusal, namespace_name, validate};
use crate::state::Caches;
use homestead_model::identity::IdentityHolder;
use homestead_model::workspace::Owner;

/// How often every User is reconciled again, changed or not (the operator triggers all of them
/// at once with kube-runtime's `Controller::reconcile_all_on`): a periodic check that costs
/// cache reads only. A User in its final state (converged or refused) is not requeued on its
/// own: watches bring every change sooner, and 10,000 pending requeues in the Controller's
/// scheduler cost megabytes for nothing.
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
pub async fn provision(user: &User, ctx: &Context) -> Result<Requeue> {
    let expiry = Expiry::of(user, Timestamp::now(), ctx.config().expiry_warning);
    if expiry == Expiry::Passed && user.spec.on_expiry == OnExpiry::Delete {
        return expire_by_deletion(user, ctx).await;
    }
    let owned = |n: &str| {
        ctx.caches()
            .namespace(n)
            .is_some_and(|ns| is_owned_by(&ns.facts, user))
    };
    let expired = expiry == Expiry::Passed;
    if let Some(holder) = ctx.caches().identities.holder_other_than(user) {
        // One person, one User: checked before the Profile, so a duplicate gets nothing.
        let name = namespace_name(user, ctx.config(), owned);
        tell_holder(user, ctx, &holder);
        let refusal = Refusal::DuplicateIdentity(holder.name);
        return refuse(user, ctx, name, &refusal, expiry).await;
    }
    let resolved = match ctx.resolve(user) {
        Ok(resolved) => resolved,
        Err(refusal) => {
            let name = namespace_name(user, ctx.config(), owned);
            return refuse(user, ctx, name, &refusal, expiry).await;
        }
    };
    // The User with its Profile applied (its metadata and status are the User's own).
    let completed = &resolved.user;
    let name = namespace_name(completed, ctx.config(), owned);
    if let Err(refusal) = validate(completed, &name, ctx.config()) {
        return refuse(completed, ctx, name, &refusal, expiry).await;
    }
    let mut changes = Vec::new();
    if let Some(note) = profile_move(completed, resolved.applied.as_ref(), ctx) {
        changes.push((Change::ProfileChanged, note));
    }
    match converge(&resolved, ctx, &name, &mut changes, expired).await {
        Ok(Step::Done(outcome, recheck)) => {
            let outcome = outcome
                .with_changes(changes)
                .with_profile(resolved.applied.clone())
                .with_role(completed.spec.role())
                .with_expiring(expiry.condition(completed));
            let unconfirmed = ctx.cluster().write_status(completed, outcome).await?;
            // Look again at the earliest of: a write the cache does not show yet, the
            // expiry warning, `validUntil` itself.
            let next = [recheck, unconfirmed, expiry.recheck()]
                .into_iter()
                .flatten()
                .min();
            Ok(Requeue::from(next))
        }
        Ok(Step::Wait(outcome)) => {
            // The Profile stays recorded through a wait or a failure: a person's workspaces
            // take their guards from it, and lose none while their owner's pass retries.
            let outcome = outcome
                .with_changes(changes)
                .with_profile(resolved.applied.clone());
            let unconfirmed = ctx.cluster().write_status(completed, outcome).await?;
            Ok(Requeue::after(
                unconfirmed.map_or(TERMINATING_RECHECK, |left| left.min(TERMINATING_RECHECK)),
            ))
        }
        Ok(Step::Refuse(refusal)) => {
            refuse_after(completed, ctx, name, &refusal, expiry, changes).await
        }
        Err(error) => {
            let outcome = Outcome::new(
                name,
                Reason::Failed(error.failure()),
                failure_message(&error),
            )
            .with_changes(changes)
            .with_profile(resolved.applied.clone());
            if let Err(status_error) = ctx.cluster().write_status(completed, outcome).await {
                warn!(completed = %user.name_any(), "reporting the failure failed: {status_error}");
            }
            Err(error)
        }
    }
}

/// The note of a `ProfileChanged` Event when `applied` (the Profile and the directory group
/// that chose it) differs from what `user`'s status says its objects reflect, such as
/// `Profile "engineer" (the operator's default) -> "data-science" (directory group
/// data-science)`; `None` when it is the same, when the User was never reconciled, or when this
/// replica converged the User with `applied` moments ago (the cache has not shown that status
/// yet).
fn profile_move(user: &User, applied: Option<&AppliedProfile>, ctx: &Context) -> Option<String> {
    let status = user.status.as_ref()?;
    user.ready_condition()?;
    let before = status.profile.as_ref();
    let key = |p: Option<&AppliedProfile>| p.map(|p| (p.name.clone(), p.group.clone()));
    if key(before) == key(applied) {
        return None;
    }
    if ctx.cluster().converged_moments_ago(user, applied) {
        return None;
    }
    let describe = |p: Option<&AppliedProfile>| match p {
        None => "none".to_owned(),
        Some(AppliedProfile {
            name,
            group: Some(group),
            ..
        }) => format!("{name:?} (directory group {group})"),
        Some(AppliedProfile { name, .. }) if user.spec.profile.as_ref() == Some(name) => {
            format!("{name:?} (spec.profile)")
        }
        Some(AppliedProfile { name, .. }) => format!("{name:?}"),
    };
    Some(format!(
        "Profile {} -> {}",
        describe(before),
        describe(applied)
    ))
}

/// What a reconcile changed so far, each with a note for the Event that reports it.
type Changes = Vec<(Change, String)>;

/// Where a reconcile of a live User ends.
enum Step {
    /// Converged: the `Ready` outcome to write, and when to look again if it relied on a
    /// write of this replica that the cache does not show yet ([`Grant::Unconfirmed`]).
    Done(Outcome, Option<Duration>),
    /// The Namespace is terminating: report and check again later.
    Wait(Outcome),
    /// Found a reason to refuse (a Namespace that is not the User's).
    Refuse(Refusal),
}

/// Converges the Namespace, then access, quota, LimitRange and network isolation, recording
/// what it changed in `changes`.
async fn converge(
    resolved: &Resolved,
    ctx: &Context,
    name: &str,
    changes: &mut Changes,
    expired: bool,
) -> Result<Step> {
    let user = &resolved.user;
    if let Some(step) = ensure_namespace(resolved, ctx, name, changes).await? {
        // A terminating namespace keeps its RoleBindings until the namespace controller gets
        // to them, which may take long (finalizers, an unavailable API): revocation does not
        // wait for it (docs/security.md, "Revocation is a standing rule").
        if let (Step::Wait(_), Some(revocation)) = (&step, revocation(user, expired)) {
            changes.extend(revoke_access(ctx, name, revocation.why()).await?);
        }
        return Ok(step);
    }
    // Guards before access (docs: "Guards before access"): Pod Security came with the
    // Namespace; quota, LimitRange and isolation exist before any RoleBinding is written.
    changes.extend(ensure_guards(resolved, ctx, name).await?);
    let mut recheck = None;
    let (reason, message) = if let Some(revocation) = revocation(user, expired) {
        changes.extend(revoke_access(ctx, name, revocation.why()).await?);
        (revocation.reason(), revocation.message(user, name))
    } else {
        let cached = ctx.caches().role_binding(name, ROLE_BINDING_NAME);
        match access::grant(ctx.cluster(), user, name, cached).await? {
            Grant::Unchanged => {}
            Grant::Changed(change, note) => changes.push((change, note)),
            Grant::Unconfirmed(left) => recheck = Some(left),
        }
        let governed = resolved.tenant_role_bindings;
        let ungoverned = ungoverned(ctx.caches(), name, governed);
        let why = format!("the home is governed (tenantRoleBindings: {governed:?})");
        changes.extend(access::revoke(ctx.cluster(), name, ungoverned, &why).await?);
        let profile = resolved
            .applied
            .as_ref()
            .map(|p| format!(" (Profile {:?})", p.name))
            .unwrap_or_default();
        let message = format!(
            "namespace {name:?} provisioned{profile}; {:?} has ClusterRole {:?} there",
            user.spec.identity.username,
            user.spec.role()
        );
        (Reason::Provisioned, message)
    };
    Ok(Step::Done(Outcome::new(name, reason, message), recheck))
}

/// Brings the Namespace `name` to the desired state, without a read the cache can answer.
/// Unknown to the cache (which holds the Namespaces labelled as Homestead's), it is created
/// with a request that fails if it exists; only then is it read, to learn whose it is. An
/// existing Namespace must be the User's, is waited for while it terminates, and gets its
/// labels, annotations and owner reference back if they drifted. Returns the [`Step`] that
/// ends the reconcile early (a refusal or a wait), or `None` to go on.
async fn ensure_namespace(
    resolved: &Resolved,
    ctx: &Context,
    name: &str,
    changes: &mut Changes,
) -> Result<Option<Step>> {
    let user = &resolved.user;
    let desired = desired_namespace(user, name, resolved.pod_security, resolved.traits());
    let mut existing = match ctx.caches().namespace(name) {
        Some(ns) => ns,
        None => match ctx.cluster().create_namespace(&desired).await? {
            Some(_) => {
                changes.push((
                    Change::NamespaceCreated,
                    format!("created namespace {name:?}"),
                ));
                return Ok(None);
            }
            None => match ctx
                .cluster()
                .get(&ObjectRef::<Namespace>::new(name))
                .await?
            {
                Some(ns) => Arc::new(ns.into()),
                None => {
                    // Deleted between the create and the read: try again soon.
                    let message = format!("namespace {name:?} was deleted a moment ago");
                    let outcome = Outcome::new(name, Reason::NamespaceTerminating, message);
                    return Ok(Some(Step::Wait(outcome)));
                }
            },
        },
    };
    if !is_owned_by(&existing.facts, user) {
        let adopted = if is_handed_to(&existing.facts, user)
            && existing.metadata.deletion_timestamp.is_none()
        {
            let uid = existing.metadata.uid.as_deref();
            ctx.cluster()
                .adopt_namespace(&desired, uid, &user.name_any())
                .await?
        } else {
            None
        };
        match adopted {
            Some(adopted) => existing = Arc::new(adopted.into()),
            None => {
                return Ok(Some(Step::Refuse(Refusal::NamespaceConflict(
                    name.to_owned(),
                ))));
            }
        }
    }
    // Adopted, or adopted by a reconcile that failed before it finished: finish it.
    if existing.facts.has_label(LABEL_ADOPT_FOR, &user.name_any()) {
        finish_adoption(ctx, user, name, existing.metadata.uid.as_deref(), changes).await?;
    }
    if existing.metadata.deletion_timestamp.is_some() {
        let message = terminating_message(name, existing.status.as_ref());
        let outcome = Outcome::new(name, Reason::NamespaceTerminating, message);
        return Ok(Some(Step::Wait(outcome)));
    }
    // The cache keeps no managedFields, so a key Homestead applied and no longer wants (one
    // dropped from `spec.namespace.labels`, or by the Profile) is seen through the fingerprint
    // of what was applied (`homestead.dev/applied`): it differs whenever anything applied
    // would change, and drift shows as a missing label or annotation.
    if !existing.facts.include(&desired.metadata)
        && ctx
            .cluster()
            .apply_over(&desired, existing.metadata.uid.as_deref())
            .await?
    {
        let note = format!("updated labels, annotations or owner of namespace {name:?}");
        changes.push((Change::NamespaceUpdated, note));
    }
    Ok(None)
}

/// Finishes the adoption of `user`'s Namespace `name` (uid `uid`), still labelled
/// `homestead.dev/adopt-for=<User>` ([`crate::act::Cluster::adopt_namespace`] made it the
/// User's): nothing in it is deleted but, under `--revoke-adopted-role-bindings`, the
/// RoleBindings made before it (never Homestead's own); then the label goes
/// ([`crate::act::Cluster::adopted`]). Until then every reconcile comes back here, so a
/// failure or a restart in between never leaves the revocation undone. The
/// `NamespaceAdopted` change names those RoleBindings, kept (`homestead access` shows them as
/// `unmanaged`) or removed; one log line says the same.
async fn finish_adoption(
    ctx: &Context,
    user: &User,
    name: &str,
    uid: Option<&str>,
    changes: &mut Changes,
) -> Result<()> {
    let user = &user.name_any();
    let mut bindings: Vec<String> = ctx
        .caches()
        .role_bindings_in(name)
        .into_iter()
        .filter(|b| b != ROLE_BINDING_NAME && !b.starts_with(SHARE_BINDING_PREFIX))
        .collect();
    bindings.sort();
    let revoke = ctx.config().revoke_adopted_role_bindings && !bindings.is_empty();
    let fate = match (bindings.is_empty(), revoke) {
        (true, _) => "it had no RoleBinding".to_owned(),
        (false, false) => format!(
            "kept its RoleBindings made before adoption, unmanaged: {}",
            bindings.join(", ")
        ),
        (false, true) => format!(
            "removed its RoleBindings made before adoption (--revoke-adopted-role-bindings): {}",
            bindings.join(", ")
        ),
    };
    info!(
        user = %user,
        namespace = %name,
        role_bindings = %bindings.join(","),
        revoked = revoke,
        "adopted a namespace the platform labelled {LABEL_ADOPT_FOR}={user}"
    );
    changes.push((
        Change::NamespaceAdopted,
        format!(
            "adopted namespace {name:?}, labelled {LABEL_ADOPT_FOR}={user} by the platform; nothing in it was deleted; {fate}"
        ),
    ));
    if revoke {
        access::revoke(ctx.cluster(), name, bindings, "made before adoption").await?;
    }
    ctx.cluster().adopted(name, uid).await
}

/// `validUntil` passed with `onExpiry: Delete`: deletes the User, whose finalizer then
/// offboards the person per `deletionPolicy`; an Event says why.
async fn expire_by_deletion(user: &User, ctx: &Context) -> Result<Requeue> {
    let until = user.spec.valid_until.as_ref().map(|t| t.0.to_string());
    info!(user = %user.name_any(), "validUntil passed: deleting the User");
    ctx.cluster()
        .delete(
            &ObjectRef::<User>::new(&user.name_any()),
            &DeleteParams::default(),
        )
        .await?;
    let note = format!(
        "validUntil {} passed and onExpiry is Delete: deleted the User; offboarding follows its deletionPolicy",
        until.unwrap_or_default()
    );
    ctx.cluster()
        .publish(user, EventType::Normal, Change::Expired.as_str(), note);
    Ok(Requeue::on_change())
}

/// The `Ready=False` message for a failed request: what failed, the API server's answer, and
/// that Homestead retries.
fn failure_message(error: &Error) -> String {
    format!("{error}; retrying with backoff")
}

/// The Warning Event on `holder`, the older User with `user`'s identity, when `user` is
/// first refused as its duplicate (not on every reconcile of `user` after that).
fn tell_holder(user: &User, ctx: &Context, holder: &IdentityHolder) {
    let already = user
        .ready_condition()
        .is_some_and(|c| c.reason == RefusalKind::DuplicateIdentity.as_str());
    if already {
        return;
    }
    let regarding = ObjectReference {
        api_version: Some(User::api_version(&()).into_owned()),
        kind: Some(User::kind(&()).into_owned()),
        name: Some(holder.name.clone()),
        uid: ctx.caches().user(&holder.name).and_then(|held| held.uid()),
        ..ObjectReference::default()
    };
    let note = format!(
        "User {:?} names this User's identity {:?}; it was refused (DuplicateIdentity) and gets no access",
        user.name_any(),
        user.spec.identity.username
    );
    ctx.cluster().publish_regarding(
        regarding,
        EventType::Warning,
        RefusalKind::DuplicateIdentity.as_str(),
        note,
        None,
    );
}

/// Refuses to provision: `Ready=False` with the refusal's reason and a Warning Event on the
/// transition, and no write but the User's status and, in a Namespace proven to be the User's,
/// the revocation a suspension or a passed `validUntil` demands: a refusal never keeps access
/// that expiry or suspension ends ("Expiry wins"), and a duplicate identity keeps none at all.
/// Looks again at `validUntil` if it is still ahead.
pub(crate) async fn refuse(
    user: &User,
    ctx: &Context,
    namespace: String,
    refusal: &Refusal,
    expiry: Expiry,
) -> Result<Requeue> {
    refuse_after(user, ctx, namespace, refusal, expiry, Vec::new()).await
}

/// [`refuse`], naming in its Event the `changes` made before the refusal was found.
async fn refuse_after(
    user: &User,
    ctx: &Context,
    namespace: String,
    refusal: &Refusal,
    expiry: Expiry,
    mut changes: Changes,
) -> Result<Requeue> {
    let reason = refusal.reason();
    info!(user = %user.name_any(), %reason, "refusing to provision");
    let why = match (revocation(user, expiry == Expiry::Passed), refusal) {
        (Some(revocation), _) => Some(revocation.why()),
        (None, Refusal::DuplicateIdentity(_)) => Some("another User has this identity"),
        (None, _) => None,
    };
    if let Some(why) = why
        && ctx
            .caches()
            .namespace(&namespace)
            .is_some_and(|ns| is_owned_by(&ns.facts, user))
    {
        changes.extend(revoke_access(ctx, &namespace, why).await?);
    }
    let outcome = Outcome::new(namespace, reason, refusal.message(ctx.config()))
        .with_changes(changes)
        .with_expiring(expiry.condition(user));
    let unconfirmed = ctx.cluster().write_status(user, outcome).await?;
    let next = [unconfirmed, expiry.recheck()].into_iter().flatten().min();
    Ok(Requeue::from(next))
}

/// Suspension or expiry: removes every RoleBinding in the User's `namespace` that the cache
/// knows of, Homestead's and any the person (or anyone) made, so the person, their groups and
/// their ServiceAccounts lose all access there. The RoleBinding watch covers every namespace,
/// so one created later triggers this again (the standing revocation rule). `why` says why, for
/// the Event. Returns the change made, if any.
async fn revoke_access(
    ctx: &Context,
    namespace: &str,
    why: &str,
) -> Result<Option<(Change, String)>> {
    let names = ctx.caches().role_bindings_in(namespace);
    access::revoke(ctx.cluster(), namespace, names, why).await
}

/// The RoleBindings in `namespace` that a home governed by `governed` does not admit from a
/// tenant (the admission policy `homestead-governed-homes`): under `ServiceAccountsOnly`, one
/// that binds anything but ServiceAccounts of the namespace; under `Forbid`, every one. Never
/// Homestead's own: `homestead-user`, and a Share's binding whose Share exists (each kept as
/// its owner says by its own reconcile). Empty under `Allow`. So a home made governed later
/// keeps none of the bindings made before (docs/sharing.md, "Governed homes"): revocation
/// removes what exceeds the rule, whoever made it.
fn ungoverned(caches: &Caches, namespace: &str, governed: TenantRoleBindings) -> Vec<String> {
    if governed == TenantRoleBindings::Allow {
        return Vec::new();
    }
    caches
        .role_bindings_in(namespace)
        .into_iter()
        .filter(|name| name != ROLE_BINDING_NAME)
        .filter(|name| {
            share_of_binding(name).is_none_or(|share| !caches.has_share(namespace, share))
        })
        .filter(|name| {
            governed == TenantRoleBindings::Forbid
                || caches
                    .role_binding(namespace, name)
                    .is_some_and(|b| !b.local_service_accounts_only)
        })
        .collect()
}

/// Homestead's ResourceQuota (per `spec.quota`), the home's slice of the person's total
/// (per the Profile's `totalQuota`, docs/quota.md), LimitRange (per the Profile) and NetworkPolicy
/// (per the Profile's `networkIsolation`) in `namespace`, each applied when the cache shows
/// something else and removed when nothing is desired. Returns the changes made.
async fn ensure_guards(resolved: &Resolved, ctx: &Context, namespace: &str) -> Result<Changes> {
    let (user, caches, cluster) = (&resolved.user, ctx.caches(), ctx.cluster());
    let quota = Managed {
        cached: caches.quota(namespace, QUOTA_NAME),
        desired: desired_quota(user, namespace),
        matches: quota_matches,
        changes: (Change::QuotaApplied, Change::QuotaRemoved),
        why_removed: "spec.quota is gone",
    };
    let limits = Managed {
        cached: caches.limit_range(namespace, LIMIT_RANGE_NAME),
        desired: (resolved.limit_range.as_ref())
            .map(|spec| desired_limit_range(user, namespace, spec)),
        matches: |desired, cached| cached.matches(desired),
        changes: (Change::LimitRangeApplied, Change::LimitRangeRemoved),
        why_removed: "the Profile has none",
    };
    let isolation = Managed {
        cached: caches.network_policy(namespace, NETWORK_POLICY_NAME),
        desired: (resolved.isolation.as_deref())
            .map(|allowed| desired_network_policy(user, namespace, allowed)),
        matches: |desired, cached| cached.matches(desired),
        changes: (Change::IsolationApplied, Change::IsolationRemoved),
        why_removed: "the Profile's networkIsolation is None",
    };
    let mut changes = Vec::new();
    changes.extend(ensure(cluster, user, namespace, QUOTA_NAME, quota).await?);
    let owner = Owner::User(user.name_any());
    let total = (&owner, resolved.total.as_ref());
    changes.extend(ensure_slice(ctx, user, namespace, total).await?);
    changes.extend(ensure(cluster, user, namespace, LIMIT_RANGE_NAME, limits).await?);
    changes.extend(ensure(cluster, user, namespace, NETWORK_POLICY_NAME, isolation).await?);
    Ok(changes)
}
