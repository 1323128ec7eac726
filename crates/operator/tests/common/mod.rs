//! Shared fixtures of the operator's integration tests: one real control plane per test binary
//! with the CRD, `rbac/` and the operator binary running as its own ServiceAccount identity;
//! User builders; polling with a cluster-state dump on time-out; audit-log queries.

#![allow(dead_code, missing_docs)]

use std::future::Future;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use homestead_api::{DirectoryGroup, User, Workspace};
use homestead_testenv::{ADMIN, ControlPlane, Identity, OPERATOR, SCIM, Supervised, free_port};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

/// A tenant identity with a token, for access checks; a member of [`TENANT_GROUP`].
pub const TENANT: &str = TENANTS[0];
/// Tenant identities with tokens, members of [`TENANT_GROUP`]: one person has one User
/// (docs/security.md), so tests that run at the same time each take their own.
pub const TENANTS: [&str; 6] = [
    "tenant-tom@example.com",
    "tenant-tia@example.com",
    "tenant-ted@example.com",
    "tenant-tua@example.com",
    "tenant-tim@example.com",
    "tenant-tey@example.com",
];
/// A person the cluster's authenticator names with a prefix (as an OIDC authenticator with
/// `--oidc-username-prefix=oidc:` would): a User binding `doc-pat@example.com` never matches.
pub const PREFIXED: &str = "oidc:doc-pat@example.com";
/// A group [`TENANT`] belongs to.
pub const TENANT_GROUP: &str = "tom-team";
/// An HR identity with a token, a member of [`HR_GROUP`]; tests bind `rbac/hr.yaml`'s
/// ClusterRole `homestead-hr` (Users, and Shares in any home) to that group.
pub const HR: &str = "hr-harriet@example.com";
/// The group [`HR`] belongs to.
pub const HR_GROUP: &str = "hr";
/// Namespace name patterns the operator under test allows in `spec.namespace.name`.
pub const ALLOWED_NAMESPACES: &str = "user-*,e2e-*";
/// [`ALLOWED_NAMESPACES`] as the admission policy's variable `namespacePattern` (an RE2
/// expression in a CEL raw string).
pub const ALLOWED_NAMESPACE_PATTERN: &str = "r'^(user-.*|e2e-.*|ws-.*)$'";
/// The variable `namespacePattern` as `rbac/admission-policy.yaml` ships it.
const SHIPPED_NAMESPACE_PATTERN: &str = "r'^(user-.*|ws-.*)$'";

/// The control plane of this test binary, with the CRDs and a token for [`TENANT`].
pub fn plane() -> &'static ControlPlane {
    ControlPlane::shared(|o| {
        homestead_api::crds()
            .into_iter()
            .fold(o, |o, crd| o.crd(crd))
            .identity(Identity::new(TENANTS[0]).in_group(TENANT_GROUP))
            .identity(Identity::new(TENANTS[1]).in_group(TENANT_GROUP))
            .identity(Identity::new(TENANTS[2]).in_group(TENANT_GROUP))
            .identity(Identity::new(TENANTS[3]).in_group(TENANT_GROUP))
            .identity(Identity::new(TENANTS[4]).in_group(TENANT_GROUP))
            .identity(Identity::new(TENANTS[5]).in_group(TENANT_GROUP))
            .identity(Identity::new(HR).in_group(HR_GROUP))
            .identity(Identity::new(PREFIXED))
    })
}
/// A namespace reserved by the operator's `--reserved-namespace` flag in these tests.
pub const RESERVED_BY_FLAG: &str = "reserved-by-flag";

pub struct Env {
    pub plane: &'static ControlPlane,
    pub metrics_address: String,
    pub operator: std::sync::Mutex<Supervised>,
}

/// The repository's root directory.
pub fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Installs the operator's namespace and `rbac/` (admission policy included) on [`plane`], the
/// policy's `namespacePattern` set to [`ALLOWED_NAMESPACE_PATTERN`] before it is applied.
pub fn install() -> &'static ControlPlane {
    let plane = plane();
    let root = repo_root();
    let kubectl = |args: &[&str], stdin: &str| {
        let (ok, out) = run_with_stdin(
            plane.kubectl(ADMIN).unwrap().current_dir(root).args(args),
            stdin,
        );
        assert!(ok, "kubectl {args:?}: {out}");
        out
    };
    kubectl(&["apply", "-f", "manifests/namespace.yaml"], "");
    let rendered = plane
        .kubectl(ADMIN)
        .unwrap()
        .current_dir(root)
        .args(["kustomize", "rbac/"])
        .output()
        .unwrap();
    assert!(rendered.status.success(), "kubectl kustomize rbac/");
    let rbac = String::from_utf8(rendered.stdout).unwrap();
    let shipped = SHIPPED_NAMESPACE_PATTERN;
    assert_eq!(rbac.matches(shipped).count(), 1, "{shipped} in rbac/");
    let rbac = rbac.replace(shipped, ALLOWED_NAMESPACE_PATTERN);
    kubectl(&["apply", "-f", "-"], &rbac);
    // Admission policies load asynchronously: wait until they are in force, probing with dry
    // runs each must refuse (the operator may not create a reserved namespace; nobody but the
    // operator may add a NetworkPolicy that opens an isolated namespace).
    let probe_namespace = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"kube-probe",
        "labels":{"app.kubernetes.io/managed-by":"homestead","homestead.dev/user":"probe"}}}"#;
    refused_once_loaded(plane, OPERATOR, probe_namespace, "reserved");
    let isolated = format!(
        r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{ISOLATED_PROBE_NAMESPACE}",
        "labels":{{"homestead.dev/isolation":"Isolated"}}}}}}"#
    );
    let (ok, out) = run_with_stdin(
        plane.kubectl(ADMIN).unwrap().args(["apply", "-f", "-"]),
        &isolated,
    );
    assert!(ok, "{out}");
    refused_once_loaded(plane, ADMIN, ISOLATION_PROBE, "isolated");
    plane
}

