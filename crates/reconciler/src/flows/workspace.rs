//! The reconcile of one Workspace (docs/workspaces.md): a home that is not a person's own. The
//! finalizer helper runs [`open`] while it lives and [`close`] once it is deleted. [`open`]
//! decides from the caches ([`crate::plan::workspace::decide`]), then brings the namespace, its
//! guards and its two RoleBindings to that decision, guards before access, and writes the status;
//! whatever it decides that grants nothing (refused, suspended) removes every RoleBinding in a
//! namespace that is the workspace's, as a suspended User's home (the standing revocation rule).

use std::sync::Arc;

use homestead_api::{
    ANNOTATION_OWNER, CONDITION_READY, Change, DeletionPolicy, FINALIZER, LABEL_HANDED_OVER_FROM,
    LABEL_USER, MemberCount, SHARE_BINDING_PREFIX, TenantRoleBindings, WORKSPACE_ADMINS_BINDING,
    WORKSPACE_MEMBERS_BINDING, Workspace, WorkspaceStatus,
};
use homestead_model::workspace::{Grant, Owner};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tracing::{debug, info, instrument, warn};

use super::offboard::NOT_LEADER_RECHECK;
use super::provision::TERMINATING_RECHECK;
use crate::act::access;
use crate::act::guards::{Managed, ensure};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::flows::requeue::Requeue;
use crate::flows::total::{ensure_slice, owner_total, release_slice};
use crate::plan::desired::{
    LIMIT_RANGE_NAME, NETWORK_POLICY_NAME, QUOTA_NAME, desired_limit_range, desired_network_policy,
    quota_of,
};
use crate::plan::drift::quota_matches;
use crate::plan::facts::Facts;
use crate::plan::handover::handing_over;
use crate::plan::ownership::is_owned_by;
use crate::plan::profile::group_profile;
use crate::plan::share::share_of_binding;
use crate::plan::status::{set_condition, terminating_message};
use crate::plan::workspace::{
    Guards, Looked, Refusal, Verdict, decide, desired_bindings, desired_namespace, is_self_service,
    namespace_of, owners_annotation, retained_namespace,
};
use crate::state::Caches;

/// What a pass changed, each with the note of its Event.
type Changes = Vec<(Change, String)>;

/// Reconciles one Workspace once every cache has synced (see the module docs). Waiting for a
/// terminating namespace is a normal outcome: a look again after 30 s.
///
/// # Errors
/// [`Error`] when an API request fails; the Controller then calls [`workspace_error`].
#[instrument(skip_all, fields(workspace = %workspace.name_any()))]
pub async fn reconcile_workspace(workspace: Arc<Workspace>, ctx: Arc<Context>) -> Result<Requeue> {
    if !ctx.ready_to_write().await {
        return Ok(Requeue::after(NOT_LEADER_RECHECK));
    }
    let reference = ObjectRef::from_obj(workspace.as_ref());
    let api: Api<Workspace> = Api::all(ctx.cluster().client().clone());
    // The helper wants kube-runtime's `Action`, which cannot be read back: the flow's own
    // answer is kept here, and stays `on_change` when the helper only added the finalizer (or
    // found a deleted Workspace already without it).
    let mut next = Requeue::on_change();
    let flow_next = &mut next;
    let ctx_of_flow = &ctx;
    let result = finalizer(&api, FINALIZER, workspace, move |event| async move {
        let requeue = match event {
            Finalizer::Apply(workspace) => open(&workspace, ctx_of_flow).await,
            Finalizer::Cleanup(workspace) => close(&workspace, ctx_of_flow).await,
        }?;
        *flow_next = requeue;
        Ok(Action::from(requeue))
    })
    .await
    .map(|_| next)
    .map_err(|e| Error::Finalizer(Box::new(e)))
    .or_else(|e| match e.terminating_namespace() {
        Some(namespace) => {
            debug!(%namespace, "waiting for the workspace's namespace to be deleted");
            Ok(Requeue::after(TERMINATING_RECHECK))
        }
        None => Err(e),
    });
    if result.is_ok() {
        ctx.workspace_backoffs().reset(&reference);
    }
    result
}

