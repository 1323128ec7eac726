//! Refusals: what Homestead will not provision and why, decided before anything is written.
//! Also the Namespace name a User gets. Pure functions, no client.

use homestead_api::{
    ANNOTATION_VALUE_MAX_LEN, User, is_dns1123_label, is_label_value, is_qualified_name,
    is_quota_resource_name,
};
use kube::ResourceExt;

use homestead_api::{LABEL_ADOPT_FOR, Reason, RefusalKind};

use crate::plan::config::Config;
use crate::plan::quantity::nano_value;

/// Why Homestead refuses to provision a User, with the details its message names. Each is a
/// [`RefusalKind`] ([`Refusal::kind`]): the `Ready=False` reason and that of the Warning Event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The Namespace name is reserved: `default`, `kube-*`, the operator's own namespace, or one
    /// listed with `--reserved-namespace`.
    ReservedNamespace(String),
    /// The Namespace name (given or derived) is not a DNS-1123 label.
    InvalidNamespaceName(String),
    /// `spec.namespace.name` matches none of the platform's allowed patterns
    /// (`--allowed-namespace`).
    NamespaceNotAllowed(String),
    /// `spec.role` is not in the operator's allow-list.
    RoleNotAllowed(String),
    /// A subject name starts with `system:` (normally refused at admission already).
    ForbiddenSubject(String),
    /// `spec.namespace` sets a reserved label or annotation key (normally refused at admission
    /// already; checked again in case the CRD in the cluster lacks the rule).
    ReservedKey(String),
    /// The Namespace exists and does not belong to this User.
    NamespaceConflict(String),
    /// `spec.quota.hard` names an invalid resource or a value that is not a non-negative
    /// quantity (normally refused at admission already).
    InvalidQuota(String),
    /// A label or annotation in `spec.namespace` is not what the API server accepts (normally
    /// refused at admission already).
    InvalidMetadata(String),
    /// The Profile named by `spec.profile` (or the operator's `--default-profile`) does not
    /// exist.
    ProfileNotFound(String),
    /// Another live User, older than this one, names the same `spec.identity.username`
    /// (compared case-insensitively): the one named here. One person, one User.
    DuplicateIdentity(String),
    /// The User sets `field` differently from its Profile `profile`, whose `userOverrides` does
    /// not allow that.
    OverrideNotAllowed {
        /// The Profile's name.
        profile: String,
        /// The User field, as in `userOverrides` (`role`, `quota`, `namespaceMetadata`).
        field: &'static str,
    },
}

impl Refusal {
    /// The kind of this refusal, without its details.
    pub fn kind(&self) -> RefusalKind {
        match self {
            Self::ReservedNamespace(_) => RefusalKind::ReservedNamespace,
            Self::InvalidNamespaceName(_) => RefusalKind::InvalidNamespaceName,
            Self::NamespaceNotAllowed(_) => RefusalKind::NamespaceNotAllowed,
            Self::RoleNotAllowed(_) => RefusalKind::RoleNotAllowed,
            Self::ForbiddenSubject(_) => RefusalKind::ForbiddenSubject,
            Self::ReservedKey(_) => RefusalKind::ReservedKey,
            Self::NamespaceConflict(_) => RefusalKind::NamespaceConflict,
            Self::InvalidQuota(_) => RefusalKind::InvalidQuota,
            Self::InvalidMetadata(_) => RefusalKind::InvalidMetadata,
            Self::ProfileNotFound(_) => RefusalKind::ProfileNotFound,
            Self::DuplicateIdentity(_) => RefusalKind::DuplicateIdentity,
            Self::OverrideNotAllowed { .. } => RefusalKind::OverrideNotAllowed,
        }
    }

    /// The `Ready=False` condition reason, also the Warning Event's reason.
    pub fn reason(&self) -> Reason {
        Reason::Refused(self.kind())
    }

