//! Prometheus metrics of the reconciler, following Prometheus naming conventions (`_total`
//! counters, `_seconds` histograms, base units).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use homestead_api::{Reason, ShareReason, User};

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// The windows of `homestead_users_expiring`: label and length in seconds.
const EXPIRY_WINDOWS: [(&str, i64); 3] = [("1d", 86_400), ("7d", 7 * 86_400), ("30d", 30 * 86_400)];

/// The `change` labels of `homestead_share_changes_total` (the Events' reasons on a Share).
pub const SHARE_CHANGES: [&str; 3] = ["Granted", "Repaired", "Revoked"];

/// The `reason` label of a User without a `Ready` condition yet.
const NO_REASON: &str = "Pending";

/// Buckets of `homestead_user_time_to_ready_seconds`, in seconds: from a second to a week
/// (a User refused until HR fixes it can take days).
const TIME_TO_READY_BUCKETS: [f64; 14] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0, 604800.0,
];
/// Buckets of `homestead_offboarding_duration_seconds`, in seconds: from a second to a day
/// (a namespace with a stuck finalizer takes as long as someone needs to notice).
const OFFBOARDING_BUCKETS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0, 86400.0,
];

/// The `result` label of `homestead_reconciliations_total` (snake_case of the variant, derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum ReconcileResult {
    /// The reconcile succeeded (or waits for a namespace to go, which is no failure).
    Success,
    /// The reconcile failed and is retried with backoff.
    Error,
}

/// The `kind` label of `homestead_status_errors_total`: whose status write failed (the kind's
/// name, derived).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
pub enum StatusKind {
    /// A Profile's status.
    Profile,
    /// A DirectoryGroup's status.
    DirectoryGroup,
    /// An owner's `status.total` (a User's or a DirectoryGroup's; docs/quota.md).
    TotalQuota,
}

/// A count of Shares by `Ready` reason and of those expiring within 7 days, made one Share at
/// a time ([`ShareTally::count`]) so that `/metrics` copies none of them; published by
/// [`Metrics::observe_shares`].
pub struct ShareTally {
    /// When the count began: "expiring" is measured from it.
    now: k8s_openapi::jiff::Timestamp,
    /// Shares by the `reason` label (a [`ShareReason`], or `Pending` before Homestead wrote one).
    by_reason: HashMap<&'static str, i64>,
    /// Active Shares whose `expiresAt` is within 7 days.
    expiring: i64,
}

impl ShareTally {
    /// Counts one Share: its `Ready` reason (`None` before Homestead has written one; a reason
    /// that is no [`ShareReason`] is not counted) and its `expiresAt`.
    pub fn count(&mut self, reason: Option<&str>, expires_at: k8s_openapi::jiff::Timestamp) {
        let reason = reason.unwrap_or(NO_REASON);
        let left = expires_at.duration_since(self.now).as_secs();
        if reason == ShareReason::Active.as_str() && left > 0 && left <= 7 * 86_400 {
            self.expiring += 1;
        }
        if let Some(count) = self.by_reason.get_mut(reason) {
            *count += 1;
        }
    }
}

/// The metrics of Shares.
#[derive(Clone, Debug)]
pub struct ShareMetrics {
    /// `homestead_shares{reason}`: Shares by their `Ready` reason (`Active`, `Expired`,
    /// `Refused`, `Suspended`; `Pending` before Homestead has written one).
    pub by_reason: IntGaugeVec,
    /// `homestead_shares_expiring`: Shares that grant access now and expire within 7 days.
    pub expiring: IntGauge,
    /// `homestead_share_changes_total{change="Granted"|"Repaired"|"Revoked"}`: writes of
    /// Shares' RoleBindings, by what they did.
    pub changes: IntCounterVec,
    /// `homestead_share_errors_total`: failed reconciles of Shares (each retried with backoff,
    /// and logged).
    pub errors: IntCounter,
}

/// The metrics of Shares, registered in `r`: `homestead_shares`, `homestead_shares_expiring`,
/// `homestead_share_changes_total` and `homestead_share_errors_total`.
///
/// # Errors
/// As [`register`].
fn share_metrics(r: &Registry) -> Result<ShareMetrics, prometheus::Error> {
    Ok(ShareMetrics {
        by_reason: gauge_vec(
            r,
            "homestead_shares",
            "Shares by the reason of their Ready condition",
            &["reason"],
        )?,
        expiring: gauge(
            r,
            "homestead_shares_expiring",
            "Shares that grant access now and expire within 7 days",
        )?,
        changes: counter_vec(
            r,
            "homestead_share_changes_total",
            "Writes of Shares' RoleBindings, by what they did",
            &["change"],
        )?,
        errors: register(
            r,
            IntCounter::new(
                "homestead_share_errors_total",
                "Failed reconciles of Shares",
            )?,
        )?,
    })
}