/// After a failed reconcile of a Workspace: logs it and retries with the Workspace's backoff
/// (1 s doubling to 5 min, with jitter).
pub fn workspace_error(workspace: Arc<Workspace>, error: &Error, ctx: Arc<Context>) -> Requeue {
    let reason = error.metric_label().as_str();
    ctx.metrics().errors.with_label_values(&[reason]).inc();
    let delay = ctx
        .workspace_backoffs()
        .next_delay(ObjectRef::from_obj(workspace.as_ref()));
    warn!(workspace = %workspace.name_any(), retry_in_seconds = delay.as_secs_f64(), "reconciling a workspace failed: {error}");
    Requeue::after(delay)
}

/// Brings a live Workspace to what [`decide`] says (see the module docs).
async fn open(workspace: &Workspace, ctx: &Context) -> Result<Requeue> {
    let (caches, config) = (ctx.caches(), ctx.config());
    let namespace = namespace_of(workspace, config);
    let owner = Owner::of(workspace);
    // A personal workspace goes with its owner: once the owner it was provisioned for is
    // offboarding or gone (a User of that name made since is another person), the Workspace is
    // deleted, and its own deletionPolicy (default Retain) says what becomes of its data.
    // An owner handing their homes over keeps them until the handover has moved the namespace
    // (then this workspace, left without it, goes without touching it).
    if let Some(Owner::User(name)) = &owner
        && owner_left(workspace, caches.user(name).as_deref())
        && !caches.user(name).is_some_and(|u| handing_over(&u))
    {
        info!(workspace = %workspace.name_any(), owner = %name, "the owner left: deleting the workspace");
        let reference = ObjectRef::<Workspace>::new(&workspace.name_any());
        ctx.cluster()
            .delete(&reference, &DeleteParams::default())
            .await?;
        return Ok(Requeue::on_change());
    }
    let verdict = {
        let looked = LookedUp::of(workspace, owner.as_ref(), caches);
        let live = |name: &str| {
            looked
                .live_users
                .iter()
                .find(|u| u.name_any() == name)
                .map(AsRef::as_ref)
        };
        decide(workspace, &looked.borrowed(&live), config, Timestamp::now())
    };
    let mut changes = Changes::new();
    let outcome = match &verdict {
        Verdict::Refused(refusal) => {
            revoke_if_owned(ctx, workspace, &namespace, refusal.reason(), &mut changes).await?;
            Outcome::refused(refusal, config)
        }
        Verdict::Suspended(why, guards) => {
            converge(ctx, workspace, (&namespace, guards), Err(why), &mut changes).await?
        }
        Verdict::Open(grants, guards) => {
            converge(
                ctx,
                workspace,
                (&namespace, guards),
                Ok(grants),
                &mut changes,
            )
            .await?
        }
    };
    let terminating = outcome.reason == "NamespaceTerminating";
    write_status(ctx, workspace, &namespace, &outcome, changes).await?;
    Ok(if terminating {
        Requeue::after(TERMINATING_RECHECK)
    } else {
        Requeue::on_change()
    })
}

/// Whether the owner a personal `workspace` was provisioned for has left: the User `owner`
/// (as cached) is offboarding, or gone, or another User than the one recorded in
/// `status.ownerUid`. Never before the workspace was first provisioned (no uid recorded): a
/// Workspace made before its owner's User waits for it (`OwnerNotFound`).
fn owner_left(workspace: &Workspace, owner: Option<&homestead_api::User>) -> bool {
    let recorded = workspace
        .status
        .as_ref()
        .and_then(|s| s.owner_uid.as_deref());
    match (owner, recorded) {
        (Some(user), _) if user.metadata.deletion_timestamp.is_some() => true,
        (Some(user), Some(uid)) => user.metadata.uid.as_deref() != Some(uid),
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

/// Whether `workspace` takes its Profile from its owner, a person whose status names no
/// applied Profile now (so which guards it should have is not known).
fn owner_profile_unknown(workspace: &Workspace, caches: &Caches) -> bool {
    workspace.spec.profile.is_none()
        && matches!(Owner::of(workspace), Some(Owner::User(name))
        if caches.user(&name).is_some_and(|u| {
            u.status.as_ref().and_then(|s| s.profile.as_ref()).is_none()
        }))
}

/// The Profile `workspace` gets: `spec.profile`, else its owner's (a person's applied Profile,
/// or the one the directory chooses for a team's group: [`group_profile`], else the
/// directory's floor), from the caches.
pub(crate) fn profile_of(
    workspace: &Workspace,
    caches: &Caches,
) -> Option<Arc<homestead_api::Profile>> {
    if let Some(name) = &workspace.spec.profile {
        return caches.profile(name);
    }
    match Owner::of(workspace)? {
        Owner::User(name) => caches
            .user(&name)?
            .status
            .as_ref()?
            .profile
            .as_ref()
            .and_then(|p| caches.profile(&p.name)),
        // A team whose group no Profile selects (its display name changed, say) gets the
        // directory's floor, never no guards at all.
        Owner::Group(name) => Some(
            group_profile(caches.group(&name)?.as_ref(), &caches.profiles())
                .cloned()
                .unwrap_or_else(|| Arc::new(crate::plan::profile::directory_floor())),
        ),
    }
}

/// Where a pass over a live Workspace ends: `Ready` and its reason and message, and the grants
/// in force (none unless `Provisioned`).
struct Outcome<'g> {
    ready: bool,
    reason: &'static str,
    message: String,
    grants: Option<&'g [Grant]>,
}

impl Outcome<'_> {
    /// Refused: `Ready=False`, the refusal's reason and message.
    fn refused(refusal: &Refusal, config: &crate::plan::config::Config) -> Self {
        Self {
            ready: false,
            reason: refusal.reason(),
            message: refusal.message(config),
            grants: None,
        }
    }
}

