//! The local cluster's node: containerd and runc (Debian packages) with the CNI bridge plugin
//! for pod networking, kubelet and kube-proxy (built from the same pinned `k8s.io/kubernetes`
//! module as the control plane), and kube-router's firewall enforcing NetworkPolicy.
//!
//! Network layout, all on this machine: the bridge [`BRIDGE`] holds [`NODE_IP`], which is the
//! pods' gateway, the node's InternalIP and the API server's advertised address (the
//! `kubernetes` Service at `10.0.0.1:443` leads there); pods get addresses from [`POD_CIDR`];
//! Services get ClusterIPs from [`SERVICE_CIDR`], which kube-proxy's iptables rules translate.
//! Pods reach no other address: there is no masquerading and no route out is added.
//!
//! A node needs root, cgroup v1 or v2 with the memory controller, iptables and ipset; the
//! preflight check names what is missing. One node runs on a machine at a time (kube-proxy's and
//! kube-router's iptables chains and the pod cgroups are machine-wide), so starting one takes a
//! lock in the temporary directory and fails at once, naming the holder, if another node has it.
//! `tools/node/janitor.sh` removes every trace of a node when it stops, however the test process
//! ends, and before a node starts, in case one crashed.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};

use crate::credentials::Identity;
use crate::error::{Error, Result, io};
pub use crate::network::{BRIDGE, CLUSTER_CIDR, NODE_IP, POD_CIDR, SERVICE_CIDR};

/// The node's name, as kubelet registers it.
pub const NODE_NAME: &str = "homestead-node";

/// The identity kubelet authenticates as, so the Node authorizer and NodeRestriction apply.
pub const KUBELET: &str = "system:node:homestead-node";

/// The identity kube-scheduler authenticates as (bound to `system:kube-scheduler` by default).
pub const KUBE_SCHEDULER: &str = "system:kube-scheduler";

/// The identity kube-proxy authenticates as (bound to `system:node-proxier` by default).
pub const KUBE_PROXY: &str = "system:kube-proxy";

/// The identity kube-router authenticates as; the testenv grants it read access to what
/// NetworkPolicy enforcement needs.
pub const KUBE_ROUTER: &str = "system:homestead-testenv:kube-router";

/// How long the node may take to report `Ready=True` once its processes run.
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// What `tools/node/build.sh` prepared: kube-router and the images to import.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTools {
    /// The directory printed by `tools/node/build.sh`.
    pub dir: PathBuf,
}

impl NodeTools {
    /// The kube-router binary.
    pub fn kube_router(&self) -> PathBuf {
        self.dir.join("kube-router")
    }

    /// The OCI archive of image `name` (`pause` or `toolbox`).
    pub fn image_archive(&self, name: &str) -> PathBuf {
        self.dir.join("images").join(format!("{name}.tar"))
    }

    /// The reference `<repository>:<tag>` the archive of image `name` is imported as.
    ///
    /// # Errors
    /// [`Error::Io`] if `images/<name>.ref` cannot be read.
    pub fn image_ref(&self, name: &str) -> Result<String> {
        let path = self.dir.join("images").join(format!("{name}.ref"));
        let text =
            std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
        Ok(text.trim().to_owned())
    }
}

/// Runs `tools/node/build.sh` (a no-op when its cache is complete): installs the Debian packages
/// the node needs when missing, builds kube-router and the images.
///
/// # Errors
/// [`Error::Node`] when the script fails (it prints why, e.g. packages missing and not root).
pub fn node_tools() -> Result<NodeTools> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| crate::binaries::run_build_script("tools/node/build.sh"))
        .clone()
        .map(|dir| NodeTools { dir })
        .map_err(Error::Node)
}

/// The identities a node's processes authenticate as.
pub(crate) fn identities() -> [Identity; 4] {
    [
        Identity::new(KUBELET).in_group("system:nodes"),
        Identity::new(KUBE_SCHEDULER),
        Identity::new(KUBE_PROXY),
        Identity::new(KUBE_ROUTER),
    ]
}

/// Checks that this process runs as root, which kubelet, containerd and iptables need.
///
/// # Errors
/// [`Error::Node`] naming the user id it runs as otherwise.
pub fn require_root() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("?");
    if uid != "0" {
        return Err(Error::Node(format!(
            "a node needs root (kubelet, containerd and iptables), and this process runs as uid {uid}"
        )));
    }
    Ok(())
}

