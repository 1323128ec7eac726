//! Homestead and people's workloads in real Pods, on the local cluster's node (containerd, runc,
//! kubelet, kube-proxy, kube-router enforcing NetworkPolicy; see `homestead_testenv::node`).
//!
//! Homestead is installed as a platform team installs it: the image built here with no registry,
//! the Helm chart with two operator replicas, the SCIM service and Homestead's own NetworkPolicies
//! (`tools/node/install-chart.sh`). Then: leader failover between Pods and a `helm upgrade` that
//! rolls them without rewriting a User, SCIM through its Service's ClusterIP, a person's
//! workloads under their own credentials, network isolation with real traffic between Pods (and
//! `homestead doctor` trying it, with the NetworkPolicy implementation running and paused), and
//! a suspended person's running Pod losing its API access.
//!
//! The node needs root; without it (or without containerd, ...) every test here fails with the
//! message that names what is missing. None passes by skipping.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use homestead_testenv::{ADMIN, ControlPlane, Identity};

// Only helpers that start nothing: this binary's cluster is `cluster()`, with a node.
mod common;
use serde_json::{Value, json};

/// A person who runs workloads in their namespace.
const WALT: &str = "node-walt@example.com";
/// A person whose Pod uses the API, then is suspended.
const DAVE: &str = "node-dave@example.com";
/// A person in an isolated namespace who tries to open it.
const IRIS: &str = "node-iris@example.com";
/// A person who tries to take other people's traffic, and to open an isolated namespace's
/// egress.
const MAL: &str = "node-mal@example.com";
/// A person in an isolated namespace who tries to open its egress.
const SYB: &str = "node-syb@example.com";
/// The namespace the chart installs Homestead into.
const SYSTEM: &str = "homestead-system";

/// The cluster of this test binary: control plane and node, with tokens for the people above.
fn cluster() -> &'static ControlPlane {
    ControlPlane::shared(|o| {
        o.with_node()
            .identity(Identity::new(WALT))
            .identity(Identity::new(DAVE))
            .identity(Identity::new(IRIS))
            .identity(Identity::new(MAL))
            .identity(Identity::new(SYB))
            .identity(Identity::new(HOLLY))
            .identity(Identity::new(HANK))
            .identity(Identity::new(GINA))
            .identity(Identity::new(SUE))
            .identity(Identity::new(NOAH))
    })
}

/// Held for reading by every test while it needs Homestead installed (see [`installed`]), and
/// for writing by the one that uninstalls and installs it again.
static INSTALLED: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Installs the chart once ([`chart`]) and holds it installed until the guard is dropped.
async fn installed() -> tokio::sync::RwLockReadGuard<'static, ()> {
    chart();
    INSTALLED.read().await
}

/// Held for reading by tests that need NetworkPolicy enforced throughout, and for writing by
/// the one that pauses it.
static ENFORCEMENT: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// What `tools/node/install-chart.sh` installed, once per test binary.
struct Chart {
    /// The SCIM service's CA certificate and bearer token.
    scim_ca: PathBuf,
    scim_token: String,
}

fn chart() -> &'static Chart {
    static CHART: OnceLock<Chart> = OnceLock::new();
    CHART.get_or_init(|| {
        let plane = cluster();
        let node = plane.node().expect("the cluster has a node");
        let state = plane.dir().join("chart");
        let kubeconfig = plane
            .write_kubeconfig(ADMIN, &plane.dir().join("chart-admin.kubeconfig"))
            .unwrap();
        let started = Instant::now();
        let image = install_chart(&kubeconfig, &node.containerd_socket(), &state, &[]);
        println!(
            "image {image} built, loaded and the chart installed with every Pod Ready in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Chart {
            scim_ca: state.join("scim-service-ca.crt"),
            scim_token: std::fs::read_to_string(state.join("scim-service-token"))
                .unwrap()
                .trim()
                .to_owned(),
        }
    })
}

