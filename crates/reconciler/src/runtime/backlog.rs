//! A queue in front of a Controller for the triggers that come in floods: every object of a
//! re-list after a watch expired, and a bulk create. (The first list after a restart does not
//! come through here: the Controllers over keys walk their cache once it has listed,
//! `runtime::keyed`'s `sweeps_once_listed`.) A Controller takes every trigger it is given at
//! once: those it cannot start yet (all its reconciles busy, or its caches not listed) wait in its scheduler's maps, whose
//! memory stays at the size of the largest flood for the life of the process (hashbrown never
//! shrinks; at 10,000 Users, 2 MiB for the pending set alone: docs/performance.md, "Memory").
//! A [`Backlog`] hands the Controller only a window of them at a time, as its reconciles
//! start, and gives its own memory back once it is empty.
//!
//! Triggers that repair something (a changed RoleBinding, a Namespace, a Profile) do not go
//! through a Backlog: they reach the Controller at once and run before what waits here.

use std::collections::{HashSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use kube::runtime::reflector::{Lookup, ObjectRef};

/// The triggers of one Controller waiting for it, in order of arrival, each once. Cheap to
/// clone (a shared handle).
///
/// Every request it hands the Controller ([`Backlog::requests`]) counts against its window
/// until the Controller reports it [`started`](Backlog::started) (a reconcile of that object
/// began, or the object was gone from the cache when its turn came). The Controller merges a
/// request with one it already holds for the same object, and one of its reconciles always
/// reads the object as it is when that reconcile starts, so a request handed over is never
/// lost, and a trigger for an object whose request has not started yet adds nothing.
pub struct Backlog<K: Lookup<DynamicType = ()>> {
    shared: Arc<Mutex<Shared<K>>>,
}

impl<K: Lookup<DynamicType = ()>> Clone for Backlog<K> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// An object's key: `namespace/name`, or `name` for a cluster-scoped kind (names hold no `/`).
/// One allocation shared by the queue and its set, where an [`ObjectRef`] would be 96 bytes
/// and two strings in each: at 10,000 Users, a restart queues every one of them.
type Key = Arc<str>;

fn key(name: &str, namespace: Option<&str>) -> Key {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}").into(),
        None => name.into(),
    }
}

struct Shared<K: Lookup<DynamicType = ()>> {
    /// Waiting, oldest first.
    queue: VecDeque<Key>,
    /// What `queue` holds, to add each object once.
    queued: HashSet<Key>,
    /// Handed to the Controller, not started yet.
    outstanding: HashSet<Key>,
    /// How many may be outstanding at once.
    window: usize,
    /// The task polling [`Backlog::requests`], to wake when it may take more.
    waker: Option<Waker>,
    kind: std::marker::PhantomData<fn() -> K>,
}

/// Above this many slots, an emptied queue gives its memory back.
const KEEP_CAPACITY: usize = 256;

