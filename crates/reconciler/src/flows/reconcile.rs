//! The kube-runtime reconciler: [`reconcile`], whose single top-level action is the finalizer
//! helper (provisioning on `Event::Apply`, offboarding on `Event::Cleanup`), and
//! [`error_policy`], which decides the retry after a failure.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{FINALIZER, User};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, instrument};

use super::offboard::offboard;
use super::provision::{TERMINATING_RECHECK, provision};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::ReconcileResult;

/// Reconciles one User, once every cache has synced: the kube-runtime finalizer helper adds `homestead.dev/cleanup` before
/// anything is created, runs [`provision`] while the User lives and [`offboard`] once it is
/// deleted, and removes the finalizer when offboarding succeeds. Waiting for a terminating
/// Namespace is a normal outcome: `Ok` with a requeue after 30 s (the Namespace watch usually
/// triggers sooner), not an error.
///
/// Returns the next [`Action`]: a resync after 300 s when converged or refused.
///
/// # Errors
/// [`Error`] when an API request fails; the controller then calls [`error_policy`].
#[instrument(skip_all, fields(user = %user.name_any()))]
pub async fn reconcile(user: Arc<User>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.ready_to_write().await {
        // Not (or no longer) the leader: touch nothing, not even the finalizer.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let metrics = ctx.metrics();
    let timer = metrics.duration.start_timer();
    metrics.in_flight.inc();
    let reference = ObjectRef::from_obj(user.as_ref());
    let users: Api<User> = Api::all(ctx.cluster().client().clone());
    let result = finalizer(&users, FINALIZER, user, |event| async {
        match event {
            Finalizer::Apply(user) => provision(&user, &ctx).await,
            Finalizer::Cleanup(user) => {
                let done = offboard(&user, &ctx).await;
                if done.is_ok() {
                    ctx.metrics().observe_offboarded(&user);
                }
                done
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    timer.observe_duration();
    metrics.in_flight.dec();
    let result = result.or_else(|e| match e.terminating_namespace() {
        Some(namespace) => {
            // Every pass while the namespace controller empties it ends here (a dozen per
            // offboarded User); the status and the Terminating Event already say so.
            debug!(%namespace, "waiting for the namespace to be deleted");
            Ok(Action::requeue(TERMINATING_RECHECK))
        }
        None => Err(e),
    });
    let label: &str = if result.is_ok() {
        ctx.succeeded(&reference);
        ReconcileResult::Success.into()
    } else {
        ReconcileResult::Error.into()
    };
    metrics.reconciliations.with_label_values(&[label]).inc();
    result
}

/// Decides the retry after a failed reconcile: per-User exponential backoff with jitter (1 s,
/// 2 s, 4 s, ... up to 5 min; see [`crate::error::Backoffs`]). Counts the error by
/// [`Error::metric_label`] and logs it as a warning.
pub fn error_policy(user: Arc<User>, error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.retry_delay(&user, error))
}
