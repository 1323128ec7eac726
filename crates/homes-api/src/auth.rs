//! Who is asking the homes API (docs/homes.md, "Who is asking").
//!
//! kube-apiserver's aggregation layer authenticates and authorizes every request for
//! `homes.homestead.dev`, then proxies it to this server over TLS, presenting its front-proxy
//! client certificate and naming the caller in request headers (`X-Remote-User`,
//! `X-Remote-Group`, as configured): see
//! <https://kubernetes.io/docs/tasks/extend-kubernetes/configure-aggregation-layer/#authentication-flow>.
//! Those headers are believed only on a connection whose client certificate was signed by the
//! CA kube-apiserver publishes as `requestheader-client-ca-file` in the ConfigMap
//! `kube-system/extension-apiserver-authentication`, and whose common name is one of
//! `requestheader-allowed-names` (any name when that list is empty, as kube-apiserver itself
//! decides). Anything else (no certificate, a certificate from another CA, another name, no
//! username) is unauthenticated: HTTP 401, whatever the headers say.
//!
//! The TLS layer ([`RequestHeaderAuth::client_verifier`]) verifies the certificate chain during
//! the handshake and lets a client without a certificate finish it (so it gets a 401 rather than
//! a TLS alert); [`RequestHeaderAuth::caller`] then checks the name and reads the headers.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

/// The namespace and name of the ConfigMap kube-apiserver publishes its front-proxy settings
/// in.
pub const AUTHENTICATION_CONFIG_MAP: (&str, &str) =
    ("kube-system", "extension-apiserver-authentication");

/// Why the front-proxy settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The ConfigMap has no `requestheader-client-ca-file`: the cluster's API server runs
    /// without the aggregation layer's front proxy (`--requestheader-client-ca-file`).
    #[error(
        "kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: \
         kube-apiserver needs --requestheader-client-ca-file and --proxy-client-cert-file"
    )]
    NoClientCa,
    /// A list-valued key is not a JSON array of strings.
    #[error("{key} in kube-system/extension-apiserver-authentication is not a JSON list: {source}")]
    List {
        /// The ConfigMap key.
        key: &'static str,
        /// The parse error.
        source: serde_json::Error,
    },
    /// The CA bundle holds no certificate that parses.
    #[error("requestheader-client-ca-file holds no usable certificate: {0}")]
    Ca(String),
    /// A configured header name is not a valid HTTP header name.
    #[error("{0:?} is not a valid HTTP header name")]
    Header(String),
}

/// A caller as the API server named them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The username (`X-Remote-User`).
    pub username: String,
    /// Their groups (every `X-Remote-Group` value), `system:authenticated` among them.
    pub groups: Vec<String>,
}

/// Why a request is not taken as anyone's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unauthenticated {
    /// The connection presented no client certificate.
    #[error("no client certificate: requests must come through the Kubernetes API server")]
    NoCertificate,
    /// The certificate's common name is not an allowed front-proxy name.
    #[error("the client certificate's name is not an allowed front-proxy name")]
    NameNotAllowed,
    /// No username header, or only empty ones.
    #[error("no username in the front-proxy headers")]
    NoUsername,
}

/// The front-proxy settings of the cluster's API server, and the checks they make.
#[derive(Clone, Debug)]
pub struct RequestHeaderAuth {
    roots: Arc<RootCertStore>,
    allowed_names: Vec<String>,
    username_headers: Vec<axum::http::HeaderName>,
    group_headers: Vec<axum::http::HeaderName>,
}

/// A JSON list of strings under `key` (absent: empty).
fn list(data: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, ConfigError> {
    data.get(key).map_or(Ok(Vec::new()), |value| {
        serde_json::from_str(value).map_err(|source| ConfigError::List { key, source })
    })
}

fn headers(names: Vec<String>) -> Result<Vec<axum::http::HeaderName>, ConfigError> {
    names
        .into_iter()
        .map(|name| name.parse().map_err(|_| ConfigError::Header(name)))
        .collect()
}

impl RequestHeaderAuth {
    /// The settings in the `data` of [`AUTHENTICATION_CONFIG_MAP`]: the CA bundle (PEM), the
    /// allowed names and the username and group header names (JSON lists of strings).
    ///
    /// # Errors
    /// [`ConfigError`] when the CA is missing or unusable, a list is not JSON, or a header name
    /// is invalid.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let bundle = data
            .get("requestheader-client-ca-file")
            .filter(|pem| !pem.trim().is_empty())
            .ok_or(ConfigError::NoClientCa)?;
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
            let cert = cert.map_err(|e| ConfigError::Ca(e.to_string()))?;
            roots
                .add(cert)
                .map_err(|e| ConfigError::Ca(e.to_string()))?;
        }
        if roots.is_empty() {
            return Err(ConfigError::Ca("no certificate in the bundle".into()));
        }
        Ok(Self {
            roots: Arc::new(roots),
            allowed_names: list(data, "requestheader-allowed-names")?,
            username_headers: headers(list(data, "requestheader-username-headers")?)?,
            group_headers: headers(list(data, "requestheader-group-headers")?)?,
        })
    }

    /// The TLS client-certificate verifier: a certificate, when presented, must chain to the
    /// front-proxy CA (the handshake fails otherwise); a client may also present none, and
    /// [`Self::caller`] refuses its requests with a 401.
    ///
    /// # Errors
    /// When rustls cannot build a verifier from the CA bundle.
    pub fn client_verifier(
        &self,
    ) -> Result<Arc<dyn ClientCertVerifier>, rustls::server::VerifierBuilderError> {
        WebPkiClientVerifier::builder(self.roots.clone())
            .allow_unauthenticated()
            .build()
    }

    /// The caller of a request that arrived with `headers` on a connection whose verified
    /// client certificate chain is `peer` (leaf first, DER; empty when none was presented).
    ///
    /// # Errors
    /// [`Unauthenticated`] when there is no certificate, its common name is not allowed, or no
    /// username header has a value.
    pub fn caller(&self, peer: &[Vec<u8>], headers: &HeaderMap) -> Result<Caller, Unauthenticated> {
        let leaf = peer.first().ok_or(Unauthenticated::NoCertificate)?;
        self.front_proxy(leaf)?;
        let username = self
            .username_headers
            .iter()
            .flat_map(|name| headers.get_all(name))
            .filter_map(|value| value.to_str().ok())
            .find(|value| !value.is_empty())
            .ok_or(Unauthenticated::NoUsername)?
            .to_owned();
        let groups = self
            .group_headers
            .iter()
            .flat_map(|name| headers.get_all(name))
            .filter_map(|value| value.to_str().ok())
            .map(str::to_owned)
            .collect();
        Ok(Caller { username, groups })
    }
}

