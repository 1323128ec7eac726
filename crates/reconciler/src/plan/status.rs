//! The User's status and Events: one [`Reason`] enum for every `Ready` condition reason, one
//! [`Change`] enum for every Event about a change Homestead made, the pure [`desired_status`]
//! (following the Kubernetes API conventions for conditions), and the status write that sends
//! it only when it changed, with an Event on every transition (docs/design.md rules 9, 11, 16).

use std::hash::{DefaultHasher, Hash, Hasher};

use homestead_api::{
    AppliedProfile, CONDITION_EXPIRING, CONDITION_READY, Change, MAX_EVENT_NOTE_BYTES, Profile,
    Reason, User, UserStatus,
};
use k8s_openapi::api::core::v1::{NamespaceStatus, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;
use kube::runtime::events::EventType;

/// Whether a change of a User, from `before` (its cached version; `None`: new) to `after`,
/// calls for a reconcile: a new User, or a change to its spec or to the metadata reconciles
/// read (finalizers, deletion timestamp, generation, uid; [`homestead_model::trim::trim_user`] drops the
/// rest), or a status without its `Ready` condition (someone cleared it). Any other change to
/// the status alone does not: the status is Homestead's own, written by `Cluster::write_status` ([`crate::act::status`])
/// (nearly always this is the echo of that write), and reconciles only compare it with the
/// status they compute; one written by someone else is put right at the next resync or change.
pub fn triggers_reconcile(before: Option<&User>, after: &User) -> bool {
    before.is_none_or(|old| old.metadata != after.metadata || old.spec != after.spec)
        || after.ready_condition().is_none()
}

/// The outcome of a reconcile, written into the `Ready` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The Namespace the User has, or would have.
    pub namespace: String,
    /// Why `Ready` is what it is; [`Reason::is_ready`] decides its status.
    pub reason: Reason,
    /// A human-readable message: what is so, and what to do if anything.
    pub message: String,
    /// What this reconcile changed on the way, each with a note saying exactly what; reported
    /// in Events, never in the status.
    pub changes: Vec<(Change, String)>,
    /// The Profile (and its generation) the User's objects now reflect, for `status.profile`.
    pub profile: Option<AppliedProfile>,
    /// The ClusterRole the home's RoleBinding grants (or would, while revoked), for
    /// `status.role`; `None` keeps the one the status has.
    pub role: Option<String>,
    /// The `Expiring` condition as (status, reason, message), for a User with `validUntil`.
    pub expiring: Option<(bool, &'static str, String)>,
}

impl Outcome {
    /// An outcome for `namespace` with `reason` and `message`, and no change made.
    pub fn new(namespace: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            reason,
            message: message.into(),
            changes: Vec::new(),
            profile: None,
            role: None,
            expiring: None,
        }
    }

    /// This outcome, with the home's ClusterRole `role`.
    #[must_use]
    pub fn with_role(mut self, role: &str) -> Self {
        self.role = Some(role.to_owned());
        self
    }

    /// This outcome, with the `Expiring` condition `expiring` (see
    /// [`crate::plan::expiry::Expiry::condition`]).
    #[must_use]
    pub fn with_expiring(mut self, expiring: Option<(bool, &'static str, String)>) -> Self {
        self.expiring = expiring;
        self
    }

    /// This outcome, reached with `profile` applied.
    #[must_use]
    pub fn with_profile(mut self, profile: Option<AppliedProfile>) -> Self {
        self.profile = profile;
        self
    }

    /// This outcome, with the `changes` made on the way to it.
    #[must_use]
    pub fn with_changes(mut self, changes: Vec<(Change, String)>) -> Self {
        self.changes = changes;
        self
    }
}

/// A fingerprint of "generation `generation` of a User converged (`Ready=True`) with the
/// Profile `applied`" (`None`: no Profile), what `Cluster::write_status` ([`crate::act::status`]) remembers in
/// [`Recent::convergence`](crate::act::recent::Recent::convergence).
pub fn convergence_print(generation: Option<i64>, applied: Option<&AppliedProfile>) -> u64 {
    let mut hasher = DefaultHasher::new();
    (generation, applied).hash(&mut hasher);
    hasher.finish()
}

/// A fingerprint of what a status write sets, `lastTransitionTime` left out (a reconcile
/// working from a stale cache computes a different one for the same transition).
pub fn fingerprint(status: &UserStatus) -> u64 {
    let mut hasher = DefaultHasher::new();
    status.namespace.hash(&mut hasher);
    status.observed_generation.hash(&mut hasher);
    status.profile.hash(&mut hasher);
    status.role.hash(&mut hasher);
    for c in &status.conditions {
        (&c.type_, &c.status, &c.reason, &c.message).hash(&mut hasher);
        c.observed_generation.hash(&mut hasher);
    }
    hasher.finish()
}

/// A reference to the Profile `applied` names, for an Event's related object.
pub fn profile_reference(applied: &AppliedProfile) -> ObjectReference {
    ObjectReference {
        api_version: Some(Profile::api_version(&()).into_owned()),
        kind: Some(Profile::kind(&()).into_owned()),
        name: Some(applied.name.clone()),
        ..ObjectReference::default()
    }
}

/// The Events that report `outcome`, as (type, reason, note). A `transition` of `Ready` (its
/// status or reason changes; see [`is_transition`]) is one Event with the new reason, the
/// message and every change made on the way, so provisioning a User costs one Event, not one
/// per object; otherwise each change is a Normal Event of its own, and an unchanged outcome
/// none.
pub fn events_for(transition: bool, outcome: &Outcome) -> Vec<(EventType, &'static str, String)> {
    if !transition {
        return outcome
            .changes
            .iter()
            .map(|(change, note)| (EventType::Normal, change.as_str(), note.clone()))
            .collect();
    }
    let type_ = if outcome.reason.is_warning() {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let mut note = outcome.message.clone();
    if !outcome.changes.is_empty() {
        let done: Vec<&str> = outcome.changes.iter().map(|(_, n)| n.as_str()).collect();
        note = format!("{note} (done: {})", done.join("; "));
    }
    if note.len() > MAX_EVENT_NOTE_BYTES {
        let mut end = MAX_EVENT_NOTE_BYTES - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    vec![(type_, outcome.reason.as_str(), note)]
}

/// The status `outcome` describes for `user`: `status.namespace`, `observedGeneration` (the
/// User's `metadata.generation`), `status.profile`, `status.role` (the outcome's, else the one
/// the status has) and the `Ready` condition. Its `lastTransitionTime` is the
/// previous one while the condition's status stays the same, else `now` (API conventions:
/// it moves only on a transition).
pub fn desired_status(user: &User, outcome: &Outcome, now: Time) -> UserStatus {
    let previous = user
        .status
        .as_ref()
        .map_or(&[][..], |s| s.conditions.as_slice());
    let generation = user.metadata.generation;
    let mut conditions = vec![set_condition(
        previous,
        CONDITION_READY,
        outcome.reason.is_ready(),
        outcome.reason.as_str(),
        outcome.message.clone(),
        generation,
        &now,
    )];
    if let Some((expiring, reason, message)) = &outcome.expiring {
        conditions.push(set_condition(
            previous,
            CONDITION_EXPIRING,
            *expiring,
            reason,
            message.clone(),
            generation,
            &now,
        ));
    }
    let role = outcome
        .role
        .clone()
        .or_else(|| user.status.as_ref().and_then(|s| s.role.clone()));
    UserStatus {
        namespace: Some(outcome.namespace.clone()),
        observed_generation: user.metadata.generation,
        profile: outcome.profile.clone(),
        role,
        // Written apart, under its own field manager (docs/quota.md).
        total: None,
        conditions,
    }
}

/// The condition `type_` with `status`, `reason` and `message`, observed at `generation`, as
/// it follows `previous` (the object's current conditions): its `lastTransitionTime` is the
/// previous one of that type while the status stays the same, else `now` (Kubernetes API
/// conventions, "Typical status properties"; cert-manager's `SetCertificateCondition` does the
/// same). The one place that rule lives, for the User's `Ready` and `Expiring` and the
/// Profile's `Ready`.
pub fn set_condition(
    previous: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = match previous.iter().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// `user`'s condition of type `type_`, if any.
pub fn condition<'a>(user: &'a User, type_: &str) -> Option<&'a Condition> {
    user.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether `current` already holds what Homestead writes into a status (`namespace`,
/// `observedGeneration`, `profile`, `role` and the `Ready` and `Expiring` conditions); conditions other writers added are theirs
/// and never a reason to write.
pub fn status_matches(current: &UserStatus, desired: &UserStatus) -> bool {
    let ready = |s: &UserStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_READY)
            .cloned()
    };
    let expiring = |s: &UserStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CONDITION_EXPIRING)
            .cloned()
    };
    current.namespace == desired.namespace
        && current.observed_generation == desired.observed_generation
        && current.profile == desired.profile
        && current.role == desired.role
        && ready(current) == ready(desired)
        && expiring(current) == expiring(desired)
}