/// The metrics of total quotas across an owner's homes (docs/quota.md).
#[derive(Clone, Debug)]
pub struct TotalMetrics {
    /// `homestead_total_quota_rebalances_total`: moves of an owner's slices.
    pub rebalances: IntCounter,
    /// `homestead_total_quota_slice_writes_total`: slices written by those moves.
    pub writes: IntCounter,
    /// `homestead_total_quota_rebalance_seconds`: from reading an owner's slices to the last
    /// write of a move.
    pub rebalance_seconds: Histogram,
    /// `homestead_total_quota_full_with_room_total`: slices a move found full in some resource
    /// while the owner's homes together used less than the total (a create there was, or would
    /// have been, refused though another home had room).
    pub full_with_room: IntCounter,
}

/// The metrics of total quotas, registered in `r`.
///
/// # Errors
/// As [`register`].
fn total_metrics(r: &Registry) -> Result<TotalMetrics, prometheus::Error> {
    let counter = |name: &str, help: &str| register(r, IntCounter::new(name, help)?);
    Ok(TotalMetrics {
        rebalances: counter(
            "homestead_total_quota_rebalances_total",
            "Moves of an owner's slices of its total quota",
        )?,
        writes: counter(
            "homestead_total_quota_slice_writes_total",
            "Slices of total quotas written by moves",
        )?,
        rebalance_seconds: histogram(
            r,
            "homestead_total_quota_rebalance_seconds",
            "Seconds from reading an owner's slices to the last write of a move",
            &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5],
        )?,
        full_with_room: counter(
            "homestead_total_quota_full_with_room_total",
            "Slices found full while the owner's homes together used less than the total",
        )?,
    })
}

/// The metrics of reconciles themselves, registered in `r`: `homestead_reconciliations_total`,
/// `homestead_reconcile_errors_total`, `homestead_reconcile_duration_seconds` and
/// `homestead_reconciles_in_flight`.
///
/// # Errors
/// As [`register`].
fn reconcile_metrics(
    r: &Registry,
) -> Result<(IntCounterVec, IntCounterVec, Histogram, IntGauge), prometheus::Error> {
    Ok((
        counter_vec(
            r,
            "homestead_reconciliations_total",
            "Reconciles of Users by result",
            &["result"],
        )?,
        counter_vec(
            r,
            "homestead_reconcile_errors_total",
            "Failed reconciles of Users by reason",
            &["reason"],
        )?,
        histogram(
            r,
            "homestead_reconcile_duration_seconds",
            "Duration of one reconcile of a User, in seconds",
            &RECONCILE_BUCKETS,
        )?,
        gauge(
            r,
            "homestead_reconciles_in_flight",
            "Reconciles of Users running now",
        )?,
    ))
}

/// Buckets of `homestead_reconcile_duration_seconds`, in seconds: from a millisecond to 10 s.
const RECONCILE_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The name of the counter of Events whose publication failed.
const EVENTS_FAILED: &str = "homestead_events_failed_total";
/// The help of [`EVENTS_FAILED`].
const EVENTS_FAILED_HELP: &str = "Events whose publication failed (not retried)";

/// Registers `collector` in `registry` and returns it (a shared handle).
///
/// # Errors
/// A [`prometheus::Error`] if a metric of the same name is already registered there.
fn register<C>(registry: &Registry, collector: C) -> Result<C, prometheus::Error>
where
    C: prometheus::core::Collector + Clone + 'static,
{
    registry.register(Box::new(collector.clone()))?;
    Ok(collector)
}

/// A registered gauge `name` with `help`.
///
/// # Errors
/// As [`register`].
fn gauge(registry: &Registry, name: &str, help: &str) -> Result<IntGauge, prometheus::Error> {
    register(registry, IntGauge::new(name, help)?)
}

/// A registered counter vector `name` with `help` and `labels`.
///
/// # Errors
/// As [`register`].
fn counter_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, prometheus::Error> {
    register(registry, IntCounterVec::new(Opts::new(name, help), labels)?)
}