/// Brings the workspace's namespace and guards to the desired state, then its access to
/// `access`: the grants (`Ok`), or none with the reason it is suspended (`Err`). Guards before
/// access; a namespace that is not the workspace's is refused, one that terminates waited for.
async fn converge<'g>(
    ctx: &Context,
    workspace: &Workspace,
    (namespace, guards): (&str, &Guards),
    access: std::result::Result<&'g [Grant], &String>,
    changes: &mut Changes,
) -> Result<Outcome<'g>> {
    let owners = access.ok().map(owners_annotation).unwrap_or_default();
    let desired = desired_namespace(workspace, namespace, guards, &owners);
    // Whoever administers it changed (an admin added, removed, suspended): what its people
    // made there under the old admins goes, as a role change does in a home, and each Share is
    // judged again (one lasts while its creator is an admin).
    // Before the annotation changes, so a restart in between cannot skip it.
    let admins_changed = ctx.caches().namespace(namespace).is_some_and(|ns| {
        is_owned_by(&ns.facts, workspace) && !ns.facts.has_annotation(ANNOTATION_OWNER, &owners)
    });
    if admins_changed {
        // Shares' bindings too: each Share's reconcile, woken by the deletion, grants again only
        // what an admin of now made.
        let made: Vec<String> = ctx
            .caches()
            .role_bindings_in(namespace)
            .into_iter()
            .filter(|n| n != WORKSPACE_ADMINS_BINDING && n != WORKSPACE_MEMBERS_BINDING)
            .collect();
        let why = "the workspace's admins changed";
        changes.extend(access::revoke(ctx.cluster(), namespace, made, why).await?);
    }
    if let Some(wait) = ensure_namespace(ctx, workspace, &desired, changes).await? {
        return waiting(ctx, namespace, wait, changes).await;
    }
    // A personal workspace without `spec.profile` takes its guards from its owner's applied
    // Profile; while the owner's status names none (not yet provisioned, or refused), what it
    // has stays: guards are never removed for want of knowing them.
    if !owner_profile_unknown(workspace, ctx.caches()) {
        changes.extend(ensure_guards(ctx, workspace, namespace, guards).await?);
    }
    match access {
        Ok(grants) => {
            keep_bindings(ctx, workspace, namespace, grants, guards, changes).await?;
            let profile = guards
                .profile
                .as_ref()
                .map(|p| format!(" (Profile {p:?})"))
                .unwrap_or_default();
            Ok(Outcome {
                ready: true,
                reason: "Provisioned",
                message: format!(
                    "namespace {namespace:?} provisioned{profile}; {} people have access",
                    grants.len()
                ),
                grants: Some(grants),
            })
        }
        Err(why) => {
            revoke_all(ctx, namespace, "the workspace is suspended", changes).await?;
            let (ready, reason, grants) = (false, "Suspended", None);
            Ok(Outcome {
                ready,
                reason,
                message: why.clone(),
                grants,
            })
        }
    }
}

