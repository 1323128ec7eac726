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
//! folds the Normal Events of each reason, for as long as the change lasts, into one summary
//! Event regarding the `users.homestead.dev` CustomResourceDefinition ("Provisioned: 812 Users
//! at once ...", naming as many as fit). It publishes the summaries once no Event has arrived
//! for [`QUIET`] (the change is over), and every [`SUMMARY_EVERY`] while it goes on. So Events
//! follow a bulk change by about a second and cost it a handful of requests in all.
//! Warnings are never folded: every refusal and failure reaches the person's own User. What a
//! folded Event would have said is in each User's `Ready` condition (`kubectl describe user`),
//! and `homestead_events_summarised_total` counts them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use homestead_api::{CRD_NAME, MAX_EVENT_NOTE_BYTES, User};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tokio::sync::mpsc;
use tracing::warn;

use crate::act::fence::Fence;
use crate::metrics::Metrics;

/// More Events than this arriving within a second are a bulk change (an import, a mass
/// offboarding, a Profile rollout): the publisher folds their Normal Events, by reason, into
/// summaries (see the module docs). Everyday changes, even a few people at once, stay below it.
pub const BULK: usize = 32;

/// How long the publisher keeps folding after the last second with more than [`BULK`] Events.
pub const BULK_HOLD: Duration = Duration::from_secs(5);

/// A bulk change is over when no Event has arrived for this long: its summaries go out.
pub const QUIET: Duration = Duration::from_secs(1);

/// While a bulk change goes on, its summaries go out this often, so a long one reports as it
/// goes.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(30);

/// How many Users' names a summary keeps (more than its note can name).
const NAMES_KEPT: usize = 128;