/// Checks what the node needs from this machine, naming the first thing missing.
///
/// # Errors
/// [`Error::Node`] naming the missing piece: root, a program, the CNI plugins, the memory cgroup.
pub fn preflight() -> Result<()> {
    require_root()?;
    for program in [
        "containerd",
        "containerd-shim-runc-v2",
        "runc",
        "ctr",
        "iptables",
        "ipset",
        "conntrack",
        "ip",
    ] {
        if !on_path(program) {
            return Err(Error::Node(format!(
                "{program} is not on PATH (tools/node/build.sh installs it from Debian's packages)"
            )));
        }
    }
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        if !Path::new(CNI_BIN_DIR).join(plugin).exists() {
            return Err(Error::Node(format!(
                "the CNI plugin {CNI_BIN_DIR}/{plugin} is missing (Debian package containernetworking-plugins)"
            )));
        }
    }
    let memory_cgroup = Path::new("/sys/fs/cgroup/memory").is_dir()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
    if !memory_cgroup {
        return Err(Error::Node(
            "no memory cgroup controller is mounted under /sys/fs/cgroup".to_owned(),
        ));
    }
    Ok(())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .any(|dir| dir.join(program).is_file())
}

/// Where Debian's containernetworking-plugins puts the plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The machine-wide lock a running node holds (released when its file is closed, which the
/// kernel does when the process exits, however it exits).
#[derive(Debug)]
pub(crate) struct MachineLock {
    _file: File,
}

impl MachineLock {
    /// Takes the machine's lock (`homestead-node.lock` in the temporary directory) or fails at
    /// once with who holds it.
    pub(crate) fn acquire(node_dir: &Path) -> Result<Self> {
        Self::acquire_at(&std::env::temp_dir().join("homestead-node.lock"), node_dir)
    }

    fn acquire_at(path: &Path, node_dir: &Path) -> Result<Self> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(io(format!("opening {}", path.display())))?;
        if file.try_lock().is_err() {
            let holder = std::fs::read_to_string(path).unwrap_or_default();
            return Err(Error::Node(format!(
                "another local node runs on this machine ({}); one node runs at a time: stop it \
                 (`just down` for `just up`) and try again",
                holder.trim()
            )));
        }
        use std::io::Write as _;
        file.set_len(0).map_err(io("truncating the node lock"))?;
        let _ = write!(
            file,
            "pid {}, directory {}",
            std::process::id(),
            node_dir.display()
        );
        Ok(Self { _file: file })
    }
}

/// Runs `program args...` to completion, failing with its output.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(io(format!("running {program}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Node(format!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Turns on forwarding and iptables for bridged traffic (kube-proxy and NetworkPolicy need both)
/// and creates [`BRIDGE`] holding [`NODE_IP`], so the API server can advertise that address.
pub(crate) fn prepare_host() -> Result<()> {
    for (key, value) in [
        ("/proc/sys/net/ipv4/ip_forward", "1"),
        ("/proc/sys/net/bridge/bridge-nf-call-iptables", "1"),
    ] {
        std::fs::write(key, value).map_err(|e| {
            Error::Node(format!(
                "setting {key} to {value} failed ({e}); bridged pod traffic needs it"
            ))
        })?;
    }
    run("ip", &["link", "add", BRIDGE, "type", "bridge"])?;
    run(
        "ip",
        &["addr", "add", &format!("{NODE_IP}/24"), "dev", BRIDGE],
    )?;
    run("ip", &["link", "set", BRIDGE, "up"])
}

/// The node's files, all under its own directory (beside the control plane's, so removing that
/// never descends into the node's mounts).
#[derive(Clone, Debug)]
pub struct NodeDir {
    /// The directory.
    pub dir: PathBuf,
}

impl NodeDir {
    /// containerd's socket.
    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

/// containerd's configuration: everything under `node`'s directory, the CRI plugin using runc
/// with cgroupfs, `pause` as sandbox image, and CNI plugins from [`CNI_BIN_DIR`]. Containers'
/// `oom_score_adj` is never below containerd's own: lowering it needs `CAP_SYS_RESOURCE`, which
/// some machines (sandboxed VMs) deny even to root.
pub fn containerd_config(node: &NodeDir, pause: &str) -> String {
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  enable_unprivileged_ports = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{runc}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
"#,
        root = node.path("containerd"),
        state = node.path("containerd-state"),
        socket = node.containerd_socket().display(),
        runc = node.path("runc"),
        cni = node.path("cni"),
    )
}

