//! The SCIM service's Prometheus metrics, served on its own `/metrics` (no token, like
//! `/healthz`): requests by method and status, their latency, how many Users and groups it
//! manages, and when its serving certificate expires.
//! Names follow the Prometheus naming conventions (`_total` counters, `_seconds` histograms).

use std::time::Duration;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use prometheus::{
    Encoder as _, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

/// The SCIM service's metrics, in a registry of their own.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    /// `homestead_scim_requests_total{method, route, status}`: requests answered, by HTTP
    /// method, route template (`/scim/v2/Users/{id}`) and status code.
    requests: IntCounterVec,
    /// `homestead_scim_request_duration_seconds{method, route}`: time to answer, in seconds.
    duration: HistogramVec,
    /// `homestead_scim_users`: Users the service manages (labelled `homestead.dev/writer=scim`,
    /// not being deleted), counted at each scrape from the cache.
    users: IntGauge,
    /// `homestead_scim_groups`: DirectoryGroups the service manages (labelled
    /// `homestead.dev/writer=scim`), counted at each scrape from the cache.
    groups: IntGauge,
    /// The server's connection counts, kept by whoever accepts connections.
    connections: Connections,
    /// `homestead_scim_certificate_expiry_timestamp_seconds`: when the serving certificate in
    /// force stops being valid (its `notAfter`, Unix seconds), kept by whoever loads it.
    certificate_expiry: IntGauge,
}

/// The SCIM server's connection metrics, kept before any request is read (so before a token
/// is checked): what bounds an unauthenticated client.
#[derive(Clone)]
pub struct Connections {
    /// `homestead_scim_connections_open`: TCP connections accepted and not yet closed (count).
    pub open: IntGauge,
    /// `homestead_scim_connections_refused_total`: connections closed at once because
    /// `--max-connections` were open (count).
    pub refused: IntCounter,
}

impl Metrics {
    /// Registers the metrics.
    ///
    /// # Panics
    /// Never in practice: the names and labels are static and valid.
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "homestead_scim_requests_total",
                "SCIM requests answered, by method, route and status code.",
            ),
            &["method", "route", "status"],
        )
        .expect("a valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "homestead_scim_request_duration_seconds",
                "Time to answer a SCIM request, in seconds.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["method", "route"],
        )
        .expect("a valid metric");
        let users = IntGauge::new(
            "homestead_scim_users",
            "Users the SCIM service manages (labelled homestead.dev/writer=scim, not being deleted).",
        )
        .expect("a valid metric");
        let groups = IntGauge::new(
            "homestead_scim_groups",
            "DirectoryGroups the SCIM service manages (labelled homestead.dev/writer=scim).",
        )
        .expect("a valid metric");
        let connections = Connections {
            open: IntGauge::new(
                "homestead_scim_connections_open",
                "TCP connections the SCIM service has accepted and not yet closed.",
            )
            .expect("a valid metric"),
            refused: IntCounter::new(
                "homestead_scim_connections_refused_total",
                "Connections the SCIM service closed at once because --max-connections were open.",
            )
            .expect("a valid metric"),
        };
        let certificate_expiry = IntGauge::new(
            "homestead_scim_certificate_expiry_timestamp_seconds",
            "When the SCIM service's serving certificate in force expires (notAfter), in Unix seconds.",
        )
        .expect("a valid metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(certificate_expiry.clone()),
            Box::new(duration.clone()),
            Box::new(users.clone()),
            Box::new(groups.clone()),
            Box::new(connections.open.clone()),
            Box::new(connections.refused.clone()),
        ] {
            registry.register(collector).expect("unique metric names");
        }
        Self {
            registry,
            requests,
            duration,
            users,
            groups,
            connections,
            certificate_expiry,
        }
    }

    /// The connection metrics, for the server that accepts connections.
    pub fn connections(&self) -> Connections {
        self.connections.clone()
    }

    /// `homestead_scim_certificate_expiry_timestamp_seconds`, for whoever loads the serving
    /// certificate: set it to the certificate's `notAfter` (Unix seconds) each time one is put
    /// in force.
    pub fn certificate_expiry(&self) -> IntGauge {
        self.certificate_expiry.clone()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The routes a request is labelled with; any other path is `other`.
const ROUTES: [&str; 11] = [
    "/scim/v2/Users",
    "/scim/v2/Groups",
    "/scim/v2/Groups/.search",
    "/scim/v2/Users/.search",
    "/scim/v2/.search",
    "/scim/v2/ServiceProviderConfig",
    "/scim/v2/ResourceTypes",
    "/scim/v2/Schemas",
    "/healthz",
    "/readyz",
    "/metrics",
];

/// The route template of `path` (`/scim/v2/Users/{id}` for any User's id), so that a label
/// never holds an id: one series per route, not per person.
fn route_of(path: &str) -> &'static str {
    if let Some(route) = ROUTES.iter().find(|r| **r == path) {
        return route;
    }
    for (prefix, template) in [
        ("/scim/v2/Users/", "/scim/v2/Users/{id}"),
        ("/scim/v2/Groups/", "/scim/v2/Groups/{id}"),
        ("/scim/v2/ResourceTypes/", "/scim/v2/ResourceTypes/{id}"),
        ("/scim/v2/Schemas/", "/scim/v2/Schemas/{id}"),
    ] {
        if path
            .strip_prefix(prefix)
            .is_some_and(|id| !id.is_empty() && !id.contains('/'))
        {
            return template;
        }
    }
    "other"
}