/// An allow-all NetworkPolicy in [`ISOLATED_PROBE_NAMESPACE`], which `homestead-tenant-isolation`
/// refuses to anyone but the operator.
const ISOLATION_PROBE: &str = r#"{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy",
    "metadata":{"name":"probe","namespace":"homestead-isolation-probe"},
    "spec":{"podSelector":{},"ingress":[{}]}}"#;

/// A namespace labelled isolated (as Homestead labels a person's), made only to probe that the
/// tenant-isolation policy is in force.
const ISOLATED_PROBE_NAMESPACE: &str = "homestead-isolation-probe";

/// Waits (at most 30 s) until `identity`'s server-side dry-run create of `object` (JSON) is
/// refused with a message containing `needle`: the admission policy that refuses it is loaded.
pub fn refused_once_loaded(plane: &ControlPlane, identity: &str, object: &str, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out) = run_with_stdin(
            plane
                .kubectl(identity)
                .unwrap()
                .args(["create", "--dry-run=server", "-f", "-"]),
            object,
        );
        if !ok && out.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the admission policy refusing {needle:?} never came into force: {out}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The control plane with the CRD, `rbac/` and a running operator, started on first use.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let plane = install();
        let metrics_address = format!("127.0.0.1:{}", free_port().unwrap());
        let operator = spawn_operator("homestead", "homestead-test", &metrics_address);
        wait_until_ready(&operator, || {
            http_get(&metrics_address, "/readyz").map(|(code, _)| code) == Some(200)
        });
        Env {
            plane,
            metrics_address,
            operator: operator.into(),
        }
    })
}

/// Starts the operator binary as the operator's ServiceAccount identity, with Lease identity
/// `pod` and its HTTP server on `metrics_address`, 16 reconciles at once and retained namespaces
/// counted every 2 s; it logs to `<plane dir>/<name>.log`.
pub fn spawn_operator(name: &'static str, pod: &str, metrics_address: &str) -> Supervised {
    spawn_operator_with(
        name,
        pod,
        metrics_address,
        &["--concurrency=16", "--retained-count-interval=2s"],
    )
}

/// [`spawn_operator`] with `extra` flags in place of the tests' `--concurrency=16` and
/// `--retained-count-interval=2s`.
pub fn spawn_operator_with(
    name: &'static str,
    pod: &str,
    metrics_address: &str,
    extra: &[&str],
) -> Supervised {
    let plane = plane();
    let kubeconfig = plane
        .write_kubeconfig(OPERATOR, &plane.dir().join("operator.kubeconfig"))
        .unwrap();
    // HOMESTEAD_BENCH_HEAPTRACK=FILE: run the operator under heaptrack, its profile in
    // FILE.<pod>.zst (a bench's heap profile, docs/performance.md "Memory"; build without
    // jemalloc for it).
    let (program, wrapped) = match std::env::var("HOMESTEAD_BENCH_HEAPTRACK") {
        Ok(file) => (
            Path::new("heaptrack"),
            vec![
                "-o".into(),
                format!("{file}.{pod}"),
                env!("CARGO_BIN_EXE_homestead-operator").to_owned(),
            ],
        ),
        Err(_) => (Path::new(env!("CARGO_BIN_EXE_homestead-operator")), vec![]),
    };
    plane
        .spawn(
            name,
            program,
            &wrapped
                .into_iter()
                .chain([
                    "--log-format=text".into(),
                    format!("--metrics-address={metrics_address}"),
                    format!("--reserved-namespace={RESERVED_BY_FLAG}"),
                    format!("--allowed-namespace={ALLOWED_NAMESPACES}"),
                ])
                .chain(extra.iter().map(|&flag| flag.to_owned()))
                .collect::<Vec<_>>(),
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("POD_NAMESPACE", "homestead-system".into()),
                ("POD_NAME", pod.into()),
                ("RUST_LOG", "info".into()),
            ],
        )
        .unwrap()
}

/// An admin client for this test's runtime.
pub async fn admin() -> Client {
    env().plane.client(ADMIN).await.unwrap()
}

