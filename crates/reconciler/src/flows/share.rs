//! The reconcile of one Share (docs/sharing.md): read its home, its owner's limits and its
//! grantees from the caches, [`decide`], then make its one RoleBinding match the decision
//! (granted while `Active`, removed otherwise) before the status says so. A refusal is a
//! Warning Event on the Share when it first happens; every grant, repair and revocation a
//! Normal one and a line of the access log.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{CONDITION_READY, LABEL_USER, LABEL_WORKSPACE, ShareReason, ShareStatus, User};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tracing::{instrument, warn};

use super::offboard::NOT_LEADER_RECHECK;
use super::provision::RESYNC;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::flows::requeue::Requeue;
use crate::plan::facts::print;
use crate::plan::ownership::is_owned_by;
use crate::plan::share::{
    Decision, Found, Home, Limits, Member, Owner, ShareRef, binding_name, decide, desired_binding,
    inactive,
};
use crate::plan::status::set_condition;
use crate::state::Caches;
use crate::state::cache::{CachedNamespace, CachedShare, CachedShareStatus};

/// Reconciles one Share once every cache has synced (see the module docs).
///
/// Returns when to run again ([`Requeue`]): a look again at `expiresAt` (plus a second) when
/// that is within the 300 s resync; otherwise the paced resync of every Share comes first
/// ([`Requeue::on_change`], so no Share holds a timer in the Controller for weeks).
///
/// # Errors
/// [`Error`] when an API request fails; the controller then calls [`share_error`].
#[instrument(skip_all, fields(share = %share.name_any(), namespace = share.namespace().unwrap_or_default()))]
pub async fn reconcile_share(share: Arc<CachedShare>, ctx: Arc<Context>) -> Result<Requeue> {
    if !ctx.ready_to_write().await {
        return Ok(Requeue::after(NOT_LEADER_RECHECK));
    }
    let now = Timestamp::now();
    let caches = ctx.caches();
    let namespace = share.namespace().unwrap_or_default();
    let (mut home, owner) = home_of(&ctx, &namespace, now);
    close_unless_an_admins(&share, &mut home, owner.as_ref(), caches);
    // A Share to large groups waits for its turn before it resolves their members: the
    // subjects, the binding and its JSON are what a large write holds in memory.
    let _permit = ctx.large_write(grantees_at_most(&share, caches)).await;
    let decision = {
        let looked_up = LookedUp::of(&share, caches);
        let recorded = share
            .status
            .as_ref()
            .map(CachedShareStatus::recorded)
            .unwrap_or_default();
        decide(
            share_ref(&share),
            &home,
            &ctx.config().allowed_roles,
            &looked_up.found(),
            &recorded,
            now,
        )
    };
    let cached = caches.role_binding(&namespace, &binding_name(&share.name_any()));
    let cluster = ctx.cluster();
    let written = match (&owner, decision.grants()) {
        (Some(holder), true) => {
            // In a workspace, a Share never binds its own creator: an admin has the workspace
            // through it, and a Share to themselves would outlast their being its admin.
            let subjects: Vec<String> = decision
                .subjects
                .iter()
                .filter(|s| {
                    holder.0 != LABEL_WORKSPACE || share.created_by.as_deref() != Some(s.as_str())
                })
                .cloned()
                .collect();
            let holder = (holder.0, holder.1.as_str());
            let desired = desired_binding(share_ref(&share), holder, &subjects);
            cluster.keep_share_binding(&share, &desired, cached).await?
        }
        _ => {
            cluster
                .remove_share_binding(&share, cached, &decision.message)
                .await?
        }
    };
    if let Some((change, _)) = written {
        ctx.metrics()
            .share
            .changes
            .with_label_values(&[change])
            .inc();
    }
    write_status(&ctx, &share, &decision, now).await?;
    ctx.share_backoffs()
        .reset(&ObjectRef::from_obj(share.as_ref()));
    // Due within a resync: woken at expiresAt; later, the paced resync comes first.
    Ok(match decision.recheck {
        Some(left) if left < RESYNC => Requeue::after(left + Duration::from_secs(1)),
        _ => Requeue::on_change(),
    })
}

/// After a failed reconcile of a Share: counts it in `homestead_share_errors_total`, logs it,
/// and retries with the Share's backoff (1 s doubling to 5 min, with jitter).
pub fn share_error(share: Arc<CachedShare>, error: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics().share.errors.inc();
    let delay = ctx
        .share_backoffs()
        .next_delay(ObjectRef::from_obj(share.as_ref()));
    warn!(
        share = %share.name_any(),
        namespace = share.namespace().unwrap_or_default(),
        retry_in_seconds = delay.as_secs_f64(),
        "reconciling a share failed: {error}"
    );
    Requeue::after(delay)
}