impl<K: Lookup<DynamicType = ()>> Backlog<K> {
    /// An empty Backlog that lets at most `window` requests (at least 1) be handed to the
    /// Controller and not yet started. Twice the Controller's concurrency keeps every one of
    /// its reconciles busy.
    pub fn new(window: usize) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Shared {
                queue: VecDeque::new(),
                queued: HashSet::new(),
                outstanding: HashSet::new(),
                window: window.max(1),
                waker: None,
                kind: std::marker::PhantomData,
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared<K>> {
        // Nothing here panics while holding the lock; if something did, the sets are still
        // consistent enough to go on with.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a reconcile of `object` (its `extra` is dropped: only the name and namespace are
    /// kept); nothing when it already waits.
    pub fn push(&self, object: &ObjectRef<K>) {
        let key = key(&object.name, object.namespace.as_deref());
        let mut shared = self.lock();
        if shared.queued.insert(key.clone()) {
            shared.queue.push_back(key);
            shared.wake();
        }
    }

    /// Reports that the Controller began a reconcile of the object under `key` (`namespace/name`,
    /// or `name` for a cluster-scoped kind: the key of a Controller over keys, `runtime::keyed`),
    /// or dropped its request because the object was gone: its request no longer counts
    /// against the window.
    pub fn started(&self, key: &str) {
        let mut shared = self.lock();
        if shared.outstanding.remove(key) {
            shared.wake();
        }
    }

    /// How many objects wait and how many were handed over and have not started.
    pub fn len(&self) -> (usize, usize) {
        let shared = self.lock();
        (shared.queue.len(), shared.outstanding.len())
    }

    /// The requests for the Controller (`Controller::reconcile_on`), oldest first, while fewer
    /// than the window are outstanding. Never ends. Polled by one task: a second stream of the
    /// same Backlog would take turns with the first.
    pub fn requests(&self) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: 'static,
        ObjectRef<K>: Send,
    {
        Requests {
            backlog: self.clone(),
        }
    }
}

impl<K: Lookup<DynamicType = ()>> Shared<K> {
    fn wake(&mut self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }
}

/// [`Backlog::requests`].
struct Requests<K: Lookup<DynamicType = ()>> {
    backlog: Backlog<K>,
}

impl<K: Lookup<DynamicType = ()>> futures::Stream for Requests<K> {
    type Item = ObjectRef<K>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut shared = self.backlog.lock();
        if shared.outstanding.len() < shared.window
            && let Some(next) = shared.queue.pop_front()
        {
            shared.queued.remove(&next);
            let request = match next.split_once('/') {
                Some((namespace, name)) => ObjectRef::new(name).within(namespace),
                None => ObjectRef::new(&next),
            };
            shared.outstanding.insert(next);
            if shared.queue.is_empty() && shared.queued.capacity() > KEEP_CAPACITY {
                shared.queue = VecDeque::new();
                shared.queued = HashSet::new();
            }
            return Poll::Ready(Some(request));
        }
        if shared.outstanding.is_empty() && shared.outstanding.capacity() > KEEP_CAPACITY {
            shared.outstanding = HashSet::new();
        }
        shared.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use futures::task::noop_waker_ref;
    use homestead_api::User;

    fn user(name: &str) -> ObjectRef<User> {
        ObjectRef::new(name)
    }

    fn poll(stream: &mut (impl futures::Stream<Item = ObjectRef<User>> + Unpin)) -> Option<String> {
        match stream.poll_next_unpin(&mut Context::from_waker(noop_waker_ref())) {
            Poll::Ready(Some(object)) => Some(object.name),
            Poll::Ready(None) => panic!("a Backlog's requests never end"),
            Poll::Pending => None,
        }
    }

    #[test]
    fn hands_over_a_window_at_a_time_in_order_of_arrival() {
        let backlog = Backlog::<User>::new(2);
        let mut requests = Box::pin(backlog.requests());
        for name in ["a", "b", "c", "d"] {
            backlog.push(&user(name));
        }
        assert_eq!(poll(&mut requests).as_deref(), Some("a"));
        assert_eq!(poll(&mut requests).as_deref(), Some("b"));
        assert_eq!(
            poll(&mut requests),
            None,
            "two outstanding: the window is full"
        );
        assert_eq!(backlog.len(), (2, 2));
        backlog.started("b");
        assert_eq!(poll(&mut requests).as_deref(), Some("c"));
        assert_eq!(poll(&mut requests), None);
        backlog.started("a");
        backlog.started("c");
        assert_eq!(poll(&mut requests).as_deref(), Some("d"));
        assert_eq!(poll(&mut requests), None, "nothing left");
        assert_eq!(backlog.len(), (0, 1));
    }

    #[test]
    fn queues_an_object_once_while_it_waits_and_again_once_handed_over() {
        let backlog = Backlog::<User>::new(8);
        let mut requests = Box::pin(backlog.requests());
        backlog.push(&user("a"));
        backlog.push(&user("a"));
        assert_eq!(backlog.len(), (1, 0));
        assert_eq!(poll(&mut requests).as_deref(), Some("a"));
        assert_eq!(poll(&mut requests), None, "the second push added nothing");
        // A change after the request was handed over: queued again (the Controller merges it
        // if the first has not started by then).
        backlog.push(&user("a"));
        assert_eq!(poll(&mut requests).as_deref(), Some("a"));
        assert_eq!(
            backlog.len(),
            (0, 1),
            "one object outstanding, whatever its requests"
        );
    }

    #[test]
    fn a_start_it_never_handed_over_frees_nothing() {
        let backlog = Backlog::<User>::new(1);
        let mut requests = Box::pin(backlog.requests());
        backlog.push(&user("a"));
        backlog.push(&user("b"));
        assert_eq!(poll(&mut requests).as_deref(), Some("a"));
        // A reconcile of b from another trigger, or of a namespaced object of the same name.
        backlog.started("b");
        backlog.started("user-a/a");
        assert_eq!(poll(&mut requests), None);
        backlog.started("a");
        assert_eq!(poll(&mut requests).as_deref(), Some("b"));
    }

    #[test]
    fn a_namespaced_object_comes_back_with_its_namespace() {
        use crate::state::cache::CachedShare;
        let backlog = Backlog::<CachedShare>::new(1);
        let mut requests = Box::pin(backlog.requests());
        backlog.push(&ObjectRef::new("review").within("user-alice"));
        backlog.push(&ObjectRef::new("review").within("user-bob"));
        let cx = &mut Context::from_waker(noop_waker_ref());
        let Poll::Ready(Some(first)) = requests.poll_next_unpin(cx) else {
            panic!("the first Share is handed over");
        };
        assert_eq!(
            (first.name.as_str(), first.namespace.as_deref()),
            ("review", Some("user-alice"))
        );
        backlog.started("user-bob/review");
        assert!(
            requests.poll_next_unpin(cx).is_pending(),
            "bob's has not started"
        );
        backlog.started("user-alice/review");
        let Poll::Ready(Some(second)) = requests.poll_next_unpin(cx) else {
            panic!("the second Share is handed over once the first started");
        };
        assert_eq!(second.namespace.as_deref(), Some("user-bob"));
    }

    #[test]
    fn keys_ignore_what_an_object_reference_carries_besides_its_name() {
        let backlog = Backlog::<User>::new(1);
        let mut requests = Box::pin(backlog.requests());
        let mut with_extra = user("a");
        with_extra.extra.resource_version = Some("42".into());
        with_extra.extra.uid = Some("0e9c".into());
        backlog.push(&with_extra);
        backlog.push(&user("a"));
        let handed = poll(&mut requests);
        assert_eq!(handed.as_deref(), Some("a"));
        assert_eq!(backlog.len(), (0, 1));
    }

    #[test]
    fn an_emptied_queue_gives_its_memory_back() {
        let backlog = Backlog::<User>::new(usize::MAX);
        let mut requests = Box::pin(backlog.requests());
        for i in 0..10 * KEEP_CAPACITY {
            backlog.push(&user(&format!("u{i}")));
        }
        for i in 0..10 * KEEP_CAPACITY {
            assert_eq!(poll(&mut requests), Some(format!("u{i}")));
            backlog.started(&format!("u{i}"));
        }
        assert_eq!(poll(&mut requests), None);
        let shared = backlog.lock();
        assert!(
            shared.queue.capacity() <= KEEP_CAPACITY,
            "{}",
            shared.queue.capacity()
        );
        assert!(shared.queued.capacity() <= KEEP_CAPACITY);
        assert!(shared.outstanding.capacity() <= KEEP_CAPACITY);
    }

    #[tokio::test]
    async fn wakes_its_consumer_when_a_request_starts_or_arrives() {
        let backlog = Backlog::<User>::new(1);
        let mut requests = backlog.requests().boxed();
        backlog.push(&user("a"));
        backlog.push(&user("b"));
        assert_eq!(requests.next().await.map(|o| o.name).as_deref(), Some("a"));
        let starter = backlog.clone();
        let next = tokio::spawn(async move { requests.next().await.map(|o| o.name) });
        tokio::task::yield_now().await;
        starter.started("a");
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), next)
            .await
            .expect("woken once a started")
            .unwrap();
        assert_eq!(next.as_deref(), Some("b"));
    }
}
