//! A Controller over keys: kube-runtime's [`scheduler`] and the same rules as its Controller,
//! with the objects in a [`CompactStore`] rather than a reflector store of whole objects. The
//! Controllers over Users, over Shares and over Workspaces are these.
//!
//! kube-runtime's `Controller` reconciles only what its own `Store<K>` holds, an `Arc` of each
//! whole typed object under an `ObjectRef` key, and its runner is private. At 10,000 Users and
//! 10,000 Shares those two stores were the operator's largest (15.7 and 10.6 MiB live,
//! docs/performance.md "At scale"). A [`Keyed`] Controller queues `namespace/name` strings,
//! rebuilds the one object a reconcile is about to run on from the compact cache, and otherwise
//! behaves as kube-runtime's:
//!
//! - every trigger becomes a request for its object, due at once; requests for one object
//!   merge in the scheduler, and a later one never delays an earlier;
//! - a failing trigger pauses no other: each watch backs off on its own (kube-runtime's
//!   `trigger_backoff` pauses the merged stream of all of them, so after an API server
//!   restart eight watches failing one after another held a new User back for about a
//!   minute);
//! - at most `concurrency` reconciles run at once (0: unbounded), never two of one object:
//!   a request for an object whose reconcile runs waits until it ends; each new reconcile is
//!   polled before the next is made, so one that needs no request ends and frees its future
//!   (about 15 KB for a User's) at once, where making `concurrency` of them first held them all
//!   (docs/performance.md, "A restart's peak"); after `concurrency` starts in one poll the
//!   runner yields, since such reconciles never fill `concurrency` and the other Controllers
//!   share its task;
//! - nothing runs before the cache has listed, nor before the gate of [`Keyed::starts_after`]
//!   has opened (the operator's: every cache has listed), so no reconcile is started only to
//!   wait; the triggers are polled meanwhile (they drive the watches that fill the caches);
//! - a request for an object the cache no longer has is dropped (it was deleted);
//! - a reconcile's [`Requeue`], or on failure its error policy's, asks for another run after
//!   its delay;
//! - on shutdown no new reconcile starts and the running ones finish.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use futures::future::BoxFuture;
use futures::stream::{BoxStream, FuturesUnordered, SelectAll};
use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::scheduler::{ScheduleRequest, Scheduler, scheduler};
use kube::runtime::watcher;
use tokio::time::Instant;

use crate::flows::requeue::Requeue;
use homestead_model::store::{Compact, CompactStore, key};

/// An object's key in the queue and in its cache: `namespace/name`, or `name` for a
/// cluster-scoped kind.
pub type Key = Arc<str>;

/// A Controller over the objects of a [`CompactStore`], built from its triggers (as kube-runtime's
/// `Controller::watches_stream` and `reconcile_on`), then [`Keyed::run`].
pub struct Keyed<K: Compact> {
    store: CompactStore<K>,
    triggers: SelectAll<BoxStream<'static, Result<Key, watcher::Error>>>,
    concurrency: u16,
    /// Resolves once reconciles may start (with the cache's first list).
    gate: BoxFuture<'static, ()>,
    /// Whether every cached object is reconciled once the gate opens
    /// ([`Keyed::sweeps_once_listed`]).
    sweep: bool,
}

