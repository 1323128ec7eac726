//! What the workload meant: every User as its writers left it, the namespaces offboarded, the
//! platform's Profiles and group, and the faults, built only from the workload's own log of
//! accepted writes. The oracle compares the cluster with this, never with the operator's code.
//!
//! Times are seconds since the soak began ([`Clock`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Instant, SystemTime};

use serde::{Deserialize, Serialize};

/// Seconds since the soak began, on both the monotonic and the wall clock (`validUntil` is a
/// wall-clock time the API server stores to the second).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    started: Instant,
    wall: SystemTime,
}

impl Clock {
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// Seconds since the start.
    pub fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// A wall-clock time as seconds since the start (negative before it).
    pub fn at(&self, wall: SystemTime) -> f64 {
        match wall.duration_since(self.wall) {
            Ok(after) => after.as_secs_f64(),
            Err(before) => -before.duration().as_secs_f64(),
        }
    }

    /// Seconds since the start as a wall-clock time.
    pub fn wall(&self, t: f64) -> SystemTime {
        self.wall + std::time::Duration::from_secs_f64(t.max(0.0))
    }
}

/// Who wrote a User: HR (by hand or roster) or the identity provider over SCIM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Writer {
    Hr,
    Scim,
}

/// A User as the workload last wrote it.
#[derive(Clone, Debug)]
pub struct ModelUser {
    pub username: String,
    /// The User's uid, as the API server gave it on create.
    pub uid: Option<String>,
    pub writer: Writer,
    pub role: Option<String>,
    pub profile: Option<String>,
    pub retain: bool,
    pub namespace: String,
    /// When HR's `spec.suspended` was last set (while it is set).
    pub suspended_at: Option<f64>,
    /// When the identity provider last set `active: false` (while it stands).
    pub deactivated_at: Option<f64>,
    /// `spec.validUntil`, in whole seconds since the start.
    pub valid_until: Option<f64>,
    /// When its deletion was accepted.
    pub deleting_at: Option<f64>,
    /// Whom its deletion hands its homes to (`deletionPolicy: Handover`).
    pub successor: Option<String>,
    /// When the workload created it.
    pub created_at: f64,
    /// When the workload last changed its spec (a Ready condition for it is due after this).
    pub changed_at: f64,
}

impl ModelUser {
    /// A User just created at `now` (seconds since the start), in `namespace`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        username: String,
        uid: Option<String>,
        writer: Writer,
        role: Option<String>,
        profile: Option<String>,
        retain: bool,
        namespace: String,
        now: f64,
    ) -> Self {
        Self {
            username,
            uid,
            writer,
            role,
            profile,
            retain,
            namespace,
            suspended_at: None,
            deactivated_at: None,
            valid_until: None,
            deleting_at: None,
            successor: None,
            created_at: now,
            changed_at: now,
        }
    }

    /// Since when the User's namespace must grant nobody anything, if it must at `t`:
    /// suspended, deactivated, expired or being offboarded (docs/security.md, "What revocation
    /// removes"), whichever began first.
    pub fn revoked_since(&self, t: f64) -> Option<f64> {
        [
            self.suspended_at,
            self.deactivated_at,
            self.valid_until.filter(|&v| v <= t),
            self.deleting_at,
        ]
        .into_iter()
        .flatten()
        .reduce(f64::min)
    }

    /// The role its namespace's Homestead RoleBinding must grant, given the Profiles' roles and
    /// the SCIM group's members: the User's own, else its Profile's (the soak's Profiles allow
    /// role overrides), else for the directory's people the group's Profile or the directory
    /// floor (`view`), else `admin` (docs/profiles.md).
    pub fn expected_role(&self, name: &str, model: &Model) -> String {
        if let Some(role) = &self.role {
            return role.clone();
        }
        let profile = match (&self.profile, self.writer) {
            (Some(p), _) => Some(p.clone()),
            (None, Writer::Scim) if model.group.contains(name) => {
                Some(super::workload::DIRECTORY_PROFILE.to_owned())
            }
            (None, Writer::Scim) => return "view".to_owned(),
            (None, Writer::Hr) => None,
        };
        profile
            .and_then(|p| model.profiles.get(&p).cloned())
            .unwrap_or_else(|| "admin".to_owned())
    }
}