/// The most Events the publisher takes from the queue at once.
const BATCH: usize = 100_000;

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
        self.publish_regarding(user.object_ref(&()), event);
    }

    /// [`EventQueue::publish`] about the object `regarding` (a User known by name and uid).
    pub fn publish_regarding(&self, regarding: ObjectReference, event: Event) {
        let name = regarding.name.clone().unwrap_or_default();
        let pending = Pending { event, regarding };
        self.metrics.events_pending.inc();
        if self.sender.send(pending).is_err() {
            self.metrics.events_pending.dec();
            warn!(user = %name, "Event dropped: the publisher has stopped");
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

/// The Normal Events of one reason folded during a bulk change.
struct Summary {
    /// The first of them, published as it is if it stays the only one.
    first: Pending,
    /// How many Users had it.
    users: usize,
    /// The first [`NAMES_KEPT`] of their names.
    names: Vec<String>,
}

/// The Normal Events of a bulk change, folded by reason until they are published.
#[derive(Default)]
struct Folded {
    /// When the first of them arrived.
    since: Option<Instant>,
    by_reason: BTreeMap<String, Summary>,
    /// How many Events are folded and not yet published.
    held: usize,
}

impl Folded {
    /// Folds `pending`, which arrived at `now`.
    fn add(&mut self, pending: Pending, now: Instant) {
        self.since.get_or_insert(now);
        self.held += 1;
        let name = pending.regarding.name.clone().unwrap_or_default();
        match self.by_reason.entry(pending.event.reason.clone()) {
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(Summary {
                    first: pending,
                    users: 1,
                    names: vec![name],
                });
            }
            std::collections::btree_map::Entry::Occupied(mut entry) => {
                let summary = entry.get_mut();
                summary.users += 1;
                if summary.names.len() < NAMES_KEPT {
                    summary.names.push(name);
                }
            }
        }
    }

    /// Everything folded so far, by reason (empties it); and how many Events that was.
    fn take(&mut self) -> (Vec<Summary>, usize) {
        self.since = None;
        let held = std::mem::take(&mut self.held);
        (
            std::mem::take(&mut self.by_reason).into_values().collect(),
            held,
        )
    }
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
/// `names` as fit in [`MAX_EVENT_NOTE_BYTES`].
fn summary_note(reason: &str, users: usize, names: &[String]) -> String {
    let mut note = format!(
        "{reason}: {users} Users at once (each User's Ready condition says what was done): "
    );
    for (i, name) in names.iter().enumerate() {
        let more = format!(" and {} more", users - i);
        let separator = if i == 0 { "" } else { ", " };
        if note.len() + separator.len() + name.len() + more.len() > MAX_EVENT_NOTE_BYTES {
            note.push_str(&more);
            return note;
        }
        note.push_str(separator);
        note.push_str(name);
    }
    if users > names.len() {
        note.push_str(&format!(" and {} more", users - names.len()));
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
    /// Publishes what arrives on `queue` until every sender is gone, in order, one Event at a
    /// time; during a bulk change, folds the Normal ones (see the module docs). A failure is
    /// logged and counted, never retried: the next change publishes a new Event.
    async fn run(mut self, mut queue: mpsc::UnboundedReceiver<Pending>) {
        let mut batch = Vec::new();
        let mut detector = BulkDetector::new(Instant::now());
        let mut folded = Folded::default();
        loop {
            let received = if folded.held == 0 {
                queue.recv_many(&mut batch, BATCH).await
            } else {
                let next = queue.recv_many(&mut batch, BATCH);
                match tokio::time::timeout(QUIET, next).await {
                    Ok(received) => received,
                    Err(_quiet) => {
                        self.flush(&mut folded).await;
                        continue;
                    }
                }
            };
            if received == 0 {
                break;
            }
            let now = Instant::now();
            let bulk = detector.arrived(batch.len(), now);
            if !bulk {
                self.flush(&mut folded).await;
            }
            for pending in batch.drain(..) {
                if bulk && pending.event.type_ == EventType::Normal {
                    folded.add(pending, now);
                } else {
                    self.send_one(pending).await;
                    self.metrics.events_pending.dec();
                }
            }
            if folded
                .since
                .is_some_and(|since| now.duration_since(since) >= SUMMARY_EVERY)
            {
                self.flush(&mut folded).await;
            }
        }
        self.flush(&mut folded).await;
    }

    /// Publishes what `folded` holds: a summary per reason, or the one Event as it is.
    async fn flush(&mut self, folded: &mut Folded) {
        let (summaries, held) = folded.take();
        for summary in summaries {
            if summary.users == 1 {
                self.send_one(summary.first).await;
            } else {
                self.send_summary(&summary).await;
            }
        }
        self.metrics.events_pending.sub(held as i64);
    }

    /// Publishes one Event about one User, with the Recorder of that User.
    async fn send_one(&self, pending: Pending) {
        if !self.fence.is_held() {
            return;
        }
        let Pending { event, regarding } = pending;
        let user = regarding.name.clone().unwrap_or_default();
        let recorder = &self.recorders[shard(&user, self.recorders.len())];
        if let Err(e) = recorder.publish(&event, &regarding).await {
            self.metrics.events_failed.inc();
            warn!(%user, reason = %event.reason, "publishing Event failed: {e}");
        }
    }

    /// Publishes `summary` about the Users CRD.
    async fn send_summary(&mut self, summary: &Summary) {
        self.metrics.events_summarised.inc_by(summary.users as u64);
        if !self.fence.is_held() {
            return;
        }
        let reason = &summary.first.event.reason;
        let event = Event {
            type_: EventType::Normal,
            reason: reason.clone(),
            note: Some(summary_note(reason, summary.users, &summary.names)),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        let regarding = self.users_crd().await;
        // A Recorder of its own: a summary is never folded into an earlier one's series (a
        // series keeps the first note).
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&event, &regarding).await {
            self.metrics.events_failed.inc();
            warn!(users = summary.users, %reason, "publishing a summary Event failed: {e}");
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
    fn a_bulk_folds_by_reason_counting_every_user_and_keeping_some_names() {
        let start = Instant::now();
        let mut folded = Folded::default();
        for i in 0..200 {
            let p = pending(&format!("u{i:03}"), EventType::Normal, "Provisioned");
            folded.add(p, start);
        }
        folded.add(pending("bob", EventType::Normal, "Terminating"), start);
        assert_eq!(folded.held, 201);
        assert_eq!(folded.since, Some(start));
        let (summaries, held) = folded.take();
        assert_eq!(held, 201);
        assert_eq!((folded.held, folded.since), (0, None), "taken");
        let shape: Vec<(&str, usize, usize, &str)> = summaries
            .iter()
            .map(|s| {
                let first = s.first.regarding.name.as_deref().unwrap();
                (s.first.event.reason.as_str(), s.users, s.names.len(), first)
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("Provisioned", 200, NAMES_KEPT, "u000"),
                ("Terminating", 1, 1, "bob"),
            ]
        );
    }

    #[test]
    fn a_summary_names_as_many_users_as_fit_and_counts_the_rest() {
        let names: Vec<String> = (0..NAMES_KEPT).map(|i| format!("person-{i:04}")).collect();
        let note = summary_note("Provisioned", 1000, &names);
        assert!(note.len() <= MAX_EVENT_NOTE_BYTES, "{} bytes", note.len());
        assert!(note.starts_with("Provisioned: 1000 Users at once"));
        assert!(note.contains("person-0000, person-0001"));
        let named = note.matches("person-").count();
        assert!(named > 50, "only {named} named");
        assert!(
            note.ends_with(&format!(" and {} more", 1000 - named)),
            "{note}"
        );
        let short = summary_note("Provisioned", 40, &names[..2]);
        assert!(
            short.ends_with(": person-0000, person-0001 and 38 more"),
            "{short}"
        );
        let two = summary_note("Terminating", 2, &names[..2]);
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
