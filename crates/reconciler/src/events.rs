//! Events published off the reconcile path.
//!
//! A reconcile hands its Events to the [`EventQueue`] and goes on; one publisher task writes
//! them through kube-runtime's [`Recorder`] (`events.k8s.io/v1`), one at a time, in the order
//! they were queued. Events are informative and best effort (per the Kubernetes API's
//! description of Events), and client-go's EventRecorder, which every controller-runtime
//! operator uses, queues them the same way, with one writer. So a person's access never waits
//! on an Event, and during a bulk import the API server serves the writes that give people
//! access first: one Event in flight against up to `--concurrency` reconciles takes a small
//! share of it. `homestead_events_pending` says how many are waiting.
//!
//! A bulk change (an import, a mass offboarding, a Profile rollout) makes Events faster than one
//! writer publishes them, and one Event per person would add a request per person to what the
//! change costs the API server. When more than [`BULK`] arrive within a second, the publisher
//! lets them gather for [`GATHER`] and folds the Normal Events of each reason into one summary
//! Event regarding the `users.homestead.dev` CustomResourceDefinition ("Provisioned: 812 Users
//! at once ...", naming as many as fit), until [`BULK_HOLD`] has passed without such a second.
//! So Events never trail the change by more than a moment and cost it next to nothing.
//! Warnings are never folded: every refusal and failure reaches the person's own User. What a
//! folded Event would have said is in each User's `Ready` condition (`kubectl describe user`),
//! and `homestead_events_summarised_total` counts them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use homestead_api::{CRD_NAME, User};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc;
use tracing::warn;

use crate::fence::Fence;
use crate::metrics::Metrics;

/// More Events than this arriving within a second are a bulk change (an import, a mass
/// offboarding, a Profile rollout): the publisher folds their Normal Events, by reason, into
/// summaries (see the module docs). Everyday changes, even a few people at once, stay below it.
pub const BULK: usize = 32;

/// How long the publisher keeps folding after the last second with more than [`BULK`] Events.
pub const BULK_HOLD: Duration = Duration::from_secs(5);

/// How long the publisher lets Events gather during a bulk change before it folds them: one
/// summary per reason covers this much of it.
pub const GATHER: Duration = Duration::from_millis(500);

/// The most Events the publisher takes from the queue at once.
const BATCH: usize = 100_000;

/// The longest Event note the API server accepts (`events.k8s.io/v1`), in bytes.
const MAX_NOTE_BYTES: usize = 1024;

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
        let publisher = Publisher {
            recorders,
            client: client.clone(),
            reporter: reporter.clone(),
            users: None,
            fence,
            metrics: metrics.clone(),
        };
        tokio::spawn(publisher.run(queue));
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

/// What the publisher sends for a batch taken from the queue.
enum Outgoing {
    /// One Event about one User, as queued.
    One(Box<Pending>),
    /// The Normal Events of one reason about these Users (at least two), folded into one.
    Summary { reason: String, users: Vec<String> },
}

/// What to publish for `batch`, the Events taken from the queue at once, in the order queued:
/// each as it is, unless `bulk`; then every Warning as it is and the Normal Events of each
/// reason folded into one [`Outgoing::Summary`] (a reason only one User has stays as it is).
fn fold(batch: Vec<Pending>, bulk: bool) -> Vec<Outgoing> {
    if !bulk {
        return batch
            .into_iter()
            .map(|p| Outgoing::One(Box::new(p)))
            .collect();
    }
    let mut out = Vec::new();
    let mut by_reason: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
    for pending in batch {
        if pending.event.type_ == EventType::Normal {
            by_reason
                .entry(pending.event.reason.clone())
                .or_default()
                .push(pending);
        } else {
            out.push(Outgoing::One(Box::new(pending)));
        }
    }
    for (reason, mut group) in by_reason {
        if group.len() == 1 {
            out.extend(group.pop().map(|p| Outgoing::One(Box::new(p))));
        } else {
            let users = group
                .into_iter()
                .map(|p| p.regarding.name.unwrap_or_default())
                .collect();
            out.push(Outgoing::Summary { reason, users });
        }
    }
    out
}

/// Tells a bulk change from everyday ones by how many Events arrive per second.
#[derive(Debug)]
struct BulkDetector {
    /// When the current one-second window began.
    window: Instant,
    /// Events arrived in it.
    arrived: usize,
    /// Until when the publisher folds (the last window over [`BULK`] plus [`BULK_HOLD`]).
    until: Option<Instant>,
}