/// A registered gauge vector `name` with `help` and `labels`.
///
/// # Errors
/// As [`register`].
fn gauge_vec(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, prometheus::Error> {
    register(registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
}

/// A registered histogram `name` with `help` and `buckets` (upper bounds, in seconds).
///
/// # Errors
/// As [`register`].
fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    buckets: &[f64],
) -> Result<Histogram, prometheus::Error> {
    register(
        registry,
        Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?,
    )
}

/// The reconciler's metrics; cheap to clone (shared handles). None has a per-User label: every
/// label takes a small, fixed set of values.
#[derive(Clone, Debug)]
pub struct Metrics {
    /// `homestead_reconciliations_total{result="success"|"error"}`: finished reconciles.
    pub reconciliations: IntCounterVec,
    /// `homestead_reconcile_errors_total{reason}`: failed reconciles by [`crate::Error::metric_label`].
    pub errors: IntCounterVec,
    /// `homestead_reconcile_duration_seconds`: wall time of one reconcile, in seconds.
    pub duration: Histogram,
    /// `homestead_reconciles_in_flight`: reconciles running now (kube-runtime does not expose
    /// its queue; this and the reconcile rate are what it leaves to watch).
    pub in_flight: IntGauge,
    /// `homestead_users{ready="True"|"False"|"Unknown",reason}`: Users by their `Ready`
    /// condition's status and reason (`Pending` before Homestead has written one).
    pub users: IntGaugeVec,
    /// `homestead_users_expiring{within="1d"|"7d"|"30d"}`: Users whose `validUntil` is ahead and
    /// within that window (cumulative: a User expiring tomorrow counts in all three). Counts,
    /// not a per-User timestamp: a label per User would grow with the company.
    pub expiring: IntGaugeVec,
    /// `homestead_user_time_to_ready_seconds`: seconds from a User's creation to its first
    /// `Ready=True` with reason `Provisioned` (the person can work), observed when Homestead
    /// writes that transition; see [`Metrics::observe_ready`].
    pub time_to_ready: Histogram,
    /// `homestead_offboarding_duration_seconds`: seconds from a User's deletion to the end of
    /// its offboarding (access revoked, namespace deleted or retained), observed when the
    /// finalizer's cleanup completes.
    pub offboarding: Histogram,
    /// `homestead_retained_namespaces`: namespaces labelled `homestead.dev/retained-from`
    /// (kept after offboarding under `deletionPolicy: Retain`), counted by the leader every
    /// `--retained-count-interval` (default 60 s); 0 on a standby.
    pub retained: IntGauge,
    /// `homestead_leader`: 1 while this replica holds the leader-election Lease and may write
    /// (its fence is open), else 0.
    pub leader: IntGauge,
    /// `homestead_events_pending`: Events queued by reconciles and not yet published (see
    /// [`crate::act::events::EventQueue`]); grows during a bulk import and drains after it.
    pub events_pending: IntGauge,
    /// `homestead_events_failed_total`: Events the API server refused or did not answer (each
    /// is logged with its User and reason; Events are not retried).
    pub events_failed: IntCounter,
    /// `homestead_events_summarised_total`: per-User Normal Events folded into a summary Event
    /// because they arrived in bulk (see [`crate::act::events::EventQueue`]).
    pub events_summarised: IntCounter,
    /// `homestead_status_errors_total{kind="Profile"|"DirectoryGroup"}`: failed writes of a
    /// Profile's or DirectoryGroup's status (each retried with backoff, and logged).
    pub status_errors: IntCounterVec,
    /// The metrics of Shares.
    pub share: ShareMetrics,
    /// The metrics of total quotas.
    pub total: TotalMetrics,
    /// `homestead_workspaces{owner="user"|"group", reason}`: Workspaces by the kind of their
    /// owner and the reason of their `Ready` condition (`Provisioned`, `Suspended`, a refusal
    /// such as `OverLimit`; `Pending` before Homestead has written one).
    pub workspaces: IntGaugeVec,
    /// `homestead_api_requests_total{verb, code}`: requests this replica sent to the API
    /// server, by verb (`get` includes lists) and response code (`error`: no answer), counted by
    /// [`crate::act::requests::CountRequests`] under the client.
    pub api_requests: IntCounterVec,
    /// The `(ready, reason)` pairs of `homestead_users` set so far, so a pair no User has any
    /// more is set to 0 rather than left at its last count.
    seen: Arc<Mutex<HashSet<(String, String)>>>,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry`, with
    /// `homestead_build_info{version}` set to 1 for this crate's version.
    ///
    /// # Errors
    /// A [`prometheus::Error`] if a metric of the same name is already registered there.
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let r = registry;
        let (reconciliations, errors, duration, in_flight) = reconcile_metrics(r)?;
        let metrics = Self {
            reconciliations,
            errors,
            duration,
            in_flight,
            users: gauge_vec(
                r,
                "homestead_users",
                "Users by the status and reason of their Ready condition",
                &["ready", "reason"],
            )?,
            expiring: gauge_vec(
                r,
                "homestead_users_expiring",
                "Users whose validUntil is ahead and within the window",
                &["within"],
            )?,
            time_to_ready: histogram(
                r,
                "homestead_user_time_to_ready_seconds",
                "Seconds from a User's creation to its first Ready=True (Provisioned)",
                &TIME_TO_READY_BUCKETS,
            )?,
            offboarding: histogram(
                r,
                "homestead_offboarding_duration_seconds",
                "Seconds from a User's deletion to the end of its offboarding",
                &OFFBOARDING_BUCKETS,
            )?,
            retained: gauge(
                r,
                "homestead_retained_namespaces",
                "Namespaces kept after offboarding (deletionPolicy Retain), counted by the leader",
            )?,
            leader: gauge(
                r,
                "homestead_leader",
                "Whether this replica holds the leader-election Lease and may write (1) or not (0)",
            )?,
            events_pending: gauge(
                r,
                "homestead_events_pending",
                "Events queued by reconciles and not yet published",
            )?,
            events_failed: register(r, IntCounter::new(EVENTS_FAILED, EVENTS_FAILED_HELP)?)?,
            events_summarised: register(
                r,
                IntCounter::new(
                    "homestead_events_summarised_total",
                    "Per-User Normal Events folded into one summary Event, arriving in bulk",
                )?,
            )?,
            status_errors: counter_vec(
                r,
                "homestead_status_errors_total",
                "Failed writes of Profile and DirectoryGroup statuses, by kind",
                &["kind"],
            )?,
            share: share_metrics(r)?,
            total: total_metrics(r)?,
            workspaces: gauge_vec(
                r,
                "homestead_workspaces",
                "Workspaces by the kind of their owner and the reason of their Ready condition",
                &["owner", "reason"],
            )?,
            api_requests: counter_vec(
                r,
                "homestead_api_requests_total",
                "Requests sent to the API server, by verb and response code",
                &["verb", "code"],
            )?,
            seen: Arc::default(),
        };
        metrics.start_series(r)?;
        Ok(metrics)
    }

    /// Registers `homestead_build_info{version}` at 1 for this crate's version, and starts every
    /// labelled series whose values are known at 0, so rates and alerts see it before its first
    /// increment.
    ///
    /// # Errors
    /// As [`register`].
    fn start_series(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        gauge_vec(
            registry,
            "homestead_build_info",
            "Always 1; the version of the running Homestead as a label",
            &["version"],
        )?
        .with_label_values(&[env!("CARGO_PKG_VERSION")])
        .set(1);
        for reason in crate::error::ErrorLabel::all() {
            self.errors.with_label_values(&[reason.as_str()]).reset();
        }
        for result in <ReconcileResult as strum::VariantArray>::VARIANTS {
            let result: &str = result.into();
            self.reconciliations.with_label_values(&[result]).reset();
        }
        for change in SHARE_CHANGES {
            self.share.changes.with_label_values(&[change]).reset();
        }
        for kind in <StatusKind as strum::VariantArray>::VARIANTS {
            let kind: &str = kind.into();
            self.status_errors.with_label_values(&[kind]).reset();
        }
        Ok(())
    }

    /// Sets `homestead_users` and `homestead_users_expiring` from the Users `visit` counts:
    /// it is handed a function to call with each User in the controller's cache (which
    /// decodes them one at a time, `homestead_model::packed`).
    pub fn observe_users(&self, visit: impl FnOnce(&mut dyn FnMut(&User))) {
        let now = k8s_openapi::jiff::Timestamp::now();
        let mut expiring = [0; EXPIRY_WINDOWS.len()];
        let mut by_reason: HashMap<(String, String), i64> = HashMap::new();
        visit(&mut |user: &User| {
            if let Some(until) = &user.spec.valid_until {
                let left = until.0.duration_since(now).as_secs();
                for (count, (_, window)) in expiring.iter_mut().zip(EXPIRY_WINDOWS) {
                    if left > 0 && left <= window {
                        *count += 1;
                    }
                }
            }
            let (ready, reason) = match user.ready_condition() {
                Some(c) if c.status == "True" || c.status == "False" => {
                    (c.status.as_str(), c.reason.as_str())
                }
                Some(c) => ("Unknown", c.reason.as_str()),
                None => ("Unknown", NO_REASON),
            };
            *by_reason
                .entry((ready.to_owned(), reason.to_owned()))
                .or_default() += 1;
        });
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for (ready, reason) in seen.iter() {
            if !by_reason.contains_key(&(ready.clone(), reason.clone())) {
                self.users.with_label_values(&[ready, reason]).set(0);
            }
        }
        for ((ready, reason), count) in by_reason {
            self.users.with_label_values(&[&ready, &reason]).set(count);
            seen.insert((ready, reason));
        }
        for (count, (label, _)) in expiring.into_iter().zip(EXPIRY_WINDOWS) {
            self.expiring.with_label_values(&[label]).set(count);
        }
    }

    /// Sets `homestead_workspaces` from every Workspace's owner kind (`user` or `group`) and
    /// `Ready` reason (`None` before Homestead has written one): each kind with `Provisioned`,
    /// `Suspended` and `Pending` always has a series (0 without such Workspaces); other reasons
    /// only while some Workspace has them.
    pub fn observe_workspaces<'a>(
        &self,
        workspaces: impl IntoIterator<Item = (&'static str, Option<&'a str>)>,
    ) {
        // Each kind of owner with the reasons every workspace passes through reads 0 rather
        // than nothing, so a query of it always has a series; a pair seen before reads 0 once
        // no Workspace has it.
        let mut counts: HashMap<(&str, String), i64> = ["user", "group"]
            .into_iter()
            .flat_map(|owner| {
                ["Provisioned", "Suspended", NO_REASON].map(|r| ((owner, r.to_owned()), 0))
            })
            .collect();
        for (owner, reason) in workspaces {
            *counts
                .entry((owner, reason.unwrap_or(NO_REASON).to_owned()))
                .or_default() += 1;
        }
        self.workspaces.reset();
        for ((owner, reason), count) in counts {
            self.workspaces
                .with_label_values(&[owner, reason.as_str()])
                .set(count);
        }
    }

    /// Sets `homestead_shares` and `homestead_shares_expiring` from `tally`, a count of every
    /// Share ([`Metrics::share_tally`]).
    pub fn observe_shares(&self, tally: ShareTally) {
        for (reason, count) in tally.by_reason {
            self.share.by_reason.with_label_values(&[reason]).set(count);
        }
        self.share.expiring.set(tally.expiring);
    }

    /// An empty count of Shares for [`Metrics::observe_shares`], every reason at 0 (a query of
    /// one always has a series).
    pub fn share_tally(&self) -> ShareTally {
        ShareTally {
            now: k8s_openapi::jiff::Timestamp::now(),
            by_reason: <ShareReason as strum::VariantArray>::VARIANTS
                .iter()
                .map(|r| (r.as_str(), 0))
                .chain([(NO_REASON, 0)])
                .collect(),
            expiring: 0,
        }
    }

    /// Observes `homestead_user_time_to_ready_seconds` for `user` when a status write moves it
    /// to `Ready=True` with reason `Provisioned` from no `Ready` condition or from a refusal
    /// (`Ready=False` for a reason of its spec, such as `RoleNotAllowed`); not after a
    /// transient API failure or a suspension, which are not a person's first access. A User
    /// refused, then fixed, is counted once, with the time until it was fixed: how long that
    /// person waited.
    pub fn observe_ready(&self, user: &User, reason: Reason) {
        if reason != Reason::Provisioned {
            return;
        }
        let first = user
            .ready_condition()
            .is_none_or(|c| c.status != "True" && Reason::refusal(&c.reason));
        if let (true, Some(created)) = (first, user.metadata.creation_timestamp.as_ref()) {
            let age = k8s_openapi::jiff::Timestamp::now().duration_since(created.0);
            self.time_to_ready.observe(age.as_secs_f64().max(0.0));
        }
    }

    /// Observes `homestead_offboarding_duration_seconds` for `user`, whose offboarding just
    /// completed: the seconds since its `deletionTimestamp`.
    pub fn observe_offboarded(&self, user: &User) {
        if let Some(deleted) = user.metadata.deletion_timestamp.as_ref() {
            let took = k8s_openapi::jiff::Timestamp::now().duration_since(deleted.0);
            self.offboarding.observe(took.as_secs_f64().max(0.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::User;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    use serde_json::json;

    #[test]
    fn expiring_users_are_counted_per_window_without_a_label_per_user() {
        let metrics = Metrics::new(&Registry::new()).unwrap();
        let in_days = |days: i64| {
            let at = Timestamp::now() + SignedDuration::from_hours(24 * days)
                - SignedDuration::from_secs(60);
            User::test("u").with_spec(json!({ "validUntil": at.to_string() }))
        };
        let users = [
            in_days(1),
            in_days(5),
            in_days(20),
            in_days(-3),
            User::test("v"),
        ];
        metrics.observe_users(|count| users.iter().for_each(count));
        let count = |w: &str| metrics.expiring.with_label_values(&[w]).get();
        assert_eq!((count("1d"), count("7d"), count("30d")), (1, 2, 3));
    }

    /// `user` created `age` seconds ago with a `Ready` condition of `status` and `reason`.
    fn with_ready(age: i64, ready: Option<(&str, &str)>) -> User {
        let mut u = User::test("r");
        let created = Timestamp::now() - SignedDuration::from_secs(age);
        u.metadata.creation_timestamp = Some(Time(created));
        if let Some((status, reason)) = ready {
            u.status = Some(
                serde_json::from_value(json!({"conditions": [{
                    "type": "Ready", "status": status, "reason": reason, "message": "",
                    "lastTransitionTime": created.to_string()
                }]}))
                .unwrap(),
            );
        }
        u
    }

    #[test]
    fn users_are_counted_by_ready_reason_and_vanished_reasons_drop_to_zero() {
        let metrics = Metrics::new(&Registry::new()).unwrap();
        let count =
            |ready: &str, reason: &str| metrics.users.with_label_values(&[ready, reason]).get();
        let users = [
            with_ready(1, Some(("True", "Provisioned"))),
            with_ready(1, Some(("True", "Provisioned"))),
            with_ready(1, Some(("False", "RoleNotAllowed"))),
            with_ready(1, None),
        ];
        metrics.observe_users(|count| users.iter().for_each(count));
        assert_eq!(count("True", "Provisioned"), 2);
        assert_eq!(count("False", "RoleNotAllowed"), 1);
        assert_eq!(count("Unknown", NO_REASON), 1);
        metrics.observe_users(|count| users[..2].iter().for_each(count));
        assert_eq!(
            count("False", "RoleNotAllowed"),
            0,
            "set to 0, not left at 1"
        );
        assert_eq!(count("True", "Provisioned"), 2);
    }

    #[test]
    fn time_to_ready_counts_a_first_access_only() {
        let metrics = Metrics::new(&Registry::new()).unwrap();
        let observed = || metrics.time_to_ready.get_sample_count();
        metrics.observe_ready(&with_ready(30, None), Reason::Provisioned);
        assert_eq!(observed(), 1);
        assert!((29.0..60.0).contains(&metrics.time_to_ready.get_sample_sum()));
        // Fixed after a refusal: the person waited that long, so it counts.
        metrics.observe_ready(
            &with_ready(3600, Some(("False", "RoleNotAllowed"))),
            Reason::Provisioned,
        );
        assert_eq!(observed(), 2);
        // Not a first access: after a transient failure, after suspension, or a suspension.
        metrics.observe_ready(
            &with_ready(9, Some(("False", "ApplyFailed"))),
            Reason::Provisioned,
        );
        metrics.observe_ready(
            &with_ready(9, Some(("True", "Suspended"))),
            Reason::Provisioned,
        );
        metrics.observe_ready(&with_ready(9, None), Reason::Suspended);
        assert_eq!(observed(), 2);
    }

    #[test]
    fn offboarding_is_timed_from_the_deletion() {
        let metrics = Metrics::new(&Registry::new()).unwrap();
        let mut gone = User::test("g");
        metrics.observe_offboarded(&gone);
        assert_eq!(
            metrics.offboarding.get_sample_count(),
            0,
            "not deleted: nothing to time"
        );
        gone.metadata.deletion_timestamp =
            Some(Time(Timestamp::now() - SignedDuration::from_secs(42)));
        metrics.observe_offboarded(&gone);
        assert_eq!(metrics.offboarding.get_sample_count(), 1);
        assert!((41.0..60.0).contains(&metrics.offboarding.get_sample_sum()));
    }
}
