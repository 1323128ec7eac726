//! Profile and DirectoryGroup statuses, each kept by a small controller of its own (driven by
//! kube-runtime's `Controller` in the operator): a Profile's status counts its Users and how many
//! reflect its current generation ([`profile_status`]); a DirectoryGroup's counts its members and
//! names the Profile it selects ([`group_status`]). Each reconcile reads caches only and writes
//! the status (server-side apply, field manager `homestead`) only when it differs. A failed write
//! is retried per object with exponential backoff and counted in
//! `homestead_status_errors_total{kind}`.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{DirectoryGroup, DirectoryGroupStatus, Profile};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use tracing::warn;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::StatusKind;
use crate::plan::profile::{group_status, profile_status, profile_status_matches};

/// While this replica may not write, statuses are looked at again after this long.
const NOT_LEADER_RECHECK: Duration = Duration::from_secs(5);

/// Waits until the caches have listed; then `None` if this replica may write, else when to
/// look again (a standby writes no status).
async fn not_yet(ctx: &Context) -> Option<Action> {
    (!ctx.ready_to_write().await).then(|| Action::requeue(NOT_LEADER_RECHECK))
}

/// Brings `profile`'s status in line with its Users (as cached); writes nothing when it already
/// is. Returns [`Action::await_change`]: a change of the Profile or of one of its Users triggers
/// the next reconcile.
///
/// # Errors
/// [`Error::Kube`] with the status write's verb when the API server refuses it.
pub async fn reconcile_profile_status(profile: Arc<Profile>, ctx: Arc<Context>) -> Result<Action> {
    if let Some(later) = not_yet(&ctx).await {
        return Ok(later);
    }
    let name = profile.name_any();
    let members = ctx.caches().users_of(&name);
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let desired = profile_status(&profile, members, now);
    if !profile_status_matches(profile.status.as_ref(), &desired) {
        ctx.cluster()
            .apply_status::<Profile>(&name, &desired)
            .await?;
    }
    ctx.profile_backoffs()
        .reset(&ObjectRef::from_obj(profile.as_ref()));
    Ok(Action::await_change())
}

/// Brings `group`'s status in line with its members and the Profiles (as cached); writes
/// nothing when it already is.
///
/// # Errors
/// [`Error::Kube`] with the status write's verb when the API server refuses it.
pub async fn reconcile_group_status(
    group: Arc<DirectoryGroup>,
    ctx: Arc<Context>,
) -> Result<Action> {
    if let Some(later) = not_yet(&ctx).await {
        return Ok(later);
    }
    let desired = group_status(&group, &ctx.caches().profiles());
    // `status.total` has a field manager of its own (docs/quota.md): not this write's.
    let current = group
        .status
        .clone()
        .map(|s| DirectoryGroupStatus { total: None, ..s });
    if current.as_ref() != Some(&desired) {
        ctx.cluster()
            .apply_status::<DirectoryGroup>(&group.name_any(), &desired)
            .await?;
    }
    ctx.group_backoffs()
        .reset(&ObjectRef::from_obj(group.as_ref()));
    Ok(Action::await_change())
}

/// After a failed Profile status write: counts it in `homestead_status_errors_total{kind="Profile"}`,
/// logs it, and retries with the Profile's backoff (1 s doubling to 5 min, with jitter).
pub fn profile_status_error(profile: Arc<Profile>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx
        .profile_backoffs()
        .next_delay(ObjectRef::from_obj(profile.as_ref()));
    retry(&ctx, StatusKind::Profile, &profile.name_any(), error, delay)
}

/// After a failed DirectoryGroup status write: as [`profile_status_error`], with
/// `kind="DirectoryGroup"`.
pub fn group_status_error(group: Arc<DirectoryGroup>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx
        .group_backoffs()
        .next_delay(ObjectRef::from_obj(group.as_ref()));
    retry(
        &ctx,
        StatusKind::DirectoryGroup,
        &group.name_any(),
        error,
        delay,
    )
}

/// Counts and logs a failed status write of the `kind` named `name`, and requeues it after
/// `delay`.
fn retry(ctx: &Context, kind: StatusKind, name: &str, error: &Error, delay: Duration) -> Action {
    let kind: &str = kind.into();
    ctx.metrics().status_errors.with_label_values(&[kind]).inc();
    warn!(
        kind,
        name,
        retry_in_seconds = delay.as_secs_f64(),
        "writing a status failed: {error}"
    );
    Action::requeue(delay)
}
