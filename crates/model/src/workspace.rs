//! Who may use a workspace, and how (docs/design.md, rule 25): a workspace's access comes from
//! its owner. A personal workspace (`owner.user`) gives its owner `admin`; a team workspace
//! (`owner.group`) gives the group's members that count (docs/security.md, "Membership by
//! identity") `spec.members.role` (default `edit`) and its `spec.admins` `admin`. Pure: the
//! Workspace, its owner group, and which Users may have access now.

use std::collections::BTreeMap;
use std::fmt;

use homestead_api::{DirectoryGroup, User, Workspace};
use kube::ResourceExt;

use crate::via::Via;

/// The role a personal workspace's owner and a team workspace's admins have.
pub const ADMIN_ROLE: &str = "admin";
/// The role of a team's members when `spec.members` names none.
pub const DEFAULT_MEMBER_ROLE: &str = "edit";

/// The owner of a home: a User or a DirectoryGroup, by `metadata.name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// A person (`User`).
    User(String),
    /// A team (`DirectoryGroup`).
    Group(String),
}

impl Owner {
    /// The owner `workspace` names, or `None` when it names neither (admission refuses that).
    pub fn of(workspace: &Workspace) -> Option<Self> {
        let owner = &workspace.spec.owner;
        match (&owner.user, &owner.group) {
            (Some(user), None) => Some(Self::User(user.clone())),
            (None, Some(group)) => Some(Self::Group(group.clone())),
            _ => None,
        }
    }

    /// The owner's `metadata.name`.
    pub fn name(&self) -> &str {
        match self {
            Self::User(name) | Self::Group(name) => name,
        }
    }
}

impl fmt::Display for Owner {
    /// `user <name>` or `group <name>`, for people.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::User(name) => write!(f, "user {name}"),
            Self::Group(name) => write!(f, "group {name}"),
        }
    }
}

/// One person's access to a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The User (`metadata.name`).
    pub user: String,
    /// Its `spec.identity.username`, the RoleBinding's subject.
    pub username: String,
    /// The ClusterRole.
    pub role: String,
    /// The way in.
    pub via: Via,
}

/// The role of a team workspace's members: `spec.members.role`, else `edit`.
pub fn member_role(workspace: &Workspace) -> &str {
    workspace
        .spec
        .members
        .as_ref()
        .map_or(DEFAULT_MEMBER_ROLE, |m| m.role.as_str())
}

/// How the User named `user` reaches `workspace`, and with which role: as its owner
/// (`admin`), one of its admins (`admin`), or a member of its owner group, which is among
/// `groups` (the DirectoryGroups that count `user`); `None` when none of these. The highest
/// first: an admin who is a member too reaches it as admin.
pub fn way_in(
    workspace: &Workspace,
    user: &str,
    groups: &[&DirectoryGroup],
) -> Option<(String, Via)> {
    let name = workspace.name_any();
    match Owner::of(workspace)? {
        Owner::User(owner) => {
            (owner == user).then(|| (ADMIN_ROLE.to_owned(), Via::Workspace(name)))
        }
        Owner::Group(group) => {
            let admin = workspace.spec.admins.iter().any(|a| a == user);
            let member = groups.iter().any(|g| g.name_any() == group);
            let role = if admin {
                ADMIN_ROLE
            } else {
                member_role(workspace)
            };
            (admin || member).then(|| {
                let via = Via::Team {
                    group,
                    workspace: name,
                    admin,
                };
                (role.to_owned(), via)
            })
        }
    }
}

