//! A real local Kubernetes control plane for Homestead's integration tests, benchmarks and
//! `just up`: etcd, kube-apiserver (RBAC authorization, static token authentication, audit log)
//! and kube-controller-manager running only the garbage-collector and namespace controllers, so
//! that owner-reference garbage collection and namespace deletion really happen.
//!
//! The binaries are built from the Go modules pinned in `tools/control-plane/` into a
//! version-keyed cache (`$HOMESTEAD_CACHE`, default `~/.cache/homestead`) and reused; a
//! `KUBEBUILDER_ASSETS` directory holding them is used instead when set (the envtest convention).
//!
//! Every process listens on a free 127.0.0.1 port, keeps its files in a fresh temporary directory,
//! and is stopped when the [`ControlPlane`] is dropped or the test process exits, including on a
//! panic (see [`process`]). Set `HOMESTEAD_TESTENV_KEEP=1` to keep the directory for inspection.

mod process;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

pub use process::Supervised;

/// The admin identity: user `homestead-admin` in group `system:masters` (all permissions).
pub const ADMIN: &str = "homestead-admin";

/// The operator's identity, the user name of ServiceAccount `homestead` in `homestead-system`,
/// with the ServiceAccount groups, so the RBAC objects in `rbac/` apply to it unchanged.
pub const OPERATOR: &str = "system:serviceaccount:homestead-system:homestead";

/// Field manager of the writes the test environment itself makes (CRD installation).
const FIELD_MANAGER: &str = "homestead-testenv";

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

/// What to start: extra identities and the CRDs to install once the API server is ready.
#[derive(Clone, Debug)]
pub struct Options {
    /// Identities that get a token; [`ADMIN`] and [`OPERATOR`] are always present.
    pub identities: Vec<Identity>,
    /// CRDs to install and wait for (`Established=True`) before [`ControlPlane::start`] returns.
    pub crds: Vec<CustomResourceDefinition>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            identities: vec![
                Identity::new(ADMIN).in_group("system:masters"),
                Identity::new(OPERATOR)
                    .in_group("system:serviceaccounts")
                    .in_group("system:serviceaccounts:homestead-system"),
            ],
            crds: Vec::new(),
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
}

/// Runs `tools/control-plane/build.sh` (a no-op when the binaries are cached) and returns the
/// directory holding `etcd`, `kube-apiserver`, `kube-controller-manager` and `kubectl`.
///
/// # Errors
/// [`Error::Build`] when the Go build fails; its output goes to this process's stderr.
pub fn binaries() -> Result<PathBuf> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/control-plane/build.sh");
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
    })
    .clone()
    .map_err(Error::Build)
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

