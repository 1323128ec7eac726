//! Access that ends on a date: `spec.validUntil` and `spec.onExpiry`. Pure: where a User stands
//! at a given moment, the `Expiring` condition that says so, and when to look again. The
//! reconcile is requeued for the exact moment the state changes (the warning window opening,
//! `validUntil` itself), so precision is the Controller's timer (milliseconds) plus one
//! reconcile; nothing polls.

use std::time::Duration;

use homestead_api::{ExpiringReason, OnExpiry, User};
use k8s_openapi::jiff::Timestamp;

/// Where a User stands with respect to its `validUntil`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No `validUntil`: access does not end by itself.
    Unset,
    /// `validUntil` is further ahead than the warning: the window opens in `warn_in`.
    Later {
        /// Time until the warning window opens.
        warn_in: Duration,
    },
    /// Within the warning window: access ends in `left`.
    Soon {
        /// Time until `validUntil`.
        left: Duration,
    },
    /// `validUntil` has passed.
    Passed,
}

impl Expiry {
    /// Where `user` stands at `now`, warned `warning` ahead of its `validUntil`.
    pub fn of(user: &User, now: Timestamp, warning: Duration) -> Self {
        let Some(until) = user.spec.valid_until.as_ref() else {
            return Self::Unset;
        };
        let left = until.0.duration_since(now);
        match Duration::try_from(left) {
            Ok(left) if !left.is_zero() => match left.checked_sub(warning) {
                Some(warn_in) if !warn_in.is_zero() => Self::Later { warn_in },
                _ => Self::Soon { left },
            },
            _ => Self::Passed,
        }
    }

    /// When the state changes next (to requeue the reconcile then), if it ever does.
    pub fn recheck(self) -> Option<Duration> {
        match self {
            Self::Later { warn_in } => Some(warn_in),
            Self::Soon { left } => Some(left),
            Self::Unset | Self::Passed => None,
        }
    }

    /// The `Expiring` condition for `user` in this state, as (status, reason, message); `None`
    /// without `validUntil`. `True` (reason `ExpiresSoon`) within the warning window, else
    /// `False` (reason `NotSoon` before it, `Expired` after).
    pub fn condition(self, user: &User) -> Option<(bool, &'static str, String)> {
        use ExpiringReason::{Expired, ExpiresSoon, NotSoon};
        let until = user.spec.valid_until.as_ref()?.0;
        let then = match user.spec.on_expiry {
            OnExpiry::Suspend => "access is revoked and the namespace kept",
            OnExpiry::Delete => "the User is deleted and offboarded per its deletionPolicy",
        };
        Some(match self {
            Self::Unset => return None,
            Self::Later { .. } => (
                false,
                NotSoon.into(),
                format!("access ends at {until}; then {then}"),
            ),
            // No "in N days": the message would change with the clock, and so the status.
            Self::Soon { .. } => (
                true,
                ExpiresSoon.into(),
                format!("access ends at {until}; then {then}"),
            ),
            Self::Passed => (false, Expired.into(), format!("access ended at {until}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::User;
    use serde_json::json;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_user_moves_from_later_to_soon_to_passed() {
        let u = User::test("ivy").with_spec(json!({ "validUntil": "2027-01-31T00:00:00Z" }));
        let at = |s: &str| s.parse::<Timestamp>().unwrap();
        let warning = 14 * DAY;
        assert_eq!(
            Expiry::of(&u, at("2027-01-01T00:00:00Z"), warning),
            Expiry::Later { warn_in: 16 * DAY }
        );
        assert_eq!(
            Expiry::of(&u, at("2027-01-30T00:00:00Z"), warning),
            Expiry::Soon { left: DAY }
        );
        assert_eq!(
            Expiry::of(&u, at("2027-01-31T00:00:00Z"), warning),
            Expiry::Passed
        );
        assert_eq!(
            Expiry::of(&User::test("ivy"), at("2027-01-01T00:00:00Z"), warning),
            Expiry::Unset
        );

        let soon = Expiry::Soon { left: DAY };
        assert_eq!(soon.recheck(), Some(DAY), "requeued for the exact moment");
        let (status, reason, message) = soon.condition(&u).unwrap();
        assert!(status);
        assert_eq!(reason, "ExpiresSoon");
        assert!(
            message.contains("2027-01-31T00:00:00Z") && message.contains("revoked"),
            "{message}"
        );
        assert_eq!(Expiry::Passed.recheck(), None);
        assert_eq!(Expiry::Passed.condition(&u).unwrap().1, "Expired");
    }
}
