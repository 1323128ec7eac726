//! Events published off the reconcile path.
//!
//! A reconcile hands its Events to the [`EventQueue`] and goes on; one publisher task writes
//! them through kube-runtime's [`Recorder`] (`events.k8s.io/v1`), one at a time, in the order
//! they were queued. Events are informative and best effort (per the Kubernetes API's
//! description of Events), and client-go's EventRecorder, which every controller-runtime
//! operator uses, queues them the same way, with one writer. So a person's access never waits
//! on an Event, and during a bulk import the API server serves the writes that give people
//! access first: one Event in flight against up to `--concurrency` reconciles takes a small
//! share of it, and the rest follow once the import is through. `homestead_events_pending`
//! says how many are waiting.

use std::sync::Arc;
use std::time::Duration;

use homestead_api::User;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;
use tracing::warn;

use crate::fence::Fence;
use crate::metrics::Metrics;

/// An Event waiting to be published, with the User it is about.
struct Pending {
    event: Event,
    regarding: ObjectReference,
}

/// Queues Events about Users and publishes them in the background, in order, only while this
/// replica holds the leader-election [`Fence`]. Cheap to clone (a shared sender).
///
/// The queue is unbounded: an Event waiting costs a few hundred bytes, and the most a bulk
/// import can queue is one per User it provisions. The publisher ends when the last clone of
/// the queue is dropped, after publishing what is queued.
#[derive(Clone)]
pub struct EventQueue {
    sender: mpsc::UnboundedSender<Pending>,
    metrics: Metrics,
}

impl EventQueue {
    /// How many kube-runtime [`Recorder`]s the Users are spread over (a User always meets the
    /// same one, so a repeat still becomes a series). A Recorder keeps every Event it published
    /// in the last 6 minutes and scans them all on each publish: after a bulk import of 10,000
    /// Users, one Recorder would scan 10,000 per Event; each of these scans a quarter of that.
    pub const RECORDERS: usize = 4;

    /// Starts the publisher task on the current Tokio runtime, reporting as `reporter` through
    /// `client`. An Event is dropped rather than published when `fence` is not held at that
    /// moment. Counts go to `homestead_events_pending` and `homestead_events_failed_total` in
    /// `metrics`.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn start(
        client: &Client,
        reporter: &Reporter,
        fence: Arc<Fence>,
        metrics: Metrics,
    ) -> Self {
        let recorders = (0..Self::RECORDERS)
            .map(|_| Recorder::new(client.clone(), reporter.clone()))
            .collect();
        let (sender, queue) = mpsc::unbounded_channel();
        tokio::spawn(publish(queue, recorders, fence, metrics.clone()));
        Self { sender, metrics }
    }

    /// Queues `event` about `user`; returns at once. Never fails: if the publisher is gone
    /// (the runtime is shutting down), the Event is dropped with a warning.
    pub fn publish(&self, user: &User, event: Event) {
        let pending = Pending {
            event,
            regarding: user.object_ref(&()),
        };
        self.metrics.events_pending.inc();
        if self.sender.send(pending).is_err() {
            self.metrics.events_pending.dec();
            warn!(user = %user.name_any(), "Event dropped: the publisher has stopped");
        }
    }

    /// How many Events are queued and not yet published (or dropped).
    pub fn pending(&self) -> i64 {
        self.metrics.events_pending.get()
    }

    /// Waits until every queued Event is published (or dropped), for at most `within`; returns
    /// whether the queue drained. The operator calls this before it gives up the Lease.
    pub async fn drained(&self, within: Duration) -> bool {
        let start = tokio::time::Instant::now();
        while self.pending() > 0 {
            if start.elapsed() >= within {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// Which of `shards` Recorders publishes the Events about the User `name`: always the same one.
fn shard(name: &str, shards: usize) -> usize {
    use std::hash::BuildHasher;
    // A fixed hasher: only the spread matters, not resistance to crafted names.
    let hash = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(name);
    hash as usize % shards
}

/// Publishes what arrives on `queue`, one at a time, each with the Recorder of its User, until
/// every sender is gone. A failure is logged and counted, never retried: the next change
/// publishes a new Event.
async fn publish(
    mut queue: mpsc::UnboundedReceiver<Pending>,
    recorders: Vec<Recorder>,
    fence: Arc<Fence>,
    metrics: Metrics,
) {
    while let Some(Pending { event, regarding }) = queue.recv().await {
        let user = regarding.name.as_deref().unwrap_or_default();
        let recorder = &recorders[shard(user, recorders.len())];
        if fence.is_held()
            && let Err(e) = recorder.publish(&event, &regarding).await
        {
            metrics.events_failed.inc();
            warn!(%user, reason = %event.reason, "publishing Event failed: {e}");
        }
        metrics.events_pending.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_always_meets_the_same_recorder_and_users_spread_over_all() {
        let names: Vec<String> = (0..400).map(|i| format!("user{i}")).collect();
        let mut counts = [0usize; EventQueue::RECORDERS];
        for name in &names {
            let recorder = shard(name, EventQueue::RECORDERS);
            assert_eq!(recorder, shard(name, EventQueue::RECORDERS));
            counts[recorder] += 1;
        }
        assert!(
            counts.iter().all(|&c| c > 50),
            "400 names spread unevenly over the Recorders: {counts:?}"
        );
    }
}
