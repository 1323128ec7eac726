//! Total quotas across an owner's homes (docs/quota.md): a home's own slice before access
//! ([`ensure_slice`], called by the home's reconcile among its guards), and the Controller over
//! slices that moves room to where use grows ([`reconcile_total`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use homestead_api::{
    ANNOTATION_TOTAL, Change, DirectoryGroup, LABEL_TOTAL, LABEL_TOTAL_OWNER, TOTAL_FIELD_MANAGER,
    TOTAL_QUOTA_NAME, TotalQuotaStatus, User,
};
use homestead_model::workspace::Owner;
use k8s_openapi::api::core::v1::ResourceQuota;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::act::total::{Home, fingerprint, owner_kind, owner_of_slice, rebalance};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::plan::ownership::{Holder, labelled_for, managed_labels};
use crate::plan::profile::group_profile;
use crate::plan::total::{Slice, amounts, plan, status};
use crate::state::Caches;

/// A total quota's `hard`: resource names to quantities.
pub type Total = BTreeMap<String, Quantity>;

/// The total of `owner`'s Profile (a person's applied Profile, or the one the directory
/// chooses for a team's group, else the directory's floor), from the caches; `None` without
/// one.
pub fn owner_total(owner: &Owner, caches: &Caches) -> Option<Total> {
    let profile = match owner {
        Owner::User(name) => {
            let applied = caches.user(name)?.status.as_ref()?.profile.clone()?;
            caches.profile(&applied.name)?
        }
        Owner::Group(name) => group_profile(caches.group(name)?.as_ref(), &caches.profiles())
            .cloned()
            .unwrap_or_else(|| Arc::new(crate::plan::profile::directory_floor())),
    };
    Some(profile.spec.total_quota.as_ref()?.hard.clone())
}

/// Makes sure the home `namespace` of `holder` (a User's own home, or a Workspace) has its
/// slice of `owner`'s `total` before anyone has access there: none yet, or one cut from another
/// total, splits the total again with this home in it (under the owner's lock); without a
/// total, a slice left from one is removed. Returns the changes made, for the home's Event.
///
/// # Errors
/// A failed list or write ([`rebalance`]), or a failed delete.
pub async fn ensure_slice<H: Holder>(
    ctx: &Context,
    holder: &H,
    namespace: &str,
    (owner, total): (&Owner, Option<&Total>),
) -> Result<Vec<(Change, String)>> {
    let cached = ctx
        .caches()
        .quota(namespace, TOTAL_QUOTA_NAME)
        .filter(|q| labelled_for(q.meta(), holder));
    let Some(total) = total else {
        return release_slice(ctx, holder, namespace, "the Profile has no totalQuota").await;
    };
    let print = amounts(total).map(|a| fingerprint(&a)).ok();
    let current = cached.as_ref().is_some_and(|q| {
        owner_of_slice(q).as_ref() == Some(owner)
            && q.annotations().get(ANNOTATION_TOTAL) == print.as_ref()
    });
    if current {
        return Ok(Vec::new());
    }
    let mut labels = managed_labels(holder);
    labels.insert(LABEL_TOTAL.to_owned(), owner_kind(owner).to_owned());
    labels.insert(LABEL_TOTAL_OWNER.to_owned(), owner.name().to_owned());
    let home = Home {
        namespace: namespace.to_owned(),
        labels,
    };
    let _lock = ctx.total_lock(owner).await;
    let moved = rebalance(ctx.cluster(), owner, total, Some(home), homes(ctx)).await?;
    let hard = moved
        .slices
        .iter()
        .find(|s| s.namespace == namespace)
        .map(|s| print_amounts(&s.hard))
        .unwrap_or_default();
    let note = format!(
        "applied {namespace}/{TOTAL_QUOTA_NAME}: this home's slice of the total of {owner} ({hard})"
    );
    Ok(vec![(Change::QuotaApplied, note)])
}

