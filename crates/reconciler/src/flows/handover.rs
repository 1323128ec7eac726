//! Handover (docs/handover.md): offboarding a User whose `deletionPolicy` is `Handover`. Access
//! was revoked before (as under `Retain`, at once); then each of the leaver's homes (their own
//! namespace and their personal workspaces' namespaces) becomes a personal workspace of the
//! successor, in the same namespace with its data, quota and Profile: Homestead creates the
//! Workspace (named as the namespace, labelled `homestead.dev/handed-over-from=<leaver>`) and
//! moves the namespace's ownership to it in one write; the Workspace's own reconcile then grants
//! the successor `admin` and re-labels the guards. Team workspaces drop the leaver from
//! `admins`, naming the successor where none would be left. With no successor fit to take them
//! the homes are retained, with a Warning Event that says why.

use homestead_api::{
    ANNOTATION_USER_UID, ANNOTATION_WORKSPACE_UID, Change, HANDOVER_FALLBACK,
    LABEL_HANDED_OVER_FROM, LABEL_USER, LABEL_WORKSPACE, TOTAL_QUOTA_NAME, User, Workspace,
};
use homestead_model::workspace::Owner;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::act::access::revoke_all;
use crate::context::Context;
use crate::error::Result;
use crate::plan::handover::{is_handover_of, refusal, successor_name, workspace_for};
use crate::plan::ownership::{Holder, is_owned_by};
use crate::plan::workspace::namespace_of;

/// What a handover did.
pub enum Handed {
    /// Every home went to the successor (or, for one whose Workspace name was taken, is left
    /// to the leaver's own `Retain`).
    Done {
        /// Whether the leaver's own home went (else it is retained).
        own_home: bool,
    },
    /// Nobody fit to take the homes: everything is retained.
    Fallback,
}

/// The creator a handover Workspace names (`homestead.dev/created-by`).
const CREATOR: &str = "homestead (handover)";

/// Hands the homes of `user` (deleted with `deletionPolicy: Handover`), whose own home is the
/// namespace `home` (`None`: it has none), to its successor (see the module docs). Each step
/// can be run again: a Workspace made by an earlier pass is reused, a namespace already moved
/// stays moved.
///
/// # Errors
/// A failed create, read or write; the pass is tried again and goes on from where it stopped.
pub async fn hand_over(user: &User, ctx: &Context, home: Option<&str>) -> Result<Handed> {
    let caches = ctx.caches();
    let name = successor_name(user);
    let candidate = name.and_then(|n| caches.user(n));
    let holds = candidate.as_ref().is_some_and(|c| !caches.is_duplicate(c));
    let now = Timestamp::now();
    if let Some(why) = refusal(user, name, candidate.as_deref(), holds, now) {
        let note = format!("{why}: the homes are retained (deletionPolicy Retain) instead");
        ctx.cluster()
            .publish(user, EventType::Warning, HANDOVER_FALLBACK, note);
        drop_from_teams(ctx, &user.name_any(), None).await?;
        return Ok(Handed::Fallback);
    }
    let successor = candidate.expect("a successor that passed refusal() exists");
    let leaver = user.name_any();
    let mut own_home = false;
    if let Some(home) = home {
        // The home keeps its Profile if it is one that exists (not the directory's floor,
        // which the operator makes up): else the successor's applies.
        let profile = user.status.as_ref().and_then(|s| s.profile.as_ref());
        let profile = profile
            .map(|p| p.name.clone())
            .filter(|name| caches.profile(name).is_some());
        own_home = hand_home(ctx, user, &successor, (home, profile.as_deref()), user).await?;
    }
    for workspace in caches.workspaces_of_user(&leaver) {
        if workspace.spec.owner.user.as_deref() != Some(leaver.as_str())
            || workspace.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let namespace = namespace_of(&workspace, ctx.config());
        let profile = workspace.spec.profile.clone();
        let from = (namespace.as_str(), profile.as_deref());
        hand_home(ctx, user, &successor, from, workspace.as_ref()).await?;
    }
    drop_from_teams(ctx, &leaver, Some(&successor)).await?;
    Ok(Handed::Done { own_home })
}

