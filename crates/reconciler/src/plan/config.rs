//! The operator's [`Config`] (from its command-line flags) and the Pod Security levels every
//! managed Namespace carries. Plain data, read by every plan.

use std::collections::BTreeSet;

pub use homestead_api::PodSecurityLevel;

/// `--namespace-prefix`: derived Namespace names are `user-<User name>`.
pub const DEFAULT_NAMESPACE_PREFIX: &str = "user-";
/// Default of [`Config::workspace_prefix`].
pub const DEFAULT_WORKSPACE_PREFIX: &str = "ws-";
/// `--reserved-key`: the service meshes' keys, which would move a tenant's Pods in or out of a
/// mesh, beyond the keys Homestead always reserves.
pub const DEFAULT_RESERVED_KEYS: [&str; 3] = ["istio-injection", "istio.io/", "linkerd.io/"];
/// `--allowed-role`: Kubernetes' aggregated user-facing ClusterRoles.
pub const DEFAULT_ALLOWED_ROLES: [&str; 3] = ["admin", "edit", "view"];
/// `--operator-namespace` (`POD_NAMESPACE` in a Pod).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "homestead-system";
/// `--expiry-warning`: 14 days, in seconds as a [`Duration`](std::time::Duration).
pub const DEFAULT_EXPIRY_WARNING: std::time::Duration = std::time::Duration::from_secs(14 * 86_400);
/// `--pod-security-enforce|warn|audit`: enforce `baseline`, warn and audit `restricted`.
pub const DEFAULT_POD_SECURITY: PodSecurity = PodSecurity {
    enforce: PodSecurityLevel::Baseline,
    warn: PodSecurityLevel::Restricted,
    audit: PodSecurityLevel::Restricted,
};

/// The Pod Security admission levels every managed Namespace is labelled with (the API's
/// [`homestead_api::PodSecurityLevels`] with every level decided).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodSecurity {
    /// `pod-security.kubernetes.io/enforce`: Pods violating it are refused. Default `baseline`.
    pub enforce: PodSecurityLevel,
    /// `pod-security.kubernetes.io/warn`: violations warn the client. Default `restricted`.
    pub warn: PodSecurityLevel,
    /// `pod-security.kubernetes.io/audit`: violations are annotated in the audit log. Default
    /// `restricted`.
    pub audit: PodSecurityLevel,
}

impl Default for PodSecurity {
    fn default() -> Self {
        DEFAULT_POD_SECURITY
    }
}

/// The operator's configuration, from its command-line flags. [`Config::default`] is what the
/// flags default to (the `DEFAULT_*` constants; a test of the CLI checks they agree).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Prefix of derived Namespace names: `<prefix><User name>`. Default `user-`.
    pub namespace_prefix: String,
    /// Prefix of every Workspace's namespace: derived names are `<prefix><Workspace name>`, and a
    /// name given in `spec.namespace.name` must start with it (so no Workspace squats a
    /// person's home-to-be, and no User a team's). Default `ws-`.
    pub workspace_prefix: String,
    /// Shell-style patterns (`*`, `?`, `[...]`) a Namespace name given in
    /// `spec.namespace.name` must match one of. Default: `<prefix>*`.
    pub allowed_namespaces: Vec<glob::Pattern>,
    /// Extra label and annotation keys Users may not set (see
    /// [`homestead_api::key_matches`]): a `domain/` prefix with its subdomains, or an exact key.
    pub reserved_keys: Vec<String>,
    /// The Pod Security labels of every managed Namespace.
    pub pod_security: PodSecurity,
    /// ClusterRoles a User may ask for. `cluster-admin` is refused even if listed.
    pub allowed_roles: BTreeSet<String>,
    /// Namespaces never touched, beyond `default`, `kube-*` and the operator's own.
    pub reserved_namespaces: BTreeSet<String>,
    /// The namespace the operator runs in (reserved too).
    pub operator_namespace: String,
    /// The Profile of every User that names none (`--default-profile`); `None`: such Users get
    /// only what their spec says.
    pub default_profile: Option<String>,
    /// How long before a User's `validUntil` its `Expiring` condition turns `True` (with an
    /// Event). Default 14 days.
    pub expiry_warning: std::time::Duration,
    /// The sharing limits of people without a Profile, or whose Profile sets none
    /// (`--share-*` flags).
    pub sharing: SharingDefaults,
    /// Whether adopting an existing Namespace removes the RoleBindings made before it
    /// (`--revoke-adopted-role-bindings`); default `false`: kept, and reported.
    pub revoke_adopted_role_bindings: bool,
}