/// Whether `outcome` changes the `Ready` condition's status or reason (an Event-worthy
/// transition) compared with `user`'s current status.
pub fn is_transition(user: &User, outcome: &Outcome) -> bool {
    user.ready_condition().is_none_or(|c| {
        c.status
            != if outcome.reason.is_ready() {
                "True"
            } else {
                "False"
            }
            || c.reason != outcome.reason.as_str()
    })
}

/// A message naming what still blocks the terminating Namespace `name`, from its `status`
/// conditions
/// (`NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, deletion failures), or a
/// generic one when the namespace controller has not reported yet.
pub fn terminating_message(name: &str, status: Option<&NamespaceStatus>) -> String {
    let blockers: Vec<String> = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status == "True")
        .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or("")))
        .collect();
    if blockers.is_empty() {
        format!("waiting for namespace {name:?} to be deleted")
    } else {
        format!(
            "waiting for namespace {name:?} to be deleted; {}",
            blockers.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::User;
    use homestead_api::{Failure, RefusalKind};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    #[test]
    fn only_a_change_beyond_homesteads_own_status_triggers_a_reconcile() {
        let mut before = User::test("alice");
        assert!(triggers_reconcile(None, &before), "a new User");
        let outcome = Outcome::new("user-alice", Reason::Provisioned, "ready");
        before.status = Some(desired_status(&before, &outcome, Time(Timestamp::now())));
        let mut echo = before.clone();
        let later = Outcome::new("user-alice", Reason::Provisioned, "ready again");
        echo.status = Some(desired_status(&echo, &later, Time(Timestamp::now())));
        assert!(!triggers_reconcile(Some(&before), &echo), "a status alone");
        let mut respecified = before.clone();
        respecified.spec.suspended = true;
        assert!(triggers_reconcile(Some(&before), &respecified), "the spec");
        let mut finalized = before.clone();
        finalized.metadata.finalizers = Some(vec!["homestead.dev/cleanup".into()]);
        assert!(
            triggers_reconcile(Some(&before), &finalized),
            "the metadata"
        );
        let mut cleared = before.clone();
        cleared.status.as_mut().unwrap().conditions.clear();
        assert!(triggers_reconcile(Some(&before), &cleared), "Ready cleared");
    }

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn outcome(reason: Reason) -> Outcome {
        Outcome {
            namespace: "user-alice".into(),
            reason,
            message: format!("{reason}"),
            changes: Vec::new(),
            profile: None,
            role: None,
            expiring: None,
        }
    }

    #[test]
    fn a_status_written_moments_ago_is_not_written_again() {
        let u = User::test("alice");
        let recent = crate::act::recent::RecentWrites::default();
        let provisioned = fingerprint(&desired_status(&u, &outcome(Reason::Provisioned), at(1)));
        // The same status computed later (another lastTransitionTime) has the same fingerprint.
        assert_eq!(
            provisioned,
            fingerprint(&desired_status(&u, &outcome(Reason::Provisioned), at(2)))
        );
        let suspended = fingerprint(&desired_status(&u, &outcome(Reason::Suspended), at(1)));
        assert_ne!(provisioned, suspended);

        assert!(recent.unconfirmed("alice", provisioned).is_none());
        recent.remember("alice".into(), provisioned);
        assert!(recent.unconfirmed("alice", provisioned).is_some());
        assert!(
            recent.unconfirmed("alice", suspended).is_none(),
            "a different status is written"
        );
        assert!(recent.unconfirmed("bob", provisioned).is_none());
        recent.forget("alice");
        assert!(
            recent.unconfirmed("alice", provisioned).is_none(),
            "the cache shows it: compare again"
        );
    }

    #[test]
    fn one_event_per_transition_sums_up_the_changes() {
        let changes = vec![
            (
                Change::NamespaceCreated,
                "created namespace \"user-alice\"".to_owned(),
            ),
            (
                Change::AccessGranted,
                "bound ClusterRole \"edit\"".to_owned(),
            ),
        ];
        let done = outcome(Reason::Provisioned).with_changes(changes);
        let events = events_for(true, &done);
        assert_eq!(events.len(), 1);
        let (type_, reason, note) = &events[0];
        assert_eq!((*type_, *reason), (EventType::Normal, "Provisioned"));
        assert!(note.contains("created namespace") && note.contains("bound ClusterRole"));
        // Without a transition, each change is its own Event; nothing changed, no Event.
        let reasons: Vec<_> = events_for(false, &done).iter().map(|e| e.1).collect();
        assert_eq!(reasons, ["NamespaceCreated", "AccessGranted"]);
        assert!(events_for(false, &outcome(Reason::Provisioned)).is_empty());
        // A long note is cut to what the API server accepts.
        let long = outcome(Reason::Provisioned)
            .with_changes(vec![(Change::QuotaApplied, "x".repeat(5000))]);
        assert!(events_for(true, &long)[0].2.len() <= MAX_EVENT_NOTE_BYTES);
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_does() {
        let mut u = User::test("alice");
        u.metadata.generation = Some(3);
        let first = desired_status(&u, &outcome(Reason::Provisioned), at(100));
        let ready = &first.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("True", "Provisioned")
        );
        assert_eq!(ready.last_transition_time, at(100));
        assert_eq!(first.observed_generation, Some(3));
        assert_eq!(ready.observed_generation, Some(3));

        // Same status, even with another reason: the time stays.
        u.status = Some(first.clone());
        let suspended = desired_status(&u, &outcome(Reason::Suspended), at(200));
        assert_eq!(suspended.conditions[0].last_transition_time, at(100));
        // Recomputing the same outcome later gives the same status: nothing to write.
        assert_eq!(
            desired_status(&u, &outcome(Reason::Provisioned), at(300)),
            first
        );

        // True -> False moves it.
        let refused = desired_status(
            &u,
            &outcome(Reason::Refused(RefusalKind::RoleNotAllowed)),
            at(400),
        );
        assert_eq!(refused.conditions[0].status, "False");
        assert_eq!(refused.conditions[0].last_transition_time, at(400));
    }

    #[test]
    fn the_role_is_kept_when_an_outcome_does_not_name_one() {
        let mut u = User::test("alice");
        let bound = desired_status(&u, &outcome(Reason::Provisioned).with_role("edit"), at(1));
        assert_eq!(bound.role.as_deref(), Some("edit"));
        u.status = Some(bound.clone());
        // A refusal computes no role: the status keeps the one it has, so nothing to write.
        let refused = desired_status(
            &u,
            &outcome(Reason::Refused(RefusalKind::RoleNotAllowed)),
            at(2),
        );
        assert_eq!(refused.role.as_deref(), Some("edit"));
        // A new role is a difference to write.
        let moved = desired_status(&u, &outcome(Reason::Provisioned).with_role("view"), at(3));
        assert!(!status_matches(&bound, &moved));
        assert_ne!(fingerprint(&bound), fingerprint(&moved));
    }

    #[test]
    fn conditions_of_other_writers_are_no_reason_to_write() {
        let u = User::test("alice");
        let desired = desired_status(&u, &outcome(Reason::Provisioned), at(1));
        let mut current = desired.clone();
        current.conditions.push(Condition {
            type_: "Audited".into(),
            status: "True".into(),
            reason: "ByOthers".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(5),
        });
        assert!(status_matches(&current, &desired));
        current.conditions[0].message = "changed".into();
        assert!(!status_matches(&current, &desired));
    }

    #[test]
    fn transitions_are_status_or_reason_changes() {
        let mut u = User::test("alice");
        assert!(
            is_transition(&u, &outcome(Reason::Provisioned)),
            "no condition yet"
        );
        u.status = Some(desired_status(&u, &outcome(Reason::Provisioned), at(1)));
        assert!(!is_transition(&u, &outcome(Reason::Provisioned)));
        assert!(is_transition(&u, &outcome(Reason::Suspended)));
        assert!(is_transition(
            &u,
            &outcome(Reason::Refused(RefusalKind::NamespaceConflict))
        ));
    }

    #[test]
    fn only_provisioned_and_suspended_are_ready() {
        let ready: Vec<Reason> = [
            Reason::Provisioned,
            Reason::Suspended,
            Reason::Refused(RefusalKind::NamespaceConflict),
            Reason::Refused(RefusalKind::InvalidQuota),
            Reason::Refused(RefusalKind::InvalidMetadata),
            Reason::Refused(RefusalKind::ReservedNamespace),
            Reason::Refused(RefusalKind::InvalidNamespaceName),
            Reason::Refused(RefusalKind::NamespaceNotAllowed),
            Reason::Refused(RefusalKind::RoleNotAllowed),
            Reason::Refused(RefusalKind::ForbiddenSubject),
            Reason::Refused(RefusalKind::ReservedKey),
            Reason::NamespaceTerminating,
            Reason::Terminating,
            Reason::Failed(Failure::Forbidden),
            Reason::Failed(Failure::ReadFailed),
            Reason::Failed(Failure::CreateFailed),
            Reason::Failed(Failure::ApplyFailed),
            Reason::Failed(Failure::DeleteFailed),
        ]
        .into_iter()
        .filter(|r| r.is_ready())
        .collect();
        assert_eq!(ready, [Reason::Provisioned, Reason::Suspended]);
    }

    #[test]
    fn terminating_message_names_the_blockers() {
        let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({
            "metadata": { "name": "user-alice", "deletionTimestamp": "2026-01-01T00:00:00Z" },
            "status": { "conditions": [
                { "type": "NamespaceDeletionDiscoveryFailure", "status": "False" },
                { "type": "NamespaceFinalizersRemaining", "status": "True", "message": "Some content in the namespace has finalizers remaining: example.com/block in 1 resource instances" },
            ] },
        }))
        .unwrap();
        let message = terminating_message("user-alice", ns.status.as_ref());
        assert!(message.contains("example.com/block"), "{message}");
        assert!(!message.contains("DiscoveryFailure"), "{message}");
    }
}