/// Deletes or retains the namespace of a deleted Workspace, per its `deletionPolicy`, after
/// revoking every RoleBinding there; nothing when the namespace is not the Workspace's.
async fn close(workspace: &Workspace, ctx: &Context) -> Result<Requeue> {
    let (cluster, caches) = (ctx.cluster(), ctx.caches());
    let name = workspace
        .status
        .as_ref()
        .and_then(|s| s.namespace.clone())
        .unwrap_or_else(|| namespace_of(workspace, ctx.config()));
    // Read afresh, not from the cache nor through `namespace()`: a handover may have moved
    // the namespace to another Workspace a moment ago, and then it is not this one's to
    // revoke, retain or delete; and a name the managed watch saw go (retained, say) may be
    // back before its watch event is, where a skipped read left the namespace with this
    // Workspace's label and no Workspace (soak seed 4221189279).
    let Some(namespace) = cluster
        .get(&ObjectRef::<Namespace>::new(&name))
        .await?
        .map(|ns| Arc::new(crate::state::cache::CachedNamespace::from(ns)))
        .filter(|ns| is_owned_by(&ns.facts, workspace))
    else {
        return Ok(Requeue::on_change());
    };
    let mut changes = Changes::new();
    changes.extend(access::revoke_all(cluster, &name, "the workspace is deleted").await?);
    if namespace.metadata.deletion_timestamp.is_some() || cluster.deleted_moments_ago(&namespace) {
        return terminating(ctx, workspace, &namespace, changes).await;
    }
    let reserved = ctx.config().is_reserved(&name);
    if workspace.spec.deletion_policy == DeletionPolicy::Delete && !reserved {
        cluster.delete_namespace(&namespace).await?;
        changes.push((
            Change::NamespaceDeleting,
            format!("deleting namespace {name:?} (deletionPolicy Delete)"),
        ));
        return terminating(ctx, workspace, &namespace, changes).await;
    }
    let guards = Guards::of(profile_of(workspace, caches).as_deref(), ctx.config());
    let retained = retained_namespace(workspace, &name, &guards);
    let why = "the namespace is retained";
    changes.extend(release_slice(ctx, workspace, &name, why).await?);
    let released = cluster
        .apply_over_if(&retained, namespace.metadata.uid.as_deref(), |live| {
            is_owned_by(&Facts::of(&live.metadata), workspace)
        })
        .await?;
    // Read a moment ago as this Workspace's, so the apply changes its labels unless the
    // namespace went or another Workspace took it in between: then there is nothing to retain.
    if released {
        changes.push((
            Change::NamespaceRetained,
            format!("the workspace is deleted (deletionPolicy Retain): access revoked, namespace {name:?} and its data kept"),
        ));
    }
    publish(ctx, workspace, changes);
    Ok(Requeue::on_change())
}

/// While a deleted workspace's namespace terminates: `Ready=False`, reason `Terminating`, the
/// message saying what still blocks it; then the error that keeps the finalizer until it is
/// gone ([`Error::NamespaceTerminating`], a normal wait).
async fn terminating(
    ctx: &Context,
    workspace: &Workspace,
    namespace: &crate::state::cache::CachedNamespace,
    changes: Changes,
) -> Result<Requeue> {
    let name = namespace.name_any();
    let outcome = Outcome {
        ready: false,
        reason: "Terminating",
        message: terminating_message(&name, namespace.status.as_ref()),
        grants: None,
    };
    write_status(ctx, workspace, &name, &outcome, changes).await?;
    Err(Error::NamespaceTerminating(name))
}

/// The outcome of a pass that found the namespace not ready for access: another's (refused),
/// still being handed over (pending), or terminating (every binding there revoked).
///
/// # Errors
/// A failed revocation.
async fn waiting<'g>(
    ctx: &Context,
    namespace: &str,
    wait: Wait,
    changes: &mut Changes,
) -> Result<Outcome<'g>> {
    let (reason, message) = match wait {
        Wait::Conflict => {
            let refusal = Refusal::NamespaceConflict(namespace.to_owned());
            return Ok(Outcome::refused(&refusal, ctx.config()));
        }
        Wait::Handover(leaver) => (
            "HandoverPending",
            format!(
                "namespace {namespace:?} is being handed over from {leaver}, who left; access follows in a moment"
            ),
        ),
        Wait::Terminating(message) => {
            revoke_all(ctx, namespace, "its namespace is being deleted", changes).await?;
            ("NamespaceTerminating", message)
        }
    };
    Ok(Outcome {
        ready: false,
        reason,
        message,
        grants: None,
    })
}

/// What ends a pass early.
enum Wait {
    /// The namespace exists and is not the workspace's.
    Conflict,
    /// The namespace is terminating: the message says what still blocks it.
    Terminating(String),
    /// The namespace is still the leaving User's (named) whose handover made this workspace:
    /// the handover moves it here next.
    Handover(String),
}