    /// A human-readable message that says what is wrong and what to do.
    pub fn message(&self, config: &Config) -> String {
        match self {
            Self::ReservedNamespace(ns) => format!(
                "namespace {ns:?} is reserved (default, kube-*, the operator's namespace, or --reserved-namespace); set spec.namespace.name to another name"
            ),
            Self::InvalidNamespaceName(ns) => format!(
                "namespace name {ns:?} is not a valid DNS-1123 label (at most 63 lower-case letters, digits and '-'); set spec.namespace.name explicitly"
            ),
            Self::NamespaceNotAllowed(ns) => {
                let patterns: Vec<&str> = config
                    .allowed_namespaces
                    .iter()
                    .map(glob::Pattern::as_str)
                    .collect();
                format!(
                    "namespace name {ns:?} is not allowed: spec.namespace.name must match one of the platform's patterns [{}] (operator flag --allowed-namespace)",
                    patterns.join(", ")
                )
            }
            Self::RoleNotAllowed(role) => {
                let allowed: Vec<&str> = config.allowed_roles.iter().map(String::as_str).collect();
                format!(
                    "role {role:?} is not in the operator's allow-list [{}]",
                    allowed.join(", ")
                )
            }
            Self::ForbiddenSubject(name) => format!(
                "subject {name:?} is refused: names starting with 'system:' belong to Kubernetes"
            ),
            Self::ReservedKey(key) => format!(
                "spec.namespace may not set {key:?}: keys under homestead.dev/, kubernetes.io/, k8s.io/ (and their subdomains) and those reserved by the platform (--reserved-key) are refused"
            ),
            Self::InvalidQuota(what) => format!(
                "spec.quota.hard is invalid: {what}; keys must be resource names such as requests.cpu, values non-negative quantities such as 500m or 8Gi"
            ),
            Self::InvalidMetadata(what) => format!(
                "spec.namespace is invalid: {what}; label and annotation keys must be qualified names, label values at most 63 letters, digits, '-', '_' or '.', annotation values at most {ANNOTATION_VALUE_MAX_LEN} characters"
            ),
            Self::ProfileNotFound(profile) => format!(
                "Profile {profile:?} does not exist; nothing was changed in the namespace. Create the Profile or name another in spec.profile"
            ),
            Self::OverrideNotAllowed { profile, field } => format!(
                "Profile {profile:?} does not let Users override {field:?} (its spec.userOverrides); remove the User's own value or ask the platform team to allow it"
            ),
            Self::DuplicateIdentity(holder) => format!(
                "User {holder:?} already has this identity (spec.identity.username, compared case-insensitively): one person has one User, so this one gets no access; its suspension, expiry and offboarding would not be the person's. Delete this User or change its identity"
            ),
            Self::NamespaceConflict(ns) => format!(
                "namespace {ns:?} already exists and does not belong to this User; Homestead never takes over a namespace it did not create for this User. To hand it over, someone allowed to update Namespaces labels it {LABEL_ADOPT_FOR}=<this User's name> (docs/adoption.md)"
            ),
        }
    }
}

/// The Namespace name for `user`: `spec.namespace.name` if set; otherwise the name recorded in
/// `status.namespace` when `provisioned` says that Namespace is this User's (so changing the
/// operator's prefix never moves anyone's namespace); otherwise `<prefix><metadata.name>`.
pub fn namespace_name(user: &User, config: &Config, provisioned: impl Fn(&str) -> bool) -> String {
    if let Some(name) = user.spec.namespace.as_ref().and_then(|n| n.name.clone()) {
        return name;
    }
    if let Some(name) = user.status.as_ref().and_then(|s| s.namespace.as_deref())
        && provisioned(name)
    {
        return name.to_owned();
    }
    format!("{}{}", config.namespace_prefix, user.name_any())
}

/// Checks the parts of `user` that need no API call: the namespace name (valid, not reserved,
/// and if given explicitly, allowed by the platform's patterns), the role (allow-listed, never `cluster-admin`), the subjects (no `system:`), the
/// extra label and annotation keys (none reserved).
///
/// # Errors
/// The first [`Refusal`] found, in that order.
pub fn validate(user: &User, namespace: &str, config: &Config) -> Result<(), Refusal> {
    if !is_dns1123_label(namespace) {
        return Err(Refusal::InvalidNamespaceName(namespace.to_owned()));
    }
    if config.is_reserved(namespace) {
        return Err(Refusal::ReservedNamespace(namespace.to_owned()));
    }
    let given = user.spec.namespace.as_ref().and_then(|n| n.name.as_deref());
    if given == Some(namespace) && !config.allows_namespace(namespace) {
        return Err(Refusal::NamespaceNotAllowed(namespace.to_owned()));
    }
    let role = user.spec.role();
    if !config.allowed_roles.contains(role) || role == "cluster-admin" {
        return Err(Refusal::RoleNotAllowed(role.to_owned()));
    }
    let identity = &user.spec.identity;
    if let Some(bad) = std::iter::once(&identity.username)
        .chain(&identity.groups)
        .find(|s| s.starts_with("system:"))
    {
        return Err(Refusal::ForbiddenSubject(bad.clone()));
    }
    if let Some(extra) = &user.spec.namespace
        && let Some(key) = extra
            .labels
            .keys()
            .chain(extra.annotations.keys())
            .find(|k| config.is_reserved_key(k))
    {
        return Err(Refusal::ReservedKey(key.clone()));
    }
    check_metadata(user)?;
    check_quota(user)
}