/// The CNI network: the bridge plugin on [`BRIDGE`] with addresses from [`POD_CIDR`] (host-local
/// IPAM, state under the node's directory), hairpin mode so a pod reaches itself through its
/// Service, and portmap.
pub fn cni_config(node: &NodeDir) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "homestead",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR, "gateway": NODE_IP}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": node.path("cni-ipam"),
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
    .to_string()
}

/// kubelet's configuration (`KubeletConfiguration`, kubelet.config.k8s.io/v1beta1): cgroupfs
/// with cgroup v1 allowed, no swap check, its own `oom_score_adj` left as it is, webhook authentication and authorization for its API
/// with client certificates from `client_ca` (the API server's), the read-only port off, and
/// disk-pressure thresholds low enough for a shared development disk.
pub fn kubelet_config(node: &NodeDir, client_ca: &Path) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {client_ca}}}
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
",
        socket = node.containerd_socket().display(),
        client_ca = client_ca.display(),
    )
}

/// kube-scheduler's arguments: its kubeconfig, no leader election (one scheduler), no serving
/// port.
pub fn scheduler_args(node: &NodeDir) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", node.path("kube-scheduler.kubeconfig")),
        "--leader-elect=false".to_owned(),
        "--secure-port=0".to_owned(),
        "--v=1".to_owned(),
    ]
}

/// kubelet's arguments: its configuration, kubeconfig and directories under the node's.
pub fn kubelet_args(node: &NodeDir) -> Vec<String> {
    vec![
        format!("--config={}", node.path("kubelet.yaml")),
        format!("--kubeconfig={}", node.path("kubelet.kubeconfig")),
        format!("--root-dir={}", node.path("kubelet")),
        format!("--cert-dir={}", node.path("kubelet-pki")),
        format!("--hostname-override={NODE_NAME}"),
        format!("--node-ip={NODE_IP}"),
        "--v=1".to_owned(),
    ]
}

/// kube-proxy's arguments: iptables mode for [`CLUSTER_CIDR`], health and metrics on loopback
/// (their usual ports: one node runs per machine), conntrack limits left as the kernel has them.
pub fn kube_proxy_args(node: &NodeDir) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", node.path("kube-proxy.kubeconfig")),
        "--proxy-mode=iptables".to_owned(),
        format!("--hostname-override={NODE_NAME}"),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        "--healthz-bind-address=127.0.0.1:10256".to_owned(),
        "--metrics-bind-address=127.0.0.1:10249".to_owned(),
        "--conntrack-max-per-core=0".to_owned(),
        "--oom-score-adj=0".to_owned(),
        "--v=1".to_owned(),
    ]
}

/// kube-router's arguments: only its firewall (NetworkPolicy), no routing, service proxy or CNI.
pub fn kube_router_args(node: &NodeDir) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", node.path("kube-router.kubeconfig")),
        "--run-firewall=true".to_owned(),
        "--run-router=false".to_owned(),
        "--run-service-proxy=false".to_owned(),
        "--enable-cni=false".to_owned(),
        "--enable-pod-egress=false".to_owned(),
        format!("--hostname-override={NODE_NAME}"),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--health-port=0".to_owned(),
        "--metrics-port=0".to_owned(),
        "--iptables-sync-period=30s".to_owned(),
        "--v=1".to_owned(),
    ]
}

/// The RBAC the node's components need beyond the defaults: kube-router reads what
/// NetworkPolicy enforcement depends on, and the API server's kubelet client certificate may use
/// kubelet's API (logs, exec) through `system:kubelet-api-admin`.
pub(crate) async fn apply_rbac(client: kube::Client) -> Result<()> {
    let params = PatchParams::apply(crate::credentials::FIELD_MANAGER).force();
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "homestead-testenv:kube-router"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
             "verbs": ["get", "list", "watch"]},
        ]
    }))
    .expect("a valid ClusterRole");
    let bindings = [
        (
            "homestead-testenv:kube-router",
            "homestead-testenv:kube-router",
            KUBE_ROUTER,
        ),
        (
            "homestead-testenv:apiserver-kubelet-client",
            "system:kubelet-api-admin",
            crate::certificates::APISERVER_KUBELET_CLIENT,
        ),
    ];
    Api::<ClusterRole>::all(client.clone())
        .patch(
            "homestead-testenv:kube-router",
            &params,
            &Patch::Apply(&role),
        )
        .await?;
    let api = Api::<ClusterRoleBinding>::all(client);
    for (name, role, user) in bindings {
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .expect("a valid ClusterRoleBinding");
        api.patch(name, &params, &Patch::Apply(&binding)).await?;
    }
    Ok(())
}