/// A running control plane. Dropping it stops every process and removes its directory.
#[derive(Debug)]
pub struct ControlPlane {
    dir: PathBuf,
    server: String,
    tokens: BTreeMap<String, String>,
    bin: PathBuf,
    /// In stop order: kube-controller-manager, kube-apiserver, etcd.
    processes: Vec<Supervised>,
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
        let bin = binaries()?;
        let started = Instant::now();
        let dir = std::env::temp_dir().join(format!("homestead-testenv-{}", random_hex()));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let write = |name: &str, contents: &str| -> Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, contents).map_err(io(format!("writing {}", path.display())))?;
            Ok(path)
        };

        // TLS: one self-signed serving certificate for 127.0.0.1, which clients trust directly,
        // and an ECDSA key that signs (and verifies) service-account tokens.
        let serving = rcgen::generate_simple_self_signed(vec![
            "127.0.0.1".to_owned(),
            "localhost".to_owned(),
        ])?;
        let cert = write("serving.crt", &serving.cert.pem())?;
        let key = write("serving.key", &serving.signing_key.serialize_pem())?;
        let sa = rcgen::KeyPair::generate()?;
        let sa_key = write("service-account.key", &sa.serialize_pem())?;
        let sa_pub = write("service-account.pub", &sa.public_key_pem())?;

        let mut tokens = BTreeMap::new();
        let mut csv = String::new();
        for (uid, identity) in options.identities.iter().enumerate() {
            let token = random_hex();
            let groups = identity.groups.join(",");
            let _ = writeln!(csv, "{token},{},{uid},\"{groups}\"", identity.name);
            tokens.insert(identity.name.clone(), token);
        }
        let token_file = write("tokens.csv", &csv)?;
        let audit_policy = write(
            "audit-policy.yaml",
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
        )?;

        let (etcd_port, peer_port, api_port) = (free_port()?, free_port()?, free_port()?);
        let server = format!("https://127.0.0.1:{api_port}");
        let keep = std::env::var_os("HOMESTEAD_TESTENV_KEEP").is_some_and(|v| v != "0");
        let mut plane = Self {
            dir: dir.clone(),
            server,
            tokens,
            bin: bin.clone(),
            processes: Vec::new(),
        };

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Supervised::spawn(
            "etcd",
            &bin.join("etcd"),
            &[
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=homestead={peer_url}"),
                "--name=homestead".to_owned(),
                "--unsafe-no-fsync".to_owned(),
                "--log-level=warn".to_owned(),
            ],
            dir.join("etcd.log"),
            (!keep).then_some(dir.as_path()),
        )
        .map_err(io("starting etcd"))?;
        plane.processes.push(etcd);

        let path = |p: &Path| p.display().to_string();
        let apiserver = Supervised::spawn(
            "kube-apiserver",
            &bin.join("kube-apiserver"),
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".to_owned(),
                "--advertise-address=127.0.0.1".to_owned(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", dir.join("certs").display()),
                format!("--tls-cert-file={}", path(&cert)),
                format!("--tls-private-key-file={}", path(&key)),
                "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
                "--service-account-issuer=https://127.0.0.1".to_owned(),
                format!("--service-account-key-file={}", path(&sa_pub)),
                format!("--service-account-signing-key-file={}", path(&sa_key)),
                "--authorization-mode=RBAC".to_owned(),
                format!("--token-auth-file={}", path(&token_file)),
                "--disable-admission-plugins=ServiceAccount".to_owned(),
                format!("--audit-policy-file={}", path(&audit_policy)),
                format!("--audit-log-path={}", dir.join("audit.log").display()),
                "--v=1".to_owned(),
            ],
            dir.join("kube-apiserver.log"),
            None,
        )
        .map_err(io("starting kube-apiserver"))?;
        plane.processes.insert(0, apiserver);

        plane.wait_ready(started).await?;

        let admin_kubeconfig = plane.write_kubeconfig(ADMIN, &dir.join("admin.kubeconfig"))?;
        let kcm = Supervised::spawn(
            "kube-controller-manager",
            &bin.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", path(&admin_kubeconfig)),
                "--leader-elect=false".to_owned(),
                "--controllers=garbage-collector-controller,namespace-controller".to_owned(),
                "--secure-port=0".to_owned(),
                "--v=1".to_owned(),
            ],
            dir.join("kube-controller-manager.log"),
            None,
        )
        .map_err(io("starting kube-controller-manager"))?;
        plane.processes.insert(0, kcm);
        plane.wait_logged(0).await?;

        if !options.crds.is_empty() {
            plane.install_crds(&options.crds).await?;
        }
        plane.check_running()?;
        tracing::info!(
            server = %plane.server,
            dir = %dir.display(),
            ready_after_ms = started.elapsed().as_millis(),
            "control plane ready"
        );
        Ok(plane)
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

    /// Polls `/readyz` every 250 ms until it answers `ok`, failing early if a process exits.
    async fn wait_ready(&mut self, started: Instant) -> Result<()> {
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

    /// Waits up to 30 seconds until process `index` has written to its log (it got as far as
    /// initializing), failing with the logs if any process exits meanwhile.
    async fn wait_logged(&mut self, index: usize) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.check_running()?;
            let logged = std::fs::metadata(&self.processes[index].log).is_ok_and(|m| m.len() > 0);
            if logged {
                return Ok(());
            }
            if Instant::now() > deadline {
                let reason = format!("{} wrote nothing in 30 s", self.processes[index].name);
                return Err(self.startup_error(reason));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails with the logs if any process has exited.
    fn check_running(&mut self) -> Result<()> {
        let dead: Vec<&str> = self
            .processes
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

    fn startup_error(&mut self, reason: String) -> Error {
        let mut logs = String::new();
        for p in &mut self.processes {
            if let Some(status) = p.exit_status() {
                let _ = writeln!(logs, "{} exited: {status}", p.name);
            }
        }
        for p in &self.processes {
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

    /// A kubeconfig (YAML) that authenticates as `identity` with its bearer token and trusts the
    /// API server's serving certificate.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`] if `identity` got no token.
    pub fn kubeconfig_yaml(&self, identity: &str) -> Result<String> {
        let token = self
            .tokens
            .get(identity)
            .ok_or_else(|| Error::UnknownIdentity(identity.to_owned()))?;
        let ca = self.dir.join("serving.crt");
        Ok(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: homestead-testenv\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {identity:?}\n  user:\n    token: {token}\ncontexts:\n- name: homestead-testenv\n  context:\n    cluster: homestead-testenv\n    user: {identity:?}\ncurrent-context: homestead-testenv\n",
            server = self.server,
            ca = ca.display(),
        ))
    }

    /// Writes [`ControlPlane::kubeconfig_yaml`] for `identity` to `path` and returns the path.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`], or [`Error::Io`] if the file cannot be written.
    pub fn write_kubeconfig(&self, identity: &str, path: &Path) -> Result<PathBuf> {
        let yaml = self.kubeconfig_yaml(identity)?;
        std::fs::write(path, yaml).map_err(io(format!("writing {}", path.display())))?;
        Ok(path.to_owned())
    }

    /// A client that authenticates as `identity`. Create one per tokio runtime (per test): its
    /// connections belong to the runtime it was created on.
    ///
    /// # Errors
    /// [`Error::UnknownIdentity`], or a kubeconfig / client construction error.
    pub async fn client(&self, identity: &str) -> Result<Client> {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig_yaml(identity)?)?;
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

    /// The API server's audit events so far (policy: every request at level `Metadata`), one
    /// JSON object per request, in order. Useful to count what a given user wrote.
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
    pub fn stop(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        for p in &mut self.processes {
            p.stop();
        }
        self.processes.clear();
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop_all();
    }
}