/// The label and name of a home's holder, which its Share bindings carry
/// (`homestead.dev/user=<User>` or `homestead.dev/workspace=<Workspace>`).
type Holder = (&'static str, String);

/// The home `namespace` as the caches show it at `now`, and its holder if it is one: a User's
/// home, or a workspace's ([`workspace_home`]).
fn home_of(ctx: &Context, namespace: &str, now: Timestamp) -> (Home, Option<Holder>) {
    let caches = ctx.caches();
    let Some(cached) = caches.namespace(namespace) else {
        return (Home::NotAHome, None);
    };
    if let Some(workspace) = cached.workspace() {
        return workspace_home(ctx, &cached, &workspace.name);
    }
    let (home, owner) = user_home(ctx, &cached, now);
    (home, owner.map(|o| (LABEL_USER, o.name_any())))
}

/// Closes the workspace `home` (held by `owner`) to `share` when its creator is not one of its
/// admins now ([`made_by_an_admin`]). A Share made under another holder of the home is left to
/// end as handed over (decide's rule), whoever administers the workspace now.
fn close_unless_an_admins(
    share: &CachedShare,
    home: &mut Home,
    owner: Option<&Holder>,
    caches: &Caches,
) {
    let made_under = share
        .status
        .as_ref()
        .map(CachedShareStatus::recorded)
        .and_then(|r| r.owner_uid);
    if let (Some((LABEL_WORKSPACE, workspace)), Home::Open(_, opened)) = (owner, &*home)
        && made_under.is_none_or(|uid| opened.uid.as_deref() == Some(uid.as_str()))
        && !made_by_an_admin(share, workspace, caches)
    {
        let why = "its creator is not an admin of the workspace now".to_owned();
        *home = Home::Closed(why, Some(opened.clone()));
    }
}

/// Whether `share`, in the workspace `name`'s namespace, was made by one of its admins now (a
/// personal workspace's owner, or a team's admin with access): a Share in a workspace lasts
/// while its creator administers it, so an admin removed leaves nothing granted behind.
fn made_by_an_admin(share: &CachedShare, name: &str, caches: &Caches) -> bool {
    let Some(workspace) = caches.workspace(name) else {
        return false;
    };
    let creator = share.created_by.as_deref().unwrap_or_default();
    let owner = workspace.spec.owner.user.iter();
    owner
        .chain(workspace.spec.admins.iter())
        .filter_map(|admin| caches.user(admin))
        .filter(|u| inactive(u, k8s_openapi::jiff::Timestamp::now()).is_none())
        .any(|u| u.spec.identity.username == creator)
}

/// The workspace `name`'s home, its namespace `cached`: open while the workspace is
/// `Provisioned` (its people have access), with the sharing limits of its Profile (`spec.profile`, else its
/// owner's; without one, the operator's); closed otherwise.
fn workspace_home(ctx: &Context, cached: &CachedNamespace, name: &str) -> (Home, Option<Holder>) {
    let caches = ctx.caches();
    let Some(workspace) = caches.workspace(name) else {
        return (Home::Closed("without its workspace".to_owned(), None), None);
    };
    if !is_owned_by(&cached.facts, workspace.as_ref()) {
        return (Home::NotAHome, None);
    }
    let owner = Owner::workspace(&workspace);
    let holder = Some((LABEL_WORKSPACE, name.to_owned()));
    if cached.metadata.deletion_timestamp.is_some()
        || workspace.metadata.deletion_timestamp.is_some()
    {
        return (
            Home::Closed("being deleted".to_owned(), Some(owner)),
            holder,
        );
    }
    let ready = workspace
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY));
    match ready {
        Some(ready) if ready.status == "True" => {}
        ready => {
            let reason = ready.map_or("no Ready condition yet", |c| c.reason.as_str());
            return (
                Home::Closed(format!("not provisioned ({reason})"), Some(owner)),
                holder,
            );
        }
    }
    let profile = super::workspace::profile_of(&workspace, caches);
    let limits = Limits::of(
        profile.as_ref().map(|p| {
            (
                p.metadata.name.as_deref().unwrap_or_default(),
                p.spec.sharing.as_ref(),
            )
        }),
        &ctx.config().sharing,
    );
    (Home::Open(limits, owner), holder)
}

/// A User's home, its namespace `cached`, at `now`, and its owner if it is one.
fn user_home(ctx: &Context, cached: &CachedNamespace, now: Timestamp) -> (Home, Option<Arc<User>>) {
    let caches = ctx.caches();
    let Some(owner) = cached.user().and_then(|user| caches.user(&user.name)) else {
        return (Home::Closed("without its owner".to_owned(), None), None);
    };
    if !is_owned_by(&cached.facts, owner.as_ref()) {
        return (Home::NotAHome, None);
    }
    let closed = |why: String| {
        (
            Home::Closed(why, Some(Owner::of(&owner))),
            Some(owner.clone()),
        )
    };
    if cached.metadata.deletion_timestamp.is_some() {
        return closed("being deleted".to_owned());
    }
    if let Some(why) = inactive(&owner, now) {
        return closed(format!("{why} (its owner {})", owner.name_any()));
    }
    match owner.ready_condition() {
        Some(ready) if ready.status == "True" => {}
        ready => {
            let reason = ready.map_or("no Ready condition yet", |c| c.reason.as_str());
            return closed(format!("not provisioned ({reason})"));
        }
    }
    let profile = owner
        .status
        .as_ref()
        .and_then(|s| s.profile.as_ref())
        .map(|applied| {
            let sharing = caches
                .profile(&applied.name)
                .and_then(|p| p.spec.sharing.clone());
            (applied.name.clone(), sharing)
        });
    let limits = Limits::of(
        profile
            .as_ref()
            .map(|(name, sharing)| (name.as_str(), sharing.as_ref())),
        &ctx.config().sharing,
    );
    (Home::Open(limits, Owner::of(&owner)), Some(owner))
}

