//! How a person reaches a namespace through Homestead ([`Via`]) and what kind of source that is
//! ([`Source`]): one vocabulary for `kubectl get homes` and `homestead access`.

use serde::{Deserialize, Serialize};

/// Where an access comes from, as `homestead access` names it in its `source` column: the kind
/// of a [`Via`], or `unmanaged` for a RoleBinding no Homestead rule accounts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The person's own home.
    Home,
    /// A Share, to the person by name.
    Share,
    /// A Share, to a DirectoryGroup that counts the person.
    Group,
    /// A workspace of the person's own (they own it).
    Workspace,
    /// A team's workspace: the person is a member of its owner group that counts, or an admin.
    Team,
    /// A RoleBinding no Homestead rule accounts for.
    Unmanaged,
    /// Nobody: a namespace retained from a person who left (or a workspace deleted with
    /// `Retain`), listed so that no namespace Homestead made goes unaccounted for.
    Retained,
}

/// How the caller has a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// It is their own home.
    OwnHome,
    /// A Share (by name) names their User.
    Share(String),
    /// A Share names a DirectoryGroup that counts them as a member.
    Group {
        /// The DirectoryGroup's name.
        group: String,
        /// The Share's name.
        share: String,
    },
    /// A workspace (by name) the caller owns.
    Workspace(String),
    /// A team's workspace: as a member of its owner group that counts them, or as an admin.
    Team {
        /// The owner DirectoryGroup's name.
        group: String,
        /// The Workspace's name.
        workspace: String,
        /// Whether the caller is one of its admins (else a member).
        admin: bool,
    },
}

impl Via {
    /// The kind of this way in.
    pub fn source(&self) -> Source {
        match self {
            Self::OwnHome => Source::Home,
            Self::Share(_) => Source::Share,
            Self::Group { .. } => Source::Group,
            Self::Workspace(_) => Source::Workspace,
            Self::Team { .. } => Source::Team,
        }
    }

    /// The way in, for people: `own home`, `share <name>`, `group <group> (share <name>)`.
    pub fn describe(&self) -> String {
        match self {
            Self::OwnHome => "own home".to_owned(),
            Self::Share(share) => format!("share {share}"),
            Self::Group { group, share } => format!("group {group} (share {share})"),
            Self::Workspace(workspace) => format!("workspace {workspace}"),
            Self::Team {
                group, admin: true, ..
            } => format!("team {group} (admin)"),
            Self::Team { group, .. } => format!("team {group}"),
        }
    }
}
