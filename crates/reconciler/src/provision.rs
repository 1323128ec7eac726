//! Provisioning a live User, as small idempotent steps: decide the Namespace name and refuse
//! what is unsafe ([`crate::validate`]), check the existing Namespace's ownership, then bring
//! the Namespace, the person's access (RoleBinding, or none while suspended) and the quota to
//! the desired state, writing only what differs from the cache, and finally the status.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{AppliedProfile, OnExpiry, Suspension, User};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::jiff::Timestamp;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use crate::cache::CachedRoleBinding;
use crate::client::{Object, cached};
use crate::context::Context;
use crate::desired::{
    LIMIT_RANGE_NAME, NETWORK_POLICY_NAME, QUOTA_NAME, ROLE_BINDING_NAME, desired_limit_range,
    desired_namespace, desired_network_policy, desired_quota, desired_role_binding,
};
use crate::drift::{limit_range_matches, network_policy_matches, quota_matches};
use crate::error::{Error, Result, Verb};
use crate::expiry::Expiry;
use crate::identity::IdentityHolder;
use crate::ownership::{is_owned_by, labelled_for};
use crate::profile::Resolved;
use crate::recent::user_key;
use crate::status::{Change, Outcome, Reason, convergence_print, terminating_message};
use crate::validate::{Refusal, namespace_name, validate};

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
pub async fn provision(user: &User, ctx: &Context) -> Result<Action> {
    let expiry = Expiry::of(user, Timestamp::now(), ctx.config.expiry_warning);
    if expiry == Expiry::Passed && user.spec.on_expiry == OnExpiry::Delete {
        return expire_by_deletion(user, ctx).await;
    }
    let owned = |n: &str| {
        ctx.cached_namespace(n)
            .is_some_and(|ns| is_owned_by(&ns.facts, user))
    };
    let expired = expiry == Expiry::Passed;
    if let Some(holder) = ctx.caches.identities.holder_other_than(user) {
        // One person, one User: checked before the Profile, so a duplicate gets nothing.
        let name = namespace_name(user, &ctx.config, owned);
        tell_holder(user, ctx, &holder);
        let refusal = Refusal::DuplicateIdentity(holder.name);
        return refuse(user, ctx, name, &refusal, expiry).await;
    }
    let resolved = match ctx.resolve(user) {
        Ok(resolved) => resolved,
        Err(refusal) => {
            let name = namespace_name(user, &ctx.config, owned);
            return refuse(user, ctx, name, &refusal, expiry).await;
        }
    };
    let user = &resolved.user;
    let name = namespace_name(user, &ctx.config, owned);
    if let Err(refusal) = validate(user, &name, &ctx.config) {
        return refuse(user, ctx, name, &refusal, expiry).await;
    }
    let mut changes = Vec::new();
    if let Some(note) = profile_move(user, resolved.applied.as_ref(), ctx) {
        changes.push((Change::ProfileChanged, note));
    }
    match converge(&resolved, ctx, &name, &mut changes, expired).await {
        Ok(Step::Done(outcome, recheck)) => {
            let outcome = outcome
                .with_changes(changes)
                .with_profile(resolved.applied.clone())
                .with_expiring(expiry.condition(user));
            let unconfirmed = ctx.write_status(user, outcome).await?;
            // Look again at the earliest of: a write the cache does not show yet, the
            // expiry warning, `validUntil` itself.
            let next = [recheck, unconfirmed, expiry.recheck()]
                .into_iter()
                .flatten()
                .min();
            Ok(next.map_or_else(Action::await_change, Action::requeue))
        }
        Ok(Step::Wait(outcome)) => {
            let unconfirmed = ctx
                .write_status(user, outcome.with_changes(changes))
                .await?;
            Ok(Action::requeue(
                unconfirmed.map_or(TERMINATING_RECHECK, |left| left.min(TERMINATING_RECHECK)),
            ))
        }
        Ok(Step::Refuse(refusal)) => refuse_after(user, ctx, name, &refusal, expiry, changes).await,
        Err(error) => {
            let outcome = Outcome::new(name, failure_reason(&error), failure_message(&error))
                .with_changes(changes);
            if let Err(status_error) = ctx.write_status(user, outcome).await {
                warn!(user = %user.name_any(), "reporting the failure failed: {status_error}");
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
    let print = convergence_print(user.metadata.generation, applied);
    if ctx
        .recent
        .convergence
        .unconfirmed(&user_key(user), print)
        .is_some()
    {
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
    changes.extend(ensure_quota(user, ctx, name).await?);
    changes.extend(ensure_limit_range(resolved, ctx, name).await?);
    changes.extend(ensure_isolation(resolved, ctx, name).await?);
    let mut recheck = None;
    let (reason, message) = if let Some(revocation) = revocation(user, expired) {
        changes.extend(revoke_access(ctx, name, revocation.why()).await?);
        (revocation.reason(), revocation.message(user, name))
    } else {
        match grant_access(user, ctx, name).await? {
            Grant::Unchanged => {}
            Grant::Changed(change, note) => changes.push((change, note)),
            Grant::Unconfirmed(left) => recheck = Some(left),
        }
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
    let isolated = resolved.isolation.is_some();
    let desired = desired_namespace(user, name, resolved.pod_security, isolated);
    let existing = match ctx.cached_namespace(name) {
        Some(ns) => ns,
        None => match ctx.create(&desired).await? {
            Some(created) => {
                ctx.recent.namespaces.remember(created);
                changes.push((
                    Change::NamespaceCreated,
                    format!("created namespace {name:?}"),
                ));
                return Ok(None);
            }
            None => match ctx.get(&ObjectRef::<Namespace>::new(name)).await? {
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
        return Ok(Some(Step::Refuse(Refusal::NamespaceConflict(
            name.to_owned(),
        ))));
    }
    if existing.metadata.deletion_timestamp.is_some() {
        let message = terminating_message(&existing);
        let outcome = Outcome::new(name, Reason::NamespaceTerminating, message);
        return Ok(Some(Step::Wait(outcome)));
    }
    // The cache keeps no managedFields, so a key Homestead applied and no longer wants (one
    // dropped from `spec.namespace.labels`, or by the Profile) is seen through the fingerprint
    // of what was applied (`homestead.dev/applied`): it differs whenever anything applied
    // would change, and drift shows as a missing label or annotation.
    if !existing.facts.include(&desired.metadata)
        && ctx
            .apply_over(&desired, existing.metadata.uid.as_deref())
            .await?
    {
        let note = format!("updated labels, annotations or owner of namespace {name:?}");
        changes.push((Change::NamespaceUpdated, note));
    }
    Ok(None)
}

/// Applies, or removes, Homestead's LimitRange in `namespace` per the Profile. Returns the
/// change made, if any.
async fn ensure_limit_range(
    resolved: &Resolved,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<(Change, String)>> {
    let user = &resolved.user;
    let managed = Managed {
        cached: cached(&ctx.caches.limit_ranges, namespace, LIMIT_RANGE_NAME)
            .filter(|l| labelled_for(&l.metadata, user)),
        desired: resolved
            .limit_range
            .as_ref()
            .map(|spec| desired_limit_range(user, namespace, spec)),
        matches: limit_range_matches,
        changes: (Change::LimitRangeApplied, Change::LimitRangeRemoved),
        why_removed: "the Profile has none",
    };
    ensure(ctx, namespace, LIMIT_RANGE_NAME, managed).await
}

/// Applies, or removes, Homestead's NetworkPolicy in `namespace` per the Profile's
/// `networkIsolation`. Returns the change made, if any.
async fn ensure_isolation(
    resolved: &Resolved,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<(Change, String)>> {
    let user = &resolved.user;
    let managed = Managed {
        cached: cached(&ctx.caches.network_policies, namespace, NETWORK_POLICY_NAME)
            .filter(|p| labelled_for(&p.metadata, user)),
        desired: resolved
            .isolation
            .as_deref()
            .map(|allowed| desired_network_policy(user, namespace, allowed)),
        matches: network_policy_matches,
        changes: (Change::IsolationApplied, Change::IsolationRemoved),
        why_removed: "the Profile's networkIsolation is None",
    };
    ensure(ctx, namespace, NETWORK_POLICY_NAME, managed).await
}

/// `validUntil` passed with `onExpiry: Delete`: deletes the User, whose finalizer then
/// offboards the person per `deletionPolicy`; an Event says why.
async fn expire_by_deletion(user: &User, ctx: &Context) -> Result<Action> {
    let until = user.spec.valid_until.as_ref().map(|t| t.0.to_string());
    info!(user = %user.name_any(), "validUntil passed: deleting the User");
    ctx.delete(
        &ObjectRef::<User>::new(&user.name_any()),
        &DeleteParams::default(),
    )
    .await?;
    let note = format!(
        "validUntil {} passed and onExpiry is Delete: deleted the User; offboarding follows its deletionPolicy",
        until.unwrap_or_default()
    );
    ctx.publish(user, EventType::Normal, Change::Expired.as_str(), note);
    Ok(Action::await_change())
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
            Verb::Get => Reason::ReadFailed,
            Verb::Create => Reason::CreateFailed,
            Verb::Apply | Verb::PatchStatus => Reason::ApplyFailed,
            Verb::Delete | Verb::DeleteCollection => Reason::DeleteFailed,
        },
        _ => Reason::ApplyFailed,
    }
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
        .is_some_and(|c| c.reason == Reason::DuplicateIdentity.as_str());
    if already {
        return;
    }
    let regarding = ObjectReference {
        api_version: Some(User::api_version(&()).into_owned()),
        kind: Some(User::kind(&()).into_owned()),
        name: Some(holder.name.clone()),
        uid: holder.uid.clone(),
        ..ObjectReference::default()
    };
    let note = format!(
        "User {:?} names this User's identity {:?}; it was refused (DuplicateIdentity) and gets no access",
        user.name_any(),
        user.spec.identity.username
    );
    ctx.publish_regarding(
        regarding,
        EventType::Warning,
        Reason::DuplicateIdentity.as_str(),
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
) -> Result<Action> {
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
) -> Result<Action> {
    let reason = refusal.reason();
    info!(user = %user.name_any(), %reason, "refusing to provision");
    let why = match (revocation(user, expiry == Expiry::Passed), refusal) {
        (Some(revocation), _) => Some(revocation.why()),
        (None, Refusal::DuplicateIdentity(_)) => Some("another User has this identity"),
        (None, _) => None,
    };
    if let Some(why) = why
        && ctx
            .cached_namespace(&namespace)
            .is_some_and(|ns| is_owned_by(&ns.facts, user))
    {
        changes.extend(revoke_access(ctx, &namespace, why).await?);
    }
    let outcome = Outcome::new(namespace, reason, refusal.message(&ctx.config))
        .with_changes(changes)
        .with_expiring(expiry.condition(user));
    let unconfirmed = ctx.write_status(user, outcome).await?;
    let next = [unconfirmed, expiry.recheck()].into_iter().flatten().min();
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// Why a live User has no access: expiry first (it wins over everything), then a suspension by
/// HR, then a deactivation by the identity provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Revocation {
    Expired,
    Suspended(Suspension),
}

/// The [`Revocation`] in force for `user`, if any (`expired`: `validUntil` has passed).
fn revocation(user: &User, expired: bool) -> Option<Revocation> {
    if expired {
        Some(Revocation::Expired)
    } else {
        user.spec.suspension().map(Revocation::Suspended)
    }
}

impl Revocation {
    fn reason(self) -> Reason {
        match self {
            Self::Expired => Reason::Expired,
            Self::Suspended(_) => Reason::Suspended,
        }
    }

    /// Why access was revoked, for the Event that names the removed RoleBindings.
    fn why(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Suspended(Suspension::Spec) => "suspended",
            Self::Suspended(Suspension::Directory) => "deactivated by the identity provider",
        }
    }

    /// The `Ready` message for `user` with Namespace `namespace`.
    fn message(self, user: &User, namespace: &str) -> String {
        let kept = format!("access revoked; namespace {namespace:?} and its contents are kept");
        match self {
            Self::Expired => {
                let until = user.spec.valid_until.as_ref().map(|t| t.0.to_string());
                format!("expired at {}: {kept}", until.unwrap_or_default())
            }
            Self::Suspended(Suspension::Spec) => format!("suspended: {kept}"),
            Self::Suspended(Suspension::Directory) => {
                format!("deactivated by the identity provider (SCIM active=false): {kept}")
            }
        }
    }
}

/// Homestead's RoleBinding in the User's `namespace`, from the cache. It is known by its name in
/// a Namespace proven to be the User's, not by labels the person could edit.
fn cached_binding(ctx: &Context, namespace: &str) -> Option<Arc<CachedRoleBinding>> {
    let binding = ctx
        .caches
        .role_bindings
        .get(Some(namespace), ROLE_BINDING_NAME);
    binding.map(Arc::new)
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
    revoke(ctx, namespace, cached_bindings_in(ctx, namespace), why).await
}

/// The names of every RoleBinding in `namespace` the cache knows of.
pub(crate) fn cached_bindings_in(ctx: &Context, namespace: &str) -> Vec<String> {
    ctx.caches.role_bindings.names_in(namespace)
}

/// Deletes the RoleBindings `names` in `namespace`; returns the `AccessRevoked` change that
/// names them (`why` says why), or `None` for an empty list.
pub(crate) async fn revoke(
    ctx: &Context,
    namespace: &str,
    mut names: Vec<String>,
    why: &str,
) -> Result<Option<(Change, String)>> {
    names.sort();
    for name in &names {
        let binding = ObjectRef::<RoleBinding>::new(name).within(namespace);
        ctx.delete(&binding, &DeleteParams::default()).await?;
    }
    Ok(revoked(namespace, &names, why))
}

/// Deletes every RoleBinding in `namespace` with one `deletecollection`, including any created
/// a moment ago that the cache does not show yet; returns the `AccessRevoked` change that names
/// them (`why` says why), or `None` when there were none.
pub(crate) async fn revoke_all(
    ctx: &Context,
    namespace: &str,
    why: &str,
) -> Result<Option<(Change, String)>> {
    let names = ctx.delete_all::<RoleBinding>(namespace).await?;
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

/// What [`grant_access`] did.
enum Grant {
    /// The cache shows the binding as desired: nothing written.
    Unchanged,
    /// Created, repaired or replaced the binding; the change and its note for the Event.
    Changed(Change, String),
    /// This replica created the binding moments ago and the RoleBinding watch has not
    /// delivered it yet: nothing written; look again after this long, in case the binding was
    /// deleted again before the cache caught up.
    Unconfirmed(Duration),
}

/// Grants `spec.role` in `namespace`: creates, repairs or replaces Homestead's RoleBinding;
/// writes nothing when the cache already matches, nor when this replica created the same
/// binding moments ago and the RoleBinding watch has not delivered it yet
/// ([`Recent::role_bindings`](crate::recent::Recent::role_bindings)).
///
/// A binding with another roleRef (a role change; roleRef is immutable) or other subjects (an
/// identity change, or someone rewrote Homestead's binding) is replaced by [`replace_access`]:
/// every RoleBinding in the Namespace goes first, so neither the old identity nor what the person
/// granted themselves under the old role outlives the change.
async fn grant_access(user: &User, ctx: &Context, namespace: &str) -> Result<Grant> {
    let desired = desired_role_binding(user, namespace);
    let (change, note) = match cached_binding(ctx, namespace) {
        Some(cached) if cached.matches(&desired) => return Ok(Grant::Unchanged),
        Some(cached) if !cached.binds_role_of(&desired) || !cached.binds_subjects_of(&desired) => {
            return replace_access(user, ctx, &cached, desired).await;
        }
        cached => {
            let note = format!(
                "bound ClusterRole {:?} to {:?} in namespace {namespace:?}",
                user.spec.role(),
                user.spec.identity.username
            );
            if cached.is_none() {
                let created = &ctx.recent.role_bindings;
                let same = |binding: &CachedRoleBinding| binding.matches(&desired);
                if let Some(left) = created.unconfirmed(Some(namespace), ROLE_BINDING_NAME, same) {
                    return Ok(Grant::Unconfirmed(left));
                }
                // A binding the cache does not know is created with a request that fails if
                // it exists (cheaper for the API server than an apply); one that exists is
                // applied.
                if let Some(created) = ctx.create(&desired).await? {
                    ctx.recent.role_bindings.remember(created);
                    return Ok(Grant::Changed(Change::AccessGranted, note));
                }
            }
            (Change::RoleBindingRepaired, note)
        }
    };
    ctx.apply(&desired).await?;
    Ok(Grant::Changed(change, note))
}

/// Replaces Homestead's binding `cached` with `desired` after a role or identity change: first
/// a dry-run create under a generated name (so a binding someone named `homestead-user-next`
/// cannot block it) proves the API server accepts the new one, and a refusal keeps the old
/// access; then every RoleBinding in the Namespace is removed with one `deletecollection`
/// (what exists, not what the cache shows) ("a role downgrade removes what grants more than the new role"; the old identity's
/// own grants go with it), and the new binding is created.
async fn replace_access(
    user: &User,
    ctx: &Context,
    cached: &CachedRoleBinding,
    desired: RoleBinding,
) -> Result<Grant> {
    let namespace = desired.metadata.namespace.clone().unwrap_or_default();
    let mut trial = desired.clone();
    trial.metadata.name = None;
    trial.metadata.generate_name = Some(format!("{ROLE_BINDING_NAME}-"));
    ctx.dry_run_create(&trial).await?;
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
    let revoked = revoke_all(ctx, &namespace, why).await?;
    match ctx.create(&desired).await? {
        Some(created) => ctx.recent.role_bindings.remember(created),
        // Someone created one under Homestead's name between the removal and the create.
        None => ctx.apply(&desired).await?,
    }
    let removed = revoked
        .map(|(_, note)| format!("; {note}"))
        .unwrap_or_default();
    Ok(Grant::Changed(change, format!("{what}{removed}")))
}

/// Applies, or removes, Homestead's ResourceQuota in `namespace` per `spec.quota`. Returns the
/// change made, if any.
async fn ensure_quota(
    user: &User,
    ctx: &Context,
    namespace: &str,
) -> Result<Option<(Change, String)>> {
    let managed = Managed {
        cached: cached(&ctx.caches.quotas, namespace, QUOTA_NAME)
            .filter(|q| labelled_for(&q.metadata, user)),
        desired: desired_quota(user, namespace),
        matches: quota_matches,
        changes: (Change::QuotaApplied, Change::QuotaRemoved),
        why_removed: "spec.quota is gone",
    };
    ensure(ctx, namespace, QUOTA_NAME, managed).await
}

/// One object Homestead keeps in a person's Namespace, as the cache and the desired state
/// have it.
struct Managed<K> {
    /// The cached object, if it is labelled as this User's.
    cached: Option<Arc<K>>,
    /// The object Homestead wants, or `None` for none.
    desired: Option<K>,
    /// Whether the cached object already is the desired one, as (desired, cached).
    matches: fn(&K, &K) -> bool,
    /// The Event reasons of an apply and of a removal.
    changes: (Change, Change),
    /// Why it is removed, for the Event's note.
    why_removed: &'static str,
}

/// Applies `managed.desired` (server-side apply) when the cache shows something else, or
/// deletes the object `name` when nothing is desired and the cache has it. Returns the change
/// made, if any.
async fn ensure<K: Object>(
    ctx: &Context,
    namespace: &str,
    name: &str,
    managed: Managed<K>,
) -> Result<Option<(Change, String)>> {
    let kind = K::kind(&());
    let (applied, removed) = managed.changes;
    match (managed.desired, managed.cached) {
        (Some(desired), Some(cached)) if (managed.matches)(&desired, &cached) => Ok(None),
        (Some(desired), _) => {
            ctx.apply(&desired).await?;
            Ok(Some((
                applied,
                format!("applied {kind} {namespace}/{name}"),
            )))
        }
        (None, Some(_)) => {
            let reference = ObjectRef::<K>::new(name).within(namespace);
            ctx.delete(&reference, &DeleteParams::default()).await?;
            let note = format!("removed {kind} {namespace}/{name}: {}", managed.why_removed);
            Ok(Some((removed, note)))
        }
        (None, None) => Ok(None),
    }
}
