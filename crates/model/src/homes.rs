//! What the homes API shows a person (docs/homes.md, "What a person sees"): the namespaces they
//! can use through Homestead, each with its role, the way in (their own home, a Share, a
//! group's Share), until when, and their home's state. Pure: the caller's User, the groups that
//! count them, the Shares naming either, and the time.

use homestead_api::{CONDITION_READY, DirectoryGroup, Reason, Share, User, Workspace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

pub use crate::via::{Source, Via};
use crate::workspace::way_in;

/// The state of the caller's own home, as their User's `Ready` reason says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HomeState {
    /// Provisioned, access as declared.
    Active,
    /// Suspended (`spec.suspended` or the directory): the namespace is kept, access revoked.
    Suspended,
    /// Past `spec.validUntil`: the namespace is kept, access revoked.
    Expired,
    /// Anything else (refused, failing, terminating): no access to count on.
    NotReady,
}

/// One namespace the caller can use, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// The namespace.
    pub namespace: String,
    /// The ClusterRole the caller has there.
    pub role: String,
    /// The way in.
    pub via: Via,
    /// When it ends, if it does: a Share's `expiresAt`, or the User's `validUntil` for their own
    /// home.
    pub until: Option<Time>,
    /// The caller's own home's state (for a shared home: [`HomeState::Active`], since only
    /// Shares that grant access now are listed).
    pub state: HomeState,
    /// Since when: the User's creation for their own home, the Share's for a share.
    pub since: Option<Time>,
}

/// The ClusterRole of `user`'s own home: `status.role` (what the operator bound, a Profile's
/// choice included), else `spec.role` or the default before the first reconcile.
pub fn own_role(user: &User) -> &str {
    user.status
        .as_ref()
        .and_then(|s| s.role.as_deref())
        .unwrap_or_else(|| user.spec.role())
}

/// The state of `user`'s home from its `Ready` condition.
pub fn state_of(user: &User) -> HomeState {
    match user.ready_condition().map(|c| c.reason.parse::<Reason>()) {
        Some(Ok(Reason::Provisioned)) => HomeState::Active,
        Some(Ok(Reason::Suspended)) => HomeState::Suspended,
        Some(Ok(Reason::Expired)) => HomeState::Expired,
        _ => HomeState::NotReady,
    }
}

/// Whether `share` grants access at `now`: `Ready=True` for its current generation and
/// `expiresAt` not yet passed.
fn grants(share: &Share, now: Timestamp) -> bool {
    let Some(status) = share.status.as_ref() else {
        return false;
    };
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_READY && c.status == "True");
    ready
        && status.observed_generation == share.metadata.generation
        && share.spec.expires_at.0 > now
}

/// Whether `workspace` gives access now: `Ready=True` for its current generation, with a
/// namespace.
fn provisioned(workspace: &Workspace) -> Option<&str> {
    let status = workspace.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_READY && c.status == "True");
    (ready && status.observed_generation == workspace.metadata.generation)
        .then_some(status.namespace.as_deref())
        .flatten()
}

/// The ways `share` lets the User named `user` in, in the order of its grantees: by name
/// ([`Via::Share`]), and through each grantee of `groups` that names a DirectoryGroup of
/// `groups` ([`Via::Group`]). `groups` are the DirectoryGroups that count `user` as a member
/// ([`DirectoryGroup::counts_member`], docs/security.md, "Membership by identity"). Says nothing
/// of whether the Share grants access now.
pub fn ways_in(share: &Share, user: &str, groups: &[&DirectoryGroup]) -> Vec<Via> {
    share
        .spec
        .to
        .iter()
        .filter_map(|grantee| match (&grantee.user, &grantee.group) {
            (Some(grantee), _) if grantee == user => Some(Via::Share(share.name_any())),
            (None, Some(group)) if groups.iter().any(|g| g.name_any() == *group) => {
                Some(Via::Group {
                    group: group.clone(),
                    share: share.name_any(),
                })
            }
            _ => None,
        })
        .collect()
}