/// Runs `tools/node/install-chart.sh` (`helm upgrade --install`, waiting for every Pod to be
/// Ready) with the extra Helm arguments `helm`; returns the image it installed.
fn install_chart(kubeconfig: &Path, socket: &Path, state: &Path, helm: &[&str]) -> String {
    let out = std::process::Command::new(root().join("tools/node/install-chart.sh"))
        .arg(kubeconfig)
        .arg(socket)
        .arg(env!("CARGO_BIN_EXE_homestead"))
        .arg(state)
        .args(helm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "install-chart.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs kubectl as `identity` with `stdin`: whether it succeeded, and stdout then stderr.
fn kubectl_as(identity: &str, args: &[&str], stdin: &str) -> (bool, String) {
    common::run_with_stdin(cluster().kubectl(identity).unwrap().args(args), stdin)
}

fn kubectl(args: &[&str]) -> String {
    let (ok, out) = kubectl_as(ADMIN, args, "");
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

fn apply_as(identity: &str, object: &Value) -> (bool, String) {
    kubectl_as(identity, &["apply", "-f", "-"], &object.to_string())
}

/// Polls `f` every 500 ms for up to `secs` seconds until it returns `Some`; panics with `what`
/// and the cluster's Pods and Users otherwise.
async fn eventually<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(value) = f() {
            return value;
        }
        if Instant::now() > deadline {
            let (_, pods) = kubectl_as(ADMIN, &["get", "pods", "-A", "-o", "wide"], "");
            let (_, users) = kubectl_as(ADMIN, &["get", "users", "-o", "wide"], "");
            panic!("timed out after {secs} s waiting for {what}\n{pods}\n{users}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates User `name` for `username` with `spec` (merged over the identity) as the admin.
fn create_user(name: &str, username: &str, spec: Value) {
    let mut full = json!({"identity": {"username": username}});
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    let user = json!({"apiVersion": homestead_api::API_VERSION, "kind": "User",
        "metadata": {"name": name}, "spec": full});
    let (ok, out) = apply_as(ADMIN, &user);
    assert!(ok, "{out}");
}

/// The User's `Ready` condition as `status/reason`, once it describes the current generation.
fn ready(name: &str) -> Option<String> {
    let (ok, out) = kubectl_as(ADMIN, &["get", "user", name, "-o", "json"], "");
    let user: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
    let status = &user["status"];
    if status["observedGeneration"] != user["metadata"]["generation"] {
        return None;
    }
    let ready = status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?;
    Some(format!(
        "{}/{}",
        ready["status"].as_str()?,
        ready["reason"].as_str()?
    ))
}

async fn wait_ready(name: &str, want: &str) {
    eventually(&format!("User {name} to be {want}"), 90, || {
        (ready(name).as_deref() == Some(want)).then_some(())
    })
    .await;
}

/// A Pod of the toolbox image (busybox and kubectl) running `command`, meeting Pod Security's
/// restricted level.
fn toolbox_pod(namespace: &str, name: &str, labels: Value, command: &[&str]) -> Value {
    let image = cluster().node().unwrap().toolbox_image().unwrap();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65534,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container(&image, command)],
        }
    })
}

fn container(image: &str, command: &[&str]) -> Value {
    json!({
        "name": "main", "image": image, "imagePullPolicy": "Never", "command": command,
        "env": [{"name": "HOME", "value": "/tmp"}],
        "securityContext": {"allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}},
    })
}

/// An HTTP server Pod (busybox httpd on port 8080) labelled `app: <name>`.
fn server_pod(namespace: &str, name: &str) -> Value {
    toolbox_pod(
        namespace,
        name,
        json!({"app": name}),
        &["httpd", "-f", "-p", "8080", "-h", "/tmp"],
    )
}

/// A client Pod that sleeps, for `kubectl exec`.
fn client_pod(namespace: &str, name: &str) -> Value {
    toolbox_pod(namespace, name, json!({"app": name}), &["sleep", "3600"])
}

/// An HTTP server Pod labelled `app: <name>` whose page (`/`) says `says`.
fn named_server_pod(namespace: &str, name: &str, says: &str) -> Value {
    let script = format!("echo {says} > /tmp/index.html && exec httpd -f -p 8080 -h /tmp");
    toolbox_pod(
        namespace,
        name,
        json!({"app": name}),
        &["sh", "-c", &script],
    )
}

/// The body of `GET /` on `ip:8080` from inside `client` (busybox nc, 2 s timeout), if any.
fn page(namespace: &str, client: &str, ip: &str) -> Option<String> {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {ip} 8080");
    let (ok, out) = kubectl_as(
        ADMIN,
        &["-n", namespace, "exec", client, "--", "sh", "-c", &script],
        "",
    );
    let body = out.split_once("\r\n\r\n")?.1.trim().to_owned();
    (ok && out.starts_with("HTTP/1.")).then_some(body)
}

/// Waits until the Pod runs and returns its IP.
async fn running(namespace: &str, pod: &str) -> String {
    eventually(&format!("Pod {namespace}/{pod} to run"), 90, || {
        let (ok, out) = kubectl_as(
            ADMIN,
            &[
                "-n",
                namespace,
                "get",
                "pod",
                pod,
                "-o",
                "jsonpath={.status.phase} {.status.podIP}",
            ],
            "",
        );
        let (phase, ip) = out.trim().split_once(' ')?;
        (ok && phase == "Running" && !ip.is_empty()).then(|| ip.to_owned())
    })
    .await
}

/// Whether an HTTP request from inside `client` reaches `ip:8080` (busybox nc, 2 s timeout).
fn reaches(namespace: &str, client: &str, ip: &str) -> bool {
    let script = format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 {ip} 8080");
    let (_, out) = kubectl_as(
        ADMIN,
        &["-n", namespace, "exec", client, "--", "sh", "-c", &script],
        "",
    );
    out.starts_with("HTTP/1.")
}

/// A plain HTTP GET from this machine: status code and body.
fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    let mut stream =
        TcpStream::connect_timeout(&address.parse().ok()?, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((code, body))
}

/// The value of the unlabelled gauge `name` in a Prometheus text exposition.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// The operator Pods that are Ready: name and IP.
fn ready_operator_pods() -> Vec<(String, String)> {
    let out = kubectl(&[
        "-n",
        SYSTEM,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=homestead",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.podIP} {.status.conditions[?(@.type==\"Ready\")].status} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            match parts.as_slice() {
                [name, ip, "True"] => Some(((*name).to_owned(), (*ip).to_owned())),
                _ => None,
            }
        })
        .collect()
}

/// The Ready operator Pods scraped on their metrics port: name and `homestead_leader`.
fn leadership() -> Vec<(String, f64)> {
    ready_operator_pods()
        .into_iter()
        .filter_map(|(name, ip)| {
            let (_, body) = http_get(&format!("{ip}:8080"), "/metrics")?;
            Some((name, gauge(&body, "homestead_leader")?))
        })
        .collect()
}

fn cluster_ip(namespace: &str, service: &str) -> String {
    kubectl(&[
        "-n",
        namespace,
        "get",
        "service",
        service,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn two_operator_pods_elect_a_leader_survive_its_death_and_an_upgrade_without_rewriting_a_user()
 {
    let _installed = installed().await;
    let leaders = eventually("two Ready operator Pods, exactly one leading", 120, || {
        let pods = leadership();
        let leading: Vec<String> = pods
            .iter()
            .filter(|(_, l)| *l == 1.0)
            .map(|(n, _)| n.clone())
            .collect();
        (pods.len() == 2 && leading.len() == 1).then(|| (leading[0].clone(), pods))
    })
    .await;
    let (leader, pods) = leaders;
    println!("operator Pods and homestead_leader: {pods:?}");
    // Through the metrics Service (ClusterIP, kube-proxy), as Prometheus scrapes it.
    let service = format!("{}:8080", cluster_ip(SYSTEM, "homestead-metrics"));
    eventually(
        "the metrics Service to answer with homestead_leader",
        30,
        || {
            let (code, body) = http_get(&service, "/metrics")?;
            (code == 200 && gauge(&body, "homestead_leader").is_some()).then_some(())
        },
    )
    .await;

    // The leader dies without a chance to release its Lease.
    let killed = Instant::now();
    kubectl(&[
        "-n",
        SYSTEM,
        "delete",
        "pod",
        &leader,
        "--grace-period=0",
        "--force",
    ]);
    // The Pod object is gone at once; its process may live a moment longer (kubelet still
    // sends SIGTERM), so the new User is created only once another Pod leads.
    let new_leader = eventually("another operator Pod to lead", 60, || {
        leadership()
            .into_iter()
            .find(|(name, l)| *l == 1.0 && *name != leader)
            .map(|(name, _)| name)
    })
    .await;
    let took_over = killed.elapsed();
    create_user("node-failover", "node-failover@example.com", json!({}));
    wait_ready("node-failover", "True/Provisioned").await;
    println!(
        "leader {leader} killed; {new_leader} led {:.1} s later and had provisioned a new User \
         {:.1} s later",
        took_over.as_secs_f64(),
        killed.elapsed().as_secs_f64()
    );

    // A `helm upgrade` that rolls both operator Pods (a new Pod label): the User stays as it is,
    // and neither the Pods going nor the new leader's first reconcile of every User writes to
    // it, its status or anything in its namespace.
    let audit = cluster().dir().join("audit.log");
    let mark = std::fs::read_to_string(&audit).unwrap().lines().count();
    let before: Vec<String> = ready_operator_pods().into_iter().map(|(n, _)| n).collect();
    let plane = cluster();
    let kubeconfig = plane.dir().join("chart-admin.kubeconfig");
    let state = plane.dir().join("chart");
    let socket = plane.node().unwrap().containerd_socket();
    install_chart(
        &kubeconfig,
        &socket,
        &state,
        &["--set", "operator.podLabels.rollout=upgraded"],
    );
    let upgraded = eventually("two new Ready operator Pods, one leading", 120, || {
        let pods = leadership();
        let fresh = pods.iter().all(|(n, _)| !before.contains(n));
        let leading = pods.iter().filter(|(_, l)| *l == 1.0).count();
        (pods.len() == 2 && fresh && leading == 1).then_some(pods)
    })
    .await;
    // The new leader reconciles every User when its caches are synced, within seconds.
    tokio::time::sleep(Duration::from_secs(10)).await;
    wait_ready("node-failover", "True/Provisioned").await;
    let operator = format!("system:serviceaccount:{SYSTEM}:homestead");
    let log = std::fs::read_to_string(&audit).unwrap();
    let operator_writes = |lines: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        lines
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| {
                let r = &e["objectRef"];
                let about_the_user = (r["resource"] == "users" && r["name"] == "node-failover")
                    || (r["resource"] == "namespaces" && r["name"] == "user-node-failover")
                    || r["namespace"] == "user-node-failover";
                e["user"]["username"] == operator.as_str()
                    && ["create", "update", "patch", "delete"]
                        .contains(&e["verb"].as_str().unwrap_or(""))
                    && about_the_user
            })
            .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
            .collect()
    };
    assert!(
        !operator_writes(&mut log.lines().take(mark)).is_empty(),
        "the audit log shows the operator provisioning the User before the upgrade"
    );
    let writes = operator_writes(&mut log.lines().skip(mark));
    println!("after the upgrade: {upgraded:?}");
    assert!(
        writes.is_empty(),
        "the upgrade rewrote the User's objects: {writes:#?}"
    );
    kubectl(&["delete", "user", "node-failover", "--wait=false"]);
}

/// Sends a SCIM request through the SCIM Service's ClusterIP (kube-proxy), verifying the
/// service's certificate for its DNS name; returns the status and body. A connection that
/// fails (kube-proxy may program a new Service's rules a moment after its Pods are Ready) is
/// tried again for up to 30 s.
fn scim(method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match scim_once(method, path, body) {
            Ok(answer) => return answer,
            Err(e) if Instant::now() > deadline => panic!("{e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

fn scim_once(method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), String> {
    let chart = chart();
    let host = "homestead-scim.homestead-system.svc";
    let ip = cluster_ip(SYSTEM, "homestead-scim");
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "-X", method, "--max-time", "20", "--cacert"])
        .arg(&chart.scim_ca)
        .args(["--resolve", &format!("{host}:8443:{ip}")])
        .args(["-H", &format!("Authorization: Bearer {}", chart.scim_token)])
        .args(["-H", "Content-Type: application/scim+json"])
        .args(["-w", "\n%{http_code}"]);
    if let Some(body) = body {
        curl.args(["--data", &body.to_string()]);
    }
    let out = curl
        .arg(format!("https://{host}:8443/scim/v2{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    match code.trim().parse() {
        Ok(code) if code != 0 => Ok((code, serde_json::from_str(body).unwrap_or(Value::Null))),
        _ => Err(format!(
            "curl {method} {path}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scim_through_its_service_creates_suspends_and_deletes_a_person() {
    let _installed = installed().await;
    let person = json!({
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": "node-sam@example.com",
        "displayName": "Sam Node",
        "active": true,
    });
    let (code, created) = scim("POST", "/Users", Some(&person));
    assert_eq!(code, 201, "{created}");
    // SCIM's id is the User's uid.
    let id = created["id"].as_str().expect("an id").to_owned();
    let name = kubectl(&[
        "get",
        "users",
        "-o",
        "jsonpath={range .items[*]}{.metadata.uid} {.metadata.name}{\"\\n\"}{end}",
    ])
    .lines()
    .find_map(|l| l.strip_prefix(&format!("{id} ")).map(str::to_owned))
    .expect("a User with the SCIM id as its uid");
    wait_ready(&name, "True/Provisioned").await;
    let namespace = kubectl(&["get", "user", &name, "-o", "jsonpath={.status.namespace}"]);
    assert!(
        !kubectl(&["-n", &namespace, "get", "rolebindings", "-o", "name"])
            .trim()
            .is_empty()
    );

    let suspend = json!({
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "replace", "path": "active", "value": false}],
    });
    let (code, patched) = scim("PATCH", &format!("/Users/{id}"), Some(&suspend));
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["active"], false);
    eventually("the suspended person's RoleBindings to be gone", 60, || {
        kubectl(&["-n", &namespace, "get", "rolebindings", "-o", "name"])
            .trim()
            .is_empty()
            .then_some(())
    })
    .await;
    wait_ready(&name, "True/Suspended").await;

    let (code, _) = scim("DELETE", &format!("/Users/{id}"), None);
    assert_eq!(code, 204);
    eventually("the User to be gone", 90, || {
        let (ok, out) = kubectl_as(ADMIN, &["get", "user", &name], "");
        (!ok && out.contains("NotFound")).then_some(())
    })
    .await;
    let (code, _) = scim("GET", &format!("/Users/{id}"), None);
    assert_eq!(code, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_persons_workloads_run_within_their_profile_under_their_own_credentials() {
    let _installed = installed().await;
    let profile = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
        "metadata": {"name": "node-workloads"},
        "spec": {
            "role": "edit",
            "quota": {"hard": {"pods": "1"}},
            "limitRange": {"limits": [{"type": "Container",
                "default": {"cpu": "200m", "memory": "96Mi"},
                "defaultRequest": {"cpu": "50m", "memory": "32Mi"}}]},
        }
    });
    let (ok, out) = apply_as(ADMIN, &profile);
    assert!(ok, "{out}");
    create_user("node-walt", WALT, json!({"profile": "node-workloads"}));
    wait_ready("node-walt", "True/Provisioned").await;
    let ns = "user-node-walt";

    // A Deployment of the person's, as the person: kube-controller-manager makes its
    // ReplicaSet and Pod, the scheduler places it, kubelet runs it.
    let image = cluster().node().unwrap().toolbox_image().unwrap();
    let pod_spec = toolbox_pod(
        ns,
        "x",
        json!({}),
        &["httpd", "-f", "-p", "8080", "-h", "/tmp"],
    )["spec"]
        .clone();
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec},
        }
    });
    let (ok, out) = apply_as(WALT, &deployment);
    assert!(ok, "{out}");
    eventually("the person's Deployment to be available", 120, || {
        let (ok, out) = kubectl_as(
            WALT,
            &[
                "-n",
                ns,
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.availableReplicas}",
            ],
            "",
        );
        (ok && out.trim() == "1").then_some(())
    })
    .await;
    // The Profile's LimitRange default is on the running container.
    let (ok, out) = kubectl_as(
        WALT,
        &[
            "-n",
            ns,
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].status.phase} {.items[0].spec.containers[0].resources.limits.memory} {.items[0].spec.containers[0].resources.requests.cpu}",
        ],
        "",
    );
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "Running 96Mi 50m");

    // The quota (one Pod) refuses a second one.
    let (ok, out) = apply_as(WALT, &client_pod(ns, "one-too-many"));
    assert!(!ok && out.contains("exceeded quota"), "{out}");

    // Pod Security (baseline, the chart's default) refuses a privileged Pod.
    let mut privileged = toolbox_pod(ns, "privileged", json!({}), &["sleep", "60"]);
    privileged["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    privileged["spec"]["containers"][0]["image"] = json!(image);
    let (ok, out) = apply_as(WALT, &privileged);
    assert!(!ok && out.contains("violates PodSecurity"), "{out}");

    kubectl(&["delete", "user", "node-walt", "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn isolated_namespaces_admit_only_their_own_and_allowed_traffic() {
    let _installed = installed().await;
    let _enforced = ENFORCEMENT.read().await;
    // A gateway namespace (isolation None) that isolated namespaces admit.
    create_user("node-gate", "node-gate@example.com", json!({}));
    let profile = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
        "metadata": {"name": "node-isolated"},
        "spec": {"networkIsolation": "Isolated", "allowIngressFrom": ["user-node-gate"]},
    });
    let (ok, out) = apply_as(ADMIN, &profile);
    assert!(ok, "{out}");
    create_user("node-iris", IRIS, json!({"profile": "node-isolated"}));
    create_user(
        "node-ivan",
        "node-ivan@example.com",
        json!({"profile": "node-isolated"}),
    );
    create_user("node-olga", "node-olga@example.com", json!({}));
    for user in ["node-gate", "node-iris", "node-ivan", "node-olga"] {
        wait_ready(user, "True/Provisioned").await;
    }
    let (iris, ivan, olga, gate) = (
        "user-node-iris",
        "user-node-ivan",
        "user-node-olga",
        "user-node-gate",
    );
    for ns in [iris, ivan, olga] {
        let (ok, out) = apply_as(ADMIN, &server_pod(ns, "server"));
        assert!(ok, "{out}");
    }
    for ns in [iris, ivan, olga, gate] {
        let (ok, out) = apply_as(ADMIN, &client_pod(ns, "client"));
        assert!(ok, "{out}");
    }
    let iris_server = running(iris, "server").await;
    let olga_server = running(olga, "server").await;
    for ns in [iris, ivan, olga, gate] {
        running(ns, "client").await;
    }

    // Reachable: within the isolated namespace, from the allowed namespace, and anything in
    // a namespace without isolation from its own.
    for (ns, target, what) in [
        (iris, &iris_server, "iris's server from iris's namespace"),
        (
            gate,
            &iris_server,
            "iris's server from the allowed namespace",
        ),
        (olga, &olga_server, "olga's server from olga's namespace"),
    ] {
        eventually(&format!("{what} to be reachable"), 60, || {
            reaches(ns, "client", target).then_some(())
        })
        .await;
    }
    // Blocked: another person's isolated namespace, a namespace without isolation, and (egress)
    // from an isolated namespace to one outside its allowed set. Policies take a moment to
    // apply; once blocked, they stay blocked.
    for (ns, target, what) in [
        (ivan, &iris_server, "iris's server from ivan's namespace"),
        (olga, &iris_server, "iris's server from olga's namespace"),
        (iris, &olga_server, "olga's server from iris's namespace"),
    ] {
        eventually(&format!("{what} to be blocked"), 60, || {
            (!reaches(ns, "client", target)).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!reaches(ns, "client", target), "{what} is reachable again");
    }

    // The person (admin in their namespace) cannot open it with an allow-all policy of their own.
    let allow_all = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "allow-all", "namespace": iris},
        "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]},
    });
    let (ok, out) = apply_as(IRIS, &allow_all);
    assert!(!ok, "iris opened her isolated namespace: {out}");
    println!("iris's own allow-all NetworkPolicy: {}", out.trim());
    assert!(!reaches(olga, "client", &iris_server));

    for user in ["node-gate", "node-iris", "node-ivan", "node-olga"] {
        kubectl(&["delete", "user", user, "--wait=false"]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_suspended_persons_running_pod_loses_its_api_access() {
    let _installed = installed().await;
    create_user("node-dave", DAVE, json!({"role": "admin"}));
    wait_ready("node-dave", "True/Provisioned").await;
    let ns = "user-node-dave";
    // Dave lets his Pods' ServiceAccount read his namespace, and runs a Pod that uses it.
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "pods-may-read", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
    });
    let (ok, out) = apply_as(DAVE, &binding);
    assert!(ok, "{out}");
    let (ok, out) = apply_as(DAVE, &client_pod(ns, "worker"));
    assert!(ok, "{out}");
    running(ns, "worker").await;
    // From inside the Pod, with its ServiceAccount token, through the kubernetes Service.
    let from_pod = || {
        kubectl_as(
            ADMIN,
            &[
                "-n", ns, "exec", "worker", "--", "kubectl", "get", "pods", "-o", "name",
            ],
            "",
        )
    };
    let (ok, out) = from_pod();
    assert!(ok && out.contains("pod/worker"), "{out}");

    kubectl(&[
        "patch",
        "user",
        "node-dave",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspended":true}}"#,
    ]);
    let refused = eventually("the Pod's API access to be refused", 60, || {
        let (ok, out) = from_pod();
        (!ok && out.contains("Forbidden")).then_some(out)
    })
    .await;
    println!("after suspension, from inside the Pod: {}", refused.trim());
    // The Pod itself keeps running: suspension revokes access, not workloads.
    let phase = kubectl(&[
        "-n",
        ns,
        "get",
        "pod",
        "worker",
        "-o",
        "jsonpath={.status.phase}",
    ]);
    assert_eq!(phase, "Running");
    kubectl(&["delete", "user", "node-dave", "--wait=false"]);
}