/// Removes the slice in `namespace` if the cache has one labelled as `holder`'s, giving its
/// room back to the owner's other homes: the Profile has no total any more, or the home stops
/// being the owner's (kept as a retained namespace, where Homestead writes nothing after).
/// Returns the change made, for the home's Event.
///
/// # Errors
/// A failed delete.
pub async fn release_slice<H: Holder>(
    ctx: &Context,
    holder: &H,
    namespace: &str,
    why: &str,
) -> Result<Vec<(Change, String)>> {
    let cached = ctx.caches().quota(namespace, TOTAL_QUOTA_NAME);
    if !cached
        .as_ref()
        .is_some_and(|q| labelled_for(q.meta(), holder))
    {
        return Ok(Vec::new());
    }
    let reference = ObjectRef::<ResourceQuota>::new(TOTAL_QUOTA_NAME).within(namespace);
    ctx.cluster()
        .delete(&reference, &DeleteParams::default())
        .await?;
    if let Some(owner) = cached.as_deref().and_then(owner_of_slice) {
        forget_home(ctx, &owner, namespace).await;
    }
    let note = format!("removed {namespace}/{TOTAL_QUOTA_NAME}: {why}");
    Ok(vec![(Change::QuotaRemoved, note)])
}

/// Drops the home `namespace` from `owner`'s `status.total` as the cache has it (the whole field
/// when the owner has no total any more), after its slice was removed: the deletion wakes
/// another slice of the owner, which writes the status afresh, but the owner's last slice has
/// none to wake.
async fn forget_home(ctx: &Context, owner: &Owner, namespace: &str) {
    let current = match owner {
        Owner::User(name) => ctx
            .caches()
            .user(name)
            .and_then(|u| u.status.clone()?.total),
        Owner::Group(name) => ctx
            .caches()
            .group(name)
            .and_then(|g| g.status.clone()?.total),
    };
    let Some(listed) = current else {
        return;
    };
    let of = |m: &BTreeMap<String, Quantity>| amounts(m).unwrap_or_default();
    let rest: Vec<Slice> = listed
        .homes
        .iter()
        .filter(|h| h.namespace != namespace)
        .map(|h| Slice {
            namespace: h.namespace.clone(),
            hard: of(&h.hard),
            used: of(&h.used),
        })
        .collect();
    let total = owner_total(owner, ctx.caches()).map(|hard| status(&hard, &rest));
    publish_or_count(ctx, owner, total).await;
}

/// Whether a namespace is a home Homestead may write a slice in: one the cache holds as
/// Homestead's (a retained namespace is not).
fn homes(ctx: &Context) -> impl Fn(&str) -> bool + '_ {
    |namespace| ctx.caches().namespace(namespace).is_some()
}

/// `amounts` as `resource=quantity` pairs for people.
fn print_amounts(amounts: &crate::plan::total::Amounts) -> String {
    let pairs: Vec<String> = amounts
        .iter()
        .map(|(k, v)| format!("{k}={}", crate::plan::total::quantity(*v).0))
        .collect();
    pairs.join(", ")
}

/// Reconciles one slice (a ResourceQuota `homestead-total`): brings its owner's
/// `status.total` in line with the owner's slices as `slices` (the Controller's cache of every
/// slice, usage included) has them ([`publish`]); then, when they show a move is due (a home
/// short of room another holds, or slices cut from another total than the owner's now; see
/// [`crate::plan::total::Split::is_due`]), moves them ([`rebalance`], which reads them afresh)
/// under the owner's lock. An owner without a total leaves its slices to their homes'
/// reconciles, which remove them, and loses `status.total`.
///
/// # Errors
/// A failed status write, or a failed list or write of the move.
pub async fn reconcile_total(
    quota: Arc<ResourceQuota>,
    ctx: Arc<Context>,
    slices: Store<ResourceQuota>,
) -> Result<Action> {
    ctx.wait_synced().await;
    let Some(owner) = owner_of_slice(&quota) else {
        return Ok(Action::await_change());
    };
    let Some(total) = owner_total(&owner, ctx.caches()) else {
        publish_or_count(&ctx, &owner, None).await;
        return Ok(Action::await_change());
    };
    let Ok(amounts) = amounts(&total) else {
        return Ok(Action::await_change());
    };
    let (stale, mine) = cached(&owner, &fingerprint(&amounts), &slices);
    if stale || plan(&amounts, &mine).is_due() {
        let _lock = ctx.total_lock(&owner).await;
        let moved = rebalance(ctx.cluster(), &owner, &total, None, homes(&ctx)).await?;
        if moved.writes > 0 {
            // The writes come back as slice events, which publish the status they make.
            tracing::debug!(%owner, writes = moved.writes, "moved the slices of a total quota");
            return Ok(Action::requeue(SLICE_RESYNC));
        }
    }
    publish_or_count(&ctx, &owner, Some(status(&total, &mine))).await;
    Ok(Action::requeue(SLICE_RESYNC))
}