/// Imports the OCI archive `archive` into the node's containerd (namespace `k8s.io`, where
/// kubelet looks) as `<repository>:<tag in the archive>`.
///
/// # Errors
/// [`Error::Node`] with `ctr`'s output if the import fails.
pub fn import_image(socket: &Path, archive: &Path, repository: &str) -> Result<()> {
    let socket = socket.display().to_string();
    let archive = archive.display().to_string();
    run(
        "ctr",
        &[
            "--address",
            &socket,
            "--namespace",
            "k8s.io",
            "images",
            "import",
            "--base-name",
            repository,
            &archive,
        ],
    )
}

/// Waits until Node [`NODE_NAME`] reports `Ready=True`; `alive` is called between polls and
/// fails the wait early (a process exited).
pub(crate) async fn wait_node_ready(
    client: kube::Client,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let nodes: Api<NodeObject> = Api::all(client);
    let started = Instant::now();
    let mut last = String::from("not registered");
    while started.elapsed() < NODE_READY_TIMEOUT {
        alive()?;
        if let Some(node) = nodes.get_opt(NODE_NAME).await? {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            match ready {
                Some(c) if c.status == "True" => return Ok(()),
                Some(c) => {
                    last = String::new();
                    let _ = write!(
                        last,
                        "Ready={} ({}: {})",
                        c.status,
                        c.reason.as_deref().unwrap_or(""),
                        c.message.as_deref().unwrap_or("")
                    );
                }
                None => last = "registered, no Ready condition yet".to_owned(),
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(Error::Node(format!(
        "node {NODE_NAME} was not Ready within {} s: {last}",
        NODE_READY_TIMEOUT.as_secs()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeDir {
        NodeDir {
            dir: "/tmp/n".into(),
        }
    }

    #[test]
    fn a_second_node_on_the_machine_is_refused_naming_the_first() {
        let dir = std::env::temp_dir().join(format!("homestead-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lock = dir.join("node.lock");
        let first = MachineLock::acquire_at(&lock, Path::new("/tmp/first-node")).unwrap();
        let second = MachineLock::acquire_at(&lock, Path::new("/tmp/second-node"));
        let message = second.unwrap_err().to_string();
        assert!(
            message.contains("another local node runs on this machine")
                && message.contains("/tmp/first-node"),
            "{message}"
        );
        drop(first);
        MachineLock::acquire_at(&lock, Path::new("/tmp/second-node"))
            .expect("the lock is free once the first node is gone");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn containerd_keeps_everything_under_the_node_directory() {
        let config = containerd_config(&node(), "homestead.local/pause:v1");
        for want in [
            r#"root = "/tmp/n/containerd""#,
            r#"state = "/tmp/n/containerd-state""#,
            r#"address = "/tmp/n/containerd.sock""#,
            r#"Root = "/tmp/n/runc""#,
            r#"sandbox_image = "homestead.local/pause:v1""#,
            r#"conf_dir = "/tmp/n/cni""#,
        ] {
            assert!(config.contains(want), "{want} missing from\n{config}");
        }
    }

    #[test]
    fn pods_get_addresses_on_the_bridge_without_masquerading() {
        let config: serde_json::Value = serde_json::from_str(&cni_config(&node())).unwrap();
        let bridge = &config["plugins"][0];
        assert_eq!(bridge["bridge"], BRIDGE);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], POD_CIDR);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["gateway"], NODE_IP);
    }

    #[test]
    fn kubelet_serves_its_api_to_authenticated_and_authorized_clients_only() {
        let config = kubelet_config(&node(), Path::new("/tmp/ca.crt"));
        for want in [
            "anonymous: {enabled: false}",
            "mode: Webhook",
            "clientCAFile: /tmp/ca.crt",
            "readOnlyPort: 0",
            "cgroupDriver: cgroupfs",
        ] {
            assert!(config.contains(want), "{want} missing from\n{config}");
        }
    }

    #[test]
    fn kube_router_runs_only_its_firewall() {
        let args = kube_router_args(&node());
        for want in [
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--enable-cni=false",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} missing: {args:?}");
        }
    }
}
