//! The User reconciler: [`reconcile`], whose single top-level action is kube-runtime's finalizer
//! helper (provisioning on `Event::Apply`, offboarding on `Event::Cleanup`), and
//! [`error_policy`], which decides the retry after a failure; both say when to run again as a
//! [`Requeue`].

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
use super::requeue::Requeue;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::ReconcileResult;

/// Reconciles one User, once every cache has synced: the kube-runtime finalizer helper adds `homestead.dev/cleanup` before
/// anything is created, runs [`provision`] while the User lives and [`offboard`] once it is
/// deleted, and removes the finalizer when offboarding succeeds. Waiting for a terminating
/// Namespace is a normal outcome: `Ok` with a requeue after 30 s (the Namespace watch usually
/// triggers sooner), not an error.
///
/// Returns when to run again without a watch event ([`Requeue`]): the earliest recheck the
/// flow asked for (an expiry, a write the cache does not show yet, a terminating Namespace);
/// none after adding or removing the finalizer, whose own watch event runs the next pass.
///
/// # Errors
/// [`Error`] when an API request fails; the controller then calls [`error_policy`].
#[instrument(skip_all, fields(user = %user.name_any()))]
pub async fn reconcile(user: Arc<User>, ctx: Arc<Context>) -> Result<Requeue> {
    if !ctx.ready_to_write().await {
        // Not (or no longer) the leader: touch nothing, not even the finalizer.
        return Ok(Requeue::after(Duration::from_secs(5)));
    }
    let metrics = ctx.metrics();
    let timer = metrics.duration.start_timer();
    metrics.in_flight.inc();
    let reference = ObjectRef::from_obj(user.as_ref());
    let users: Api<User> = Api::all(ctx.cluster().client().clone());
    // The helper wants kube-runtime's `Action`, which cannot be read back: the flow's own
    // answer is kept here, and stays `on_change` when the helper only added or removed the
    // finalizer.
    let mut next = Requeue::on_change();
    let flow_next = &mut next;
    let ctx_of_flow = &ctx;
    let result = finalizer(&users, FINALIZER, user, move |event| async move {
        let ctx = ctx_of_flow;
        let requeue = match event {
            Finalizer::Apply(user) => provision(&user, ctx).await,
            Finalizer::Cleanup(user) => {
                let done = offboard(&user, ctx).await;
                if done.is_ok() {
                    ctx.metrics().observe_offboarded(&user);
                }
                done
            }
        }?;
        *flow_next = requeue;
        Ok(Action::from(requeue))
    })
    .await
    .map(|_| next)
    .map_err(|e| Error::Finalizer(Box::new(e)));
    timer.observe_duration();
    metrics.in_flight.dec();
    let result = result.or_else(|e| match e.terminating_namespace() {
        Some(namespace) => {
            // Every pass while the namespace controller empties it ends here (a dozen per
            // offboarded User); the status and the Terminating Event already say so.
            debug!(%namespace, "waiting for the namespace to be deleted");
            Ok(Requeue::after(TERMINATING_RECHECK))
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
pub fn error_policy(user: Arc<User>, error: &Error, ctx: Arc<Context>) -> Requeue {
    Requeue::after(ctx.retry_delay(&user, error))
}
