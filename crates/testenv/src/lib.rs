//! A real local Kubernetes control plane for Homestead's integration tests, benchmarks and
//! `just up`: etcd, kube-apiserver (RBAC authorization, static token authentication, audit log)
//! and kube-controller-manager running the [`CONTROLLERS`] a real cluster needs for what
//! Homestead relies on: garbage collection, namespace deletion, aggregated `admin`/`edit`/`view`
//! roles, `default` ServiceAccounts and quota status.
//!
//! The binaries are built from the Go modules pinned in `tools/control-plane/` into a
//! version-keyed cache (`$HOMESTEAD_CACHE`, default `~/.cache/homestead`) and reused; a
//! `KUBEBUILDER_ASSETS` directory holding them is used instead when set (the envtest convention).
//!
//! Every process listens on a free 127.0.0.1 port, keeps its files in a fresh temporary directory,
//! and is stopped when the [`ControlPlane`] is dropped or the test process exits, including on a
//! panic (see [`process`]). Set `HOMESTEAD_TESTENV_KEEP=1` to keep the directory for inspection.

pub mod node;
mod process;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{
    AuthInfo, Cluster, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

pub use node::{NODE_NAME, NodeTools, node_tools};
pub use process::Supervised;

/// The admin identity: user `homestead-admin` in group `system:masters` (all permissions).
pub const ADMIN: &str = "homestead-admin";

/// The operator's identity, the user name of ServiceAccount `homestead` in `homestead-system`,
/// with the ServiceAccount groups, so the RBAC objects in `rbac/` apply to it unchanged.
pub const OPERATOR: &str = "system:serviceaccount:homestead-system:homestead";

/// The SCIM service's identity, the user name of ServiceAccount `homestead-scim` in
/// `homestead-system`, with the ServiceAccount groups, so `manifests/scim/` applies to it.
pub const SCIM: &str = "system:serviceaccount:homestead-system:homestead-scim";

/// Field manager of the writes the test environment itself makes (CRD installation).
pub(crate) const FIELD_MANAGER: &str = "homestead-testenv";

/// The common name of the client certificate kube-apiserver presents to kubelet (for logs and
/// exec), when the cluster has a node.
pub const APISERVER_KUBELET_CLIENT: &str = "homestead-testenv:apiserver-kubelet-client";

/// How long the control plane may take to become ready once the binaries exist.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Errors from building, starting or talking to the control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `tools/control-plane/build.sh` failed or printed no directory.
    #[error("building the control-plane binaries failed: {0}")]
    Build(String),
    /// A file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A process exited or the API server did not become ready in time; holds the process logs.
    #[error("control plane failed to start: {reason}\n{logs}")]
    Startup {
        /// What went wrong.
        reason: String,
        /// The last lines of each process log.
        logs: String,
    },
    /// Generating the serving certificate or the service-account signing key failed.
    #[error("generating TLS material failed: {0}")]
    Tls(#[from] rcgen::Error),
    /// A request to the API server failed.
    #[error("Kubernetes API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be built or loaded.
    #[error("kubeconfig error: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// No token was issued for this identity; add it to [`Options::identities`].
    #[error("unknown identity {0:?}: declare it in Options::identities before start")]
    UnknownIdentity(String),
    /// A CRD did not report `Established=True` within 30 seconds.
    #[error("CRD {0} did not become Established")]
    CrdNotEstablished(String),
    /// The node cannot start: what is missing or what failed (root, a program, a lock, a
    /// process that exited, readiness).
    #[error("the local node cannot start: {0}")]
    Node(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}

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

/// What to start: extra identities, the CRDs to install once the API server is ready, and
/// whether the cluster gets a node.
#[derive(Clone, Debug)]
pub struct Options {
    /// Identities that get a token; [`ADMIN`], [`OPERATOR`] and [`SCIM`] are always present.
    pub identities: Vec<Identity>,
    /// CRDs to install and wait for (`Established=True`) before [`ControlPlane::start`] returns.
    pub crds: Vec<CustomResourceDefinition>,
    /// Start a node (see [`node`]): containerd, kubelet, kube-proxy and kube-router, so Pods run.
    pub node: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            identities: vec![
                Identity::new(ADMIN).in_group("system:masters"),
                Identity::new(OPERATOR)
                    .in_group("system:serviceaccounts")
                    .in_group("system:serviceaccounts:homestead-system"),
                Identity::new(SCIM)
                    .in_group("system:serviceaccounts")
                    .in_group("system:serviceaccounts:homestead-system"),
            ],
            crds: Vec::new(),
            node: false,
        }
    }
}

impl Options {
    /// Adds an identity that gets a token.
    #[must_use]
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identities.push(identity);
        self
    }

    /// Adds a CRD to install at start.
    #[must_use]
    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// Starts a node with the control plane (see [`node`]); needs root.
    #[must_use]
    pub fn with_node(mut self) -> Self {
        self.node = true;
        self
    }
}