/// The method label: one of the methods SCIM uses, else `other`. Anyone reaching the port may
/// send any method token, unauthenticated; a label per token would grow without bound.
fn method_of(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        _ => "other",
    }
}

impl Metrics {
    /// Counts and times one request answered with `status` after `elapsed`, labelled with its
    /// method and route template (never an id).
    pub fn observe(
        &self,
        method: &axum::http::Method,
        path: &str,
        status: StatusCode,
        elapsed: Duration,
    ) {
        let (method, route) = (method_of(method), route_of(path));
        self.duration
            .with_label_values(&[method, route])
            .observe(elapsed.as_secs_f64());
        self.requests
            .with_label_values(&[method, route, status.as_str()])
            .inc();
    }

    /// The Prometheus text exposition of the service's metrics, with `homestead_scim_users`
    /// and `homestead_scim_groups` set to `users` and `groups` (counts) first.
    pub fn exposition(&self, users: usize, groups: usize) -> Response {
        self.users.set(i64::try_from(users).unwrap_or(i64::MAX));
        self.groups.set(i64::try_from(groups).unwrap_or(i64::MAX));
        let mut body = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        match encoder.encode(&self.registry.gather(), &mut body) {
            Ok(()) => (
                [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
                body,
            )
                .into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_holds_a_route_never_an_id() {
        assert_eq!(route_of("/scim/v2/Users"), "/scim/v2/Users");
        assert_eq!(route_of("/scim/v2/Users/7f0c-11"), "/scim/v2/Users/{id}");
        assert_eq!(route_of("/scim/v2/Groups/7f0c-12"), "/scim/v2/Groups/{id}");
        assert_eq!(route_of("/scim/v2/Users/.search"), "/scim/v2/Users/.search");
        assert_eq!(route_of("/scim/v2/Schemas/urn:x"), "/scim/v2/Schemas/{id}");
        assert_eq!(route_of("/scim/v2/Users/a/b"), "other");
        assert_eq!(route_of("/wp-admin"), "other");
    }

    #[test]
    fn a_label_holds_a_known_method_never_an_invented_one() {
        use axum::http::Method;
        assert_eq!(method_of(&Method::PATCH), "PATCH");
        assert_eq!(method_of(&Method::from_bytes(b"XYZZY").unwrap()), "other");
        assert_eq!(method_of(&Method::OPTIONS), "other");
    }
}
