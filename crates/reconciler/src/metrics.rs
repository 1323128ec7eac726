//! Prometheus metrics of the reconciler, following Prometheus naming conventions (`_total`
//! counters, `_seconds` histograms, base units).

use std::sync::Arc;

use homestead_api::User;
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The windows of `homestead_users_expiring`: label and length in seconds.
const EXPIRY_WINDOWS: [(&str, i64); 3] = [("1d", 86_400), ("7d", 7 * 86_400), ("30d", 30 * 86_400)];

/// The reconciler's metrics; cheap to clone (shared handles).
#[derive(Clone, Debug)]
pub struct Metrics {
    /// `homestead_reconciliations_total{result="success"|"error"}`: finished reconciles.
    pub reconciliations: IntCounterVec,
    /// `homestead_reconcile_errors_total{reason}`: failed reconciles by [`crate::Error::metric_label`].
    pub errors: IntCounterVec,
    /// `homestead_reconcile_duration_seconds`: wall time of one reconcile, in seconds.
    pub duration: Histogram,
    /// `homestead_users{ready="True"|"False"|"Unknown"}`: Users by their `Ready` condition.
    pub users: IntGaugeVec,
    /// `homestead_users_expiring{within="1d"|"7d"|"30d"}`: Users whose `validUntil` is ahead and
    /// within that window (cumulative: a User expiring tomorrow counts in all three). Counts,
    /// not a per-User timestamp: a label per User would grow with the company.
    pub expiring: IntGaugeVec,
    /// `homestead_leader`: 1 while this replica holds the leader-election Lease and may write
    /// (its fence is open), else 0.
    pub leader: IntGauge,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`.
    ///
    /// # Errors
    /// A [`prometheus::Error`] if a metric of the same name is already registered there.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let reconciliations = IntCounterVec::new(
            Opts::new(
                "homestead_reconciliations_total",
                "Reconciles of Users by result",
            ),
            &["result"],
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "homestead_reconcile_errors_total",
                "Failed reconciles of Users by reason",
            ),
            &["reason"],
        )?;
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "homestead_reconcile_duration_seconds",
                "Duration of one reconcile of a User, in seconds",
            )
            .buckets(vec![
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
        )?;
        let users = IntGaugeVec::new(
            Opts::new(
                "homestead_users",
                "Users by the status of their Ready condition",
            ),
            &["ready"],
        )?;
        registry.register(Box::new(reconciliations.clone()))?;
        registry.register(Box::new(errors.clone()))?;
        registry.register(Box::new(duration.clone()))?;
        let leader = IntGauge::new(
            "homestead_leader",
            "Whether this replica holds the leader-election Lease and may write (1) or not (0)",
        )?;
        let expiring = IntGaugeVec::new(
            Opts::new(
                "homestead_users_expiring",
                "Users whose validUntil is ahead and within the window",
            ),
            &["within"],
        )?;
        registry.register(Box::new(users.clone()))?;
        registry.register(Box::new(expiring.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        Ok(Self {
            reconciliations,
            errors,
            duration,
            users,
            expiring,
            leader,
        })
    }

    /// Sets `homestead_users` and `homestead_users_expiring` from the Users in the
    /// controller's cache.
    pub fn observe_users(&self, users: &[Arc<User>]) {
        let (mut ready, mut not_ready, mut unknown) = (0, 0, 0);
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut expiring = [0; EXPIRY_WINDOWS.len()];
        for user in users {
            if let Some(until) = &user.spec.valid_until {
                let left = until.0.duration_since(now).as_secs();
                for (count, (_, window)) in expiring.iter_mut().zip(EXPIRY_WINDOWS) {
                    if left > 0 && left <= window {
                        *count += 1;
                    }
                }
            }
            match user.ready_condition().map(|c| c.status.as_str()) {
                Some("True") => ready += 1,
                Some("False") => not_ready += 1,
                _ => unknown += 1,
            }
        }
        self.users.with_label_values(&["True"]).set(ready);
        self.users.with_label_values(&["False"]).set(not_ready);
        self.users.with_label_values(&["Unknown"]).set(unknown);
        for (count, (label, _)) in expiring.into_iter().zip(EXPIRY_WINDOWS) {
            self.expiring.with_label_values(&[label]).set(count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::user;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    use serde_json::json;

    #[test]
    fn expiring_users_are_counted_per_window_without_a_label_per_user() {
        let metrics = Metrics::new(&Registry::new()).unwrap();
        let in_days = |days: i64| {
            let at = Timestamp::now() + SignedDuration::from_hours(24 * days)
                - SignedDuration::from_secs(60);
            user("u", json!({ "validUntil": at.to_string() }))
        };
        let users: Vec<Arc<User>> = [
            in_days(1),
            in_days(5),
            in_days(20),
            in_days(-3),
            user("v", json!({})),
        ]
        .into_iter()
        .map(Arc::new)
        .collect();
        metrics.observe_users(&users);
        let count = |w: &str| metrics.expiring.with_label_values(&[w]).get();
        assert_eq!((count("1d"), count("7d"), count("30d")), (1, 2, 3));
    }
}