impl<K> Keyed<K>
where
    K: Compact + Clone + Send + Sync + 'static,
{
    /// A Controller over `store`'s objects, `concurrency` reconciles at once (0: unbounded),
    /// with no trigger yet.
    pub fn new(store: CompactStore<K>, concurrency: u16) -> Self {
        Self {
            store,
            triggers: SelectAll::new(),
            concurrency,
            gate: std::future::ready(()).boxed(),
            sweep: false,
        }
    }

    /// Reconciles every object of the cache once, when reconciles may start (the cache has
    /// listed and the gate is open): by walking the cache in key order, one key at a time,
    /// whenever a reconcile is free and no request is due. Requests (the triggers) go first;
    /// an object whose reconcile runs when the walk reaches it is passed over (that reconcile
    /// reads the listed cache). The triggers should then leave out the objects of the first
    /// list: queued one by one, 10,000 Users' keys held 1.1 MB at a restart's peak, and the
    /// walk holds one (docs/performance.md, "A restart's peak").
    #[must_use]
    pub fn sweeps_once_listed(mut self) -> Self {
        self.sweep = true;
        self
    }

    /// Starts no reconcile before `gate` resolves, as none starts before the cache has listed.
    ///
    /// The operator's reconciles first wait until every cache has listed
    /// ([`crate::context::Context::ready_to_write`]). Started before that, `concurrency` of them
    /// would each hold their whole future (about 15 KB for a User's) only to wait: at a restart
    /// with 10,000 Users, 2.3 MB of the heap's peak over the three Controllers
    /// (docs/performance.md, "A restart's peak").
    #[must_use]
    pub fn starts_after(mut self, gate: impl Future<Output = ()> + Send + 'static) -> Self {
        self.gate = gate.boxed();
        self
    }

    /// Reconciles the objects `mapper` names for each item of `stream`; the stream's errors
    /// are logged as warnings (the watch backs off on its own).
    #[must_use]
    pub fn watches_stream<T, I>(
        mut self,
        stream: impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
        mut mapper: impl FnMut(T) -> I + Send + 'static,
    ) -> Self
    where
        I: IntoIterator<Item = ObjectRef<K>>,
        I::IntoIter: Send + 'static,
        K: kube::runtime::reflector::Lookup,
        <K as kube::runtime::reflector::Lookup>::DynamicType: Send,
    {
        let keys = stream.flat_map(move |item| {
            let keys: Vec<Result<Key, watcher::Error>> = match item {
                Ok(item) => mapper(item).into_iter().map(|o| Ok(key_of(&o))).collect(),
                Err(error) => vec![Err(error)],
            };
            futures::stream::iter(keys)
        });
        self.triggers.push(keys.boxed());
        self
    }

    /// Reconciles every object `requests` names.
    #[must_use]
    pub fn reconcile_on(
        mut self,
        requests: impl Stream<Item = ObjectRef<K>> + Send + 'static,
    ) -> Self
    where
        K: kube::runtime::reflector::Lookup,
        <K as kube::runtime::reflector::Lookup>::DynamicType: Send,
    {
        self.triggers.push(requests.map(|o| Ok(key_of(&o))).boxed());
        self
    }

    /// Reconciles every object the cache has for each item of `trigger`.
    #[must_use]
    pub fn reconcile_all_on(mut self, trigger: impl Stream<Item = ()> + Send + 'static) -> Self {
        let store = self.store.clone();
        let every = trigger.flat_map(move |()| {
            let keys = store.keys().into_iter().map(|key| Ok(Key::from(key)));
            futures::stream::iter(keys.collect::<Vec<_>>())
        });
        self.triggers.push(every.boxed());
        self
    }

    /// The cache this Controller reconciles from.
    pub fn store(&self) -> CompactStore<K> {
        self.store.clone()
    }

    /// Runs until `shutdown` resolves and the running reconciles have ended: `reconcile` on
    /// each requested object as the cache has it, `error_policy` when it fails, `started`
    /// with the key of every request taken from the queue (its object found or not, before
    /// its reconcile starts).
    pub async fn run<Ctx, Fut, E>(
        self,
        mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
        error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Requeue + Send + Sync + 'static,
        ctx: Arc<Ctx>,
        started: impl Fn(&str),
        shutdown: impl Future<Output = ()>,
    ) where
        Ctx: Send + Sync + 'static,
        Fut: Future<Output = Result<Requeue, E>> + Send + 'static,
        E: Send + 'static,
    {
        let Self {
            store,
            triggers,
            concurrency,
            gate,
            sweep,
        } = self;
        let error_policy = Arc::new(error_policy);
        let (requeue, queue) = queue_of(triggers);
        let mut queue = std::pin::pin!(queue);
        let mut running: FuturesUnordered<Run> = FuturesUnordered::new();
        let mut active: HashSet<Key> = HashSet::new();
        let mut listed = std::pin::pin!(may_start(store.clone(), gate).fuse());
        let mut shutdown = std::pin::pin!(shutdown.fuse());
        let (mut ready, mut stopping) = (false, false);
        let mut sweep = Sweep::new(sweep);
        let budget = usize::from(concurrency.max(1));
        let full = |running: usize| concurrency > 0 && running >= usize::from(concurrency);
        std::future::poll_fn(|cx| {
            ended(cx, &mut running, &mut active, &requeue);
            stopping = stopping || shutdown.as_mut().poll(cx).is_ready();
            if stopping {
                return if running.is_empty() {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                };
            }
            ready = ready || matches!(listed.as_mut().poll(cx), Poll::Ready(true));
            for _ in 0..budget {
                if !ready || full(running.len()) {
                    // Take in triggers (they drive the watches) and hold whatever is due.
                    let _ = queue.as_mut().hold().poll_next_unpin(cx);
                    return Poll::Pending;
                }
                let next = queue
                    .as_mut()
                    .hold_unless(|key| !active.contains(key))
                    .poll_next_unpin(cx);
                let key = match next {
                    Poll::Ready(Some(key)) => key,
                    Poll::Ready(None) | Poll::Pending => match sweep.next(&store, &active) {
                        Some(key) => key,
                        None if next.is_ready() && running.is_empty() => return Poll::Ready(()),
                        None => return Poll::Pending,
                    },
                };
                started(&key);
                let Some(object) = store.get_by_key(&key) else {
                    tracing::debug!(%key, "object gone before its reconcile");
                    continue;
                };
                active.insert(key.clone());
                let object = Arc::new(object);
                let run = reconcile(object.clone(), ctx.clone());
                running.push(finish(
                    key,
                    run,
                    (object, error_policy.clone(), ctx.clone()),
                ));
                // One that needs no request ends here, its future freed before the next is made.
                ended(cx, &mut running, &mut active, &requeue);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
    }
}

/// The scheduler over `triggers` (each due at once) and what reconciles ask to be run again,
/// and the sender of the latter.
fn queue_of(
    triggers: SelectAll<BoxStream<'static, Result<Key, watcher::Error>>>,
) -> (
    futures::channel::mpsc::UnboundedSender<ScheduleRequest<Key>>,
    Scheduler<Key, impl Stream<Item = ScheduleRequest<Key>>>,
) {
    let (requeue, requeued) = futures::channel::mpsc::unbounded::<ScheduleRequest<Key>>();
    let queue = scheduler(futures::stream::select(due_now(triggers), requeued));
    (requeue, queue)
}

/// Resolves once reconciles may start: `true` when `store` has listed and `gate` has resolved;
/// `false` when the cache's writer is gone first (it never lists: nothing runs then).
async fn may_start<K: Compact>(store: CompactStore<K>, gate: BoxFuture<'static, ()>) -> bool {
    let listed = store.wait_until_ready().await.is_ok();
    if listed {
        gate.await;
    }
    listed
}

/// The walk of [`Keyed::sweeps_once_listed`] over the cache, one key at a time.
struct Sweep {
    /// The last key it reached.
    after: Option<Key>,
    /// Whether it goes on (not asked for, or past the last key: not).
    on: bool,
}

impl Sweep {
    /// A walk from the first key, if `on`.
    fn new(on: bool) -> Self {
        Self { after: None, on }
    }

    /// The next key of `store` whose reconcile is not running (`active`), or `None` once the
    /// walk has passed the last key.
    fn next<K: Compact>(&mut self, store: &CompactStore<K>, active: &HashSet<Key>) -> Option<Key> {
        while self.on {
            match store.key_after(self.after.as_deref()) {
                Some(key) => {
                    let key = Key::from(key);
                    self.after = Some(key.clone());
                    if !active.contains(&key) {
                        return Some(key);
                    }
                }
                None => self.on = false,
            }
        }
        None
    }
}

/// Takes the reconciles that ended out of `running` and `active`, queueing each object again
/// after the delay its reconcile asked for.
fn ended(
    cx: &mut std::task::Context<'_>,
    running: &mut FuturesUnordered<Run>,
    active: &mut HashSet<Key>,
    requeue: &futures::channel::mpsc::UnboundedSender<ScheduleRequest<Key>>,
) {
    while let Poll::Ready(Some((key, delay))) = running.poll_next_unpin(cx) {
        active.remove(&key);
        if let Some(delay) = delay {
            let run_at = Instant::now() + delay;
            let _ = requeue.unbounded_send(ScheduleRequest {
                message: key,
                run_at,
            });
        }
    }
}

/// A running reconcile: its object's key and when to run it again.
type Run = BoxFuture<'static, (Key, Option<std::time::Duration>)>;

/// `triggers` as requests due now; their errors logged as warnings and dropped.
fn due_now(
    triggers: impl Stream<Item = Result<Key, watcher::Error>>,
) -> impl Stream<Item = ScheduleRequest<Key>> {
    triggers.filter_map(|trigger| async move {
        match trigger {
            Ok(key) => Some(ScheduleRequest {
                message: key,
                run_at: Instant::now(),
            }),
            Err(error) => {
                tracing::warn!("watch failed: {error}");
                None
            }
        }
    })
}

/// `run`, the reconcile of the object under `key`, to its end: its [`Requeue`], or on failure
/// `error_policy`'s for `object`.
fn finish<K, Ctx, E>(
    key: Key,
    run: impl Future<Output = Result<Requeue, E>> + Send + 'static,
    (object, error_policy, ctx): (
        Arc<K>,
        Arc<impl Fn(Arc<K>, &E, Arc<Ctx>) -> Requeue + Send + Sync + 'static>,
        Arc<Ctx>,
    ),
) -> Run
where
    K: Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
{
    async move {
        let next = match run.await {
            Ok(next) => next,
            Err(error) => error_policy(object, &error, ctx),
        };
        (key, next.delay())
    }
    .boxed()
}

/// The queue's key of `object`.
fn key_of<K: kube::runtime::reflector::Lookup>(object: &ObjectRef<K>) -> Key {
    key(object.namespace.as_deref(), &object.name).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc::{UnboundedSender, unbounded};
    use homestead_api::User;
    use homestead_model::store::{CompactWriter, compact_store};
    use std::sync::Mutex;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    /// What the reconciles did: `+name` when one started, `-name` when it ended.
    type Log = Arc<Mutex<Vec<String>>>;

    /// A Controller over a cache of Users named `names` (listed unless `listed` is false),
    /// each reconcile taking `work` and asking to run again per `next`, its gate open; its
    /// trigger sender, its log, the keys `started` reported, the cache's writer and the gate.
    struct Harness {
        triggers: UnboundedSender<ObjectRef<User>>,
        all: UnboundedSender<()>,
        log: Log,
        started: Arc<Mutex<Vec<String>>>,
        writer: CompactWriter<User>,
        /// Cancelled: the gate of [`Keyed::starts_after`] is open.
        gate: CancellationToken,
        stop: CancellationToken,
        run: tokio::task::JoinHandle<()>,
    }

    fn harness(
        names: &[&str],
        listed: bool,
        concurrency: u16,
        work: Duration,
        next: fn(&str) -> Result<Requeue, String>,
    ) -> Harness {
        let h = gated(names, listed, concurrency, work, next, false);
        h.gate.cancel();
        h
    }

    /// [`harness`], its gate closed, walking the cache once open if `sweep`.
    fn gated(
        names: &[&str],
        listed: bool,
        concurrency: u16,
        work: Duration,
        next: fn(&str) -> Result<Requeue, String>,
        sweep: bool,
    ) -> Harness {
        let (store, mut writer) = compact_store::<User>();
        writer.apply(&watcher::Event::Init);
        for name in names {
            writer.apply(&watcher::Event::InitApply(User::test(name)));
        }
        if listed {
            writer.apply(&watcher::Event::InitDone);
        }
        let (triggers, requests) = unbounded();
        let (all, every) = unbounded();
        let (log, started) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
        let (gate, stop) = (CancellationToken::new(), CancellationToken::new());
        let keyed = Keyed::new(store, concurrency)
            .reconcile_on(requests)
            .reconcile_all_on(every)
            .starts_after(gate.clone().cancelled_owned());
        let keyed = if sweep {
            keyed.sweeps_once_listed()
        } else {
            keyed
        };
        let (reconciles, taken, shutdown) = (log.clone(), started.clone(), stop.clone());
        let run = tokio::spawn(async move {
            keyed
                .run(
                    move |user: Arc<User>, _: Arc<()>| {
                        let (log, name) = (reconciles.clone(), user.metadata.name.clone().unwrap());
                        async move {
                            log.lock().unwrap().push(format!("+{name}"));
                            tokio::time::sleep(work).await;
                            log.lock().unwrap().push(format!("-{name}"));
                            next(&name)
                        }
                    },
                    |_, _: &String, _| Requeue::after(Duration::from_secs(7)),
                    Arc::new(()),
                    move |key| taken.lock().unwrap().push(key.to_owned()),
                    shutdown.cancelled_owned(),
                )
                .await;
        });
        Harness {
            triggers,
            all,
            log,
            started,
            writer,
            gate,
            stop,
            run,
        }
    }

    impl Harness {
        fn trigger(&self, name: &str) {
            self.triggers.unbounded_send(ObjectRef::new(name)).unwrap();
        }

        fn log(&self) -> Vec<String> {
            self.log.lock().unwrap().clone()
        }
    }

    /// Lets the runner and every reconcile due by `after` run.
    async fn settle(after: Duration) {
        tokio::time::sleep(after).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    fn done(_: &str) -> Result<Requeue, String> {
        Ok(Requeue::on_change())
    }

    #[tokio::test(start_paused = true)]
    async fn one_object_never_runs_twice_at_once_and_a_trigger_meanwhile_runs_it_once_more() {
        let h = harness(&["ada"], true, 0, Duration::from_secs(10), done);
        h.trigger("ada");
        settle(Duration::from_secs(1)).await;
        h.trigger("ada");
        h.trigger("ada");
        settle(Duration::from_secs(30)).await;
        assert_eq!(h.log(), ["+ada", "-ada", "+ada", "-ada"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_of_all_reconciles_every_cached_object_once() {
        let h = harness(&["a", "b", "c"], true, 0, Duration::from_secs(1), done);
        h.all.unbounded_send(()).unwrap();
        settle(Duration::from_secs(5)).await;
        let mut log = h.log();
        log.sort();
        assert_eq!(log, ["+a", "+b", "+c", "-a", "-b", "-c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_concurrency_reconciles_run_at_once() {
        let h = harness(&["a", "b", "c"], true, 2, Duration::from_secs(10), done);
        for name in ["a", "b", "c"] {
            h.trigger(name);
        }
        settle(Duration::from_secs(1)).await;
        assert_eq!(h.log().len(), 2, "two started: {:?}", h.log());
        settle(Duration::from_secs(10)).await;
        let log = h.log();
        assert_eq!(log.len(), 5, "the third started once one ended: {log:?}");
        assert!(log[2].starts_with('-') && log[3].starts_with('-') && log[4].starts_with('+'));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_runs_before_the_cache_has_listed_and_a_gone_object_is_dropped() {
        let mut h = harness(&["ada"], false, 0, Duration::from_secs(1), done);
        h.trigger("ada");
        h.trigger("bob");
        settle(Duration::from_secs(60)).await;
        assert!(h.log().is_empty(), "ran before the list: {:?}", h.log());
        h.writer.apply(&watcher::Event::InitDone);
        settle(Duration::from_secs(5)).await;
        assert_eq!(h.log(), ["+ada", "-ada"]);
        let mut started = h.started.lock().unwrap().clone();
        started.sort();
        assert_eq!(started, ["ada", "bob"], "bob is not cached, but was taken");
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_runs_before_the_gate_opens_and_then_what_was_asked_for_runs_once() {
        let h = gated(
            &["ada", "bob"],
            true,
            0,
            Duration::from_secs(1),
            done,
            false,
        );
        h.trigger("ada");
        h.trigger("ada");
        h.trigger("bob");
        settle(Duration::from_secs(60)).await;
        assert!(h.log().is_empty(), "ran before the gate: {:?}", h.log());
        assert!(h.started.lock().unwrap().is_empty(), "nothing taken yet");
        h.gate.cancel();
        settle(Duration::from_secs(5)).await;
        let mut log = h.log();
        log.sort();
        assert_eq!(log, ["+ada", "+bob", "-ada", "-bob"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_reconciles_every_cached_object_once_after_what_was_asked_for() {
        let h = gated(
            &["a", "b", "c"],
            true,
            1,
            Duration::from_secs(1),
            done,
            true,
        );
        h.trigger("c");
        settle(Duration::from_secs(60)).await;
        assert!(h.log().is_empty(), "ran before the gate: {:?}", h.log());
        h.gate.cancel();
        settle(Duration::from_secs(10)).await;
        assert_eq!(
            h.log(),
            ["+c", "-c", "+a", "-a", "+b", "-b", "+c", "-c"],
            "the request first, then the walk in key order, c again as it ended before"
        );
        settle(Duration::from_secs(60)).await;
        assert_eq!(h.log().len(), 8, "the walk runs once");
        h.trigger("a");
        settle(Duration::from_secs(5)).await;
        assert_eq!(
            h.log()[8..],
            ["+a", "-a"],
            "requests still run after the walk"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_sweep_passes_over_an_object_whose_reconcile_runs() {
        let h = gated(&["a", "b"], true, 0, Duration::from_secs(10), done, true);
        h.trigger("a");
        h.gate.cancel();
        settle(Duration::from_secs(30)).await;
        let mut log = h.log();
        log.sort();
        assert_eq!(
            log,
            ["+a", "+b", "-a", "-b"],
            "a once: it ran when the walk passed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_that_needs_no_request_ends_before_the_next_starts() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        /// Counts the reconciles alive (made, not yet dropped) and the most at once.
        struct Alive(Arc<(AtomicUsize, AtomicUsize)>);
        impl Drop for Alive {
            fn drop(&mut self) {
                self.0.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let counts = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let names: Vec<String> = (0..100).map(|i| format!("user-{i:03}")).collect();
        let (store, mut writer) = compact_store::<User>();
        for name in &names {
            writer.insert(User::test(name));
        }
        writer.apply(&watcher::Event::InitDone);
        let ran = Arc::new(AtomicUsize::new(0));
        let (runs, alive) = (ran.clone(), counts.clone());
        let stop = CancellationToken::new();
        let run = Keyed::new(store, 64).sweeps_once_listed().run(
            move |_: Arc<User>, _: Arc<()>| {
                let now = alive.0.fetch_add(1, Ordering::SeqCst) + 1;
                alive.1.fetch_max(now, Ordering::SeqCst);
                let (guard, ran) = (Alive(alive.clone()), runs.clone());
                async move {
                    let _guard = guard;
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, String>(Requeue::on_change())
                }
            },
            |_, _: &String, _| Requeue::on_change(),
            Arc::new(()),
            |_| {},
            stop.clone().cancelled_owned(),
        );
        let run = tokio::spawn(run);
        settle(Duration::from_secs(1)).await;
        stop.cancel();
        run.await.unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 100, "every User once");
        assert_eq!(
            counts.1.load(Ordering::SeqCst),
            1,
            "each ended at its first poll, before the next was made"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_and_a_failure_run_again_after_the_delay_they_ask_for() {
        fn next(name: &str) -> Result<Requeue, String> {
            match name {
                "ada" => Ok(Requeue::after(Duration::from_secs(20))),
                _ => Err("failed".into()),
            }
        }
        let h = harness(&["ada", "bob"], true, 0, Duration::ZERO, next);
        h.trigger("ada");
        h.trigger("bob");
        settle(Duration::from_secs(1)).await;
        let count = |log: &[String], entry: &str| log.iter().filter(|e| *e == entry).count();
        assert_eq!((count(&h.log(), "+ada"), count(&h.log(), "+bob")), (1, 1));
        // bob's error policy asks for 7 s, ada for 20 s.
        settle(Duration::from_secs(7)).await;
        assert_eq!((count(&h.log(), "+ada"), count(&h.log(), "+bob")), (1, 2));
        settle(Duration::from_secs(12)).await;
        assert_eq!((count(&h.log(), "+ada"), count(&h.log(), "+bob")), (2, 3));
    }

    #[tokio::test(start_paused = true)]
    async fn on_shutdown_the_running_reconciles_finish_and_no_new_one_starts() {
        let h = harness(&["a", "b"], true, 1, Duration::from_secs(10), done);
        h.trigger("a");
        h.trigger("b");
        settle(Duration::from_secs(1)).await;
        h.stop.cancel();
        settle(Duration::from_secs(20)).await;
        assert!(h.run.is_finished());
        let log = h.log();
        assert_eq!(
            log.len(),
            2,
            "one ran to its end, the other never started: {log:?}"
        );
        assert_eq!(log[0][1..], log[1][1..]);
    }
}