/// Issue 45, findings 1 and 2, with real traffic between Pods. (1) A Service with
/// `spec.externalIPs` naming another person's Pod IP makes kube-proxy send everyone's traffic
/// for that Pod to the Service's endpoints (CVE-2020-8554): shown working in a namespace
/// Homestead does not govern, then refused to a person with `admin` in their own, whose
/// neighbours' traffic keeps reaching them. (2) A person in an `Isolated` namespace may not
/// open its egress with an ipBlock policy of their own, and their Pod still reaches nobody
/// outside it.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_can_neither_take_anothers_traffic_nor_open_isolated_egress() {
    let _installed = installed().await;
    let _enforced = ENFORCEMENT.read().await;
    create_user("node-mal", MAL, json!({}));
    create_user("node-bea", "node-bea@example.com", json!({}));
    create_user("node-dan", "node-dan@example.com", json!({}));
    let profile = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
        "metadata": {"name": "node-contractor"},
        "spec": {"role": "admin", "networkIsolation": "Isolated"},
    });
    let (ok, out) = apply_as(ADMIN, &profile);
    assert!(ok, "{out}");
    create_user("node-syb", SYB, json!({"profile": "node-contractor"}));
    for user in ["node-mal", "node-bea", "node-dan", "node-syb"] {
        wait_ready(user, "True/Provisioned").await;
    }
    let (mal, bea, dan, syb, plain) = (
        "user-node-mal",
        "user-node-bea",
        "user-node-dan",
        "user-node-syb",
        "node-plain",
    );
    kubectl(&["create", "namespace", plain]);
    for (ns, says) in [(bea, "bea"), (mal, "mallory"), (plain, "plain")] {
        let (ok, out) = apply_as(ADMIN, &named_server_pod(ns, "server", says));
        assert!(ok, "{out}");
    }
    for ns in [dan, syb] {
        let (ok, out) = apply_as(ADMIN, &client_pod(ns, "client"));
        assert!(ok, "{out}");
    }
    let bea_ip = running(bea, "server").await;
    running(mal, "server").await;
    running(plain, "server").await;
    running(dan, "client").await;
    running(syb, "client").await;
    eventually("dan to reach bea's server", 60, || {
        (page(dan, "client", &bea_ip).as_deref() == Some("bea")).then_some(())
    })
    .await;

    // The control: where no admission policy of Homestead's applies, externalIPs really take
    // another Pod's traffic on this node.
    let steal = |ns: &str| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "steal", "namespace": ns},
            "spec": {"selector": {"app": "server"}, "externalIPs": [bea_ip],
                     "ports": [{"port": 8080, "targetPort": 8080}]},
        })
    };
    let (ok, out) = apply_as(ADMIN, &steal(plain));
    assert!(ok, "{out}");
    eventually(
        "kube-proxy to send bea's traffic to the plain namespace",
        60,
        || (page(dan, "client", &bea_ip).as_deref() == Some("plain")).then_some(()),
    )
    .await;
    kubectl(&["-n", plain, "delete", "service", "steal"]);
    eventually("bea's traffic to reach bea again", 60, || {
        (page(dan, "client", &bea_ip).as_deref() == Some("bea")).then_some(())
    })
    .await;

    // The attack by a person with admin in their own namespace: refused, and dan keeps
    // reaching bea.
    let (ok, out) = apply_as(MAL, &steal(mal));
    assert!(
        !ok && out.contains("CVE-2020-8554"),
        "mal took bea's traffic: {out}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(page(dan, "client", &bea_ip).as_deref(), Some("bea"));

    // Finding 2: syb's isolated namespace reaches nobody outside it, and her own ipBlock
    // policy cannot change that.
    eventually("syb's egress to bea to be blocked", 60, || {
        page(syb, "client", &bea_ip).is_none().then_some(())
    })
    .await;
    let open_egress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "egress-everywhere", "namespace": syb},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                 "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]},
    });
    let (ok, out) = apply_as(SYB, &open_egress);
    assert!(
        !ok && out.contains("isolated"),
        "syb opened her egress: {out}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(page(syb, "client", &bea_ip), None, "syb reaches bea");

    kubectl(&["delete", "namespace", plain, "--wait=false"]);
    for user in ["node-mal", "node-bea", "node-dan", "node-syb"] {
        kubectl(&["delete", "user", user, "--wait=false"]);
    }
}

