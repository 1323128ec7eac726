//! The homes API's request metrics (Prometheus; docs/homes.md, "Metrics"):
//! `homestead_homes_api_requests_total{verb,code}` and
//! `homestead_homes_api_request_duration_seconds{verb}`, taken by a middleware around every
//! route. A watch is counted when it starts and never timed (it lasts as long as the client
//! stays). `homestead_homes_api_connections_open` and
//! `homestead_homes_api_connections_refused_total` count connections as they are accepted,
//! before TLS (by the binary that accepts them).

use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

use crate::resource::GROUP_VERSION;

/// The request counters and latency histogram.
#[derive(Clone)]
pub struct RequestMetrics {
    requests: IntCounterVec,
    duration: HistogramVec,
}

impl RequestMetrics {
    /// The metrics, registered in `registry`.
    ///
    /// # Errors
    /// When `registry` already holds metrics of these names.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        let requests = IntCounterVec::new(
            Opts::new(
                "homestead_homes_api_requests_total",
                "Requests to the homes API, by verb (get, list, watch, discovery, openapi, \
                 other) and HTTP status code.",
            ),
            &["verb", "code"],
        )?;
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "homestead_homes_api_request_duration_seconds",
                "Time to answer a homes API request, in seconds, by verb (watches excluded).",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            ]),
            &["verb"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        Ok(Self { requests, duration })
    }
}

/// The verb of a request, from its path and query, as kube-apiserver names them.
pub fn verb(path: &str, query: Option<&str>) -> &'static str {
    let homes = format!("/apis/{GROUP_VERSION}/homes");
    match path.trim_end_matches('/').strip_prefix(&homes) {
        Some("") => {
            let watch = query.is_some_and(|q| {
                q.split('&')
                    .any(|pair| matches!(pair, "watch=true" | "watch=1"))
            });
            if watch { "watch" } else { "list" }
        }
        Some(rest) if rest.starts_with('/') => "get",
        _ if path.starts_with("/apis") => "discovery",
        _ if path.starts_with("/openapi") => "openapi",
        _ => "other",
    }
}

/// The middleware: counts every request by verb and code, and times all but watches.
pub async fn track(
    State(metrics): State<RequestMetrics>,
    request: Request,
    next: Next,
) -> Response {
    let verb = verb(request.uri().path(), request.uri().query());
    let started = Instant::now();
    let response = next.run(request).await;
    metrics
        .requests
        .with_label_values(&[verb, response.status().as_str()])
        .inc();
    if verb != "watch" {
        metrics
            .duration
            .with_label_values(&[verb])
            .observe(started.elapsed().as_secs_f64());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_named_by_the_verbs_kube_apiserver_uses() {
        let homes = "/apis/homes.homestead.dev/v1alpha1/homes";
        assert_eq!(verb(homes, None), "list");
        assert_eq!(verb(homes, Some("limit=500")), "list");
        assert_eq!(verb(homes, Some("resourceVersion=3&watch=true")), "watch");
        assert_eq!(verb(homes, Some("watch=false")), "list");
        assert_eq!(verb(&format!("{homes}/user-alice"), None), "get");
        assert_eq!(
            verb("/apis/homes.homestead.dev/v1alpha1", None),
            "discovery"
        );
        assert_eq!(verb("/openapi/v2", None), "openapi");
        assert_eq!(verb("/metrics", None), "other");
    }
}