impl BulkDetector {
    fn new(now: Instant) -> Self {
        Self {
            window: now,
            arrived: 0,
            until: None,
        }
    }

    /// Counts `count` Events arriving at `now`; returns whether a bulk change is under way.
    fn arrived(&mut self, count: usize, now: Instant) -> bool {
        if now.duration_since(self.window) >= Duration::from_secs(1) {
            self.window = now;
            self.arrived = 0;
        }
        self.arrived += count;
        if self.arrived > BULK {
            self.until = Some(now + BULK_HOLD);
        }
        self.until.is_some_and(|until| now < until)
    }
}

/// The note of a summary Event: how many Users had `reason` at once, and as many of their
/// names as fit in [`MAX_NOTE_BYTES`].
fn summary_note(reason: &str, users: &[String]) -> String {
    let head = format!(
        "{reason}: {} Users at once (each User's Ready condition says what was done): ",
        users.len()
    );
    let mut note = head.clone();
    for (i, user) in users.iter().enumerate() {
        let more = format!(" and {} more", users.len() - i);
        let separator = if i == 0 { "" } else { ", " };
        if note.len() + separator.len() + user.len() + more.len() > MAX_NOTE_BYTES {
            note.push_str(&more);
            return note;
        }
        note.push_str(separator);
        note.push_str(user);
    }
    note
}

/// The one task that publishes queued Events.
struct Publisher {
    /// The Recorders the Users are spread over ([`EventQueue::RECORDERS`]).
    recorders: Vec<Recorder>,
    client: Client,
    reporter: Reporter,
    /// The `users.homestead.dev` CRD, which summaries are about, once read.
    users: Option<ObjectReference>,
    fence: Arc<Fence>,
    metrics: Metrics,
}

impl Publisher {
    /// Publishes what arrives on `queue` until every sender is gone: whatever is waiting at
    /// once, [`fold`]ed, one Event at a time. A failure is logged and counted, never retried:
    /// the next change publishes a new Event.
    async fn run(mut self, mut queue: mpsc::UnboundedReceiver<Pending>) {
        let mut batch = Vec::new();
        let mut detector = BulkDetector::new(Instant::now());
        while queue.recv_many(&mut batch, BATCH).await > 0 {
            let bulk = detector.arrived(batch.len(), Instant::now());
            if bulk {
                tokio::time::sleep(GATHER).await;
                let before = batch.len();
                if !queue.is_empty() {
                    queue.recv_many(&mut batch, BATCH).await;
                }
                detector.arrived(batch.len() - before, Instant::now());
            }
            let taken = batch.len();
            for outgoing in fold(std::mem::take(&mut batch), bulk) {
                if self.fence.is_held() {
                    self.send(outgoing).await;
                }
            }
            self.metrics.events_pending.sub(taken as i64);
        }
    }

    async fn send(&mut self, outgoing: Outgoing) {
        let (result, user, reason) = match outgoing {
            Outgoing::One(pending) => {
                let Pending { event, regarding } = *pending;
                let user = regarding.name.clone().unwrap_or_default();
                let recorder = &self.recorders[shard(&user, self.recorders.len())];
                let result = recorder.publish(&event, &regarding).await;
                (result, user, event.reason)
            }
            Outgoing::Summary { reason, users } => {
                self.metrics.events_summarised.inc_by(users.len() as u64);
                let event = Event {
                    type_: EventType::Normal,
                    reason: reason.clone(),
                    note: Some(summary_note(&reason, &users)),
                    action: "Reconcile".to_owned(),
                    secondary: None,
                };
                let regarding = self.users_crd().await;
                // A Recorder of its own: a summary is never folded into an earlier one's
                // series (a series keeps the first note).
                let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
                let result = recorder.publish(&event, &regarding).await;
                (result, format!("{} Users", users.len()), reason)
            }
        };
        if let Err(e) = result {
            self.metrics.events_failed.inc();
            warn!(%user, %reason, "publishing Event failed: {e}");
        }
    }