/// Brings the namespace to `desired`, creating it if the cache does not know it; an existing
/// namespace must be the workspace's ([`is_owned_by`]).
async fn ensure_namespace(
    ctx: &Context,
    workspace: &Workspace,
    desired: &Namespace,
    changes: &mut Changes,
) -> Result<Option<Wait>> {
    let (cluster, caches) = (ctx.cluster(), ctx.caches());
    let name = desired.name_any();
    let existing = match caches.namespace(&name) {
        Some(ns) => ns,
        None => match cluster.create_namespace(desired).await? {
            Some(_) => {
                changes.push((
                    Change::NamespaceCreated,
                    format!("created namespace {name:?}"),
                ));
                return Ok(None);
            }
            None => match cluster.get(&ObjectRef::<Namespace>::new(&name)).await? {
                Some(ns) => Arc::new(ns.into()),
                None => {
                    return Ok(Some(Wait::Terminating(format!(
                        "namespace {name:?} was deleted a moment ago"
                    ))));
                }
            },
        },
    };
    if !is_owned_by(&existing.facts, workspace) {
        // Still the leaver's (their own home, or a personal workspace of theirs): the
        // handover moves it here next.
        let held_by = |leaver: &str| {
            existing.facts.has_label(LABEL_USER, leaver)
                || existing.workspace().is_some_and(|w| {
                    ctx.caches()
                        .workspace(&w.name)
                        .is_some_and(|w| w.spec.owner.user.as_deref() == Some(leaver))
                })
        };
        if let Some(leaver) = workspace.labels().get(LABEL_HANDED_OVER_FROM)
            && held_by(leaver)
        {
            return Ok(Some(Wait::Handover(leaver.clone())));
        }
        return Ok(Some(Wait::Conflict));
    }
    if existing.metadata.deletion_timestamp.is_some() {
        return Ok(Some(Wait::Terminating(terminating_message(
            &name,
            existing.status.as_ref(),
        ))));
    }
    if !existing.facts.include(&desired.metadata)
        && cluster
            .apply_over_if(desired, existing.metadata.uid.as_deref(), |live| {
                // Still this workspace's as read now: a handover may have moved it.
                is_owned_by(&Facts::of(&live.metadata), workspace)
            })
            .await?
    {
        changes.push((
            Change::NamespaceUpdated,
            format!("updated labels, annotations or owner of namespace {name:?}"),
        ));
    }
    Ok(None)
}

/// The workspace's ResourceQuota, LimitRange and NetworkPolicy from its Profile (`guards`),
/// and its slice of its owner's total (docs/quota.md), each applied when the cache shows something else and removed when none is desired.
async fn ensure_guards(
    ctx: &Context,
    workspace: &Workspace,
    namespace: &str,
    guards: &Guards,
) -> Result<Changes> {
    let (caches, cluster) = (ctx.caches(), ctx.cluster());
    let quota = Managed {
        cached: caches.quota(namespace, QUOTA_NAME),
        desired: guards
            .quota
            .as_ref()
            .map(|hard| quota_of(workspace, namespace, hard)),
        matches: quota_matches,
        changes: (Change::QuotaApplied, Change::QuotaRemoved),
        why_removed: "the Profile has no quota",
    };
    let limits = Managed {
        cached: caches.limit_range(namespace, LIMIT_RANGE_NAME),
        desired: guards
            .limit_range
            .as_ref()
            .map(|spec| desired_limit_range(workspace, namespace, spec)),
        matches: |desired, cached| cached.matches(desired),
        changes: (Change::LimitRangeApplied, Change::LimitRangeRemoved),
        why_removed: "the Profile has none",
    };
    let isolation = Managed {
        cached: caches.network_policy(namespace, NETWORK_POLICY_NAME),
        desired: guards
            .isolation
            .as_deref()
            .map(|allowed| desired_network_policy(workspace, namespace, allowed)),
        matches: |desired, cached| cached.matches(desired),
        changes: (Change::IsolationApplied, Change::IsolationRemoved),
        why_removed: "the Profile's networkIsolation is None",
    };
    let mut changes = Changes::new();
    changes.extend(ensure(cluster, workspace, namespace, QUOTA_NAME, quota).await?);
    if let Some(owner) = Owner::of(workspace) {
        let total = owner_total(&owner, caches);
        let total = (&owner, total.as_ref());
        changes.extend(ensure_slice(ctx, workspace, namespace, total).await?);
    }
    changes.extend(ensure(cluster, workspace, namespace, LIMIT_RANGE_NAME, limits).await?);
    changes.extend(
        ensure(
            cluster,
            workspace,
            namespace,
            NETWORK_POLICY_NAME,
            isolation,
        )
        .await?,
    );
    Ok(changes)
}

