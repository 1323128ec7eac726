//! Every watch the operator runs, declared once as data ([`WATCHES`]): the kind, which objects
//! it selects, where it keeps what it sees, and which reconciles a change wakes. The runtime
//! opens each watch with its entry's selector; readiness waits for exactly the entries that
//! keep a cache reconciles read ([`crate::state::Caches::synced`], docs/design.md, rule 29);
//! docs/development.md's table of watches is [`table`], checked by a test here. Which change
//! wakes what is wired in `runtime::watches`, beside the entry it wires.

use homestead_api::{
    LABEL_ADOPT_FOR, LABEL_MANAGED_BY, LABEL_RETAINED_FROM, LABEL_TOTAL_OWNER, MANAGED_BY,
};

/// Which objects a watch selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selects {
    /// Every object of the kind, cluster-wide.
    Every,
    /// The objects labelled as Homestead's (`app.kubernetes.io/managed-by=homestead`).
    Managed,
    /// The objects that carry this label (any value).
    Labelled(&'static str),
}

impl Selects {
    /// The label selector, if any (`None`: every object).
    pub fn label_selector(self) -> Option<String> {
        match self {
            Self::Every => None,
            Self::Managed => Some(format!("{LABEL_MANAGED_BY}={MANAGED_BY}")),
            Self::Labelled(label) => Some(label.to_owned()),
        }
    }
}

/// The caches reconciles read, one per watch that keeps one. Readiness waits for every one of
/// them ([`crate::state::Caches::wait_for`] matches on this without a wildcard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::EnumIter, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Cache {
    /// Homestead's Namespaces, compact.
    Namespaces,
    /// Every RoleBinding, compact.
    RoleBindings,
    /// Homestead's ResourceQuotas.
    Quotas,
    /// Homestead's LimitRanges.
    LimitRanges,
    /// Homestead's NetworkPolicies.
    NetworkPolicies,
    /// Every Profile.
    Profiles,
    /// Every DirectoryGroup.
    Groups,
    /// Every User, and the indexes kept from its events (identities, Profile to Users).
    Users,
    /// Every Share, and its index (grantees, namespaces).
    Shares,
    /// Every Workspace.
    Workspaces,
}

/// Where a watch keeps what it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeps {
    /// A cache reconciles read.
    Cache(Cache),
    /// Its Controller's own cache, which that Controller waits for and nothing else reads.
    Controller,
    /// Nothing: each change only wakes a reconcile.
    Nothing,
}

/// A reconcile a change seen by a watch may wake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Wakes {
    /// The User the object belongs to (or names).
    User,
    /// The other Users naming an identity a User took or gave up (the next holder).
    IdentityHolders,
    /// The Users of a Profile, or a group's members who joined or left and are Users.
    Users,
    /// The Shares the object concerns (its own, or those naming a grantee or a home).
    Shares,
    /// Every Share (a limit may have changed).
    AllShares,
    /// The retained Namespace a RoleBinding appeared in.
    Retained,
    /// The status of a Profile (the User's, or the Profile's own).
    ProfileStatus,
    /// The status of the DirectoryGroup itself.
    GroupStatus,
    /// The status of every DirectoryGroup.
    GroupStatuses,
    /// The Workspaces the object concerns (its own, its owner's, or those a person or a group
    /// has a way into).
    Workspaces,
    /// Every Workspace (their Profiles may have changed).
    AllWorkspaces,
    /// The slice itself, to move its owner's slices (docs/quota.md).
    Slice,
    /// Another slice of the same owner, when a slice is deleted: its owner's `status.total`
    /// stops listing the home.
    SiblingSlice,
}

/// One watch the operator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    /// The kind watched.
    pub kind: &'static str,
    /// Which objects of it.
    pub selects: Selects,
    /// Where what it sees is kept.
    pub keeps: Keeps,
    /// What a change may wake (the User's own reconcile is not woken by an echo of
    /// Homestead's own write; see `runtime::watches`).
    pub wakes: &'static [Wakes],
}