/// A plain HTTP/1.0 GET on 127.0.0.1: status code and body.
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// A test's Users (and any Namespace it made itself): created through it, deleted when it is
/// dropped, so no test leaves Users behind. When the test fails (drops while panicking), it
/// first prints each User, its Namespace, RoleBindings, ResourceQuotas and Events, and the
/// operator's last log lines.
#[derive(Default)]
pub struct Scenario {
    users: std::sync::Mutex<Vec<String>>,
    namespaces: std::sync::Mutex<Vec<String>>,
}

impl Scenario {
    pub fn new() -> Self {
        env();
        Self::default()
    }

    /// Creates `user` as the admin and remembers it for cleanup.
    pub async fn create(&self, client: &Client, user: &User) -> User {
        self.track(&user.metadata.name.clone().unwrap());
        Api::<User>::all(client.clone())
            .create(&PostParams::default(), user)
            .await
            .unwrap()
    }

    /// Remembers a User created some other way (for example by `kubectl apply`).
    pub fn track(&self, name: &str) {
        self.users.lock().unwrap().push(name.to_owned());
    }

    /// Remembers a Namespace the test created itself, to delete it afterwards.
    pub fn track_namespace(&self, name: &str) {
        self.namespaces.lock().unwrap().push(name.to_owned());
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        let users = std::mem::take(&mut *self.users.lock().unwrap_or_else(|e| e.into_inner()));
        let namespaces =
            std::mem::take(&mut *self.namespaces.lock().unwrap_or_else(|e| e.into_inner()));
        if std::thread::panicking() {
            eprintln!("{}", dump_users(&users));
        }
        for (kind, names) in [("users", &users), ("namespaces", &namespaces)] {
            if names.is_empty() {
                continue;
            }
            let mut args = vec!["delete", kind, "--ignore-not-found", "--wait=false"];
            args.extend(names.iter().map(String::as_str));
            let (ok, out) = kubectl(&args, "");
            if !ok && !std::thread::panicking() {
                eprintln!("cleanup of {kind} {names:?} failed: {out}");
            }
        }
    }
}

/// The state of `users` and their objects, for the output of a failed test.
pub fn dump_users(users: &[String]) -> String {
    let mut out = String::new();
    for name in users {
        let (_, user) = kubectl(&["get", "user", name, "-o", "yaml"], "");
        let namespace = kubectl(
            &["get", "user", name, "-o", "jsonpath={.status.namespace}"],
            "",
        )
        .1;
        let namespace = if namespace.trim().is_empty() || namespace.contains("NotFound") {
            format!("user-{name}")
        } else {
            namespace.trim().to_owned()
        };
        let (_, ns) = kubectl(&["get", "namespace", &namespace, "-o", "yaml"], "");
        let (_, objects) = kubectl(
            &[
                "get",
                "rolebindings,resourcequotas,limitranges,networkpolicies",
                "-n",
                &namespace,
                "-o",
                "wide",
            ],
            "",
        );
        let selector = format!("involvedObject.name={name}");
        let (_, events) = kubectl(
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                &selector,
            ],
            "",
        );
        out += &format!(
            "===== User {name} =====\n{user}\n----- Namespace {namespace} -----\n{ns}\n----- RoleBindings, ResourceQuotas -----\n{objects}\n----- Events -----\n{events}\n"
        );
    }
    let log = env()
        .operator
        .lock()
        .map(|o| o.log_tail(40))
        .unwrap_or_default();
    out + "----- operator log -----\n" + &log
}

/// The `Ready` condition's reason, if any.
pub fn reason(user: &User) -> Option<String> {
    user.ready_condition().map(|c| c.reason.clone())
}

/// What the cluster looks like, for failure messages.
pub fn dump() -> String {
    let plane = env().plane;
    let out = plane
        .kubectl(ADMIN)
        .unwrap()
        .args(["get", "users,namespaces", "-o", "wide"])
        .output()
        .unwrap();
    format!(
        "{}\n--- operator log ---\n{}",
        String::from_utf8_lossy(&out.stdout),
        env()
            .operator
            .lock()
            .map(|o| o.log_tail(30))
            .unwrap_or_default()
    )
}

/// Polls `f` every 200 ms for up to `secs` seconds until it returns `Some`; panics with `what`
/// and a dump of the cluster otherwise.
pub async fn eventually<T, F, Fut>(what: &str, secs: u64, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(value) = f().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}\n{}",
            dump()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the User's status describes its current generation and `Ready` has `reason`.
pub async fn wait_reason(client: &Client, name: &str, want: &str) -> User {
    let api: Api<User> = Api::all(client.clone());
    eventually(&format!("User {name} to have reason {want}"), 60, || {
        let api = api.clone();
        async move {
            let u = api.get_opt(name).await.ok()??;
            let current = u.status.as_ref()?.observed_generation == u.metadata.generation;
            (current && reason(&u).as_deref() == Some(want)).then_some(u)
        }
    })
    .await
}