/// Runs `tools/control-plane/build.sh` (a no-op when the binaries are cached) and returns the
/// directory holding `etcd`, `kube-apiserver`, `kube-controller-manager` and `kubectl`.
///
/// # Errors
/// [`Error::Build`] when the Go build fails; its output goes to this process's stderr.
pub fn binaries() -> Result<PathBuf> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| run_build_script("tools/control-plane/build.sh"))
        .clone()
        .map_err(Error::Build)
}

/// Runs the script at `relative` (to the repository root), its stderr going to ours, and returns
/// the directory it prints on stdout.
pub(crate) fn run_build_script(relative: &str) -> std::result::Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(relative);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("{} exited with {}", script.display(), out.status));
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if dir.is_empty() {
        return Err(format!("{} printed no directory", script.display()));
    }
    Ok(PathBuf::from(dir))
}

/// Returns a free TCP port on 127.0.0.1 (the OS picks it; it is released before use).
///
/// # Errors
/// [`Error::Io`] if no port can be bound.
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding a free port"))?;
    Ok(listener
        .local_addr()
        .map_err(io("reading the bound port"))?
        .port())
}

/// A random-enough hex string for tokens and directory names (not for cryptography).
fn random_hex() -> String {
    use std::hash::{BuildHasher, RandomState};
    let a = RandomState::new().hash_one(SystemTime::now());
    let b = RandomState::new().hash_one(std::process::id());
    format!("{a:016x}{b:016x}")
}

/// The audit policy: RoleBinding writes with their request bodies (who was granted what), every
/// other request at level `Metadata`.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
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
const SERVING_NAMES: [&str; 8] = [
    "127.0.0.1",
    "localhost",
    node::NODE_IP,
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
fn write_files(dir: &Path, tokens_csv: &str, node: bool) -> Result<ApiServerFiles> {
    let write = |name: &str, contents: &str| -> Result<PathBuf> {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(io(format!("writing {}", path.display())))?;
        Ok(path)
    };
    let serving = rcgen::generate_simple_self_signed(SERVING_NAMES.map(str::to_owned).to_vec())?;
    let service_account = rcgen::KeyPair::generate()?;
    let kubelet_client = if node {
        let ca = certificate_authority("Homestead local kubelet client CA")?;
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, APISERVER_KUBELET_CLIENT);
        let cert = params.signed_by(&key, &ca)?;
        Some(KubeletClientFiles {
            ca: write("kubelet-client-ca.crt", &ca.pem())?,
            cert: write("kubelet-client.crt", &cert.pem())?,
            key: write("kubelet-client.key", &key.serialize_pem())?,
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
        kubelet_client,
    })
}

/// A fresh self-signed CA named `common_name`, for signing certificates only.
fn certificate_authority(
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

/// The loopback ports of one control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// etcd's client port.
    pub etcd: u16,
    /// etcd's peer port (not the default 2380, so several control planes can run at once).
    pub etcd_peer: u16,
    /// kube-apiserver's secure port.
    pub apiserver: u16,
}

impl Ports {
    /// Three free ports on 127.0.0.1.
    ///
    /// # Errors
    /// [`Error::Io`] if no port can be bound.
    pub fn free() -> Result<Self> {
        Ok(Self {
            etcd: free_port()?,
            etcd_peer: free_port()?,
            apiserver: free_port()?,
        })
    }

    fn etcd_url(self) -> String {
        format!("http://127.0.0.1:{}", self.etcd)
    }
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
    /// With a node: the CA kubelet trusts for clients, and the API server's certificate.
    pub kubelet_client: Option<KubeletClientFiles>,
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

/// The controllers kube-controller-manager runs: garbage collection and namespace deletion
/// really happen, `admin`/`edit`/`view` carry their aggregated rules, every namespace gets its
/// `default` ServiceAccount, and quota status moves as on a real cluster.
pub const CONTROLLERS: &str = "garbage-collector-controller,namespace-controller,clusterrole-aggregation-controller,serviceaccount-controller,resourcequota-controller";

/// etcd's arguments: data in `<dir>/etcd`, client and peer URLs on `ports`, no fsync (tests).
pub fn etcd_args(dir: &Path, ports: Ports) -> Vec<String> {
    let peer_url = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={}", ports.etcd_url()),
        format!("--advertise-client-urls={}", ports.etcd_url()),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=homestead={peer_url}"),
        "--name=homestead".to_owned(),
        "--unsafe-no-fsync".to_owned(),
        "--log-level=warn".to_owned(),
    ]
}

/// kube-apiserver's arguments: etcd on `ports`, RBAC authorization, static token
/// authentication, an audit log at `<dir>/audit.log`, and service-account tokens signed with the
/// key in `files`. Without a node it listens on 127.0.0.1 only. With one (`files` has kubelet
/// client credentials) it listens on the node's address [`node::NODE_IP`], where Pods reach it
/// (still nothing outside this machine), authorizes kubelet with the Node authorizer and
/// NodeRestriction, and admits Pods with their ServiceAccount's token, as a real cluster does.
pub fn apiserver_args(dir: &Path, ports: Ports, files: &ApiServerFiles) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let address = if files.kubelet_client.is_some() {
        node::NODE_IP
    } else {
        "127.0.0.1"
    };
    let mut args = vec![
        format!("--etcd-servers={}", ports.etcd_url()),
        format!("--bind-address={address}"),
        format!("--advertise-address={address}"),
        format!("--secure-port={}", ports.apiserver),
        format!("--cert-dir={}", dir.join("certs").display()),
        format!("--tls-cert-file={}", path(&files.serving_cert)),
        format!("--tls-private-key-file={}", path(&files.serving_key)),
        format!("--service-cluster-ip-range={}", node::SERVICE_CIDR),
        "--service-account-issuer=https://127.0.0.1".to_owned(),
        format!(
            "--service-account-key-file={}",
            path(&files.service_account_pub)
        ),
        format!(
            "--service-account-signing-key-file={}",
            path(&files.service_account_key)
        ),
        format!("--token-auth-file={}", path(&files.tokens)),
        // As on real clusters (kubelets run privileged pods): Pod Security decides, not this.
        "--allow-privileged=true".to_owned(),
        format!("--audit-policy-file={}", path(&files.audit_policy)),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
        // Never rotate (the default rotates at 100 MB, and a benchmark writes more).
        "--audit-log-maxsize=1000000".to_owned(),
        "--v=1".to_owned(),
    ];
    match &files.kubelet_client {
        None => args.extend(
            [
                "--authorization-mode=RBAC",
                // No Pod runs without a node; tests create Pods only as objects.
                "--disable-admission-plugins=ServiceAccount",
                // Nor does any Pod reach the API server through the `kubernetes` Service, whose
                // endpoints cannot be a loopback address (1.34 logs an error every 10 s trying;
                // 1.37 refuses to start).
                "--endpoint-reconciler-type=none",
                "--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
            ]
            .map(str::to_owned),
        ),
        Some(kubelet) => args.extend([
            "--authorization-mode=Node,RBAC".to_owned(),
            "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement"
                .to_owned(),
            format!("--kubelet-client-certificate={}", path(&kubelet.cert)),
            format!("--kubelet-client-key={}", path(&kubelet.key)),
            "--kubelet-preferred-address-types=InternalIP".to_owned(),
        ]),
    }
    args
}