/// A namespace whose User was deleted: no access in it from `since` on, for as long as the
/// namespace with `uid` exists (for ever under Retain, until it is gone under Delete).
#[derive(Clone, Debug)]
pub struct Offboarded {
    pub namespace: String,
    /// The User that was deleted.
    pub user: String,
    pub uid: Option<String>,
    pub owner: String,
    pub since: f64,
    pub retain: bool,
    /// The User it was handed over to (docs/handover.md): from `since` on the leaver has no
    /// access there, and the namespace has exactly one owner (the successor's Workspace, or,
    /// when the handover fell back, none but the retained label).
    pub successor: Option<String>,
}

/// A fault: from `start` until `end` (when the workload stopped injecting it), `healed` once an
/// operator leads again; `recovery` is how long after that the operator may take to catch up.
#[derive(Clone, Debug)]
pub struct FaultWindow {
    pub what: String,
    pub start: f64,
    pub end: Option<f64>,
    pub healed: Option<f64>,
    pub recovery: f64,
}

/// Everything the workload meant so far.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub users: BTreeMap<String, ModelUser>,
    pub offboarded: Vec<Offboarded>,
    /// Namespaces the platform made by hand and has not handed (`homestead.dev/adopt-for`) to
    /// the User that names them: Homestead must never write them.
    pub squatted: BTreeSet<String>,
    /// Namespaces the platform made by hand and then handed to the User that names them, with
    /// that User: the only one whose revocation concerns the namespace (other Users naming it
    /// are refused and own nothing there).
    pub adopted: BTreeMap<String, String>,
    /// The soak's Profiles and their roles.
    pub profiles: BTreeMap<String, String>,
    /// The User names in the SCIM group that selects the directory's Profile.
    pub group: BTreeSet<String>,
    pub faults: Vec<FaultWindow>,
    /// Every username a User ever had, for access reviews.
    pub usernames: BTreeSet<String>,
    /// User names with an operation in flight (how many): the API server may have accepted a
    /// change the model does not know of yet.
    pub in_flight: BTreeMap<String, u32>,
    /// When the last operation on each User name came back.
    pub settled_at: BTreeMap<String, f64>,
}

/// How long a promise may take to hold after the change that calls for it, with no fault:
/// revocation within 2 s of the accepted change (docs/security.md).
pub const REVOCATION_ALLOWED: f64 = 2.0;
/// How long a User may wait for a `Ready` condition that describes its current generation.
pub const READY_ALLOWED: f64 = 5.0;
/// After a leader change heals (an operator renews its Lease again), how long the new leader
/// may take to catch up: sync its caches and reconcile what changed meanwhile.
pub const RECOVERY_ALLOWED: f64 = 5.0;
/// After an API server restart heals, how long the operator may take to catch up: each watch
/// retries at most every 5 s, with jitter up to twice that (docs/operations.md), then
/// reconciles.
pub const API_RECOVERY_ALLOWED: f64 = 12.0;

impl Model {
    /// The deadline of a promise due `allowed` seconds after `since`, moved past every fault
    /// that overlaps the wait or whose recovery the change fell into: `allowed` after the
    /// fault's recovery ends. `None` while such a fault has not healed.
    pub fn deadline(&self, since: f64, allowed: f64) -> Option<f64> {
        let mut deadline = since + allowed;
        for fault in &self.faults {
            if fault.start > deadline {
                continue;
            }
            match fault.healed {
                None => return None,
                Some(healed) if healed + fault.recovery >= since => {
                    deadline = deadline.max(healed + fault.recovery + allowed);
                }
                Some(_) => {}
            }
        }
        Some(deadline)
    }

    /// Whether any fault is being injected or has not healed.
    pub fn faulty(&self) -> bool {
        self.faults.iter().any(|f| f.healed.is_none())
    }

    /// Whether what the cluster showed of User `name` from `since` on may differ from the model
    /// for a moment: an operation on it was in flight, or came back after `since`.
    pub fn unsettled(&self, name: &str, since: f64) -> bool {
        self.in_flight.contains_key(name) || self.settled_at.get(name).is_some_and(|&t| t > since)
    }

    /// The live model User named `name`.
    pub fn user(&mut self, name: &str) -> Option<&mut ModelUser> {
        self.users.get_mut(name)
    }
}