/// Waits until the object is gone (get returns 404).
pub async fn wait_gone<K>(api: &Api<K>, name: &str, secs: u64)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    eventually(&format!("{name} to be gone"), secs, || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await;
}

/// The audit events so far (every request, in the order kube-apiserver logged them), with every
/// request answered before this call as far as the marker below can tell.
///
/// kube-apiserver logs a request once it has answered it, so a write whose effect a test has
/// just read can still be missing from the log (CI once saw a status the test had read, without
/// its `patch`). So this first sends a marker request of its own (`GET /version?audit-marker=N`,
/// as the admin) and reads the log until the marker's line is in it, for at most 10 s.
///
/// # Panics
/// If the marker request fails, or its line is not logged within 10 s.
pub fn audit() -> Vec<Value> {
    static MARKERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = MARKERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let marker = format!("/version?audit-marker={}-{n}", std::process::id());
    let (ok, out) = kubectl(&["get", "--raw", &marker], "");
    assert!(ok, "the audit marker request {marker}: {out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let events = env().plane.audit_events().unwrap();
        if events
            .iter()
            .rev()
            .any(|e| e["requestURI"] == marker.as_str())
        {
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "the audit marker {marker} was not logged within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether an audit event is a write (create, update, patch, delete) made by the operator.
pub fn is_operator_write(event: &Value) -> bool {
    event["user"]["username"] == OPERATOR
        && matches!(
            event["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete" | "deletecollection")
        )
}

/// Whether an audit event is a write by the operator that succeeded, so changed something. A
/// create refused with 409 AlreadyExists is how the operator learns that a namespace it does
/// not know exists: it changes nothing, and is not counted.
pub fn is_operator_change(event: &Value) -> bool {
    is_operator_write(event)
        && event["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| c < 300)
}

/// Whether an audit event concerns `user`'s objects: the User, its namespace `ns` or anything
/// in it, or an Event about it.
pub fn concerns(event: &Value, user: &str, ns: &str) -> bool {
    let r = &event["objectRef"];
    let (resource, name, namespace) = (
        r["resource"].as_str(),
        r["name"].as_str(),
        r["namespace"].as_str(),
    );
    (resource == Some("users") && name == Some(user))
        || (resource == Some("namespaces") && name == Some(ns))
        || namespace == Some(ns)
        || (resource == Some("events") && name.is_some_and(|n| n.starts_with(&format!("{user}."))))
}

/// `kubectl auth can-i get pods -n NS --as=PERSON`: "yes" or "no".
pub fn can_get_pods(person: &str, ns: &str) -> String {
    let who = format!("--as={person}");
    let (_, out) = kubectl(&["auth", "can-i", "get", "pods", "-n", ns, &who], "");
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// Runs a repository script that installs a tool (cached) and prints its path; returns it.
pub fn repo_tool(script: &str) -> std::path::PathBuf {
    let out = std::process::Command::new(repo_root().join(script))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().into()
}

/// Runs `command` with `stdin`; returns (success, stdout + stderr).
pub fn run_with_stdin(command: &mut std::process::Command, stdin: &str) -> (bool, String) {
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `kubectl` as admin with `stdin`; returns (success, stdout + stderr).
pub fn kubectl(args: &[&str], stdin: &str) -> (bool, String) {
    kubectl_as(ADMIN, args, stdin)
}

/// Runs `kubectl` authenticated as `identity` (with its own token) with `stdin`; returns
/// (success, stdout + stderr).
pub fn kubectl_as(identity: &str, args: &[&str], stdin: &str) -> (bool, String) {
    run_with_stdin(env().plane.kubectl(identity).unwrap().args(args), stdin)
}

/// The pid of the operator process serving `metrics_address` (not its watchdog), if running.
pub fn operator_pid(metrics_address: &str) -> Option<u32> {
    let needle = format!("--metrics-address={metrics_address}");
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(Result::ok)
        .find_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            // The operator itself, not a shell or heaptrack running it.
            let program = cmdline.split('\0').next().unwrap_or_default();
            (cmdline.contains(&needle) && program.ends_with("homestead-operator"))
                .then(|| e.file_name().to_string_lossy().parse().ok())?
        })
}

/// `homestead_reconciliations_total` (all results) of the operator serving `metrics_address`.
pub fn reconciles(metrics_address: &str) -> u64 {
    let (_, body) = http_get(metrics_address, "/metrics").unwrap_or_default();
    body.lines()
        .filter(|l| l.starts_with("homestead_reconciliations_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Starts a second operator replica (`homestead-standby`, Lease identity the same) serving
/// `metrics_address`, and waits until it is ready (a standby is ready while it waits for the
/// Lease).
pub async fn spawn_standby(metrics_address: &str) -> Supervised {
    let standby = spawn_operator("homestead-standby", "homestead-standby", metrics_address);
    eventually("the standby to be ready", 60, || async {
        (http_get(metrics_address, "/readyz")?.0 == 200).then_some(())
    })
    .await;
    standby
}

/// Waits up to `secs` seconds until `namespace` holds no RoleBinding at all (access revoked).
pub async fn wait_no_role_bindings(client: &Client, namespace: &str, secs: u64) {
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), namespace);
    let what = format!("every RoleBinding in {namespace} to be gone");
    eventually(&what, secs, || async {
        let left = bindings.list(&Default::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}

/// Sends `method path` over HTTPS to `address` (127.0.0.1), trusting only the CA in `ca` (PEM),
/// with bearer `token` and, if given, a JSON `body`: the status code and the response body, or
/// the error if the connection or the TLS handshake fails.
pub fn https_request(
    address: &str,
    ca: &Path,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> Result<(u16, String), String> {
    let mut tls = tls_connect(address, ca)?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        tls,
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/scim+json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| e.to_string())?;
    let mut response = String::new();
    // The server may close without close_notify; what was read is the whole response.
    let _ = tls.read_to_string(&mut response);
    status_and_body(&response)
}

/// The status code and body of a whole HTTP/1 `response`.
pub fn status_and_body(response: &str) -> Result<(u16, String), String> {
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("no HTTP status in {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// A TLS client stream to `address` (127.0.0.1), trusting only the CA in `ca` (PEM), with a
/// 30 s read timeout; the handshake happens on the first read or write.
pub fn tls_connect(
    address: &str,
    ca: &Path,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, ServerName};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| e.to_string())? {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name)
        .map_err(|e| e.to_string())?;
    let socket = TcpStream::connect(address).map_err(|e| e.to_string())?;
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    Ok(rustls::StreamOwned::new(connection, socket))
}

/// Applies `manifests/scim/` (the SCIM identity and its RBAC), once per test binary (two
/// concurrent client-side applies of the same new object race: one gets AlreadyExists), and
/// waits until both of its admission policies refuse what they should.
pub fn install_scim_identity() {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let (ok, out) = kubectl(
            &[
                "apply",
                "-f",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../manifests/scim/rbac.yaml"
                ),
            ],
            "",
        );
        assert!(ok, "{out}");
        let probe = User::test("scim-probe")
            .with_username("probe@example.com")
            .with_role("admin");
        let mut probe = serde_json::to_value(probe).unwrap();
        probe["metadata"] = serde_json::json!({ "name": "scim-probe" });
        refused_once_loaded(
            env().plane,
            homestead_testenv::SCIM,
            &probe.to_string(),
            "SCIM",
        );
        // Each policy comes into force on its own: the groups' too (a test once patched a
        // hand-made group in the moment between them).
        let group = serde_json::json!({
            "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
            "metadata": { "name": "scim-probe-group" },
            "spec": { "displayName": "probe", "members": ["someone"] },
        });
        refused_once_loaded(
            env().plane,
            homestead_testenv::SCIM,
            &group.to_string(),
            "homestead.dev/writer=scim",
        );
    });
}

/// Creates the Profile `name` with `spec` (replacing one left by an earlier run).
pub async fn profile(client: &Client, name: &str, spec: Value) -> homestead_api::Profile {
    let api: Api<homestead_api::Profile> = Api::all(client.clone());
    let _ = api.delete(name, &kube::api::DeleteParams::default()).await;
    wait_gone(&api, name, 30).await;
    let profile = homestead_api::Profile::test(name).with_spec(spec);
    api.create(&PostParams::default(), &profile).await.unwrap()
}

/// `homestead_events_pending` of the operator serving `metrics_address`, if it answers.
pub fn events_pending(metrics_address: &str) -> Option<i64> {
    let (_, body) = http_get(metrics_address, "/metrics")?;
    body.lines()
        .find(|l| l.starts_with("homestead_events_pending "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The audit log's length once the shared operator has published every Event it queued, for
/// tests that count requests from a mark: an Event is published off the reconcile path, after
/// the status write a test waits for, and would otherwise land after the mark as a stray write.
/// Waits 250 ms first (a reconcile queues its Event just after its status write returns), then
/// until `homestead_events_pending` is 0 (at most 30 s).
pub async fn settled_mark() -> usize {
    tokio::time::sleep(Duration::from_millis(250)).await;
    let address = env().metrics_address.clone();
    eventually("every queued Event to be published", 30, || {
        let address = address.clone();
        async move { (events_pending(&address)? == 0).then_some(()) }
    })
    .await;
    audit().len()
}

/// Polls `ready` every 200 ms for up to 60 s; panics with `process`'s last log lines otherwise.
pub fn wait_until_ready(process: &Supervised, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "not ready after 60 s:\n{}",
            process.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Binds `homestead-hr` (from `rbac/`, applied with the rest of it) to [`HR_GROUP`], and in
/// `default` the Role `homestead-user-events`, as `rbac/hr.yaml` says to, once.
pub async fn hr() -> Client {
    static BOUND: OnceLock<()> = OnceLock::new();
    BOUND.get_or_init(|| bind_roles("homestead-hr", HR_GROUP));
    env().plane.client(HR).await.unwrap()
}

/// Binds the ClusterRole `role` (cluster-wide) and the Role `homestead-user-events` (in
/// `default`) to the group `group`, as `rbac/hr.yaml` and `rbac/viewer.yaml` say to.
pub fn bind_roles(role: &str, group: &str) {
    let subjects =
        json!([{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group }]);
    let bindings = json!({
        "apiVersion": "v1", "kind": "List",
        "items": [{
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": format!("{role}-test") },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": subjects,
        }, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": format!("{role}-events-test"), "namespace": "default" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": "homestead-user-events" },
            "subjects": subjects,
        }],
    });
    let (ok, out) = kubectl(&["apply", "-f", "-"], &bindings.to_string());
    assert!(ok, "{out}");
}

/// A running `homestead scim` (HTTPS, as the SCIM ServiceAccount): its address, CA and token.
pub struct ScimService {
    pub address: String,
    pub ca: std::path::PathBuf,
    pub token: String,
    _process: Supervised,
}

/// Starts `homestead scim` (HTTPS, as the SCIM ServiceAccount) named `name`, with `extra`
/// flags, and waits until it is ready.
pub fn spawn_scim(name: &'static str, extra: &[&str]) -> ScimService {
    install_scim_identity();
    let plane = env().plane;
    let dir = plane.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let credentials = homestead_testenv::scim_credentials(&dir).unwrap();
    let token = std::fs::read_to_string(&credentials.token)
        .unwrap()
        .trim()
        .to_owned();
    let address = format!("127.0.0.1:{}", homestead_testenv::free_port().unwrap());
    let kubeconfig = plane
        .write_kubeconfig(SCIM, &dir.join("scim.kubeconfig"))
        .unwrap();
    let mut args = vec![
        "--log-format=text".to_owned(),
        "scim".to_owned(),
        format!("--address={address}"),
        format!("--token-file={}", credentials.token.display()),
        format!("--tls-cert={}", credentials.cert.display()),
        format!("--tls-key={}", credentials.key.display()),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let process = plane
        .spawn(
            name,
            Path::new(env!("CARGO_BIN_EXE_homestead")),
            &args,
            &[
                ("KUBECONFIG", kubeconfig.display().to_string()),
                ("RUST_LOG", "info".to_owned()),
            ],
        )
        .unwrap();
    wait_until_ready(&process, || {
        https_request(&address, &credentials.ca, "GET", "/readyz", &token, None)
            .map(|(code, _)| code)
            == Ok(200)
    });
    ScimService {
        address,
        ca: credentials.ca,
        token,
        _process: process,
    }
}

/// Objects a benchmark creates, deletes or provisions at once.
pub const IN_FLIGHT: usize = 64;

/// Runs `f(i)` for `0..count`, [`IN_FLIGHT`] at a time; panics on the first error.
pub async fn each<F, Fut>(count: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = kube::Result<()>>,
{
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(0..count)
        .map(f)
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
}

/// A field of `/proc/<pid>/status` in MiB (`VmRSS`: resident now; `VmHWM`: peak).
pub fn memory_mib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib / 1024.0
}

/// The operator under benchmark: a release binary with default flags.
pub struct Operator {
    /// Stops the operator when dropped.
    pub _process: Supervised,
    pub address: String,
}

impl Operator {
    /// Starts it and returns once it logged that every cache is synced, with the time that took.
    pub async fn start(pod: &str) -> (Self, Duration) {
        let address = format!("127.0.0.1:{}", free_port().unwrap());
        let started = Instant::now();
        let process = spawn_operator_with("homestead", pod, &address, &[]);
        while !process.log_tail(usize::MAX).contains("caches synced") {
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "operator not synced:\n{}",
                process.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        (
            Self {
                _process: process,
                address,
            },
            started.elapsed(),
        )
    }

    pub fn pid(&self) -> u32 {
        operator_pid(&self.address).expect("operator running")
    }
}

/// Events on a User (in `default`, as for any cluster-scoped object): type, reason and note.
pub async fn user_events(c: &Client, user: &str) -> Vec<(String, String, String)> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(c.clone(), "default");
    events
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(user))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Whether the server closes `stream` (EOF or an error on read) within `secs` seconds of now,
/// reading past whatever it answers first.
pub fn closed_within(stream: &mut impl std::io::Read, secs: u64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 1024];
    while std::time::Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
    false
}

/// HTTP/2's connection preface, an empty SETTINGS frame, and a HEADERS frame that ends its
/// stream: `GET path` (HPACK literals, no Huffman coding; RFC 9113 and RFC 7541).
pub fn http2_request(path: &str) -> Vec<u8> {
    let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    // :method GET, :scheme https (static table 2 and 7); :path and :authority as literals
    // without indexing, their names from the static table (4 and 1).
    let mut block = vec![0x82, 0x87, 0x04, u8::try_from(path.len()).unwrap()];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 1, b'x']);
    let length = u32::try_from(block.len()).unwrap().to_be_bytes();
    // Type 1 (HEADERS), flags END_STREAM | END_HEADERS, stream 1.
    bytes.extend_from_slice(&[length[1], length[2], length[3], 1, 0x05, 0, 0, 0, 1]);
    bytes.extend_from_slice(&block);
    bytes
}

/// What `stream` sends until it is closed or `secs` seconds pass (reads that time out are
/// retried), and whether it was closed.
pub fn read_until_closed(stream: &mut impl std::io::Read, secs: u64) -> (Vec<u8>, bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    let (mut answer, mut buf) = (Vec::new(), [0u8; 1024]);
    while std::time::Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return (answer, true),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (answer, true),
        }
    }
    (answer, false)
}

/// Waits until the Share's `Ready` reason is `want` (its status describing its generation);
/// returns the Share.
pub async fn wait_share(client: &Client, ns: &str, name: &str, want: &str) -> homestead_api::Share {
    let api: Api<homestead_api::Share> = Api::namespaced(client.clone(), ns);
    eventually(&format!("Share {ns}/{name} to be {want}"), 60, || {
        let api = api.clone();
        async move {
            let share = api.get_opt(name).await.ok()??;
            let status = share.status.as_ref()?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            (status.observed_generation == share.metadata.generation && ready.reason == want)
                .then_some(share)
        }
    })
    .await
}

/// What a server that faces the network holds for clients that never authenticate, when it
/// runs with `--max-connections=6 --header-read-timeout=2s` and the default header size
/// (docs/security.md): six silent TCP connections fill it and a seventh is closed at once; each
/// silent one is closed at the handshake timeout; headers that never end, and a kept-alive
/// connection left idle, are closed too; headers over 16 KiB get 431. `address` and `ca` reach
/// it over TLS; `served` asks it something (`Some(code)`, `None` when the connection fails) and
/// must answer `expected` when it has room; `path` is any path it serves. `quiet` says whether
/// the server holds no connection but the one asking (its `*_connections_open` gauge): a
/// connection's place is freed just after its client sees it closed, so each step that counts
/// places waits for it (CI once had the first request's place still held when the six came).
pub fn assert_bounded(
    address: &str,
    ca: &Path,
    path: &str,
    served: impl Fn() -> Option<u16>,
    expected: u16,
    quiet: impl Fn() -> bool,
) {
    assert_eq!(served(), Some(expected), "with room, it serves");
    wait_quiet(&quiet);
    let silent: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(address).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(served(), None, "a seventh connection was served");
    for mut stream in silent {
        stream
            .set_read_timeout(Some(Duration::from_secs(1)))
            .unwrap();
        assert!(
            closed_within(&mut stream, 10),
            "a silent connection stayed open"
        );
    }
    wait_quiet(&quiet);
    assert_eq!(
        served(),
        Some(expected),
        "served again once the silent ones are closed"
    );
    let mut partial = tls_connect(address, ca).unwrap();
    write!(partial, "GET {path} HTTP/1.1\r\nHost: x\r\nX-Slow: a").unwrap();
    partial
        .sock
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    assert!(
        closed_within(&mut partial, 10),
        "partial headers kept the connection"
    );
    let mut idle = tls_connect(address, ca).unwrap();
    write!(idle, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    idle.sock
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    assert!(
        closed_within(&mut idle, 10),
        "an idle connection stayed open"
    );
    // HTTP/2 by prior knowledge: its preface, an empty SETTINGS frame, and one request, then
    // nothing. hyper's HTTP/2 has no header read timeout and would keep such a connection idle
    // for as long as the client liked: the server must close it within the bounds, either at
    // once (it speaks HTTP/1.1 alone) or when an unauthenticated connection's time is over.
    let mut h2 = tls_connect(address, ca).unwrap();
    h2.write_all(&http2_request(path)).unwrap();
    h2.sock
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    let (answer, closed) = read_until_closed(&mut h2, 10);
    assert!(closed, "an HTTP/2 connection stayed open: {answer:?}");
    wait_quiet(&quiet);
    // Oversized headers get 431. Up to three tries, a second apart: the answer is lost when the
    // connection is closed before TLS because the idle one's place is not yet free (the server
    // drops it just after the client sees it closed), or when the server's close with the
    // request's unread rest resets it first (CI saw an empty answer once).
    let filler = "a".repeat(20 * 1024);
    let mut answers = Vec::new();
    for _ in 0..3 {
        let Ok(mut big) = tls_connect(address, ca) else {
            answers.push("(no TLS handshake)".to_owned());
            std::thread::sleep(Duration::from_secs(1));
            continue;
        };
        let _ = write!(
            big,
            "GET {path} HTTP/1.1\r\nHost: x\r\nX-Big: {filler}\r\n\r\n"
        );
        let mut answer = String::new();
        let _ = big.read_to_string(&mut answer);
        if answer.starts_with("HTTP/1.1 431") {
            return;
        }
        assert!(
            answer.is_empty(),
            "oversized headers were answered: {answer:?}"
        );
        answers.push(answer);
        std::thread::sleep(Duration::from_secs(1));
    }
    panic!("oversized headers never got 431: {answers:?}");
}

/// Waits up to 10 s for `quiet` (see [`assert_bounded`]), then 100 ms more: when `quiet` asks
/// the bounded port itself, its own connection (HTTP/1.0, closed by the server) frees its place
/// just after the answer.
fn wait_quiet(quiet: &impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !quiet() {
        assert!(
            std::time::Instant::now() < deadline,
            "the server still held a closed connection's place after 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
}

/// The gauge `<prefix>_connections_open` in the Prometheus text `metrics` (a count), if present.
pub fn open_connections(metrics: &str, prefix: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{prefix}_connections_open ")))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether the Prometheus text `metrics` counts at least one refused connection in
/// `<prefix>_connections_refused_total` and has the gauge `<prefix>_connections_open`.
pub fn counts_refused_connections(metrics: &str, prefix: &str) -> bool {
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{prefix}_connections_refused_total ")))
        .and_then(|v| v.trim().parse::<f64>().ok());
    refused.is_some_and(|n| n >= 1.0) && metrics.contains(&format!("{prefix}_connections_open "))
}

/// Creates the User `name` (identity `<name>@example.com`) with `spec` merged in, replacing one
/// left by an earlier run, and waits until it is `Provisioned`.
pub async fn person(client: &Client, name: &str, spec: Value) -> User {
    let api: Api<User> = Api::all(client.clone());
    if api.get_opt(name).await.unwrap().is_some() {
        let _ = api.delete(name, &DeleteParams::default()).await;
        wait_gone(&api, name, 60).await;
    }
    let user = User::test(name).with_spec(spec);
    let mut user = serde_json::to_value(&user).unwrap();
    user["metadata"] = json!({ "name": name });
    user.as_object_mut().unwrap().remove("status");
    let user: User = serde_json::from_value(user).unwrap();
    api.create(&PostParams::default(), &user).await.unwrap();
    wait_reason(client, name, "Provisioned").await
}

/// Creates (or replaces) the DirectoryGroup `name` with `members`.
pub async fn group(client: &Client, name: &str, members: &[&str]) {
    let api: Api<DirectoryGroup> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
    wait_gone(&api, name, 30).await;
    let group = DirectoryGroup::test(name, name).with_members(members);
    let mut group = serde_json::to_value(&group).unwrap();
    group.as_object_mut().unwrap().remove("status");
    group["metadata"] = json!({ "name": name });
    api.create(
        &PostParams::default(),
        &serde_json::from_value(group).unwrap(),
    )
    .await
    .unwrap();
}

/// A Workspace document `name` with `spec` (JSON), created by `creator` (the annotation the
/// admission policy checks), labelled self-service when `self_service`.
pub fn workspace_doc(name: &str, spec: Value, creator: &str, self_service: bool) -> String {
    let labels = if self_service {
        json!({ "homestead.dev/self-service": "true" })
    } else {
        json!({})
    };
    json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
        "metadata": { "name": name, "labels": labels,
            "annotations": { "homestead.dev/created-by": creator } },
        "spec": spec,
    })
    .to_string()
}

/// Deletes the Workspace `name` if an earlier run left it, and waits until it is gone.
pub async fn no_workspace(client: &Client, name: &str) {
    let api: Api<Workspace> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
    wait_gone(&api, name, 60).await;
}

/// Waits until the Workspace `name` describes its generation with `Ready` reason `want`.
pub async fn wait_workspace(client: &Client, name: &str, want: &str) -> Workspace {
    let api: Api<Workspace> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let w = api.get_opt(name).await.ok().flatten();
        let ready = w.as_ref().and_then(|w| {
            let status = w.status.as_ref()?;
            let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
            Some((
                status.observed_generation == w.metadata.generation,
                ready.clone(),
            ))
        });
        match (w, ready) {
            (Some(w), Some((true, ready))) if ready.reason == want => return w,
            (_, ready) if started.elapsed() > Duration::from_secs(60) => panic!(
                "timed out after 60 s waiting for Workspace {name} to have reason {want}; it has {ready:?}\n{}",
                dump()
            ),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as PERSON`: "yes" or "no".
pub fn can(person: &str, verb: &str, resource: &str, ns: &str) -> String {
    let (_, out) = kubectl(
        &[
            "auth",
            "can-i",
            verb,
            resource,
            "-n",
            ns,
            &format!("--as={person}"),
        ],
        "",
    );
    out.lines().next().unwrap_or_default().trim().to_owned()
}

/// Waits until `person` can (`"yes"`) or cannot (`"no"`) get pods in `ns`; returns how long it
/// took.
pub async fn wait_can(person: &str, ns: &str, want: &str) -> std::time::Duration {
    let started = Instant::now();
    let what = format!("{person} can-i get pods in {ns}: {want}");
    eventually(&what, 60, || async move {
        (can_get_pods(person, ns) == want).then_some(())
    })
    .await;
    started.elapsed()
}