/// The homes of `user` (the caller's User) at `now`, sorted by namespace then way in: their own
/// home in [`own_role`], once provisioned (shown while suspended or expired too, with that state);
/// and, only while their own access stands ([`HomeState::Active`]: a suspended, expired or
/// offboarded grantee loses every share), each Share of `shares` that grants access now and
/// names `user` or one of `groups` (the DirectoryGroups that count `user` as a member), but
/// none in their own home: a Share never binds the home's owner; and each of `workspaces` that
/// is provisioned and that `user` owns, administers or reaches as a member of its owner group
/// ([`way_in`]).
pub fn homes_of(
    user: &User,
    groups: &[&DirectoryGroup],
    shares: &[&Share],
    workspaces: &[&Workspace],
    now: Timestamp,
) -> Vec<Home> {
    let state = state_of(user);
    let mut homes = Vec::new();
    let own = user.status.as_ref().and_then(|s| s.namespace.clone());
    if let Some(namespace) = own.clone() {
        homes.push(Home {
            namespace,
            role: own_role(user).to_owned(),
            via: Via::OwnHome,
            until: user.spec.valid_until.clone(),
            state,
            since: user.metadata.creation_timestamp.clone(),
        });
    }
    if state == HomeState::Active {
        let name = user.name_any();
        // A Share never binds its home's owner (docs/sharing.md, "A grantee is a User, not a
        // name"), even through a group the owner is in: their own home shows once, as theirs.
        for share in shares.iter().filter(|s| grants(s, now)) {
            let namespace = share.namespace().unwrap_or_default();
            if own.as_deref() == Some(namespace.as_str()) {
                continue;
            }
            for via in ways_in(share, &name, groups) {
                homes.push(Home {
                    namespace: namespace.clone(),
                    role: share.spec.role.clone(),
                    via,
                    until: Some(share.spec.expires_at.clone()),
                    state: HomeState::Active,
                    since: share.metadata.creation_timestamp.clone(),
                });
            }
        }
    }
    if state == HomeState::Active {
        let name = user.name_any();
        for workspace in workspaces {
            let Some(namespace) = provisioned(workspace) else {
                continue;
            };
            if let Some((role, via)) = way_in(workspace, &name, groups) {
                homes.push(Home {
                    namespace: namespace.to_owned(),
                    role,
                    via,
                    until: None,
                    state: HomeState::Active,
                    since: workspace.metadata.creation_timestamp.clone(),
                });
            }
        }
    }
    // By namespace; the ways in are spelled out only to order the few in one namespace.
    homes.sort_by(|a, b| {
        a.namespace
            .cmp(&b.namespace)
            .then_with(|| a.via.describe().cmp(&b.via.describe()))
    });
    homes
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::{Grantee, ShareSpec, ShareStatus, UserStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::SignedDuration;

    fn now() -> Timestamp {
        "2026-12-01T00:00:00Z".parse().unwrap()
    }

    fn user(name: &str, reason: &str) -> User {
        let mut user = User::test(name).with_ready(true, reason);
        user.status
            .get_or_insert_with(UserStatus::default)
            .namespace = Some(format!("user-{name}"));
        user
    }

    fn share(name: &str, home: &str, to: Grantee, role: &str, hours: i64, ready: bool) -> Share {
        let mut share = Share::new(
            name,
            ShareSpec {
                to: vec![to],
                role: role.into(),
                expires_at: Time(now() + SignedDuration::from_hours(hours)),
                reason: "review".into(),
            },
        );
        share.metadata.namespace = Some(home.into());
        share.metadata.generation = Some(1);
        share.status = Some(ShareStatus {
            observed_generation: Some(1),
            conditions: vec![Condition {
                type_: CONDITION_READY.into(),
                status: if ready { "True" } else { "False" }.into(),
                reason: if ready { "Active" } else { "Refused" }.into(),
                message: String::new(),
                last_transition_time: Time(now()),
                observed_generation: Some(1),
            }],
            ..ShareStatus::default()
        });
        share
    }

    fn to_user(name: &str) -> Grantee {
        Grantee {
            user: Some(name.into()),
            group: None,
        }
    }

    fn to_group(name: &str) -> Grantee {
        Grantee {
            user: None,
            group: Some(name.into()),
        }
    }

    fn seen(homes: &[Home]) -> Vec<(String, String, String)> {
        homes
            .iter()
            .map(|h| (h.namespace.clone(), h.role.clone(), h.via.describe()))
            .collect()
    }

    #[test]
    fn a_person_sees_their_home_and_the_shares_that_grant_them_access_now() {
        let bob = user("bob", "Provisioned");
        let analysts = DirectoryGroup::test("analysts", "Analysts").with_members(&["bob"]);
        let shares = [
            share("review", "user-alice", to_user("bob"), "view", 24, true),
            share("q4", "team-data", to_group("analysts"), "edit", 48, true),
            // Not for bob, expired, or refused: none of these show.
            share("other", "user-carol", to_user("dave"), "view", 24, true),
            share("old", "user-carol", to_user("bob"), "view", -1, true),
            share("too-much", "user-erin", to_user("bob"), "admin", 24, false),
            // His own home shared with a group he is in: never a way in for him.
            share("mine", "user-bob", to_group("analysts"), "edit", 24, true),
        ];
        let homes = homes_of(
            &bob,
            &[&analysts],
            &shares.iter().collect::<Vec<_>>(),
            &[],
            now(),
        );
        assert_eq!(
            seen(&homes),
            [
                (
                    "team-data".into(),
                    "edit".into(),
                    "group analysts (share q4)".into()
                ),
                ("user-alice".into(), "view".into(), "share review".into()),
                ("user-bob".into(), "admin".into(), "own home".into()),
            ]
        );
        assert_eq!(homes[1].until, Some(shares[0].spec.expires_at.clone()));
        assert!(homes.iter().all(|h| h.state == HomeState::Active));
    }

    #[test]
    fn a_suspended_person_sees_their_home_suspended_and_no_share() {
        let bob = user("bob", "Suspended");
        let shares = [share(
            "review",
            "user-alice",
            to_user("bob"),
            "view",
            24,
            true,
        )];
        let homes = homes_of(&bob, &[], &shares.iter().collect::<Vec<_>>(), &[], now());
        assert_eq!(
            seen(&homes),
            [("user-bob".into(), "admin".into(), "own home".into())]
        );
        assert_eq!(homes[0].state, HomeState::Suspended);
        assert_eq!(state_of(&user("x", "Expired")), HomeState::Expired);
    }

    #[test]
    fn the_own_home_has_the_role_the_operator_bound() {
        let mut bob = user("bob", "Provisioned");
        assert_eq!(own_role(&bob), "admin", "before any reconcile: the default");
        bob.status.as_mut().unwrap().role = Some("view".into());
        let homes = homes_of(&bob, &[], &[], &[], now());
        assert_eq!(
            homes[0].role, "view",
            "a Profile's choice, from status.role"
        );
    }

    #[test]
    fn a_person_with_nothing_sees_nothing() {
        let nobody = User::test("nobody");
        assert!(homes_of(&nobody, &[], &[], &[], now()).is_empty());
    }
}
