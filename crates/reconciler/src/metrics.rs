//! Prometheus metrics of the reconciler, following Prometheus naming conventions (`_total`
//! counters, `_seconds` histograms, base units).

use std::sync::Arc;

use homestead_api::User;
use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

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
        registry.register(Box::new(users.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        Ok(Self {
            reconciliations,
            errors,
            duration,
            users,
            leader,
        })
    }

    /// Sets `homestead_users` from the Users in the controller's cache.
    pub fn observe_users(&self, users: &[Arc<User>]) {
        let (mut ready, mut not_ready, mut unknown) = (0, 0, 0);
        for user in users {
            match user.ready_condition().map(|c| c.status.as_str()) {
                Some("True") => ready += 1,
                Some("False") => not_ready += 1,
                _ => unknown += 1,
            }
        }
        self.users.with_label_values(&["True"]).set(ready);
        self.users.with_label_values(&["False"]).set(not_ready);
        self.users.with_label_values(&["Unknown"]).set(unknown);
    }
}