/// A person whose home is shared, who shares it.
const HOLLY: &str = "node-holly@example.com";
/// A person Holly shares her home with.
const HANK: &str = "node-hank@example.com";
/// A person in the directory group Holly shares her home with.
const GINA: &str = "node-gina@example.com";
/// A person who is suspended while a share names them.
const SUE: &str = "node-sue@example.com";
/// A person with no User: nothing to see.
const NOAH: &str = "node-noah@example.com";

/// A Share of `home` by `owner` (their own token) to `to` (grantees) in `role`, ending in
/// `seconds`.
fn share(owner: &str, home: &str, name: &str, to: Value, role: &str, seconds: i64) {
    let ends =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
    let share = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": {"name": name, "namespace": home,
                     "annotations": {"homestead.dev/created-by": owner}},
        "spec": {"to": to, "role": role, "reason": "issue 49 node test",
                 "expiresAt": ends.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
    });
    let (ok, out) = kubectl_as(owner, &["create", "-f", "-"], &share.to_string());
    assert!(ok, "{out}");
}

/// `kubectl get homes ARGS` as `identity` with their own token: whether it succeeded, and
/// stdout then stderr.
fn homes_as(identity: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["get", "homes"];
    all.extend_from_slice(args);
    kubectl_as(identity, &all, "")
}