/// The grantees of a Share as the caches hold them, owned while [`decide`] borrows them.
/// How many subjects `share`'s binding can have at most, from the caches: one per User grantee
/// and the listed members of each DirectoryGroup grantee.
fn grantees_at_most(share: &CachedShare, caches: &Caches) -> usize {
    share
        .spec
        .to
        .iter()
        .map(|grantee| match &grantee.group {
            Some(group) => caches.group(group).map_or(0, |g| g.spec.members.len()),
            None => 1,
        })
        .sum()
}

struct LookedUp {
    entries: Vec<Entry>,
}

enum Entry {
    /// A User grantee: the User, if cached, and whether another User holds its identity.
    User(String, Option<Arc<User>>, bool),
    /// A group grantee: the group, if cached, and what the decision reads of each member
    /// that counts (one User decoded at a time, not all of them held).
    Group(
        String,
        Option<Arc<homestead_api::DirectoryGroup>>,
        Vec<Member>,
    ),
}

impl LookedUp {
    fn of(share: &CachedShare, caches: &Caches) -> Self {
        let entries = share
            .spec
            .to
            .iter()
            .filter_map(|grantee| match (&grantee.user, &grantee.group) {
                (Some(name), _) => {
                    let user = caches.user(name);
                    let duplicate = user.as_ref().is_some_and(|u| caches.is_duplicate(u));
                    Some(Entry::User(name.clone(), user, duplicate))
                }
                (None, Some(name)) => {
                    let group = caches.group(name);
                    let members = group
                        .iter()
                        .flat_map(|g| g.spec.members.iter())
                        .filter_map(|member| caches.user(member))
                        .filter(|user| group.as_ref().is_some_and(|g| g.counts_member(user)))
                        .filter(|user| !caches.is_duplicate(user))
                        .map(|user| Member::of(&user))
                        .collect();
                    Some(Entry::Group(name.clone(), group, members))
                }
                (None, None) => None,
            })
            .collect();
        Self { entries }
    }

    fn found(&self) -> Vec<Found<'_>> {
        self.entries
            .iter()
            .map(|entry| match entry {
                Entry::User(name, Some(user), true) => Found::Duplicate(name, user),
                Entry::User(name, user, _) => Found::User(name, user.as_deref()),
                Entry::Group(name, group, members) => Found::Group(name, group.as_deref(), members),
            })
            .collect()
    }
}

/// Writes the status `decision` describes, when it differs from `share`'s; a new refusal is
/// also a Warning Event.
async fn write_status(
    ctx: &Context,
    share: &CachedShare,
    decision: &Decision,
    now: Timestamp,
) -> Result<()> {
    let previous = share.status.as_ref().and_then(|s| s.ready.as_ref());
    // What set_condition reads of the previous condition: its status and transition time.
    let carried: Vec<Condition> = previous
        .map(|p| Condition {
            type_: CONDITION_READY.to_owned(),
            status: if p.status { "True" } else { "False" }.to_owned(),
            last_transition_time: p.last_transition_time.clone(),
            reason: String::new(),
            message: String::new(),
            observed_generation: None,
        })
        .into_iter()
        .collect();
    let ready = set_condition(
        &carried,
        CONDITION_READY,
        decision.grants(),
        decision.reason.as_str(),
        decision.message.clone(),
        share.metadata.generation,
        &Time(now),
    );
    let newly_refused = decision.reason == ShareReason::Refused
        && previous.is_none_or(|c| *c.reason != ready.reason || c.message != print(&ready.message));
    let desired = ShareStatus {
        conditions: vec![ready],
        observed_generation: share.metadata.generation,
        grantees: decision.grantees.clone(),
        to: Some(decision.to.clone()),
        expires_at: decision.grants().then(|| share.spec.expires_at.clone()),
        renewed_at: Some(Time(decision.renewed_at)),
        owner_uid: decision.owner_uid.clone(),
    };
    let written = ctx.cluster().apply_share_status(share, &desired).await?;
    if written && newly_refused {
        ctx.cluster().refuse_share(share, decision.message.clone());
    }
    Ok(())
}

/// The parts of a cached Share a decision reads.
fn share_ref(share: &CachedShare) -> ShareRef<'_> {
    let status = share.status.as_ref();
    ShareRef {
        meta: &share.metadata,
        spec: &share.spec,
        observed_generation: status.and_then(|s| s.observed_generation),
        renewed_at: status.and_then(|s| s.renewed_at.as_ref()),
    }
}