impl RequestHeaderAuth {
    /// Whether the verified client certificate `leaf` (DER) is the front proxy's: its common
    /// name is in `requestheader-allowed-names`, or that list is empty (any certificate the CA
    /// signed, as kube-apiserver decides itself). The TLS handshake verified its chain.
    ///
    /// # Errors
    /// [`Unauthenticated::NameNotAllowed`] when it is not.
    pub fn front_proxy(&self, leaf: &[u8]) -> Result<(), Unauthenticated> {
        if self.allowed_names.is_empty() {
            return Ok(());
        }
        let name = common_name(leaf).ok_or(Unauthenticated::NameNotAllowed)?;
        if self.allowed_names.contains(&name) {
            Ok(())
        } else {
            Err(Unauthenticated::NameNotAllowed)
        }
    }
}

/// The subject common name of the DER certificate `der`, if it parses and has one.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let name = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(name: &str) -> rcgen::CertifiedIssuer<'static, rcgen::KeyPair> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap()).unwrap()
    }

    fn client(name: &str, issuer: &rcgen::CertifiedIssuer<'static, rcgen::KeyPair>) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        params.signed_by(&key, issuer).unwrap().der().to_vec()
    }

    fn data(ca_pem: &str, allowed: &str) -> BTreeMap<String, String> {
        [
            ("requestheader-client-ca-file", ca_pem),
            ("requestheader-allowed-names", allowed),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            (
                "requestheader-extra-headers-prefix",
                r#"["X-Remote-Extra-"]"#,
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    fn request(user: Option<&str>, groups: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(user) = user {
            headers.insert("x-remote-user", user.parse().unwrap());
        }
        for group in groups {
            headers.append("x-remote-group", group.parse().unwrap());
        }
        headers
    }

    #[test]
    fn the_front_proxy_names_the_caller_and_nobody_else_does() {
        let front = ca("front-proxy-ca");
        let auth =
            RequestHeaderAuth::from_config_map(&data(&front.pem(), r#"["front-proxy-client"]"#))
                .unwrap();
        let proxy = client("front-proxy-client", &front);
        let alice = request(
            Some("alice@example.com"),
            &["analysts", "system:authenticated"],
        );

        assert_eq!(
            auth.caller(std::slice::from_ref(&proxy), &alice),
            Ok(Caller {
                username: "alice@example.com".into(),
                groups: vec!["analysts".into(), "system:authenticated".into()],
            })
        );
        // Forged headers without the certificate, or with another name's certificate.
        assert_eq!(
            auth.caller(&[], &alice),
            Err(Unauthenticated::NoCertificate)
        );
        let other = client("someone-else", &front);
        assert_eq!(
            auth.caller(&[other], &alice),
            Err(Unauthenticated::NameNotAllowed)
        );
        // The certificate but no (or an empty) username.
        assert_eq!(
            auth.caller(std::slice::from_ref(&proxy), &request(None, &["analysts"])),
            Err(Unauthenticated::NoUsername)
        );
        assert_eq!(
            auth.caller(&[proxy], &request(Some(""), &[])),
            Err(Unauthenticated::NoUsername)
        );
    }

    #[test]
    fn an_empty_allowed_list_accepts_any_name_the_ca_signed() {
        let front = ca("front-proxy-ca");
        let auth = RequestHeaderAuth::from_config_map(&data(&front.pem(), "[]")).unwrap();
        let any = client("any-name", &front);
        assert_eq!(
            auth.caller(&[any], &request(Some("bob"), &[]))
                .map(|c| c.username),
            Ok("bob".to_owned())
        );
    }

    #[test]
    fn settings_without_a_ca_or_with_a_bad_list_are_refused() {
        let mut missing = data("", "[]");
        assert!(matches!(
            RequestHeaderAuth::from_config_map(&missing),
            Err(ConfigError::NoClientCa)
        ));
        missing.remove("requestheader-client-ca-file");
        assert!(matches!(
            RequestHeaderAuth::from_config_map(&missing),
            Err(ConfigError::NoClientCa)
        ));
        let front = ca("front-proxy-ca");
        assert!(matches!(
            RequestHeaderAuth::from_config_map(&data(&front.pem(), "front-proxy-client")),
            Err(ConfigError::List {
                key: "requestheader-allowed-names",
                ..
            })
        ));
    }
}