/// Who `workspace` lets in, sorted by User: for a personal workspace its owner with `admin`;
/// for a team's, the members of `group` (its owner DirectoryGroup, `None` when gone: then
/// nobody) that count with [`member_role`], and its admins with `admin` (an admin who is a
/// member too is let in once, as admin). Only the Users `live` returns are let in: `live(name)`
/// is the User named `name` when it may have access now (it exists and is not suspended,
/// expired, offboarding or a duplicate of another's identity).
pub fn grants<'u>(
    workspace: &Workspace,
    group: Option<&DirectoryGroup>,
    live: impl Fn(&str) -> Option<&'u User>,
) -> Vec<Grant> {
    let name = workspace.name_any();
    let mut out: BTreeMap<String, Grant> = BTreeMap::new();
    let mut let_in = |user: &User, role: &str, via: Via| {
        out.insert(
            user.name_any(),
            Grant {
                user: user.name_any(),
                username: user.spec.identity.username.clone(),
                role: role.to_owned(),
                via,
            },
        );
    };
    match Owner::of(workspace) {
        Some(Owner::User(owner)) => {
            if let Some(user) = live(&owner) {
                let_in(user, ADMIN_ROLE, Via::Workspace(name));
            }
        }
        Some(Owner::Group(owner)) => {
            let Some(group) = group.filter(|g| g.name_any() == owner) else {
                return Vec::new();
            };
            let role = member_role(workspace);
            for member in &group.spec.members {
                if let Some(user) = live(member).filter(|u| group.counts_member(u)) {
                    let via = Via::Team {
                        group: owner.clone(),
                        workspace: name.clone(),
                        admin: false,
                    };
                    let_in(user, role, via);
                }
            }
            for admin in &workspace.spec.admins {
                if let Some(user) = live(admin) {
                    let via = Via::Team {
                        group: owner.clone(),
                        workspace: name.clone(),
                        admin: true,
                    };
                    let_in(user, ADMIN_ROLE, via);
                }
            }
        }
        None => {}
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::{Members, WorkspaceOwner, WorkspaceSpec};

    fn workspace(owner: WorkspaceOwner, admins: &[&str], role: Option<&str>) -> Workspace {
        Workspace::new(
            "ml-platform",
            WorkspaceSpec {
                owner,
                members: role.map(|r| Members { role: r.into() }),
                admins: admins.iter().map(|a| (*a).to_owned()).collect(),
                profile: None,
                namespace: None,
                reason: "ML platform team".into(),
                deletion_policy: homestead_api::DeletionPolicy::Retain,
            },
        )
    }

    fn team(group: &str) -> WorkspaceOwner {
        WorkspaceOwner {
            user: None,
            group: Some(group.into()),
        }
    }

    fn seen(grants: &[Grant]) -> Vec<(String, String, String)> {
        grants
            .iter()
            .map(|g| (g.user.clone(), g.role.clone(), g.via.describe()))
            .collect()
    }

    #[test]
    fn a_team_workspace_lets_in_its_members_that_count_and_its_admins() {
        let users = ["alice", "bob", "carol"].map(|n| User::test(n).with_username(n));
        let live = |name: &str| users.iter().find(|u| u.name_any() == name);
        let ml = DirectoryGroup::test("ml-team", "ML").with_members(&["bob", "carol", "gone"]);
        let ws = workspace(team("ml-team"), &["alice", "bob"], Some("view"));
        assert_eq!(
            seen(&grants(&ws, Some(&ml), live)),
            [
                (
                    "alice".into(),
                    "admin".into(),
                    "team ml-team (admin)".into()
                ),
                ("bob".into(), "admin".into(), "team ml-team (admin)".into()),
                ("carol".into(), "view".into(), "team ml-team".into()),
            ]
        );
        // Without its group, nobody; a member who is not live, nothing.
        assert!(grants(&ws, None, live).is_empty());
        let only_alice = |name: &str| live(name).filter(|u| u.name_any() == "alice");
        let left = grants(&ws, Some(&ml), only_alice);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].user, "alice");
    }

    #[test]
    fn a_personal_workspace_gives_its_owner_admin_and_nobody_else() {
        let alice = User::test("alice").with_username("alice@example.com");
        let owner = WorkspaceOwner {
            user: Some("alice".into()),
            group: None,
        };
        let ws = workspace(owner, &[], None);
        let granted = grants(&ws, None, |n| (n == "alice").then_some(&alice));
        assert_eq!(
            seen(&granted),
            [(
                "alice".into(),
                "admin".into(),
                "workspace ml-platform".into()
            )]
        );
        assert_eq!(granted[0].username, "alice@example.com");
        assert!(grants(&ws, None, |_| None).is_empty(), "a suspended owner");
        assert_eq!(member_role(&workspace(team("t"), &["a"], None)), "edit");
    }
}
