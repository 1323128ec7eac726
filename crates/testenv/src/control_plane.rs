//! The running control plane ([`ControlPlane`]) and its optional node ([`Node`]): start, wait
//! for readiness, install CRDs, hand out clients and kubeconfigs, stop.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

use crate::binaries::binaries;
use crate::certificates::{ApiServerFiles, write_files};
use crate::credentials::{
    ADMIN, FIELD_MANAGER, HOMES_API, Identity, OPERATOR, SCIM, kubeconfig, random_hex, token_file,
};
use crate::error::{Error, Result, io};
use crate::flags::{Ports, apiserver_args, controller_manager_args, etcd_args};
use crate::node::{self, NodeTools, node_tools};
use crate::process::Supervised;

/// How long the control plane may take to become ready once the binaries exist.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// What Go's `net.Listen` says when the port is taken, in etcd's and kube-apiserver's logs.
const PORT_TAKEN: &str = "address already in use";

/// What to start: extra identities, the CRDs to install once the API server is ready, and
/// whether the cluster gets a node.
#[derive(Clone, Debug)]
pub struct Options {
    /// Identities that get a token; [`ADMIN`], [`OPERATOR`], [`SCIM`] and [`HOMES_API`] are
    /// always present.
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
                Identity::new(HOMES_API)
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

    /// Pauses the node's NetworkPolicy implementation (kube-router, SIGSTOP) until the returned
    /// guard is dropped (SIGCONT): NetworkPolicies stay in the API and the rules already applied
    /// stay, but no Pod started meanwhile is put under them. A cluster whose network plugin does
    /// not enforce NetworkPolicy, on cue, for tests of what notices.
    ///
    /// # Errors
    /// [`Error::Node`] if kube-router's process is not found or cannot be signalled.
    pub fn pause_network_policy(&self) -> Result<NetworkPolicyPaused> {
        let kubeconfig = format!(
            "--kubeconfig={}",
            self.dir.dir.join("kube-router.kubeconfig").display()
        );
        let found = std::process::Command::new("pgrep")
            .args(["-x", "kube-router"])
            .output()
            .map_err(|e| Error::Node(format!("running pgrep: {e}")))?;
        let pid = String::from_utf8_lossy(&found.stdout)
            .lines()
            .find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                    cmdline
                        .split(|b| *b == 0)
                        .any(|arg| arg == kubeconfig.as_bytes())
                })
            })
            .map(str::to_owned)
            .ok_or_else(|| Error::Node("this node's kube-router is not running".to_owned()))?;
        node::run("kill", &["-STOP", &pid])?;
        Ok(NetworkPolicyPaused { pid })
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

/// kube-router paused by [`Node::pause_network_policy`]; resumed when dropped.
#[derive(Debug)]
pub struct NetworkPolicyPaused {
    pid: String,
}

impl Drop for NetworkPolicyPaused {
    fn drop(&mut self) {
        if let Err(error) = node::run("kill", &["-CONT", &self.pid]) {
            tracing::error!(%error, pid = %self.pid, "cannot resume kube-router");
        }
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
    /// Without a node, a start whose kube-apiserver found its port taken ("address already in
    /// use": another process bound it after [`free_port`](crate::free_port) chose it), or whose
    /// etcd exited (its watchdog removes the directory, its log with it, so why is not known),
    /// is tried again on new ports, three times in all.
    pub async fn start(options: Options) -> Result<Self> {
        const TRIES: u32 = 3;
        let mut tried = 1;
        loop {
            match Self::start_once(options.clone(), Ports::free()?).await {
                Err(Error::Startup { reason, logs })
                    if !options.node
                        && tried < TRIES
                        && (logs.contains(PORT_TAKEN) || reason.contains("etcd")) =>
                {
                    tracing::warn!(%reason, tried, "a control-plane port was taken; starting on new ports");
                    tried += 1;
                }
                outcome => return outcome,
            }
        }
    }

    async fn start_once(options: Options, ports: Ports) -> Result<Self> {
        let started = Instant::now();
        let bin = binaries()?;
        let dir = std::env::temp_dir().join(format!("homestead-testenv-{}", random_hex()));
        let node = if options.node {
            Some(Node::prepare(&dir, &bin)?)
        } else {
            None
        };
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
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

    /// The retry in [`ControlPlane::start`] rests on kube-apiserver's words for a taken port,
    /// and on etcd's exit being named for its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_taken_port_fails_the_start_with_the_words_start_retries_on() {
        let ports = Ports::free().unwrap();
        // Bound and not listening, as the local end of an outgoing connection is.
        let squatter = tokio::net::TcpSocket::new_v4().unwrap();
        squatter
            .bind(([127, 0, 0, 1], ports.apiserver).into())
            .unwrap();
        let options = Options::default();
        match ControlPlane::start_once(options, ports).await {
            Err(Error::Startup { logs, .. }) => assert!(logs.contains(PORT_TAKEN), "{logs}"),
            Err(error) => panic!("not a start-up error: {error}"),
            Ok(_) => panic!("kube-apiserver started on a taken port"),
        }
        let ports = Ports::free().unwrap();
        let squatter = tokio::net::TcpSocket::new_v4().unwrap();
        squatter.bind(([127, 0, 0, 1], ports.etcd).into()).unwrap();
        match ControlPlane::start_once(Options::default(), ports).await {
            Err(Error::Startup { reason, .. }) => assert!(reason.contains("etcd"), "{reason}"),
            Err(error) => panic!("not a start-up error: {error}"),
            Ok(_) => panic!("etcd started on a taken port"),
        }
    }
}