/// kube-controller-manager's arguments: the admin `kubeconfig`, no leader election, no serving
/// port, and client rate limits raised as on a tuned production control plane (100 requests/s,
/// bursts of 200; the namespace controller gets 20 times that), so deleting thousands of
/// namespaces is bound by the API server, not by a client-side limit. Without a node it runs the
/// [`CONTROLLERS`] only. With one (`files` has kubelet client credentials) it runs every
/// controller enabled by default (Deployments get ReplicaSets and Pods, Services get
/// EndpointSlices, ServiceAccount tokens, disruption budgets, ...) and gives the node its pod
/// range from [`node::CLUSTER_CIDR`]; `kube-root-ca.crt` ConfigMaps carry the serving certificate.
pub fn controller_manager_args(kubeconfig: &Path, files: &ApiServerFiles) -> Vec<String> {
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".to_owned(),
        "--secure-port=0".to_owned(),
        "--kube-api-qps=100".to_owned(),
        "--kube-api-burst=200".to_owned(),
        "--concurrent-namespace-syncs=20".to_owned(),
        "--v=1".to_owned(),
    ];
    if files.kubelet_client.is_some() {
        args.extend([
            "--controllers=*".to_owned(),
            "--allocate-node-cidrs=true".to_owned(),
            format!("--cluster-cidr={}", node::CLUSTER_CIDR),
            "--node-cidr-mask-size=24".to_owned(),
            format!("--service-cluster-ip-range={}", node::SERVICE_CIDR),
            format!("--root-ca-file={}", files.serving_cert.display()),
            format!(
                "--service-account-private-key-file={}",
                files.service_account_key.display()
            ),
        ]);
    } else {
        args.push(format!("--controllers={CONTROLLERS}"));
    }
    args
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

/// A running control plane. Dropping it stops every process and removes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    server: String,
    tokens: BTreeMap<String, String>,
    bin: PathBuf,
    ports: Ports,
    files: ApiServerFiles,
    /// The node, when started with one.
    node: Option<Node>,
    /// In stop order: the node's processes (kube-router, kube-proxy, kubelet, kube-scheduler,
    /// containerd, its janitor), kube-controller-manager, kube-apiserver, etcd.
    processes: Mutex<Vec<Supervised>>,
}