/// Brings the admins' and the members' RoleBindings to `grants` (created, repaired, replaced
/// on a role change, removed when nobody is left), then, in a governed workspace, removes the
/// RoleBindings a tenant may not have made there.
async fn keep_bindings(
    ctx: &Context,
    workspace: &Workspace,
    namespace: &str,
    grants: &[Grant],
    guards: &Guards,
    changes: &mut Changes,
) -> Result<()> {
    let (caches, cluster) = (ctx.caches(), ctx.cluster());
    for (name, desired) in desired_bindings(workspace, namespace, grants) {
        let cached = caches.role_binding(namespace, name);
        let reference = ObjectRef::<RoleBinding>::new(name).within(namespace);
        match (desired, cached) {
            (Some(desired), Some(cached)) if cached.matches(&desired) => {}
            (Some(desired), cached) => {
                if cached.as_ref().is_some_and(|c| !c.binds_role_of(&desired)) {
                    // roleRef is immutable: the old binding goes first.
                    cluster.delete(&reference, &DeleteParams::default()).await?;
                }
                cluster.apply(&desired).await?;
                let note = format!(
                    "bound ClusterRole {:?} to {} people in namespace {namespace:?} ({name})",
                    desired.role_ref.name,
                    desired.subjects.as_ref().map_or(0, Vec::len)
                );
                changes.push((Change::AccessGranted, note));
            }
            (None, Some(_)) => {
                changes.extend(
                    access::revoke(
                        cluster,
                        namespace,
                        vec![name.to_owned()],
                        "nobody left to bind",
                    )
                    .await?,
                );
            }
            (None, None) => {}
        }
    }
    let ungoverned = ungoverned(caches, namespace, guards.tenant_role_bindings);
    let why = format!(
        "the workspace is governed (tenantRoleBindings: {:?})",
        guards.tenant_role_bindings
    );
    changes.extend(access::revoke(cluster, namespace, ungoverned, &why).await?);
    Ok(())
}

/// The RoleBindings in `namespace` a governed workspace does not admit from a tenant: never
/// its own two, nor a binding of a Share that exists (docs/sharing.md, "Governed homes").
fn ungoverned(caches: &Caches, namespace: &str, governed: TenantRoleBindings) -> Vec<String> {
    if governed == TenantRoleBindings::Allow {
        return Vec::new();
    }
    caches
        .role_bindings_in(namespace)
        .into_iter()
        .filter(|n| n != WORKSPACE_ADMINS_BINDING && n != WORKSPACE_MEMBERS_BINDING)
        .filter(|n| {
            !n.starts_with(SHARE_BINDING_PREFIX)
                || share_of_binding(n).is_none_or(|share| !caches.has_share(namespace, share))
        })
        .filter(|n| {
            governed == TenantRoleBindings::Forbid
                || caches
                    .role_binding(namespace, n)
                    .is_some_and(|b| !b.local_service_accounts_only)
        })
        .collect()
}

/// Removes every RoleBinding the cache knows of in `namespace` (`why` says why).
async fn revoke_all(
    ctx: &Context,
    namespace: &str,
    why: &str,
    changes: &mut Changes,
) -> Result<()> {
    let names = ctx.caches().role_bindings_in(namespace);
    changes.extend(access::revoke(ctx.cluster(), namespace, names, why).await?);
    Ok(())
}

/// [`revoke_all`] in `namespace` if the cache shows it is the workspace's: a refused workspace
/// grants nothing, and touches no namespace that is not its own.
async fn revoke_if_owned(
    ctx: &Context,
    workspace: &Workspace,
    namespace: &str,
    why: &str,
    changes: &mut Changes,
) -> Result<()> {
    let owned = ctx
        .caches()
        .namespace(namespace)
        .is_some_and(|ns| is_owned_by(&ns.facts, workspace));
    if owned {
        revoke_all(
            ctx,
            namespace,
            &format!("the workspace is refused ({why})"),
            changes,
        )
        .await?;
    }
    Ok(())
}