/// The limits of sharing a home for people whose Profile sets none (`--share-enabled`,
/// `--share-max-role`, `--share-max-duration`, `--share-groups`); a Profile's `spec.sharing`
/// overrides each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharingDefaults {
    /// Whether people may share their homes. Default `true`.
    pub enabled: bool,
    /// The highest ClusterRole a Share may grant. Default `edit`.
    pub max_role: String,
    /// The longest a Share may last from its creation or renewal. Default 90 days.
    pub max_duration: std::time::Duration,
    /// Whether DirectoryGroups may be grantees. Default `true`.
    pub groups: bool,
}

/// Default of [`SharingDefaults::max_role`].
pub const DEFAULT_SHARE_MAX_ROLE: &str = "edit";
/// Default of [`SharingDefaults::max_duration`]: 90 days.
pub const DEFAULT_SHARE_MAX_DURATION: std::time::Duration =
    std::time::Duration::from_secs(90 * 86_400);

impl Default for SharingDefaults {
    fn default() -> Self {
        Self {
            enabled: true,
            max_role: DEFAULT_SHARE_MAX_ROLE.to_owned(),
            max_duration: DEFAULT_SHARE_MAX_DURATION,
            groups: true,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            namespace_prefix: DEFAULT_NAMESPACE_PREFIX.to_owned(),
            workspace_prefix: DEFAULT_WORKSPACE_PREFIX.to_owned(),
            allowed_namespaces: vec![
                glob::Pattern::new(&format!("{DEFAULT_NAMESPACE_PREFIX}*"))
                    .expect("a valid pattern"),
            ],
            reserved_keys: DEFAULT_RESERVED_KEYS.map(String::from).into(),
            pod_security: DEFAULT_POD_SECURITY,
            allowed_roles: DEFAULT_ALLOWED_ROLES.map(String::from).into(),
            reserved_namespaces: BTreeSet::new(),
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.to_owned(),
            default_profile: None,
            expiry_warning: DEFAULT_EXPIRY_WARNING,
            sharing: SharingDefaults::default(),
            revoke_adopted_role_bindings: false,
        }
    }
}

impl Config {
    /// Whether Homestead must never touch `namespace`: `default`, any `kube-*`, the operator's
    /// own namespace, or one listed in [`Config::reserved_namespaces`].
    pub fn is_reserved(&self, namespace: &str) -> bool {
        namespace == "default"
            || namespace.starts_with("kube-")
            || namespace == self.operator_namespace
            || self.reserved_namespaces.contains(namespace)
    }

    /// Whether a Namespace name given in `spec.namespace.name` is one the platform allows
    /// (matches one of [`Config::allowed_namespaces`]).
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.allowed_namespaces.iter().any(|p| p.matches(namespace))
    }

    /// Whether a label or annotation key is reserved, by Homestead itself
    /// ([`homestead_api::is_reserved_key`]) or by [`Config::reserved_keys`].
    pub fn is_reserved_key(&self, key: &str) -> bool {
        homestead_api::is_reserved_key(key)
            || self
                .reserved_keys
                .iter()
                .any(|p| homestead_api::key_matches(key, p))
    }
}

/// Parses a duration written as a whole number and a unit: `s`, `m`, `h` or `d` (`14d`, `36h`),
/// as the operator's flags and a Profile's `sharing.maxDuration` write it.
///
/// # Errors
/// A message naming the expected form when `text` is not one.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let split = text.len().saturating_sub(1);
    let (number, unit) = text.split_at(split);
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => 0,
    };
    match number.parse::<u64>() {
        Ok(n) if seconds > 0 => Ok(std::time::Duration::from_secs(n.saturating_mul(seconds))),
        _ => Err(format!(
            "{text:?} is not a duration: a whole number and a unit s, m, h or d (for example 14d)"
        )),
    }
}