/// A node started with the control plane ([`Options::with_node`]).
#[derive(Debug)]
pub struct Node {
    dir: node::NodeDir,
    tools: NodeTools,
    _lock: node::MachineLock,
}

impl Node {
    /// containerd's socket (for `ctr --address`).
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.containerd_socket()
    }

    /// The node's directory: configuration, logs of its processes aside, containerd's and
    /// kubelet's state.
    pub fn dir(&self) -> &Path {
        &self.dir.dir
    }

    /// The reference of the toolbox test image in the node's containerd: busybox (sh, nc,
    /// httpd) and kubectl, running as 65534.
    ///
    /// # Errors
    /// [`Error::Io`] if the image's reference file is missing.
    pub fn toolbox_image(&self) -> Result<String> {
        self.tools.image_ref("toolbox")
    }

    /// Imports an OCI image archive into the node's containerd as `<repository>:<tag in it>`.
    ///
    /// # Errors
    /// [`Error::Node`] if `ctr images import` fails.
    pub fn import_image(&self, archive: &Path, repository: &str) -> Result<()> {
        node::import_image(&self.containerd_socket(), archive, repository)
    }

    /// Prepares a node's machine-wide prerequisites before the control plane starts: the tools,
    /// the preflight checks, the lock, cleanup after a node that crashed, and the bridge.
    fn prepare(plane_dir: &Path, bin: &Path) -> Result<Self> {
        node::require_root()?;
        let tools = node_tools()?;
        node::preflight()?;
        let dir = node::NodeDir {
            dir: PathBuf::from(format!("{}-node", plane_dir.display())),
        };
        let lock = node::MachineLock::acquire(&dir.dir)?;
        let janitor = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/node/janitor.sh");
        let tmp = std::env::temp_dir();
        node::run(
            "bash",
            &[
                &janitor.display().to_string(),
                "stale",
                &tmp.display().to_string(),
                &bin.display().to_string(),
                &tools.kube_router().display().to_string(),
            ],
        )?;
        node::prepare_host()?;
        std::fs::create_dir_all(dir.dir.join("cni"))
            .map_err(io(format!("creating {}", dir.dir.display())))?;
        Ok(Self {
            dir,
            tools,
            _lock: lock,
        })
    }
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and kube-controller-manager, waits until `/readyz` answers
    /// `ok` (at most 120 seconds), and installs `options.crds`.
    ///
    /// # Errors
    /// [`Error::Build`] if the binaries cannot be built, [`Error::Startup`] (with the process
    /// logs) if a process exits or readiness times out, [`Error::CrdNotEstablished`] if a CRD is
    /// not established within 30 seconds, and I/O or TLS errors while preparing the directory.
    pub async fn start(options: Options) -> Result<Self> {
        let started = Instant::now();
        let bin = binaries()?;
        let dir = std::env::temp_dir().join(format!("homestead-testenv-{}", random_hex()));
        let node = if options.node {
            Some(Node::prepare(&dir, &bin)?)
        } else {
            None
        };
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let ports = Ports::free()?;
        let mut identities = options.identities.clone();
        if node.is_some() {
            identities.extend(node::identities());
        }
        let tokens: BTreeMap<String, String> = identities
            .iter()
            .map(|i| (i.name.clone(), random_hex()))
            .collect();
        let files = write_files(&dir, &token_file(&identities, &tokens), node.is_some())?;
        let address = if node.is_some() {
            node::NODE_IP
        } else {
            "127.0.0.1"
        };
        let plane = Self {
            server: format!("https://{address}:{}", ports.apiserver),
            dir,
            tokens,
            bin,
            ports,
            files,
            node,
            processes: Mutex::default(),
        };
        plane.start_etcd()?;
        plane.start_apiserver("kube-apiserver.log")?;
        // Timed from here, not from `started`: a first run builds the binaries above (minutes).
        plane.wait_ready().await?;
        plane.start_controller_manager().await?;
        if plane.node.is_some() {
            plane.start_node().await?;
        }
        if !options.crds.is_empty() {
            plane.install_crds(&options.crds).await?;
        }
        plane.check_running()?;
        tracing::info!(
            server = %plane.server,
            dir = %plane.dir.display(),
            ready_after_ms = started.elapsed().as_millis(),
            "control plane ready"
        );
        Ok(plane)
    }

    /// Starts etcd; the watchdog removes the directory after it stops, unless
    /// `HOMESTEAD_TESTENV_KEEP` is set.
    fn start_etcd(&self) -> Result<()> {
        let keep = std::env::var_os("HOMESTEAD_TESTENV_KEEP").is_some_and(|v| v != "0");
        let etcd = Supervised::spawn(
            "etcd",
            &self.bin.join("etcd"),
            &etcd_args(&self.dir, self.ports),
            self.dir.join("etcd.log"),
            (!keep).then_some(self.dir.as_path()),
        )
        .map_err(io("starting etcd"))?;
        self.processes().push(etcd);
        Ok(())
    }

    /// Starts kube-apiserver (logging to `log` in the directory) before etcd in stop order.
    fn start_apiserver(&self, log: &str) -> Result<()> {
        let apiserver = Supervised::spawn(
            "kube-apiserver",
            &self.bin.join("kube-apiserver"),
            &apiserver_args(&self.dir, self.ports, &self.files),
            self.dir.join(log),
            None,
        )
        .map_err(io("starting kube-apiserver"))?;
        let mut processes = self.processes();
        let etcd = processes.iter().position(|p| p.name == "etcd").unwrap_or(0);
        processes.insert(etcd, apiserver);
        Ok(())
    }

    /// Stops kube-apiserver (etcd and the cluster's state stay); clients then find nobody
    /// listening. For testing how clients survive an API server outage; see
    /// [`ControlPlane::start_apiserver_again`].
    pub fn stop_apiserver(&self) {
        let mut processes = self.processes();
        if let Some(i) = processes.iter().position(|p| p.name == "kube-apiserver") {
            processes.remove(i).stop();
        }
    }

    /// Starts kube-apiserver again on the same port and etcd after
    /// [`ControlPlane::stop_apiserver`], and waits until it is ready. Its log continues in
    /// `kube-apiserver-restarted-<n>.log`.
    ///
    /// # Errors
    /// [`Error::Startup`] if it is not ready within 120 seconds, [`Error::Io`] if it cannot be
    /// started.
    pub async fn start_apiserver_again(&self) -> Result<()> {
        let restarts = std::fs::read_dir(&self.dir).map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("kube-apiserver-restarted")
                })
                .count()
        });
        self.start_apiserver(&format!("kube-apiserver-restarted-{}.log", restarts + 1))?;
        self.wait_ready().await
    }

    /// [`ControlPlane::stop_apiserver`], then [`ControlPlane::start_apiserver_again`].
    ///
    /// # Errors
    /// As [`ControlPlane::start_apiserver_again`].
    pub async fn restart_apiserver(&self) -> Result<()> {
        self.stop_apiserver();
        self.start_apiserver_again().await
    }

    /// The supervised processes (a poisoned lock is taken over: the list stays valid).
    fn processes(&self) -> std::sync::MutexGuard<'_, Vec<Supervised>> {
        self.processes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts kube-controller-manager as the admin and waits until it has initialized.
    async fn start_controller_manager(&self) -> Result<()> {
        let kubeconfig = self.write_kubeconfig(ADMIN, &self.dir.join("admin.kubeconfig"))?;
        let kcm = Supervised::spawn(
            "kube-controller-manager",
            &self.bin.join("kube-controller-manager"),
            &controller_manager_args(&kubeconfig, &self.files),
            self.dir.join("kube-controller-manager.log"),
            None,
        )
        .map_err(io("starting kube-controller-manager"))?;
        let log = kcm.log.clone();
        self.processes().insert(0, kcm);
        self.wait_logged("kube-controller-manager", &log).await
    }

    /// Starts the node's processes (janitor, containerd, kube-scheduler, kubelet, kube-proxy,
    /// kube-router) and waits until the Node is `Ready`.
    async fn start_node(&self) -> Result<()> {
        let node = self
            .node
            .as_ref()
            .expect("start_node is called with a node");
        let dir = &node.dir;
        self.write_node_config(node).await?;
        let janitor = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/node/janitor.sh");
        let router = node.tools.kube_router();
        let path = |p: &Path| p.display().to_string();
        self.spawn_node_process(
            "node-janitor",
            Path::new("bash"),
            vec![
                path(&janitor),
                "watch".to_owned(),
                path(&dir.dir),
                path(&self.bin),
                path(&router),
            ],
        )?;
        let config = format!("--config={}", dir.dir.join("containerd.toml").display());
        self.spawn_node_process("containerd", Path::new("containerd"), vec![config])?;
        let socket = dir.containerd_socket();
        self.wait_for_socket(&socket).await?;
        for image in ["pause", "toolbox"] {
            let reference = node.tools.image_ref(image)?;
            let repository = reference.rsplit_once(':').map_or(&*reference, |(r, _)| r);
            node::import_image(&socket, &node.tools.image_archive(image), repository)?;
        }
        for (name, args) in [
            ("kube-scheduler", node::scheduler_args(dir)),
            ("kubelet", node::kubelet_args(dir)),
            ("kube-proxy", node::kube_proxy_args(dir)),
        ] {
            self.spawn_node_process(name, &self.bin.join(name), args)?;
        }
        let client = self.client(ADMIN).await?;
        node::wait_node_ready(client, || self.check_running())
            .await
            .map_err(|e| self.startup_error(e.to_string()))?;
        // kube-router reads its Node at start, so it starts once kubelet has registered it.
        self.spawn_node_process("kube-router", &router, node::kube_router_args(dir))?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.check_running()
    }

    /// Writes the node's configuration (containerd, CNI, kubelet) and the kubeconfigs of its
    /// components into its directory, and applies their RBAC.
    async fn write_node_config(&self, node: &Node) -> Result<()> {
        let dir = &node.dir;
        let write = |name: &str, contents: &str| -> Result<()> {
            let path = dir.dir.join(name);
            std::fs::write(&path, contents).map_err(io(format!("writing {}", path.display())))
        };
        let pause = node.tools.image_ref("pause")?;
        write("containerd.toml", &node::containerd_config(dir, &pause))?;
        write("cni/10-homestead.conflist", &node::cni_config(dir))?;
        let client_ca = &self
            .files
            .kubelet_client
            .as_ref()
            .expect("a node's control plane has kubelet client credentials")
            .ca;
        write("kubelet.yaml", &node::kubelet_config(dir, client_ca))?;
        for (identity, file) in [
            (node::KUBELET, "kubelet.kubeconfig"),
            (node::KUBE_SCHEDULER, "kube-scheduler.kubeconfig"),
            (node::KUBE_PROXY, "kube-proxy.kubeconfig"),
            (node::KUBE_ROUTER, "kube-router.kubeconfig"),
        ] {
            self.write_kubeconfig(identity, &dir.dir.join(file))?;
        }
        node::apply_rbac(self.client(ADMIN).await?).await
    }

    /// Starts the node process `name` (`program` with `args`), logging to `<name>.log`, first
    /// in line to be stopped.
    fn spawn_node_process(
        &self,
        name: &'static str,
        program: &Path,
        args: Vec<String>,
    ) -> Result<()> {
        let process = Supervised::spawn(
            name,
            program,
            &args,
            self.dir.join(format!("{name}.log")),
            None,
        )
        .map_err(io(format!("starting {name}")))?;
        self.processes().insert(0, process);
        Ok(())
    }

    /// Waits until `socket` exists (containerd listens), at most 30 s.
    async fn wait_for_socket(&self, socket: &Path) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            self.check_running()?;
            if Instant::now() > deadline {
                return Err(self.startup_error("containerd opened no socket in 30 s".to_owned()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// The node, when the control plane was started with one ([`Options::with_node`]).
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// The control plane shared by all tests of one test binary, started on first use with
    /// [`Options::default`] plus whatever `options` adds. It runs until the test process exits
    /// (statics are never dropped; the watchdogs stop the processes then). Every test should use
    /// names of its own, since the cluster is shared.
    ///
    /// # Panics
    /// If the control plane cannot start; the message holds the process logs.
    pub fn shared(options: impl FnOnce(Options) -> Options) -> &'static ControlPlane {
        static SHARED: OnceLock<ControlPlane> = OnceLock::new();
        SHARED.get_or_init(|| {
            let options = options(Options::default());
            // Its own thread and runtime: the caller may be inside a runtime of its own, which
            // may not block, and which ends with its test.
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("building a tokio runtime")
                    .block_on(Self::start(options))
            })
            .join()
            .expect("control-plane start-up thread panicked")
            .unwrap_or_else(|e| panic!("{e}"))
        })
    }

    /// Polls `/readyz` every 250 ms until it answers `ok` (for at most `READY_TIMEOUT` from the
    /// call), failing early if a process exits.
    async fn wait_ready(&self) -> Result<()> {
        let started = Instant::now();
        let client = self.client(ADMIN).await?;
        loop {
            self.check_running()?;
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("static request is valid");
            match client.request_text(request).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(_) | Err(_) if started.elapsed() < READY_TIMEOUT => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok(body) => return Err(self.startup_error(format!("/readyz said {body:?}"))),
                Err(e) => return Err(self.startup_error(format!("/readyz failed: {e}"))),
            }
        }
    }

    /// Waits up to 30 seconds until process `name` has written to its `log` (it got as far as
    /// initializing), failing with the logs if any process exits meanwhile.
    async fn wait_logged(&self, name: &str, log: &Path) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.check_running()?;
            if std::fs::metadata(log).is_ok_and(|m| m.len() > 0) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.startup_error(format!("{name} wrote nothing in 30 s")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails with the logs if any process has exited.
    fn check_running(&self) -> Result<()> {
        let dead: Vec<&str> = self
            .processes()
            .iter_mut()
            .filter_map(|p| (!p.is_running()).then_some(p.name))
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            let reason = format!("{} exited", dead.join(", "));
            Err(self.startup_error(reason))
        }
    }

    fn startup_error(&self, reason: String) -> Error {
        let mut logs = String::new();
        let mut processes = self.processes();
        for p in processes.iter_mut() {
            if let Some(status) = p.exit_status() {
                let _ = writeln!(logs, "{} exited: {status}", p.name);
            }
        }
        for p in processes.iter() {
            let _ = writeln!(
                logs,
                "---- {} ({}) ----\n{}",
                p.name,
                p.log.display(),
                p.log_tail(40)
            );
        }
        Error::Startup { reason, logs }
    }

    /// The API server URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The directory holding certificates, tokens, logs (`<process>.log`), the audit log
    /// (`audit.log`, one JSON event per line) and etcd's data.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding the control-plane binaries, `kubectl` among them.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// A kubeconfig that authenticates as `identity` with its bearer token and trusts the API
    /// server's serving certificate.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`] if `identity` got no token.
    pub fn kubeconfig(&self, identity: &str) -> Result<Kubeconfig> {
        let token = self
            .tokens
            .get(identity)
            .ok_or_else(|| Error::UnknownIdentity(identity.to_owned()))?;
        let ca = self.dir.join("serving.crt");
        Ok(kubeconfig(&self.server, &ca, identity, token))
    }

    /// [`ControlPlane::kubeconfig`] as YAML.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`] if `identity` got no token.
    pub fn kubeconfig_yaml(&self, identity: &str) -> Result<String> {
        let kubeconfig = self.kubeconfig(identity)?;
        Ok(serde_saphyr::to_string(&kubeconfig).expect("a kubeconfig serializes"))
    }

    /// Writes [`ControlPlane::kubeconfig_yaml`] for `identity` to `path` (atomically: readers
    /// see the old file or the new one) and returns the path.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`], or [`Error::Io`] if the file cannot be written.
    pub fn write_kubeconfig(&self, identity: &str, path: &Path) -> Result<PathBuf> {
        let yaml = self.kubeconfig_yaml(identity)?;
        // Written aside and renamed into place, so a concurrent reader (tests run kubectl in
        // parallel) never sees a half-written file.
        let partial = path.with_extension(format!("partial-{}", random_hex()));
        std::fs::write(&partial, yaml).map_err(io(format!("writing {}", partial.display())))?;
        std::fs::rename(&partial, path).map_err(io(format!("renaming to {}", path.display())))?;
        Ok(path.to_owned())
    }

    /// A client that authenticates as `identity`. Create one per tokio runtime (per test): its
    /// connections belong to the runtime it was created on.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`], or a kubeconfig / client construction error.
    pub async fn client(&self, identity: &str) -> Result<Client> {
        let kubeconfig = self.kubeconfig(identity)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// A `kubectl` command (the cached build matching the API server) authenticated as
    /// `identity` through a kubeconfig written into [`ControlPlane::dir`].
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`], or [`Error::Io`] if the kubeconfig cannot be written.
    pub fn kubectl(&self, identity: &str) -> Result<std::process::Command> {
        let file: String = identity
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let kubeconfig =
            self.write_kubeconfig(identity, &self.dir.join(format!("{file}.kubeconfig")))?;
        let mut cmd = std::process::Command::new(self.bin.join("kubectl"));
        cmd.arg("--kubeconfig").arg(kubeconfig);
        Ok(cmd)
    }

    /// Installs `crds` by server-side apply (field manager `homestead-testenv`) and waits up to
    /// 30 seconds for each to report `Established=True`.
    ///
    /// # Errors
    /// [`Error::Kube`] if a request fails, [`Error::CrdNotEstablished`] on time-out.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client(ADMIN).await?);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &params, &Patch::Apply(crd)).await?;
        }
        for crd in crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let established = await_condition(api.clone(), &name, conditions::is_crd_established());
            tokio::time::timeout(Duration::from_secs(30), established)
                .await
                .map_err(|_| Error::CrdNotEstablished(name.clone()))?
                .map_err(|_| Error::CrdNotEstablished(name))?;
        }
        Ok(())
    }

    /// The API server's audit events so far (see [`AUDIT_POLICY`]: RoleBinding writes with their
    /// request bodies, the rest at level `Metadata`), one JSON object per request, in order.
    /// Useful to count what a given user wrote.
    ///
    /// # Errors
    /// [`Error::Io`] if the audit log cannot be read.
    pub fn audit_events(&self) -> Result<Vec<serde_json::Value>> {
        let path = self.dir.join("audit.log");
        let text =
            std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    }

    /// Starts `program args...` with `env` under the same watchdog as the control plane (stopped
    /// on drop of the returned handle or when this process exits), logging to
    /// `<dir>/<name>.log`. Use it for the operator under test.
    ///
    /// # Errors
    /// [`Error::Io`] if the process cannot be started.
    pub fn spawn(
        &self,
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
    ) -> Result<Supervised> {
        let log = self.dir.join(format!("{name}.log"));
        Supervised::spawn_with_env(name, program, args, env, log, None)
            .map_err(io(format!("starting {name}")))
    }

    /// Stops every process (kube-controller-manager, kube-apiserver, then etcd) and removes the
    /// directory unless `HOMESTEAD_TESTENV_KEEP` is set. Dropping does the same.
    pub fn stop(self) {
        self.stop_all();
    }

    fn stop_all(&self) {
        let mut processes = self.processes();
        for p in processes.iter_mut() {
            p.stop();
        }
        processes.clear();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_has_all(args: &[String], wants: &[&str]) {
        for want in wants {
            assert!(
                args.iter().any(|a| a == want),
                "{want} missing from {args:?}"
            );
        }
    }

    fn ports() -> Ports {
        Ports {
            etcd: 2001,
            etcd_peer: 2002,
            apiserver: 6443,
        }
    }

    #[test]
    fn etcd_listens_on_loopback_ports_of_its_own() {
        let args = etcd_args(Path::new("/tmp/cp"), ports());
        assert_has_all(
            &args,
            &[
                "--data-dir=/tmp/cp/etcd",
                "--listen-client-urls=http://127.0.0.1:2001",
                "--listen-peer-urls=http://127.0.0.1:2002",
                "--initial-cluster=homestead=http://127.0.0.1:2002",
                "--unsafe-no-fsync",
            ],
        );
    }

    fn files() -> ApiServerFiles {
        ApiServerFiles {
            serving_cert: "/cp/serving.crt".into(),
            serving_key: "/cp/serving.key".into(),
            service_account_key: "/cp/sa.key".into(),
            service_account_pub: "/cp/sa.pub".into(),
            tokens: "/cp/tokens.csv".into(),
            audit_policy: "/cp/audit.yaml".into(),
            kubelet_client: None,
        }
    }

    fn files_with_node() -> ApiServerFiles {
        ApiServerFiles {
            kubelet_client: Some(KubeletClientFiles {
                ca: "/cp/kubelet-client-ca.crt".into(),
                cert: "/cp/kubelet-client.crt".into(),
                key: "/cp/kubelet-client.key".into(),
            }),
            ..files()
        }
    }

    #[test]
    fn apiserver_authenticates_by_token_and_authorizes_by_rbac() {
        let args = apiserver_args(Path::new("/cp"), ports(), &files());
        assert_has_all(
            &args,
            &[
                "--etcd-servers=http://127.0.0.1:2001",
                "--bind-address=127.0.0.1",
                "--secure-port=6443",
                "--authorization-mode=RBAC",
                "--token-auth-file=/cp/tokens.csv",
                "--service-account-signing-key-file=/cp/sa.key",
                "--service-account-key-file=/cp/sa.pub",
                "--audit-log-path=/cp/audit.log",
                "--endpoint-reconciler-type=none",
            ],
        );
    }

    #[test]
    fn with_a_node_the_apiserver_listens_where_pods_reach_it_and_authorizes_kubelet() {
        let args = apiserver_args(Path::new("/cp"), ports(), &files_with_node());
        assert_has_all(
            &args,
            &[
                "--bind-address=10.244.0.1",
                "--advertise-address=10.244.0.1",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction,OwnerReferencesPermissionEnforcement",
                "--kubelet-client-certificate=/cp/kubelet-client.crt",
            ],
        );
        assert!(
            !args.iter().any(|a| a.contains("disable-admission-plugins")),
            "Pods on a node get their ServiceAccount token: {args:?}"
        );
        assert!(
            !args.iter().any(|a| a.contains("endpoint-reconciler-type")),
            "Pods on a node reach the API server through the kubernetes Service: {args:?}"
        );
    }

    #[test]
    fn with_a_node_the_controller_manager_runs_its_defaults_and_allocates_pod_ranges() {
        let args = controller_manager_args(Path::new("/cp/admin.kubeconfig"), &files_with_node());
        assert_has_all(
            &args,
            &[
                "--controllers=*",
                "--allocate-node-cidrs=true",
                "--cluster-cidr=10.244.0.0/16",
                "--root-ca-file=/cp/serving.crt",
                "--service-account-private-key-file=/cp/sa.key",
            ],
        );
    }

    #[test]
    fn controller_manager_runs_what_access_checks_need() {
        let args = controller_manager_args(Path::new("/cp/admin.kubeconfig"), &files());
        assert!(args.contains(&"--kubeconfig=/cp/admin.kubeconfig".to_owned()));
        let controllers = args
            .iter()
            .find_map(|a| a.strip_prefix("--controllers="))
            .expect("an explicit controller list");
        for c in [
            "garbage-collector-controller",
            "namespace-controller",
            "clusterrole-aggregation-controller",
            "serviceaccount-controller",
            "resourcequota-controller",
        ] {
            assert!(controllers.split(',').any(|x| x == c), "{c} not run");
        }
    }

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
