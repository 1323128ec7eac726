//! The leader's write fence: whether this replica may write now, and the client that refuses
//! every write request while it may not. Every request the reconciler sends goes through one
//! [`kube::Client`] made by [`fenced`], so the rule lives in one place: a write (any method but
//! GET, HEAD and OPTIONS: creates, applies, patches, deletes, status writes, the finalizer
//! helper's patches, Events) leaves this replica only while its [`Fence`] is held. See
//! docs/design.md, "How a reconcile runs".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;

/// Whether this replica may still write: a deadline the leader-election code moves forward
/// each time it sees this replica hold the Lease, so a leader that was paused or cut off from
/// the API server stops writing by itself once the Lease may have passed to another replica,
/// before it has even learnt so. Without leader election it is always held.
#[derive(Debug)]
pub struct Fence {
    epoch: std::time::Instant,
    /// Milliseconds after `epoch` until which writes are allowed; `u64::MAX`: always.
    valid_until_ms: std::sync::atomic::AtomicU64,
}

impl Fence {
    /// A fence that is always held (no leader election).
    pub fn always() -> Self {
        Self {
            epoch: std::time::Instant::now(),
            valid_until_ms: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }

    /// A fence that is not held until [`Fence::hold_until`] is called.
    pub fn closed() -> Self {
        Self {
            epoch: std::time::Instant::now(),
            valid_until_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Allows writes until `deadline` (never moves an "always" fence).
    pub fn hold_until(&self, deadline: std::time::Instant) {
        let ms = u64::try_from(deadline.saturating_duration_since(self.epoch).as_millis())
            .unwrap_or(u64::MAX - 1);
        let _ = self.valid_until_ms.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |current| (current != u64::MAX).then_some(ms),
        );
    }

    /// Whether writes are allowed now.
    pub fn is_held(&self) -> bool {
        let until = self
            .valid_until_ms
            .load(std::sync::atomic::Ordering::Acquire);
        until == u64::MAX || (self.epoch.elapsed().as_millis() as u64) < until
    }
}

/// The error a fenced client answers a write with when the [`Fence`] is not held; the
/// reconciler reports it as [`crate::Error::NotLeader`].
#[derive(Debug, thiserror::Error)]
#[error("not the leader (the leader-election Lease is not confirmed): the write was not sent")]
pub struct FenceClosed;

/// A client that sends what `client` sends, except that a write request made while `fence` is
/// not held never leaves the process: it fails with [`FenceClosed`] (as a
/// [`kube::Error::Service`]). Reads always pass.
///
/// # Panics
/// Outside a Tokio runtime (the client's request buffer is a task).
pub fn fenced(client: Client, fence: Arc<Fence>) -> Client {
    let namespace = client.default_namespace().to_owned();
    Client::new(FencedService { client, fence }, namespace)
}

/// Whether `error` is a write a fenced client refused.
pub fn is_fence_closed(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Service(e) if e.is::<FenceClosed>())
}

/// The [`tower::Service`] behind [`fenced`].
#[derive(Clone)]
struct FencedService {
    client: Client,
    fence: Arc<Fence>,
}

/// A boxed error, as tower services return them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Request<Body>> for FencedService {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let read = matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::OPTIONS
        );
        if !read && !self.fence.is_held() {
            return Box::pin(std::future::ready(Err(FenceClosed.into())));
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Fence;

    #[test]
    fn a_fence_holds_until_its_deadline_and_always_means_always() {
        let fence = Fence::closed();
        assert!(!fence.is_held());
        fence.hold_until(Instant::now() + Duration::from_secs(60));
        assert!(fence.is_held());
        fence.hold_until(Instant::now());
        assert!(!fence.is_held());
        let always = Fence::always();
        always.hold_until(Instant::now());
        assert!(always.is_held());
    }
}
