//! How every watch receives its initial state (at start, and again after the API server lost
//! its place): streamed as watch events where the API server serves streaming lists
//! (Kubernetes API concepts, "Streaming lists"; the `WatchList` feature, on by default in
//! Kubernetes 1.32 and from 1.34 on), else as kube-runtime's paged lists of 500 objects.
//!
//! A page is read whole before its first object is decoded: kube-client collects the body and
//! copies it before decoding, so a page costs about three times its JSON at once. A page of
//! RoleBindings that bind directory groups of 1,000 members is some 240 KiB of JSON each
//! (`managedFields` names every subject), so a restart with a hundred of them peaked at more
//! than twice the operator's steady memory (docs/performance.md, "At scale"). Streamed, each
//! object is decoded alone as its event arrives.
//!
//! Whether the API server streams is asked once per process, before any watch starts
//! ([`probe`]): a watch of a kind with few objects that the process may watch anyway (Profiles
//! for the operator, Workspaces for the homes API) with `sendInitialEvents`, which an API server
//! without the feature refuses (422) before sending anything.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use homestead_model::watched::Watched;
use kube::Api;
use kube::runtime::watcher::{self, watcher};

/// Whether [`probe`] found that the API server streams lists.
static STREAMING: AtomicBool = AtomicBool::new(false);

/// How long [`probe`] waits for the probe watch's initial state to end.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the API server behind `api` whether it streams the initial state of a watch: a watch of
/// every object of `api` (a kind with few) with `sendInitialEvents`, read until the bookmark that
/// ends the initial events, at most [`PROBE_TIMEOUT`]. Returns the answer and remembers it for every
/// watch [`config`] configures from then on: streamed if it did, paged lists otherwise (a
/// refusal, an error or a time-out all mean paged lists, as before the feature existed).
pub async fn probe<K: Watched>(api: Api<K>) -> bool {
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(api, config).boxed();
    let streamed = tokio::time::timeout(PROBE_TIMEOUT, async {
        loop {
            match events.try_next().await {
                Ok(Some(watcher::Event::InitDone)) => return true,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    STREAMING.store(streamed, Ordering::Relaxed);
    streamed
}

/// A watcher configuration whose initial state arrives as [`probe`] found best: streamed, or
/// paged (kube-runtime's default) when the API server does not stream or nothing probed it.
pub fn config() -> watcher::Config {
    let config = watcher::Config::default();
    if STREAMING.load(Ordering::Relaxed) {
        config.streaming_lists()
    } else {
        config
    }
}

/// Logs what [`probe`] found (`streamed`), once at start.
pub fn log(streamed: bool) {
    if streamed {
        tracing::info!(
            streamed,
            "initial lists streamed as watch events (WatchList)"
        );
    } else {
        tracing::info!(
            streamed,
            "initial lists paged: the API server does not stream lists (WatchList)"
        );
    }
}
