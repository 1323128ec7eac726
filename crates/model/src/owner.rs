//! Who a home belongs to (docs/design.md, rule 25): a person's own home and their personal
//! workspaces belong to a User; a team's workspaces to a DirectoryGroup. Access, limits and
//! quota follow the owner.

use std::fmt;

/// The owner of a home: a User or a DirectoryGroup, by `metadata.name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Owner {
    /// A person (`User`).
    User(String),
    /// A team (`DirectoryGroup`): its members that count
    /// ([`homestead_api::DirectoryGroup::counts_member`]).
    Group(String),
}

impl Owner {
    /// The owner's `metadata.name`.
    pub fn name(&self) -> &str {
        match self {
            Self::User(name) | Self::Group(name) => name,
        }
    }

    /// The owner's kind, as `kubectl` names it: `User` or `DirectoryGroup`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::User(_) => "User",
            Self::Group(_) => "DirectoryGroup",
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