/// Users: the User Controller's own watch.
pub const USERS: Watch = Watch {
    kind: "User",
    selects: Selects::Every,
    keeps: Keeps::Cache(Cache::Users),
    wakes: &[
        Wakes::User,
        Wakes::IdentityHolders,
        Wakes::Shares,
        Wakes::ProfileStatus,
        Wakes::Workspaces,
    ],
};
/// Homestead's Namespaces.
pub const NAMESPACES: Watch = Watch {
    kind: "Namespace",
    selects: Selects::Managed,
    keeps: Keeps::Cache(Cache::Namespaces),
    wakes: &[Wakes::User, Wakes::Workspaces],
};
/// Every RoleBinding: revoking access removes the ones a person made too.
pub const ROLE_BINDINGS: Watch = Watch {
    kind: "RoleBinding",
    selects: Selects::Every,
    keeps: Keeps::Cache(Cache::RoleBindings),
    wakes: &[
        Wakes::User,
        Wakes::Shares,
        Wakes::Retained,
        Wakes::Workspaces,
    ],
};
/// Namespaces the platform hands to a User (`homestead.dev/adopt-for`), by metadata alone.
pub const ADOPTIONS: Watch = Watch {
    kind: "Namespace",
    selects: Selects::Labelled(LABEL_ADOPT_FOR),
    keeps: Keeps::Nothing,
    wakes: &[Wakes::User],
};
/// Retained Namespaces (`homestead.dev/retained-from`): their own Controller's watch. Its
/// cache is that Controller's, not one readiness waits for: no reconcile of a User reads it
/// (the RoleBinding watch looks a namespace up there only to wake that Controller), and its
/// watch retries with kube-runtime's default backoff (up to 30 s), which would hold every
/// reconcile back after an API server restart.
pub const RETAINED: Watch = Watch {
    kind: "Namespace",
    selects: Selects::Labelled(LABEL_RETAINED_FROM),
    keeps: Keeps::Controller,
    wakes: &[Wakes::Retained],
};
/// Homestead's ResourceQuotas.
pub const QUOTAS: Watch = Watch {
    kind: "ResourceQuota",
    selects: Selects::Managed,
    keeps: Keeps::Cache(Cache::Quotas),
    wakes: &[Wakes::User, Wakes::Workspaces],
};
/// Homestead's LimitRanges, kept as [`super::cache::CachedGuard`]s: a change wakes the User or
/// Workspace whose Namespace it is in (the Namespace cache's labels, which tenants cannot write).
pub const LIMIT_RANGES: Watch = Watch {
    kind: "LimitRange",
    selects: Selects::Managed,
    keeps: Keeps::Cache(Cache::LimitRanges),
    wakes: &[Wakes::User, Wakes::Workspaces],
};
/// Homestead's NetworkPolicies, kept and mapped as [`LIMIT_RANGES`] are.
pub const NETWORK_POLICIES: Watch = Watch {
    kind: "NetworkPolicy",
    selects: Selects::Managed,
    keeps: Keeps::Cache(Cache::NetworkPolicies),
    wakes: &[Wakes::User, Wakes::Workspaces],
};
/// Every Profile.
pub const PROFILES: Watch = Watch {
    kind: "Profile",
    selects: Selects::Every,
    keeps: Keeps::Cache(Cache::Profiles),
    wakes: &[
        Wakes::ProfileStatus,
        Wakes::Users,
        Wakes::AllShares,
        Wakes::GroupStatuses,
        Wakes::AllWorkspaces,
    ],
};
/// Every DirectoryGroup.
pub const GROUPS: Watch = Watch {
    kind: "DirectoryGroup",
    selects: Selects::Every,
    keeps: Keeps::Cache(Cache::Groups),
    wakes: &[
        Wakes::GroupStatus,
        Wakes::Users,
        Wakes::Shares,
        Wakes::Workspaces,
    ],
};
/// Every Share: the Share Controller's own watch.
pub const SHARES: Watch = Watch {
    kind: "Share",
    selects: Selects::Every,
    keeps: Keeps::Cache(Cache::Shares),
    wakes: &[Wakes::Shares],
};