    /// A reference to the `users.homestead.dev` CRD, with its uid (so `kubectl describe crd`
    /// shows the summaries) once it could be read; read again until it could.
    async fn users_crd(&mut self) -> ObjectReference {
        if let Some(reference) = &self.users {
            return reference.clone();
        }
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        match api.get_opt(CRD_NAME).await {
            Ok(Some(crd)) => self.users.insert(crd.object_ref(&())).clone(),
            Ok(None) | Err(_) => ObjectReference {
                api_version: Some(CustomResourceDefinition::api_version(&()).into_owned()),
                kind: Some(CustomResourceDefinition::kind(&()).into_owned()),
                name: Some(CRD_NAME.to_owned()),
                ..ObjectReference::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(user: &str, type_: EventType, reason: &str) -> Pending {
        Pending {
            event: Event {
                type_,
                reason: reason.to_owned(),
                note: Some(format!("{reason} {user}")),
                action: "Reconcile".to_owned(),
                secondary: None,
            },
            regarding: ObjectReference {
                name: Some(user.to_owned()),
                ..ObjectReference::default()
            },
        }
    }

    /// (user or `n Users`, reason) of each outgoing Event.
    fn shape(outgoing: &[Outgoing]) -> Vec<(String, String)> {
        outgoing
            .iter()
            .map(|o| match o {
                Outgoing::One(p) => (p.regarding.name.clone().unwrap(), p.event.reason.clone()),
                Outgoing::Summary { reason, users } => {
                    (format!("{} Users", users.len()), reason.clone())
                }
            })
            .collect()
    }

    #[test]
    fn outside_a_bulk_change_events_go_out_as_they_are_in_order() {
        let batch: Vec<Pending> = (0..100)
            .map(|i| pending(&format!("u{i}"), EventType::Normal, "Provisioned"))
            .collect();
        let out = shape(&fold(batch, false));
        assert_eq!(out.len(), 100);
        assert_eq!(out[0], ("u0".into(), "Provisioned".into()));
        assert_eq!(out[99], ("u99".into(), "Provisioned".into()));
    }

    #[test]
    fn more_than_bulk_events_within_a_second_start_a_bulk_change_that_holds_a_while() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut detector = BulkDetector::new(start);
        // A few people at once, every second: never a bulk change.
        for second in 0..5 {
            for i in 0..4 {
                assert!(!detector.arrived(BULK / 4, at(second * 1000 + i * 10)));
            }
        }
        // One more Event than BULK within a second is.
        assert!(!detector.arrived(BULK, at(5000)));
        assert!(detector.arrived(1, at(5100)));
        // It holds for BULK_HOLD after the last such second, whatever arrives meanwhile...
        let hold = u64::try_from(BULK_HOLD.as_millis()).unwrap();
        assert!(detector.arrived(1, at(5100 + hold - 10)));
        // ...and then ends.
        assert!(!detector.arrived(1, at(5100 + hold + 10)));
    }

    #[test]
    fn a_bulk_folds_normal_events_by_reason_and_keeps_every_warning() {
        let mut batch: Vec<Pending> = (0..100)
            .map(|i| pending(&format!("u{i}"), EventType::Normal, "Provisioned"))
            .collect();
        batch.push(pending("mallory", EventType::Warning, "NamespaceConflict"));
        batch.push(pending("eve", EventType::Warning, "NamespaceConflict"));
        batch.push(pending("bob", EventType::Normal, "Terminating"));
        let out = shape(&fold(batch, true));
        assert_eq!(
            out,
            vec![
                ("mallory".into(), "NamespaceConflict".into()),
                ("eve".into(), "NamespaceConflict".into()),
                ("100 Users".into(), "Provisioned".into()),
                ("bob".into(), "Terminating".into()),
            ]
        );
    }

    #[test]
    fn a_summary_names_as_many_users_as_fit_and_counts_the_rest() {
        let users: Vec<String> = (0..1000).map(|i| format!("person-{i:04}")).collect();
        let note = summary_note("Provisioned", &users);
        assert!(note.len() <= MAX_NOTE_BYTES, "{} bytes", note.len());
        assert!(note.starts_with("Provisioned: 1000 Users at once"));
        assert!(note.contains("person-0000, person-0001"));
        let named = note.matches("person-").count();
        assert!(named > 50, "only {named} named");
        assert!(
            note.ends_with(&format!(" and {} more", 1000 - named)),
            "{note}"
        );
        let two = summary_note("Terminating", &users[..2]);
        assert!(two.ends_with(": person-0000, person-0001"), "{two}");
    }

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