/// The NAME, ROLE and VIA... columns of `kubectl get homes` as `identity`, one string per row
/// with its cells joined by single spaces (the header left out).
fn home_rows(identity: &str, args: &[&str]) -> Vec<String> {
    let (ok, out) = homes_as(identity, args);
    assert!(ok, "kubectl get homes as {identity}: {out}");
    out.lines()
        .skip(1)
        .map(|line| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Issue 49 through the real API server: kube-apiserver authenticates each person (their own
/// token), authorizes `homes` by the chart's ClusterRole for `system:authenticated`, and proxies
/// to the homes API's Pods with its front-proxy certificate. Each person sees exactly their
/// homes (own, a share to them, a share to their group); a suspended person sees their home
/// suspended and no share; a person with nothing sees nothing; another's home by name is 404;
/// `-o wide|yaml|name` work; a watch sees a share appear and end.
#[tokio::test(flavor = "multi_thread")]
async fn each_person_sees_exactly_their_homes_with_plain_kubectl() {
    let _installed = installed().await;
    eventually("the homes APIService to be Available", 90, || {
        let out = kubectl(&[
            "get",
            "apiservice",
            "v1alpha1.homes.homestead.dev",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
        ]);
        (out == "True").then_some(())
    })
    .await;
    for (name, identity) in [
        ("node-holly", HOLLY),
        ("node-hank", HANK),
        ("node-gina", GINA),
        ("node-sue", SUE),
    ] {
        create_user(name, identity, json!({"role": "admin"}));
    }
    let group = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
        "metadata": {"name": "node-readers"},
        "spec": {"displayName": "Node readers", "members": ["node-gina"]},
    });
    let (ok, out) = apply_as(ADMIN, &group);
    assert!(ok, "{out}");
    for name in ["node-holly", "node-hank", "node-gina", "node-sue"] {
        wait_ready(name, "True/Provisioned").await;
    }
    share(
        HOLLY,
        "user-node-holly",
        "review",
        json!([{"user": "node-hank"}, {"user": "node-sue"}, {"group": "node-readers"}]),
        "view",
        7 * 86_400,
    );

    // Hank: his own home, and Holly's through the share.
    let hank = eventually("Hank to see Holly's share", 30, || {
        let rows = home_rows(HANK, &[]);
        (rows.len() == 2).then_some(rows)
    })
    .await;
    assert!(
        hank[0].starts_with("user-node-hank admin own home - "),
        "{hank:?}"
    );
    assert!(
        hank[1].starts_with("user-node-holly view share review "),
        "{hank:?}"
    );
    // Gina: through her group.
    let gina = home_rows(GINA, &[]);
    assert!(
        gina.iter()
            .any(|r| r.starts_with("user-node-holly view group node-readers (share review)")),
        "{gina:?}"
    );
    // Holly sees her own home only, and not Hank's, by name: 404 as for no home at all.
    let holly = home_rows(HOLLY, &[]);
    assert_eq!(holly.len(), 1, "{holly:?}");
    let (ok, out) = homes_as(HOLLY, &["user-node-hank"]);
    assert!(
        !ok && out.contains("NotFound") && !out.contains("Forbidden"),
        "{out}"
    );
    // Noah has no User: an empty list, not an error.
    let (ok, out) = homes_as(NOAH, &[]);
    assert!(ok && out.contains("No resources found"), "{out}");
    // -o wide adds STATE, SLICE and TOTAL (`-`: no total quota here); -o yaml says who is
    // asking; -o name names the objects.
    let wide = home_rows(HANK, &["-o", "wide"]);
    assert!(wide[0].ends_with(" Active - -"), "{wide:?}");
    let (ok, yaml) = homes_as(HANK, &["user-node-hank", "-o", "yaml"]);
    assert!(
        ok && yaml.contains("kind: Home") && yaml.contains("user: node-hank"),
        "{yaml}"
    );
    let (ok, names) = homes_as(HANK, &["-o", "name"]);
    assert!(ok, "{names}");
    assert_eq!(
        names.lines().collect::<Vec<_>>(),
        [
            "home.homes.homestead.dev/user-node-hank",
            "home.homes.homestead.dev/user-node-holly"
        ]
    );

    // Sue is suspended: her home shows as such, and Holly's share to her is gone.
    kubectl(&[
        "patch",
        "user",
        "node-sue",
        "--type=merge",
        "-p",
        r#"{"spec":{"suspended":true}}"#,
    ]);
    wait_ready("node-sue", "True/Suspended").await;
    let sue = eventually("Sue's home to show suspended", 30, || {
        let rows = home_rows(SUE, &["-o", "wide"]);
        (rows.len() == 1 && rows[0].ends_with(" Suspended - -")).then_some(rows)
    })
    .await;
    assert!(
        sue[0].starts_with("user-node-sue admin own home"),
        "{sue:?}"
    );

    // A watch (Hank's own token): Gina shares her home with him for 20 s; the watch sees it
    // appear, then go when it ends.
    let mut watch = cluster()
        .kubectl(HANK)
        .unwrap()
        .args(["get", "homes", "--watch-only", "--output-watch-events"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = watch.stdout.take().unwrap();
    let lines = std::thread::spawn(move || {
        let mut all = String::new();
        let _ = stdout.read_to_string(&mut all);
        all
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    share(
        GINA,
        "user-node-gina",
        "quick",
        json!([{"user": "node-hank"}]),
        "edit",
        20,
    );
    eventually("Gina's share to end", 60, || {
        let rows = home_rows(HANK, &[]);
        (rows.len() == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    watch.kill().unwrap();
    let _ = watch.wait();
    let events: Vec<String> = lines
        .join()
        .unwrap()
        .lines()
        .map(|line| {
            line.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    println!("Hank's watch: {events:?}");
    assert!(
        events.contains(&"ADDED user-node-gina edit".to_owned()),
        "{events:?}"
    );
    assert!(
        events.contains(&"DELETED user-node-gina edit".to_owned()),
        "{events:?}"
    );
    for name in ["node-holly", "node-hank", "node-gina", "node-sue"] {
        kubectl(&["delete", "user", name, "--wait=false"]);
    }
}

/// Issue 49, as the attacker: the homes API's Pods, reached directly (not through the API
/// server), refuse forged `X-Remote-User` headers: without a client certificate (401) and with
/// one from another CA (the TLS handshake fails); and a person's Pod cannot even open a
/// connection to them (the NetworkPolicy admits the API server alone).
#[tokio::test(flavor = "multi_thread")]
async fn the_homes_api_refuses_forged_headers_and_other_pods() {
    let _installed = installed().await;
    let pods = kubectl(&[
        "-n",
        SYSTEM,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=homestead-homes-api",
        "-o",
        "jsonpath={.items[*].status.podIP}",
    ]);
    let ips: Vec<&str> = pods.split_whitespace().collect();
    assert_eq!(ips.len(), 2, "two replicas: {pods}");
    let url = format!(
        "https://{}:8443/apis/homes.homestead.dev/v1alpha1/homes",
        ips[0]
    );
    // No client certificate: 401, whatever the headers say. Over HTTP/1.1: the homes API
    // speaks HTTP/2 only to the front proxy and closes anyone else's HTTP/2 connection
    // unanswered (docs/security.md).
    let out = std::process::Command::new("curl")
        .args(["-sk", "--http1.1", "-o", "/dev/null", "-w", "%{http_code}"])
        .args(["-H", "X-Remote-User: node-holly@example.com"])
        .args(["-H", "X-Remote-Group: system:masters"])
        .arg(&url)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    // A client certificate from a CA of the attacker's own: no TLS session at all.
    let dir = cluster().dir().join("homes-attacker");
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("client.key");
    let cert = dir.join("client.crt");
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=front-proxy-client",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let out = std::process::Command::new("curl")
        .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg("--cert")
        .arg(&cert)
        .arg("--key")
        .arg(&key)
        .args(["-H", "X-Remote-User: node-holly@example.com"])
        .arg(&url)
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a handshake with another CA's certificate: {out:?}"
    );
    assert_ne!(String::from_utf8_lossy(&out.stdout), "200");

    // From a person's Pod: the connection itself is refused by the NetworkPolicy.
    create_user("node-mia", "node-mia@example.com", json!({"role": "admin"}));
    wait_ready("node-mia", "True/Provisioned").await;
    let ns = "user-node-mia";
    let (ok, out) = apply_as(ADMIN, &client_pod(ns, "prober"));
    assert!(ok, "{out}");
    running(ns, "prober").await;
    // The toolbox's kubectl as the HTTP client: 401 if it got through; refused (kube-router
    // rejects) or timed out if not. This machine got 401 from the same address and port above,
    // so the port is open to the API server's address and to nobody else.
    let server = format!("--server=https://{}:8443", ips[0]);
    let (ok, out) = kubectl_as(
        ADMIN,
        &[
            "-n",
            ns,
            "exec",
            "prober",
            "--",
            "kubectl",
            &server,
            "--insecure-skip-tls-verify",
            "--token=forged",
            "--request-timeout=5s",
            "get",
            "--raw",
            "/apis/homes.homestead.dev/v1alpha1/homes",
        ],
        "",
    );
    assert!(
        !ok && !out.contains("Unauthorized")
            && ["refused", "timeout", "deadline"]
                .iter()
                .any(|w| out.contains(w)),
        "a tenant's Pod reached the homes API: {out}"
    );
    kubectl(&["delete", "user", "node-mia", "--wait=false"]);
}

/// Runs `homestead doctor` as the admin (probe image: the operator Deployment's); whether it
/// exited 0, and its output (stdout then stderr).
fn doctor() -> (bool, String) {
    let plane = cluster();
    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &plane.dir().join("doctor-admin.kubeconfig"))
        .unwrap();
    common::run_with_stdin(
        std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
            .arg("doctor")
            .arg("--kubeconfig")
            .arg(kubeconfig),
        "",
    )
}

/// `homestead doctor` proves network isolation with real traffic between probe Pods of the
/// operator's own image: `ok` while kube-router enforces NetworkPolicy, and `FAIL ... NOT
/// enforced` with the fix (exit 1) while it is paused, the NetworkPolicy still in the API. Its
/// probe namespaces are removed either way.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_proves_isolation_with_real_traffic_and_fails_when_nothing_enforces_it() {
    let _installed = installed().await;
    let profile = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
        "metadata": {"name": "node-doctor-isolated"},
        "spec": {"networkIsolation": "Isolated"},
    });
    let (ok, out) = apply_as(ADMIN, &profile);
    assert!(ok, "{out}");
    let _paused_for_others = ENFORCEMENT.write().await;
    let isolation = |out: &str| {
        out.lines()
            .find(|l| l.contains("network isolation: "))
            .unwrap_or_else(|| panic!("no isolation check in {out}"))
            .to_owned()
    };

    let (ok, out) = doctor();
    println!("{out}");
    assert!(ok, "{out}");
    let line = isolation(&out);
    assert!(
        line.starts_with("ok    network isolation: enforced for Profiles")
            && line.contains("node-doctor-isolated")
            && line.contains("probe Pods of homestead.local/homestead:dev-"),
        "{out}"
    );

    let paused = cluster().node().unwrap().pause_network_policy().unwrap();
    let (ok, out) = doctor();
    drop(paused);
    println!("{out}");
    assert!(!ok, "doctor passed with NetworkPolicy unenforced: {out}");
    let line = isolation(&out);
    assert!(
        line.starts_with("FAIL  network isolation: NOT enforced"),
        "{out}"
    );
    assert!(
        out.contains("fix: the NetworkPolicy is written but nothing enforces it"),
        "{out}"
    );

    eventually("the probe namespaces to be removed", 90, || {
        let names = kubectl(&[
            "get",
            "namespaces",
            "-l",
            "homestead.dev/doctor=probe",
            "-o",
            "name",
        ]);
        names.trim().is_empty().then_some(())
    })
    .await;
    kubectl(&["delete", "profile", "node-doctor-isolated"]);
}

/// `homestead release` as the admin with `args`: whether it exited 0, and its output.
fn release(args: &[&str]) -> (bool, String) {
    let kubeconfig = cluster().dir().join("chart-admin.kubeconfig");
    common::run_with_stdin(
        std::process::Command::new(env!("CARGO_BIN_EXE_homestead"))
            .arg("release")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args),
        "",
    )
}

/// The value of `jsonpath` on the object `kind/name`, as the admin.
fn jsonpath(kind_name: &str, jsonpath: &str) -> String {
    kubectl(&["get", kind_name, "-o", &format!("jsonpath={jsonpath}")])
}

/// `helm uninstall` with `crds.keep=false` loses no person's data and leaves nobody their
/// access: the chart's pre-delete hook (a Job of Homestead's image running `homestead release`)
/// deletes the users CRD while the operator still runs, so it releases every User as Retain,
/// the one with `deletionPolicy: Delete` too; then Helm removes the operator and the other CRDs.
/// Without the hook, Helm removed the operator's RBAC first and the users CRD hung in
/// Terminating on every User's finalizer. `homestead release` refuses when no operator leads.
/// The chart is installed again afterwards, for the other tests.
#[tokio::test(flavor = "multi_thread")]
async fn helm_uninstall_without_keeping_the_crds_releases_every_user_and_keeps_their_data() {
    chart();
    let _alone = INSTALLED.write().await;
    create_user(
        "node-del",
        "node-del@example.com",
        json!({"deletionPolicy": "Delete"}),
    );
    create_user("node-ret", "node-ret@example.com", json!({}));
    let profile = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Profile",
        "metadata": {"name": "node-release"}, "spec": {},
    });
    let (ok, out) = apply_as(ADMIN, &profile);
    assert!(ok, "{out}");
    let (del, ret) = ("user-node-del", "user-node-ret");
    for user in ["node-del", "node-ret"] {
        wait_ready(user, "True/Provisioned").await;
    }
    for ns in [del, ret] {
        kubectl(&[
            "-n",
            ns,
            "create",
            "configmap",
            "data",
            "--from-literal=k=v",
        ]);
    }
    let can_i = |ns: &str, person: &str| {
        kubectl_as(
            ADMIN,
            &["auth", "can-i", "get", "pods", "-n", ns, "--as", person],
            "",
        )
        .1
        .trim()
        .to_owned()
    };
    assert_eq!(can_i(del, "node-del@example.com"), "yes");

    // No operator leads under that Lease: refused, nothing deleted.
    let (ok, out) = release(&["--lease-name", "no-such-lease"]);
    assert!(!ok, "{out}");
    assert!(out.contains("no operator leads"), "{out}");
    assert!(jsonpath("crd/users.homestead.dev", "{.metadata.deletionTimestamp}").is_empty());

    let node = cluster().node().unwrap();
    let state = cluster().dir().join("chart");
    let kubeconfig = cluster().dir().join("chart-admin.kubeconfig");
    install_chart(
        &kubeconfig,
        &node.containerd_socket(),
        &state,
        &["--set", "crds.keep=false"],
    );
    let started = Instant::now();
    let (ok, out) = common::run_with_stdin(
        std::process::Command::new(common::repo_tool("tools/helm/install.sh"))
            .args([
                "uninstall",
                "homestead",
                "--namespace",
                SYSTEM,
                "--timeout",
                "300s",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig),
        "",
    );
    assert!(ok, "helm uninstall: {out}");
    println!(
        "helm uninstall with crds.keep=false, its hook included: {:.1} s",
        started.elapsed().as_secs_f64()
    );

    eventually("Homestead's CRDs to be gone", 60, || {
        let crds = kubectl(&["get", "crds", "-o", "name"]);
        (!crds.contains("homestead.dev")).then_some(())
    })
    .await;
    for (ns, user, person) in [
        (del, "node-del", "node-del@example.com"),
        (ret, "node-ret", "node-ret@example.com"),
    ] {
        assert_eq!(
            jsonpath(&format!("namespace/{ns}"), "{.status.phase}"),
            "Active"
        );
        assert_eq!(
            jsonpath(
                &format!("namespace/{ns}"),
                "{.metadata.labels.homestead\\.dev/retained-from}"
            ),
            user
        );
        assert!(
            jsonpath(&format!("namespace/{ns}"), "{.metadata.ownerReferences}").is_empty(),
            "{ns} still has an owner reference"
        );
        let data = kubectl(&[
            "-n",
            ns,
            "get",
            "configmap",
            "data",
            "-o",
            "jsonpath={.data.k}",
        ]);
        assert_eq!(data, "v");
        assert_eq!(can_i(ns, person), "no", "{person} kept access to {ns}");
    }

    install_chart(&kubeconfig, &node.containerd_socket(), &state, &[]);
    for ns in [del, ret] {
        kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}
