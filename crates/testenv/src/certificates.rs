//! What the API server reads from its directory: its CA and serving certificate, the kubelet
//! client certificate, the front-proxy files (aggregation layer), the audit policy and the token
//! file.

use std::path::{Path, PathBuf};

use crate::error::{Result, io};
use crate::network;

/// The common name of the client certificate kube-apiserver presents to kubelet (for logs and
/// exec), when the cluster has a node.
pub const APISERVER_KUBELET_CLIENT: &str = "homestead-testenv:apiserver-kubelet-client";

/// The common name of the front-proxy client certificate: what kube-apiserver's aggregation
/// layer presents to an extension API server (with the caller in `X-Remote-User` and
/// `X-Remote-Group`), and the one name `--requestheader-allowed-names` accepts, as kubeadm
/// names it.
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// The audit policy: RoleBinding writes with their request bodies (who was granted what), every
/// other request at level `Metadata`.
pub(crate) const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Request
  verbs: [create, update, patch]
  resources: [{group: rbac.authorization.k8s.io, resources: [rolebindings]}]
- level: Metadata
";

/// The names the API server's serving certificate holds: loopback, and for Pods the node's
/// address, the `kubernetes` Service's ClusterIP and its DNS names.
pub(crate) const SERVING_NAMES: [&str; 8] = [
    "127.0.0.1",
    "localhost",
    network::NODE_IP,
    "10.0.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// Writes the serving certificate and key (self-signed for [`SERVING_NAMES`]), the
/// service-account signing key pair, the token file with `tokens_csv` and the audit policy into
/// `dir`; with `node`, also a CA for kubelet's clients and the API server's client certificate
/// ([`APISERVER_KUBELET_CLIENT`]) signed by it.
pub(crate) fn write_files(dir: &Path, tokens_csv: &str, node: bool) -> Result<ApiServerFiles> {
    let write = |name: &str, contents: &str| -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(io(format!("writing {}", path.display())))?;
        Ok(path)
    };
    let serving = rcgen::generate_simple_self_signed(SERVING_NAMES.map(str::to_owned).to_vec())?;
    let front_proxy = {
        let [ca, cert, key] =
            client_certificate("Homestead local front-proxy CA", FRONT_PROXY_CLIENT)?;
        FrontProxyFiles {
            ca: write("front-proxy-ca.crt", &ca)?,
            cert: write("front-proxy-client.crt", &cert)?,
            key: write("front-proxy-client.key", &key)?,
        }
    };
    let service_account = rcgen::KeyPair::generate()?;
    let kubelet_client = if node {
        let [ca, cert, key] = client_certificate(
            "Homestead local kubelet client CA",
            APISERVER_KUBELET_CLIENT,
        )?;
        Some(KubeletClientFiles {
            ca: write("kubelet-client-ca.crt", &ca)?,
            cert: write("kubelet-client.crt", &cert)?,
            key: write("kubelet-client.key", &key)?,
        })
    } else {
        None
    };
    Ok(ApiServerFiles {
        serving_cert: write("serving.crt", &serving.cert.pem())?,
        serving_key: write("serving.key", &serving.signing_key.serialize_pem())?,
        service_account_key: write("service-account.key", &service_account.serialize_pem())?,
        service_account_pub: write("service-account.pub", &service_account.public_key_pem())?,
        tokens: write("tokens.csv", tokens_csv)?,
        audit_policy: write("audit-policy.yaml", AUDIT_POLICY)?,
        front_proxy,
        kubelet_client,
    })
}

/// A fresh CA named `ca_name` and a client certificate (extended key usage `clientAuth`) for
/// `common_name` signed by it: the PEMs of the CA's certificate, the client's certificate and
/// its private key.
fn client_certificate(ca_name: &str, common_name: &str) -> Result<[String; 3]> {
    let ca = certificate_authority(ca_name)?;
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &ca)?;
    Ok([ca.pem(), cert.pem(), key.serialize_pem()])
}

/// A fresh self-signed CA named `common_name`, for signing certificates only.
pub(crate) fn certificate_authority(
    common_name: &str,
) -> Result<rcgen::CertifiedIssuer<'static, rcgen::KeyPair>> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    Ok(rcgen::CertifiedIssuer::self_signed(
        params,
        rcgen::KeyPair::generate()?,
    )?)
}

/// The files kube-apiserver reads, all inside the control plane's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiServerFiles {
    /// Self-signed serving certificate (PEM) for 127.0.0.1, trusted by clients directly.
    pub serving_cert: PathBuf,
    /// Its private key (PEM).
    pub serving_key: PathBuf,
    /// Private key (PEM) that signs service-account tokens.
    pub service_account_key: PathBuf,
    /// Its public key (PEM), to verify them.
    pub service_account_pub: PathBuf,
    /// Static token file: CSV `token,user,uid,"group1,group2"`.
    pub tokens: PathBuf,
    /// Audit policy ([`AUDIT_POLICY`]).
    pub audit_policy: PathBuf,
    /// The aggregation layer's front-proxy CA and client certificate.
    pub front_proxy: FrontProxyFiles,
    /// With a node: the CA kubelet trusts for clients, and the API server's certificate.
    pub kubelet_client: Option<KubeletClientFiles>,
}

/// The aggregation layer's credentials
/// (<https://kubernetes.io/docs/tasks/extend-kubernetes/configure-aggregation-layer/>): an
/// extension API server trusts the caller named in the request headers only from a client
/// certificate signed by `ca` (published in `kube-system/extension-apiserver-authentication`)
/// with the common name [`FRONT_PROXY_CLIENT`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrontProxyFiles {
    /// The CA (PEM) of `--requestheader-client-ca-file`.
    pub ca: PathBuf,
    /// kube-apiserver's client certificate (PEM) for extension API servers.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// The API server's credentials for kubelet's API (logs, exec, port-forward).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletClientFiles {
    /// The CA (PEM) kubelet trusts for client certificates.
    pub ca: PathBuf,
    /// The API server's client certificate (PEM), common name [`APISERVER_KUBELET_CLIENT`].
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}
