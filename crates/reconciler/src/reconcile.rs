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
use tracing::{debug, instrument, warn};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::ReconcileResult;
use crate::offboard::offboard;
use crate::provision::{TERMINATING_RECHECK, provision};

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
    ctx.wait_synced().await;
    if !ctx.fence.is_held() {
        // Not (or no longer) the leader: touch nothing, not even the finalizer.
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let timer = ctx.metrics.duration.start_timer();
    ctx.metrics.in_flight.inc();
    let reference = ObjectRef::from_obj(user.as_ref());
    let users: Api<User> = Api::all(ctx.client.clone());
    let result = finalizer(&users, FINALIZER, user, |event| async {
        match event {
            Finalizer::Apply(user) => provision(&user, &ctx).await,
            Finalizer::Cleanup(user) => {
                let done = offboard(&user, &ctx).await;
                if done.is_ok() {
                    ctx.metrics.observe_offboarded(&user);
                }
                done
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    timer.observe_duration();
    ctx.metrics.in_flight.dec();
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
        ctx.backoffs.reset(&reference);
        ReconcileResult::Success.into()
    } else {
        ReconcileResult::Error.into()
    };
    ctx.metrics
        .reconciliations
        .with_label_values(&[label])
        .inc();
    result
}

/// Decides the retry after a failed reconcile: per-User exponential backoff with jitter (1 s,
/// 2 s, 4 s, ... up to 5 min; see [`crate::error::Backoffs`]). Counts the error by
/// [`Error::metric_label`] and logs it as a warning.
pub fn error_policy(user: Arc<User>, error: &Error, ctx: Arc<Context>) -> Action {
    Action::requeue(ctx.retry_delay(&user, error))
}

impl Context {
    /// What [`error_policy`] does, with the delay as a [`Duration`].
    pub(crate) fn retry_delay(&self, user: &User, error: &Error) -> Duration {
        let reason = error.metric_label().as_str();
        self.metrics.errors.with_label_values(&[reason]).inc();
        let delay = self.backoffs.next_delay(ObjectRef::from_obj(user));
        warn!(
            user = %user.name_any(),
            %reason,
            retry_in_seconds = delay.as_secs_f64(),
            "reconcile failed: {error}"
        );
        delay
    }
}