/// The status of `workspace` after a pass: `Ready` as `outcome` says, its `namespace`,
/// owner and (a team's) member count, written when it differs; each change an Event, and a new
/// refusal or suspension a Warning.
async fn write_status(
    ctx: &Context,
    workspace: &Workspace,
    namespace: &str,
    outcome: &Outcome<'_>,
    changes: Changes,
) -> Result<()> {
    let Outcome {
        ready,
        reason,
        message,
        grants,
    } = outcome;
    let (ready, reason, message, grants) = (*ready, *reason, message.clone(), *grants);
    let previous = workspace.status.clone().unwrap_or_default();
    let condition = set_condition(
        &previous.conditions,
        CONDITION_READY,
        ready,
        reason,
        message.clone(),
        workspace.metadata.generation,
        &Time(Timestamp::now()),
    );
    let members = match Owner::of(workspace) {
        Some(Owner::Group(group)) => Some(MemberCount {
            count: ctx
                .caches()
                .group(&group)
                .map_or(0, |g| g.spec.members.len() as i64),
            active: grants.map_or(0, |g| {
                g.iter().filter(|g| !is_admin_grant(g)).count() as i64
            }),
        }),
        _ => None,
    };
    let desired = WorkspaceStatus {
        conditions: vec![condition.clone()],
        observed_generation: workspace.metadata.generation,
        namespace: Some(namespace.to_owned()),
        owner: Owner::of(workspace).map(|o| o.to_string()),
        role: Some(match Owner::of(workspace) {
            Some(Owner::Group(_)) => homestead_model::workspace::member_role(workspace).to_owned(),
            _ => homestead_model::workspace::ADMIN_ROLE.to_owned(),
        }),
        members,
        owner_uid: owner_uid(ctx, workspace, grants),
        admin_uids: admin_uids(ctx, workspace, grants),
    };
    let before = previous
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY);
    let newly = before.is_none_or(|c| c.reason != reason || c.message != message);
    publish(ctx, workspace, changes);
    if newly && !ready {
        ctx.cluster().publish_regarding(
            reference(workspace),
            EventType::Warning,
            reason,
            message,
            None,
        );
    }
    let unchanged = previous.observed_generation == desired.observed_generation
        && previous.namespace == desired.namespace
        && previous.owner == desired.owner
        && previous.role == desired.role
        && previous.members == desired.members
        && previous.owner_uid == desired.owner_uid
        && previous.admin_uids == desired.admin_uids
        && previous.conditions == desired.conditions;
    if !unchanged {
        ctx.cluster()
            .apply_status::<Workspace>(&workspace.name_any(), &desired)
            .await?;
    }
    Ok(())
}

/// `status.ownerUid`: as recorded; else, once the owner's people have access (`grants`), the
/// uid of the owner User or DirectoryGroup as cached.
fn owner_uid(ctx: &Context, workspace: &Workspace, grants: Option<&[Grant]>) -> Option<String> {
    let recorded = workspace.status.as_ref().and_then(|s| s.owner_uid.clone());
    recorded.or_else(|| {
        grants?;
        match Owner::of(workspace)? {
            Owner::User(name) => ctx.caches().user(&name)?.metadata.uid.clone(),
            Owner::Group(name) => ctx.caches().group(&name)?.metadata.uid.clone(),
        }
    })
}

/// `status.adminUids`: those recorded for names still in `spec.admins`, and the uid of each
/// admin granted now (`grants`) that has none recorded.
fn admin_uids(
    ctx: &Context,
    workspace: &Workspace,
    grants: Option<&[Grant]>,
) -> std::collections::BTreeMap<String, String> {
    let mut uids = workspace
        .status
        .as_ref()
        .map(|s| s.admin_uids.clone())
        .unwrap_or_default();
    uids.retain(|name, _| workspace.spec.admins.contains(name));
    for grant in grants.unwrap_or_default() {
        let admin = matches!(
            &grant.via,
            homestead_model::via::Via::Team { admin: true, .. }
        );
        if admin
            && !uids.contains_key(&grant.user)
            && let Some(uid) = ctx
                .caches()
                .user(&grant.user)
                .and_then(|u| u.metadata.uid.clone())
        {
            uids.insert(grant.user.clone(), uid);
        }
    }
    uids
}

/// Whether `grant` is an admin's (the owner of a personal workspace, or a team's admin).
fn is_admin_grant(grant: &Grant) -> bool {
    use homestead_model::via::Via;
    matches!(
        &grant.via,
        Via::Workspace(_) | Via::Team { admin: true, .. }
    )
}