/// [`publish`], a failure counted in `homestead_status_errors_total{kind="TotalQuota"}` and
/// logged rather than returned: the status only reports, and never holds up a move of the
/// slices (the next slice event, or the resync, writes it again).
async fn publish_or_count(ctx: &Context, owner: &Owner, total: Option<TotalQuotaStatus>) {
    if let Err(error) = publish(ctx, owner, total).await {
        let kind: &str = crate::metrics::StatusKind::TotalQuota.into();
        ctx.metrics().status_errors.with_label_values(&[kind]).inc();
        tracing::warn!(%owner, "writing the status of a total quota failed: {error}");
    }
}

/// `owner`'s slices in `slices`, sorted by namespace, and whether one of them was cut from
/// another total than the one printed `print`.
fn cached(owner: &Owner, print: &str, slices: &Store<ResourceQuota>) -> (bool, Vec<Slice>) {
    let mut stale = false;
    let mut mine: Vec<Slice> = Vec::new();
    for quota in slices.state() {
        if owner_of_slice(&quota).as_ref() != Some(owner) {
            continue;
        }
        stale |= quota
            .annotations()
            .get(ANNOTATION_TOTAL)
            .map(String::as_str)
            != Some(print);
        let of = |m: Option<&BTreeMap<String, Quantity>>| {
            m.map(amounts).and_then(|a| a.ok()).unwrap_or_default()
        };
        mine.push(Slice {
            namespace: quota.namespace().unwrap_or_default(),
            hard: of(quota.spec.as_ref().and_then(|s| s.hard.as_ref())),
            used: of(quota.status.as_ref().and_then(|s| s.used.as_ref())),
        });
    }
    mine.sort_by(|a, b| a.namespace.cmp(&b.namespace));
    (stale, mine)
}

/// Sets `status.total` of `owner` (its User or DirectoryGroup) to `total` (`None` removes
/// it), by server-side apply under the field manager [`TOTAL_FIELD_MANAGER`], unless the cache
/// already shows it so, or the owner is not (or no longer) there.
///
/// # Errors
/// [`Error::Kube`] with [`homestead_api::Verb::PatchStatus`] when the API server refuses.
async fn publish(ctx: &Context, owner: &Owner, total: Option<TotalQuotaStatus>) -> Result<()> {
    let current = match owner {
        Owner::User(name) => ctx
            .caches()
            .user(name)
            .map(|u| u.status.as_ref().and_then(|s| s.total.clone())),
        Owner::Group(name) => ctx
            .caches()
            .group(name)
            .map(|g| g.status.as_ref().and_then(|s| s.total.clone())),
    };
    if current.is_none_or(|current| current == total) {
        return Ok(());
    }
    // Without `total`, the apply gives up the field, and the API server removes it.
    let status = match &total {
        Some(total) => serde_json::json!({ "total": total }),
        None => serde_json::json!({}),
    };
    let cluster = ctx.cluster();
    match owner {
        Owner::User(name) => {
            cluster
                .apply_status_as::<User>(name, &status, TOTAL_FIELD_MANAGER)
                .await
        }
        Owner::Group(name) => {
            cluster
                .apply_status_as::<DirectoryGroup>(name, &status, TOTAL_FIELD_MANAGER)
                .await
        }
    }
}

/// How often a slice is looked at again without a change (seconds): a move that failed, or
/// room another home freed, is picked up by then.
const SLICE_RESYNC: Duration = Duration::from_secs(300);

/// The error policy of the slices' Controller: logs, and tries again after 5 s.
pub fn total_error(quota: Arc<ResourceQuota>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(
        namespace = quota.namespace().unwrap_or_default(),
        "moving the slices of a total quota failed: {error}"
    );
    Action::requeue(Duration::from_secs(5))
}
