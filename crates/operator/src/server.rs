//! The HTTP server for Prometheus and the kubelet: `/metrics` (Prometheus text format 0.0.4),
//! `/healthz` (liveness: the process serves requests) and `/readyz` (readiness: see
//! [`Health::set_ready`]).

use std::net::SocketAddr;

use anyhow::Context as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use homestead_api::User;
use homestead_model::store::CompactStore;
use homestead_reconciler::Metrics;
use homestead_reconciler::act::fence::Fence;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio_util::sync::CancellationToken;

/// A registry with the process's own metrics, for a server of this binary to add to:
/// `process_resident_memory_bytes`, `process_cpu_seconds_total` and open file descriptors
/// (Prometheus' process collector), and with the `jemalloc` feature (the default) jemalloc's
/// account of the heap, `homestead_allocator_bytes{state}` (`allocator::Allocator`).
///
/// # Errors
/// A [`prometheus::Error`] only if two of these collectors had the same metric name.
pub fn process_registry() -> prometheus::Result<Registry> {
    let registry = Registry::new();
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    #[cfg(feature = "jemalloc")]
    registry.register(Box::new(crate::allocator::Allocator::new()?))?;
    Ok(registry)
}

/// Sets the gauges of Shares from the operator's cache, before a scrape.
type ShareMetrics = Arc<dyn Fn() + Send + Sync>;

/// What the server reports; shared with the operator, which flips readiness.
#[derive(Clone)]
pub struct Health {
    ready: Arc<AtomicBool>,
    registry: Registry,
    /// The operator's metrics, which `/metrics` brings up to date before a scrape; `None` for
    /// another server (the homes API's) that only serves its registry.
    metrics: Option<Metrics>,
    users: Arc<OnceLock<CompactStore<User>>>,
    shares: Arc<OnceLock<ShareMetrics>>,
    fence: Arc<OnceLock<Arc<Fence>>>,
}

impl Health {
    /// A not-yet-ready state serving `registry`, with the operator's `metrics`.
    pub fn new(registry: Registry, metrics: Metrics) -> Self {
        Self {
            metrics: Some(metrics),
            ..Self::serving(registry)
        }
    }

    /// A not-yet-ready state serving `registry` alone (no operator metrics to bring up to
    /// date).
    pub fn serving(registry: Registry) -> Self {
        Self {
            ready: Arc::default(),
            registry,
            metrics: None,
            users: Arc::default(),
            shares: Arc::default(),
            fence: Arc::default(),
        }
    }

    /// Marks the operator ready (caches synced, or healthy standby) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }

    /// Gives `/metrics` the User cache, from which it computes `homestead_users`.
    pub fn set_user_store(&self, store: CompactStore<User>) {
        let _ = self.users.set(store);
    }

    /// Gives `/metrics` what sets `homestead_shares` and `homestead_shares_expiring` from the
    /// Share cache ([`homestead_reconciler::runtime::Runtime::share_metrics`]).
    pub fn set_share_metrics(&self, observe: impl Fn() + Send + Sync + 'static) {
        let _ = self.shares.set(Arc::new(observe));
    }

    /// Gives `/metrics` the fence of this replica's writes, from which it computes
    /// `homestead_leader` (0 until set: a standby does not lead).
    pub fn set_fence(&self, fence: Arc<Fence>) {
        let _ = self.fence.set(fence);
    }
}

async fn metrics(State(health): State<Health>) -> impl IntoResponse {
    if let Some(metrics) = &health.metrics {
        if let Some(store) = health.users.get() {
            metrics.observe_users(|count| store.for_each(|user| count(&user)));
        }
        if let Some(observe) = health.shares.get() {
            observe();
        }
        let leading = health.fence.get().is_some_and(|f| f.is_held());
        metrics.leader.set(i64::from(leading));
    }
    let mut body = Vec::new();
    let encoder = TextEncoder::new();
    match encoder.encode(&health.registry.gather(), &mut body) {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain".to_owned())],
            e.to_string().into_bytes(),
        ),
    }
}

async fn readyz(State(health): State<Health>) -> (StatusCode, &'static str) {
    if health.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

/// The HTTP listener, bound before anything else starts so a port in use is an error at
/// start-up.
pub struct Server {
    listener: tokio::net::TcpListener,
}

impl Server {
    /// Binds `address`.
    ///
    /// # Errors
    /// When the address cannot be bound (for example, it is in use).
    pub async fn bind(address: SocketAddr) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("binding the metrics address {address}"))?;
        Ok(Self { listener })
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` until `shutdown` is cancelled.
    ///
    /// # Errors
    /// When the server fails while serving.
    pub async fn serve(self, health: Health, shutdown: CancellationToken) -> std::io::Result<()> {
        let app = Router::new()
            .route("/metrics", get(metrics))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz))
            .with_state(health);
        let address = self.listener.local_addr()?;
        tracing::info!(%address, "serving /metrics, /healthz and /readyz");
        axum::serve(self.listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
    }
}
