//! The command lines of the three control-plane processes (etcd, kube-apiserver,
//! kube-controller-manager) and the free loopback ports they listen on.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;

use crate::certificates::{ApiServerFiles, FRONT_PROXY_CLIENT};
use crate::error::{Result, io};
use crate::network;

/// Where [`free_port`] looks: above the ports most daemons listen on, below Kubernetes' default
/// NodePort range (30000-32767), and so below Linux's default ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768-60999).
const LISTENING_PORTS: std::ops::Range<u16> = 20_000..30_000;

/// Tries of random ports in [`LISTENING_PORTS`] before [`free_port`] lets the OS pick.
const PORT_TRIES: u32 = 64;

/// Returns a TCP port free on every local address, for a server started afterwards, and
/// never one this process was handed before.
///
/// The port is released before the caller's server binds it. It is drawn at random from
/// 20000-29999, outside the kernel's ephemeral range, so the local end of an outgoing
/// connection (any process's client, at any moment) can never take it in between: a port the
/// OS picked by binding port 0 comes from that range, and a busy test run once lost one that
/// way ("bind: address already in use" from kube-apiserver). Where the ephemeral range reaches
/// below 30000, or 64 draws find nothing free, the OS picks instead.
///
/// # Errors
/// [`Error::Io`](crate::Error::Io) if no port can be bound.
pub fn free_port() -> Result<u16> {
    use std::hash::{BuildHasher, RandomState};
    static HANDED: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());
    let mut handed = HANDED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if ephemeral_ports_start() >= LISTENING_PORTS.end {
        let span = u64::from(LISTENING_PORTS.end - LISTENING_PORTS.start);
        let draws = RandomState::new();
        for attempt in 0..PORT_TRIES {
            let offset = draws.hash_one(attempt) % span;
            let port = LISTENING_PORTS.start + u16::try_from(offset).expect("below the span");
            if !handed.contains(&port) && is_free(port) {
                handed.insert(port);
                return Ok(port);
            }
        }
    }
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding a free port"))?;
        let port = listener
            .local_addr()
            .map_err(io("reading the bound port"))?
            .port();
        if handed.insert(port) {
            return Ok(port);
        }
    }
}

/// Whether nothing listens on `port` on any local address: binding the unspecified address
/// conflicts with a listener on any one of them.
fn is_free(port: u16) -> bool {
    TcpListener::bind(("0.0.0.0", port)).is_ok()
}

/// The first port of Linux's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), or 0
/// where it cannot be read, so that [`free_port`] then leaves the choice to the OS.
fn ephemeral_ports_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
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
/// client credentials) it listens on the node's address [`network::NODE_IP`], where Pods reach it
/// (still nothing outside this machine), authorizes kubelet with the Node authorizer and
/// NodeRestriction, and admits Pods with their ServiceAccount's token, as a real cluster does.
pub fn apiserver_args(dir: &Path, ports: Ports, files: &ApiServerFiles) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    let address = if files.kubelet_client.is_some() {
        network::NODE_IP
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
        format!("--service-cluster-ip-range={}", network::SERVICE_CIDR),
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
        // The aggregation layer, as kubeadm configures it: an APIService's requests go to its
        // server with the front-proxy client certificate and the caller in these headers.
        format!(
            "--requestheader-client-ca-file={}",
            path(&files.front_proxy.ca)
        ),
        format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
        "--requestheader-username-headers=X-Remote-User".to_owned(),
        "--requestheader-group-headers=X-Remote-Group".to_owned(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
        format!("--proxy-client-cert-file={}", path(&files.front_proxy.cert)),
        format!("--proxy-client-key-file={}", path(&files.front_proxy.key)),
        // To an APIService's Pod through its Service's endpoints, not the ClusterIP (which
        // needs kube-proxy on the API server's host).
        "--enable-aggregator-routing=true".to_owned(),
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
/// range from [`network::CLUSTER_CIDR`]; `kube-root-ca.crt` ConfigMaps carry the serving certificate.
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
            format!("--cluster-cidr={}", network::CLUSTER_CIDR),
            "--node-cidr-mask-size=24".to_owned(),
            format!("--service-cluster-ip-range={}", network::SERVICE_CIDR),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::{FrontProxyFiles, KubeletClientFiles};

    fn assert_has_all(args: &[String], wants: &[&str]) {
        for want in wants {
            assert!(
                args.iter().any(|a| a == want),
                "{want} missing from {args:?}"
            );
        }
    }

    #[test]
    fn a_free_port_is_outside_the_ephemeral_range_and_can_be_bound() {
        let ports: Vec<u16> = (0..64).map(|_| free_port().unwrap()).collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port handed out twice");
        for &port in &ports {
            if ephemeral_ports_start() >= LISTENING_PORTS.end {
                assert!(LISTENING_PORTS.contains(&port), "{port} from the OS");
            }
            TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        let held = TcpListener::bind(("127.0.0.1", ports[0])).unwrap();
        assert!(!is_free(ports[0]), "a listener on 127.0.0.1 went unseen");
        drop(held);
        assert!(is_free(ports[0]));
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
            front_proxy: FrontProxyFiles {
                ca: "/cp/front-proxy-ca.crt".into(),
                cert: "/cp/front-proxy-client.crt".into(),
                key: "/cp/front-proxy-client.key".into(),
            },
            kubelet_client: None,
        }
    }

    #[test]
    fn apiserver_proxies_aggregated_apis_with_the_front_proxy_certificate() {
        let args = apiserver_args(Path::new("/cp"), ports(), &files());
        assert_has_all(
            &args,
            &[
                "--requestheader-client-ca-file=/cp/front-proxy-ca.crt",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--proxy-client-cert-file=/cp/front-proxy-client.crt",
                "--proxy-client-key-file=/cp/front-proxy-client.key",
                "--enable-aggregator-routing=true",
            ],
        );
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
}
