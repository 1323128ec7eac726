//! Who talks to the local cluster and how they prove it: the identities (admin, the operator's
//! and the SCIM service's ServiceAccounts, HR, tenants), their static bearer tokens, the token
//! file the API server reads, kubeconfigs, and the SCIM service's own CA, certificate and token.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kube::config::{AuthInfo, Cluster, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};

use crate::certificates::certificate_authority;
use crate::error::{Error, Result, io};

/// The admin identity: user `homestead-admin` in group `system:masters` (all permissions).
pub const ADMIN: &str = "homestead-admin";

/// The operator's identity, the user name of ServiceAccount `homestead` in `homestead-system`,
/// with the ServiceAccount groups, so the RBAC objects in `rbac/` apply to it unchanged.
pub const OPERATOR: &str = "system:serviceaccount:homestead-system:homestead";

/// The SCIM service's identity, the user name of ServiceAccount `homestead-scim` in
/// `homestead-system`, with the ServiceAccount groups, so `manifests/scim/` applies to it.
pub const SCIM: &str = "system:serviceaccount:homestead-system:homestead-scim";

/// The homes API's identity, the user name of ServiceAccount `homestead-homes-api` in
/// `homestead-system`, with the ServiceAccount groups, so `manifests/homes-api/` applies to it.
pub const HOMES_API: &str = "system:serviceaccount:homestead-system:homestead-homes-api";

/// Field manager of the writes the test environment itself makes (CRD installation).
pub(crate) const FIELD_MANAGER: &str = "homestead-testenv";

/// A user the API server authenticates by static bearer token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The user name RBAC sees (`kubectl auth can-i --as` uses the same).
    pub name: String,
    /// The groups the user belongs to.
    pub groups: Vec<String>,
}

impl Identity {
    /// A user with the given name and no groups.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            groups: Vec::new(),
        }
    }

    /// The same user, also a member of `group`.
    #[must_use]
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.groups.push(group.into());
        self
    }
}

/// A random-enough hex string for tokens and directory names (not for cryptography).
pub(crate) fn random_hex() -> String {
    use std::hash::{BuildHasher, RandomState};
    let a = RandomState::new().hash_one(SystemTime::now());
    let b = RandomState::new().hash_one(std::process::id());
    format!("{a:016x}{b:016x}")
}

/// Files for serving SCIM over TLS on the loopback interface, from [`scim_credentials`].
#[derive(Clone, Debug)]
pub struct ScimCredentials {
    /// The CA certificate (PEM) a client trusts.
    pub ca: PathBuf,
    /// The serving certificate (PEM) for `127.0.0.1` and `localhost`, signed by the CA.
    pub cert: PathBuf,
    /// The serving certificate's private key (PEM).
    pub key: PathBuf,
    /// A file holding one bearer token (64 hex digits from the system's secure random source).
    pub token: PathBuf,
}

/// Writes, into `dir`, a fresh CA (`scim-ca.crt`), a serving certificate and key for
/// `127.0.0.1` and `localhost` signed by it (`scim-tls.crt`, `scim-tls.key`, the key readable by
/// its owner only) and a random bearer token (`scim-token`, owner only).
///
/// # Errors
/// Certificate generation, random-number or file errors.
pub fn scim_credentials(dir: &Path) -> Result<ScimCredentials> {
    scim_credentials_until(dir, None)
}

/// [`scim_credentials`] with a serving certificate valid until midnight UTC of `not_after`
/// (year, month, day), not rcgen's default (the year 4096), when given.
///
/// # Errors
/// Certificate generation, random-number or file errors.
pub fn scim_credentials_until(
    dir: &Path,
    not_after: Option<(i32, u8, u8)>,
) -> Result<ScimCredentials> {
    use std::os::unix::fs::PermissionsExt as _;
    let write = |name: &str, contents: &str, mode: u32| -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(io(format!("writing {}", path.display())))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io(format!("restricting {}", path.display())))?;
        Ok(path)
    };
    let ca = certificate_authority("Homestead local SCIM CA")?;
    let key = rcgen::KeyPair::generate()?;
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "homestead-scim");
    if let Some((year, month, day)) = not_after {
        params.not_after = rcgen::date_time_ymd(year, month, day);
    }
    let cert = params.signed_by(&key, &ca)?;
    let mut bytes = [0_u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| Error::Build("the system's random source failed".into()))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(ScimCredentials {
        ca: write("scim-ca.crt", &ca.pem(), 0o644)?,
        cert: write("scim-tls.crt", &cert.pem(), 0o644)?,
        key: write("scim-tls.key", &key.serialize_pem(), 0o600)?,
        token: write("scim-token", &format!("{token}\n"), 0o600)?,
    })
}

/// The token file's content: one line per identity, `token,user,uid,"groups"`, with the uid
/// being the identity's index.
pub fn token_file(identities: &[Identity], tokens: &BTreeMap<String, String>) -> String {
    let mut csv = String::new();
    for (uid, identity) in identities.iter().enumerate() {
        let token = tokens.get(&identity.name).map_or("", String::as_str);
        let groups = identity.groups.join(",");
        let _ = writeln!(csv, "{token},{},{uid},\"{groups}\"", identity.name);
    }
    csv
}

/// A kubeconfig for `server` (trusting the PEM certificate at `ca`) that authenticates as
/// `identity` with bearer `token`.
pub fn kubeconfig(server: &str, ca: &Path, identity: &str, token: &str) -> Kubeconfig {
    const NAME: &str = "homestead-testenv";
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: NAME.to_owned(),
            cluster: Some(Cluster {
                server: Some(server.to_owned()),
                certificate_authority: Some(ca.display().to_string()),
                ..Cluster::default()
            }),
            other: BTreeMap::default(),
        }],
        auth_infos: vec![NamedAuthInfo {
            name: identity.to_owned(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_owned().into()),
                ..AuthInfo::default()
            }),
            other: BTreeMap::default(),
        }],
        contexts: vec![NamedContext {
            name: NAME.to_owned(),
            context: Some(kube::config::Context {
                cluster: NAME.to_owned(),
                user: Some(identity.to_owned()),
                ..kube::config::Context::default()
            }),
            other: BTreeMap::default(),
        }],
        current_context: Some(NAME.to_owned()),
        ..Kubeconfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_lists_each_identity_with_its_groups() {
        let identities = [
            Identity::new("admin").in_group("system:masters"),
            Identity::new("tom"),
        ];
        let tokens = [("admin", "t1"), ("tom", "t2")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .into();
        assert_eq!(
            token_file(&identities, &tokens),
            "t1,admin,0,\"system:masters\"\nt2,tom,1,\"\"\n"
        );
    }

    #[test]
    fn kubeconfig_round_trips_through_yaml() {
        let config = kubeconfig(
            "https://127.0.0.1:6443",
            Path::new("/cp/serving.crt"),
            "tom",
            "secret",
        );
        let yaml = serde_saphyr::to_string(&config).unwrap();
        let back = Kubeconfig::from_yaml(&yaml).unwrap();
        assert_eq!(back.current_context.as_deref(), Some("homestead-testenv"));
        let cluster = back.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/cp/serving.crt")
        );
        assert_eq!(back.auth_infos[0].name, "tom");
        assert!(
            back.auth_infos[0]
                .auth_info
                .as_ref()
                .unwrap()
                .token
                .is_some()
        );
    }
}