/// Moves the home `namespace` (with the Profile `profile`), held by `holder` (the leaver's User,
/// or one of their personal workspaces), to a Workspace of `successor`'s: made if it does not
/// exist, then the namespace's ownership labels, uid annotation and owner reference moved to it
/// in one merge patch with the namespace's uid as precondition. Returns whether the home went;
/// `false` when the namespace is not `holder`'s any more, or a Workspace of that name exists
/// that is not this handover's (a Warning Event says so).
///
/// # Errors
/// A failed create, read or patch.
async fn hand_home<H: Holder>(
    ctx: &Context,
    leaver: &User,
    successor: &User,
    (namespace, profile): (&str, Option<&str>),
    holder: &H,
) -> Result<bool> {
    let (cluster, caches) = (ctx.cluster(), ctx.caches());
    let leaver_name = leaver.name_any();
    let Some(cached) = caches.namespace(namespace) else {
        return Ok(false);
    };
    let workspace =
        successors_workspace(ctx, &leaver_name, successor, (namespace, profile)).await?;
    let Some(workspace) = workspace else {
        let note = format!(
            "namespace {namespace:?} is not handed over: the API server made no Workspace for it"
        );
        cluster.publish(leaver, EventType::Warning, HANDOVER_FALLBACK, note);
        return Ok(false);
    };
    if is_owned_by(&cached.facts, &workspace) {
        return Ok(true);
    }
    if !is_owned_by(&cached.facts, holder) {
        return Ok(false);
    }
    // Whatever the old holder granted there goes first (a personal workspace's owner binding;
    // the leaver's own home was emptied already): the successor's access comes from the new
    // Workspace alone.
    revoke_all(cluster, namespace, "the home is handed over").await?;
    // The leaver's slice of their total goes too: the successor's total, if any, cuts its own.
    let slice = ObjectRef::<ResourceQuota>::new(TOTAL_QUOTA_NAME).within(namespace);
    cluster.delete(&slice, &DeleteParams::default()).await?;
    let uid = workspace.uid().unwrap_or_default();
    let owner = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
        "name": workspace.name_any(), "uid": uid,
    });
    let patch = json!({
        "metadata": {
            "uid": cached.metadata.uid,
            "labels": { LABEL_USER: null, LABEL_WORKSPACE: workspace.name_any(),
                LABEL_HANDED_OVER_FROM: leaver_name },
            "annotations": { ANNOTATION_USER_UID: null, ANNOTATION_WORKSPACE_UID: uid },
            "ownerReferences": [owner],
        }
    });
    cluster
        .merge_patch::<Namespace>(None, namespace, &patch)
        .await?;
    let to = successor.name_any();
    let note = format!(
        "namespace {namespace:?} handed over to {to} as their workspace {namespace:?}, with its data"
    );
    tracing::info!(target: "homestead::access", leaver = %leaver_name, successor = %to, %namespace, "home handed over");
    cluster.record(leaver, Change::NamespaceHandedOver, note);
    let note = format!(
        "namespace {namespace:?} of {leaver_name}, who left, is now your workspace {namespace:?}"
    );
    cluster.record(successor, Change::HomeReceived, note);
    Ok(true)
}

/// The successor's Workspace for the home `namespace` (with the Profile `profile`) of
/// `leaver`: one named as the namespace, made now or by an earlier pass; when that name is
/// another Workspace's (one the successor holds a home by from an earlier handover, or one a
/// person made to stand in the way), one this handover made before under a generated name,
/// read afresh with a list (a cache that has not seen it yet must not make a second), else a
/// new one named `<namespace>-<5 random characters>` by the API server (`generateName`): a
/// name nobody can take in advance. `None` only if the API server refuses to generate one.
///
/// # Errors
/// A failed read, list or create.
async fn successors_workspace(
    ctx: &Context,
    leaver: &str,
    successor: &User,
    (namespace, profile): (&str, Option<&str>),
) -> Result<Option<Workspace>> {
    let (cluster, caches) = (ctx.cluster(), ctx.caches());
    let to = successor.name_any();
    let ours = |w: &Workspace| {
        is_handover_of(w, leaver)
            && w.spec.owner.user.as_deref() == Some(to.as_str())
            && namespace_of(w, ctx.config()) == namespace
    };
    let mut desired = workspace_for(leaver, &to, namespace, profile, CREATOR);
    let found = match caches.workspace(namespace) {
        Some(w) => Some(w.as_ref().clone()),
        None => match cluster.create(&desired).await? {
            Some(made) => Some(made),
            None => cluster.get(&ObjectRef::<Workspace>::new(namespace)).await?,
        },
    };
    if let Some(w) = found.filter(|w| ours(w)) {
        return Ok(Some(w));
    }
    let selector = format!("{LABEL_HANDED_OVER_FROM}={leaver}");
    let what = format!("the Workspaces handed over from {leaver}");
    let made: Vec<Workspace> = cluster.list_labelled(&selector, &what).await?;
    if let Some(w) = made.into_iter().find(|w| ours(w)) {
        return Ok(Some(w));
    }
    desired.metadata.name = None;
    desired.metadata.generate_name = Some(format!("{namespace}-"));
    cluster.create(&desired).await
}

/// Drops `leaver` from the `admins` of every team workspace; one left without an admin names
/// `successor` (the API requires one), or without a successor keeps the leaver (who, gone,
/// grants nothing).
///
/// # Errors
/// A failed patch.
async fn drop_from_teams(ctx: &Context, leaver: &str, successor: Option<&User>) -> Result<()> {
    for workspace in ctx.caches().workspaces_of_user(leaver) {
        if !matches!(Owner::of(&workspace), Some(Owner::Group(_)))
            || !workspace.spec.admins.iter().any(|a| a == leaver)
        {
            continue;
        }
        let mut admins: Vec<String> = workspace
            .spec
            .admins
            .iter()
            .filter(|a| *a != leaver)
            .cloned()
            .collect();
        if admins.is_empty() {
            let Some(successor) = successor else {
                continue;
            };
            admins.push(successor.name_any());
        }
        let patch = json!({
            "metadata": { "uid": workspace.metadata.uid },
            "spec": { "admins": admins },
        });
        ctx.cluster()
            .merge_patch::<Workspace>(None, &workspace.name_any(), &patch)
            .await?;
        tracing::info!(target: "homestead::access", %leaver, workspace = %workspace.name_any(), ?admins, "team workspace admins after a handover");
    }
    Ok(())
}