/// Label and annotation keys and values the API server would refuse.
fn check_metadata(user: &User) -> Result<(), Refusal> {
    let Some(extra) = &user.spec.namespace else {
        return Ok(());
    };
    let invalid = |what: String| Err(Refusal::InvalidMetadata(what));
    for (key, value) in &extra.labels {
        if !is_qualified_name(key) {
            return invalid(format!("label key {key:?} is not a qualified name"));
        }
        if !is_label_value(value) {
            return invalid(format!("label {key:?} has the invalid value {value:?}"));
        }
    }
    for (key, value) in &extra.annotations {
        if !is_qualified_name(key) {
            return invalid(format!("annotation key {key:?} is not a qualified name"));
        }
        if value.chars().count() > ANNOTATION_VALUE_MAX_LEN {
            return invalid(format!(
                "annotation {key:?} is longer than {ANNOTATION_VALUE_MAX_LEN} characters"
            ));
        }
    }
    Ok(())
}

/// Quota resource names and values the API server would refuse.
fn check_quota(user: &User) -> Result<(), Refusal> {
    let Some(quota) = &user.spec.quota else {
        return Ok(());
    };
    for (resource, value) in &quota.hard {
        if !is_quota_resource_name(resource) {
            return Err(Refusal::InvalidQuota(format!(
                "{resource:?} is not a quota resource name"
            )));
        }
        match nano_value(&value.0) {
            Some(nano) if nano >= 0 => {}
            _ => {
                return Err(Refusal::InvalidQuota(format!(
                    "{resource}: {:?} is not a non-negative quantity",
                    value.0
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use homestead_api::Failure;
    use homestead_api::User;
    use homestead_api::UserStatus;
    use serde_json::json;
    use strum::VariantArray;

    #[test]
    fn every_refusal_is_the_reason_of_its_name_and_only_those_are_refusals() {
        for kind in RefusalKind::VARIANTS {
            let name: &str = kind.into();
            let reason: Reason = name.parse().expect("a Reason of the refusal's name");
            assert_eq!(reason, Reason::Refused(*kind));
            assert!(reason.is_refusal(), "{name}");
            assert!(!reason.is_ready(), "{name}");
        }
        let refusal = Refusal::OverrideNotAllowed {
            profile: "p".into(),
            field: "role",
        };
        assert_eq!(
            refusal.reason(),
            Reason::Refused(RefusalKind::OverrideNotAllowed)
        );
        for reason in [
            Reason::Provisioned,
            Reason::Suspended,
            Reason::Expired,
            Reason::Terminating,
            Reason::NamespaceTerminating,
            Reason::Failed(Failure::Forbidden),
            Reason::Failed(Failure::ApplyFailed),
        ] {
            assert!(!reason.is_refusal(), "{reason}");
            assert!(!Reason::refusal(reason.as_str()), "{reason}");
        }
        assert!(Reason::refusal("RoleNotAllowed"));
        // A reason of another Homestead version counts as a refusal.
        assert!(Reason::refusal("SomethingNew"));
        assert_eq!(
            Reason::all().count(),
            RefusalKind::VARIANTS.len() + 10,
            "a new Reason is either a refusal or one of the ten that are not"
        );
    }

    #[test]
    fn namespace_name_prefers_spec_then_provisioned_status_then_prefix() {
        let config = Config::default();
        let mut u = User::test("alice");
        assert_eq!(namespace_name(&u, &config, |_| true), "user-alice");
        u.status = Some(UserStatus {
            namespace: Some("old-alice".into()),
            ..UserStatus::default()
        });
        assert_eq!(
            namespace_name(&u, &config, |n| n == "old-alice"),
            "old-alice"
        );
        assert_eq!(namespace_name(&u, &config, |_| false), "user-alice");
        let u = User::test("alice").with_spec(json!({ "namespace": { "name": "lab" } }));
        assert_eq!(namespace_name(&u, &config, |_| true), "lab");
    }

    #[test]
    fn explicit_names_must_match_the_platforms_patterns() {
        let mut config = Config::default();
        let lab = User::test("alice").with_spec(json!({ "namespace": { "name": "lab" } }));
        assert_eq!(
            validate(&lab, "lab", &config),
            Err(Refusal::NamespaceNotAllowed("lab".into()))
        );
        let own = User::test("alice").with_spec(json!({ "namespace": { "name": "user-lab" } }));
        assert_eq!(validate(&own, "user-lab", &config), Ok(()));
        config
            .allowed_namespaces
            .push(glob::Pattern::new("research-*").unwrap());
        let research =
            User::test("alice").with_spec(json!({ "namespace": { "name": "research-a" } }));
        assert_eq!(validate(&research, "research-a", &config), Ok(()));
        let message = Refusal::NamespaceNotAllowed("lab".into()).message(&config);
        assert!(message.contains("[user-*, research-*]"), "{message}");
        // A derived name is the platform's own choice: never refused by pattern.
        config.allowed_namespaces.clear();
        assert_eq!(
            validate(&User::test("alice"), "user-alice", &config),
            Ok(())
        );
    }

    #[test]
    fn validate_refuses_reserved_invalid_and_unlisted() {
        let config = Config {
            reserved_namespaces: ["payroll".to_owned()].into(),
            ..Config::default()
        };
        let u = User::test("alice");
        for ns in [
            "default",
            "kube-system",
            "kube-anything",
            "homestead-system",
            "payroll",
        ] {
            assert_eq!(
                validate(&u, ns, &config),
                Err(Refusal::ReservedNamespace(ns.into()))
            );
        }
        let long = format!("user-{}", "a".repeat(60));
        assert_eq!(
            validate(&u, &long, &config),
            Err(Refusal::InvalidNamespaceName(long.clone()))
        );
        assert_eq!(validate(&u, "user-alice", &config), Ok(()));
        let u = User::test("alice").with_spec(json!({ "role": "cluster-admin" }));
        assert!(matches!(
            validate(&u, "user-alice", &config),
            Err(Refusal::RoleNotAllowed(_))
        ));
        let config = Config {
            allowed_roles: ["cluster-admin".to_owned()].into(),
            ..Config::default()
        };
        assert!(matches!(
            validate(&u, "user-alice", &config),
            Err(Refusal::RoleNotAllowed(_))
        ));
    }

    #[test]
    fn validate_refuses_reserved_keys_the_schema_should_have_stopped() {
        let config = Config::default();
        let u = User::test("alice").with_spec(json!({ "namespace": { "labels": { "pod-security.kubernetes.io/enforce": "privileged" } } }));
        assert_eq!(
            validate(&u, "user-alice", &config),
            Err(Refusal::ReservedKey(
                "pod-security.kubernetes.io/enforce".into()
            ))
        );
        let u = User::test("alice").with_spec(
            json!({ "namespace": { "annotations": { "homestead.dev/user-uid": "x" } } }),
        );
        assert!(matches!(
            validate(&u, "user-alice", &config),
            Err(Refusal::ReservedKey(_))
        ));
        let mesh = User::test("alice")
            .with_spec(json!({ "namespace": { "labels": { "istio-injection": "enabled" } } }));
        let unreserved = Config {
            reserved_keys: Vec::new(),
            ..Config::default()
        };
        assert_eq!(validate(&mesh, "user-alice", &unreserved), Ok(()));
        // The default reserves the meshes' keys (--reserved-key).
        assert_eq!(
            validate(&mesh, "user-alice", &config),
            Err(Refusal::ReservedKey("istio-injection".into()))
        );
    }

    #[test]
    fn invalid_quota_and_metadata_are_refused_before_anything_is_written() {
        let config = Config::default();
        for (spec, want) in [
            (
                json!({ "quota": { "hard": { "pods": "-5" } } }),
                Reason::Refused(RefusalKind::InvalidQuota),
            ),
            (
                json!({ "quota": { "hard": { "requests.cpu": "lots" } } }),
                Reason::Refused(RefusalKind::InvalidQuota),
            ),
            (
                json!({ "quota": { "hard": { "not a resource": "1" } } }),
                Reason::Refused(RefusalKind::InvalidQuota),
            ),
            (
                json!({ "namespace": { "labels": { "team": "has spaces and !!" } } }),
                Reason::Refused(RefusalKind::InvalidMetadata),
            ),
            (
                json!({ "namespace": { "labels": { "a/b/c": "x" } } }),
                Reason::Refused(RefusalKind::InvalidMetadata),
            ),
            (
                json!({ "namespace": { "annotations": { "note": "x".repeat(4097) } } }),
                Reason::Refused(RefusalKind::InvalidMetadata),
            ),
        ] {
            let u = User::test("alice").with_spec(spec.clone());
            let refusal = validate(&u, "user-alice", &config).expect_err(&spec.to_string());
            assert_eq!(refusal.reason(), want, "{spec}");
        }
        let fine = User::test("alice").with_spec(json!({ "quota": { "hard": { "requests.cpu": "0.1m", "count/deployments.apps": "3" } },
                    "namespace": { "labels": { "team": "a_b" }, "annotations": { "note": "x".repeat(4096) } } }));
        assert_eq!(validate(&fine, "user-alice", &config), Ok(()));
    }

    #[test]
    fn refusals_carry_their_reason() {
        let refusal = Refusal::NamespaceConflict("legacy".into());
        assert_eq!(
            refusal.reason(),
            Reason::Refused(RefusalKind::NamespaceConflict)
        );
        assert!(refusal.message(&Config::default()).contains("\"legacy\""));
        let roles = Refusal::RoleNotAllowed("monitoring".into()).message(&Config::default());
        assert!(roles.contains("[admin, edit, view]"), "{roles}");
    }
}