/// Publishes `changes` as one Normal Event on `workspace` (the first change's reason, every
/// note, at most 1024 characters), each logged: one Event a pass, not one a change, so a
/// thousand new workspaces cost a thousand Events.
fn publish(ctx: &Context, workspace: &Workspace, changes: Changes) {
    let Some((first, _)) = changes.first() else {
        return;
    };
    let reason = first.as_str();
    for (change, note) in &changes {
        info!(workspace = %workspace.name_any(), change = change.as_str(), "{note}");
    }
    let mut note: String = changes
        .iter()
        .map(|(_, note)| note.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    if note.len() > 1024 {
        let mut end = 1021;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    ctx.cluster()
        .publish_regarding(reference(workspace), EventType::Normal, reason, note, None);
}

/// The reference to `workspace` an Event is about.
fn reference(workspace: &Workspace) -> ObjectReference {
    ObjectReference {
        api_version: Some(Workspace::api_version(&()).into_owned()),
        kind: Some(Workspace::kind(&()).into_owned()),
        name: workspace.metadata.name.clone(),
        uid: workspace.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// What [`decide`] reads, owned while it borrows.
struct LookedUp {
    owner_user: Option<Arc<homestead_api::User>>,
    owner_duplicate: bool,
    owner_group: Option<Arc<homestead_api::DirectoryGroup>>,
    owner_profile: Option<Arc<homestead_api::Profile>>,
    chosen_profile: Option<Arc<homestead_api::Profile>>,
    siblings: Vec<Arc<Workspace>>,
    live_users: Vec<Arc<homestead_api::User>>,
}

impl LookedUp {
    fn of(workspace: &Workspace, owner: Option<&Owner>, caches: &Caches) -> Self {
        let owner_user = match owner {
            Some(Owner::User(name)) => caches.user(name),
            _ => None,
        };
        let status = workspace.status.as_ref();
        // A group made again under the recorded one's name is another group.
        let owner_group = match owner {
            Some(Owner::Group(name)) => caches.group(name).filter(|g| {
                status
                    .and_then(|s| s.owner_uid.as_deref())
                    .is_none_or(|uid| g.metadata.uid.as_deref() == Some(uid))
            }),
            _ => None,
        };
        let owner_profile = {
            let mut mine = workspace.clone();
            mine.spec.profile = None;
            profile_of(&mine, caches)
        };
        let siblings = match (owner, is_self_service(workspace)) {
            (Some(Owner::User(name)), true) => caches
                .workspaces_of_user(name)
                .into_iter()
                .filter(|w| is_self_service(w) && Owner::of(w) == Some(Owner::User(name.clone())))
                .collect(),
            _ => Vec::new(),
        };
        // The people who may have access now: the owner, the admins and the group's members,
        // each live and holding their identity.
        let named: Vec<&String> = match owner {
            Some(Owner::User(name)) => vec![name],
            _ => workspace
                .spec
                .admins
                .iter()
                .chain(owner_group.iter().flat_map(|g| g.spec.members.iter()))
                .collect(),
        };
        let now = Timestamp::now();
        // An admin whose name another User has taken since they were granted is not them.
        let recorded = |u: &homestead_api::User| {
            status
                .and_then(|s| s.admin_uids.get(&u.name_any()))
                .is_none_or(|uid| u.metadata.uid.as_deref() == Some(uid.as_str()))
        };
        let live_users = named
            .into_iter()
            .filter_map(|name| caches.user(name))
            .filter(|u| crate::plan::share::inactive(u, now).is_none() && !caches.is_duplicate(u))
            .filter(|u| recorded(u))
            .collect();
        Self {
            owner_duplicate: owner_user.as_ref().is_some_and(|u| caches.is_duplicate(u)),
            owner_user,
            owner_group,
            owner_profile,
            chosen_profile: workspace
                .spec
                .profile
                .as_deref()
                .and_then(|p| caches.profile(p)),
            siblings,
            live_users,
        }
    }

    fn borrowed<'a>(
        &'a self,
        live: &'a dyn Fn(&str) -> Option<&'a homestead_api::User>,
    ) -> Looked<'a> {
        Looked {
            owner_user: self.owner_user.as_deref(),
            owner_duplicate: self.owner_duplicate,
            owner_group: self.owner_group.as_deref(),
            owner_profile: self.owner_profile.as_deref(),
            chosen_profile: self.chosen_profile.as_deref(),
            siblings: self.siblings.iter().map(AsRef::as_ref).collect(),
            live,
        }
    }
}