/// Every Workspace: the Workspace Controller's own watch.
pub const WORKSPACES: Watch = Watch {
    kind: "Workspace",
    selects: Selects::Every,
    keeps: Keeps::Cache(Cache::Workspaces),
    wakes: &[Wakes::Workspaces, Wakes::Shares],
};

/// Every Workspace again, keeping nothing: a person's self-service workspace that comes or goes
/// wakes their others (the youngest beyond `max` may fit now, or no longer).
pub const WORKSPACE_SIBLINGS: Watch = Watch {
    kind: "Workspace",
    selects: Selects::Every,
    keeps: Keeps::Nothing,
    wakes: &[Wakes::Workspaces],
};

/// The slices of total quotas (`homestead.dev/total-owner`), whole, usage included: their own
/// Controller's watch, which moves room between an owner's homes as their use grows.
pub const TOTALS: Watch = Watch {
    kind: "ResourceQuota",
    selects: Selects::Labelled(LABEL_TOTAL_OWNER),
    keeps: Keeps::Controller,
    wakes: &[Wakes::Slice, Wakes::SiblingSlice],
};

/// Every watch the operator runs, in the order docs/development.md lists them.
pub const WATCHES: [Watch; 14] = [
    USERS,
    NAMESPACES,
    ROLE_BINDINGS,
    ADOPTIONS,
    RETAINED,
    QUOTAS,
    LIMIT_RANGES,
    NETWORK_POLICIES,
    PROFILES,
    GROUPS,
    SHARES,
    WORKSPACES,
    WORKSPACE_SIBLINGS,
    TOTALS,
];

/// The caches readiness waits for: those of [`WATCHES`] (each once).
pub fn caches() -> Vec<Cache> {
    WATCHES
        .iter()
        .filter_map(|watch| match watch.keeps {
            Keeps::Cache(cache) => Some(cache),
            Keeps::Controller | Keeps::Nothing => None,
        })
        .collect()
}

/// [`WATCHES`] as the Markdown table docs/development.md shows: a row per watch with its kind,
/// selector, what it keeps and what it wakes (kebab-case names).
pub fn table() -> String {
    let mut out = String::from("| watch | selects | keeps | wakes |\n|---|---|---|---|\n");
    for watch in WATCHES {
        let selects = match watch.selects {
            Selects::Every => "every".to_owned(),
            Selects::Managed => "managed".to_owned(),
            Selects::Labelled(label) => format!("`{label}`"),
        };
        let keeps = match watch.keeps {
            Keeps::Cache(cache) => format!("`{}`", <&str>::from(cache)),
            Keeps::Controller => "its Controller's".to_owned(),
            Keeps::Nothing => "nothing".to_owned(),
        };
        let wakes: Vec<&str> = watch.wakes.iter().map(|w| <&str>::from(*w)).collect();
        out.push_str(&format!(
            "| {} | {selects} | {keeps} | {} |\n",
            watch.kind,
            wakes.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator as _;

    #[test]
    fn every_cache_is_kept_by_exactly_one_watch() {
        let kept = caches();
        for cache in Cache::iter() {
            let by = kept.iter().filter(|c| **c == cache).count();
            assert_eq!(by, 1, "{cache:?} is kept by {by} watches");
        }
    }

    #[test]
    fn the_development_guide_shows_every_watch() {
        let guide = include_str!("../../../../docs/development.md");
        assert!(
            guide.contains(&table()),
            "docs/development.md's table of watches is not WATCHES; it is:\n{}",
            table()
        );
    }

    #[test]
    fn selectors_are_label_selectors() {
        assert_eq!(Selects::Every.label_selector(), None);
        assert_eq!(
            NAMESPACES.selects.label_selector().as_deref(),
            Some("app.kubernetes.io/managed-by=homestead")
        );
        assert_eq!(
            RETAINED.selects.label_selector().as_deref(),
            Some("homestead.dev/retained-from")
        );
    }
}
