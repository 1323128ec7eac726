//! The Helm chart (`charts/homestead`): it lints, it renders the same RBAC, admission policies
//! and CRDs as the kustomize path (`rbac/`, `manifests/`), and a real `helm install` on the local
//! control plane yields a working CRD, RBAC and admission policy. Helm is built from its Go
//! module by `tools/helm/install.sh` (cached).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use homestead_testenv::{ADMIN, ControlPlane, OPERATOR, Options, SCIM};
use serde_json::Value;

mod common;

fn root() -> &'static Path {
    common::repo_root()
}

/// Runs a repository script that installs a tool and prints its path, one at a time (two
/// first builds of Helm into the same cache directory would collide).
fn tool(script: &str) -> PathBuf {
    static TOOLS: OnceLock<std::sync::Mutex<()>> = OnceLock::new();
    let _one_at_a_time = TOOLS.get_or_init(Default::default).lock().unwrap();
    common::repo_tool(script)
}

fn helm() -> Command {
    let mut helm = Command::new(tool("tools/helm/install.sh"));
    helm.current_dir(root());
    helm
}

/// `helm template` of the chart into `homestead-system` with `sets`: helm's exit status and
/// output, whether it rendered or refused the values.
fn render(sets: &[&str]) -> std::process::Output {
    let mut helm = helm();
    helm.args([
        "template",
        "homestead",
        "charts/homestead",
        "--namespace",
        "homestead-system",
    ])
    .args(["--kube-version", "1.34.4", "--include-crds"]);
    for set in sets {
        helm.args(["--set", set]);
    }
    helm.output().unwrap()
}

/// `helm template` of the chart into `homestead-system` with `sets`, as YAML.
fn template(sets: &[&str]) -> String {
    let out = render(sets);
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap()
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

fn read(path: &str) -> Vec<Value> {
    documents(&std::fs::read_to_string(root().join(path)).unwrap())
}

/// An object without what may differ between the two paths: labels, annotations, comments, and
/// whether a whole number is written `1000` or `1000.0` (Helm's `toYaml` writes the first, the
/// CRD generator the second).
fn essence(object: &Value) -> Value {
    fn whole_numbers(value: &mut Value) {
        match value {
            Value::Number(n) => {
                if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && n.is_f64()) {
                    #[allow(clippy::cast_possible_truncation)]
                    let whole = f as i64;
                    *value = Value::from(whole);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(whole_numbers),
            Value::Object(map) => map.values_mut().for_each(whole_numbers),
            _ => {}
        }
    }
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("labels");
        meta.remove("annotations");
    }
    whole_numbers(&mut object);
    object
}

fn key(object: &Value) -> (String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&object["kind"]),
        s(&object["metadata"]["namespace"]),
        s(&object["metadata"]["name"]),
    )
}

#[test]
fn helm_lint_passes() {
    let (ok, out) = common::run_with_stdin(
        helm().args([
            "lint",
            "--strict",
            "charts/homestead",
            "--kube-version",
            "1.34.4",
        ]),
        "",
    );
    assert!(ok, "{out}");
}

#[test]
fn the_chart_renders_what_the_kustomize_path_installs() {
    let chart = documents(&template(&["scim.enabled=true"]));
    let mut sources = Vec::new();
    for file in [
        "rbac/service-account.yaml",
        "rbac/cluster-role.yaml",
        "rbac/roles.yaml",
        "rbac/admission-policy.yaml",
        "rbac/hr.yaml",
        "rbac/viewer.yaml",
        "rbac/shares.yaml",
        "rbac/workspaces.yaml",
        "rbac/auditor.yaml",
        "manifests/crd.yaml",
        "manifests/scim/rbac.yaml",
    ] {
        sources.extend(read(file));
    }
    assert!(sources.len() >= 14, "{} objects", sources.len());
    for source in &sources {
        let found = chart.iter().find(|c| key(c) == key(source));
        let found = found.unwrap_or_else(|| panic!("the chart renders no {:?}", key(source)));
        assert_eq!(
            essence(found),
            essence(source),
            "{:?} differs between the chart and the kustomize path",
            key(source)
        );
    }
    // The CRDs are the very file `just generate` writes.
    assert_eq!(
        std::fs::read_to_string(root().join("charts/homestead/files/crds.yaml")).unwrap(),
        std::fs::read_to_string(root().join("manifests/crd.yaml")).unwrap(),
        "charts/homestead/files/crds.yaml is stale: copy manifests/crd.yaml (just generate does)"
    );
}

/// The plain install is generated from the chart (docs/development.md, "One source for the
/// install"): what `tools/helm/plain.sh` renders now is what is committed.
#[test]
fn rbac_and_manifests_are_what_the_chart_renders() {
    let (ok, out) = common::run_with_stdin(
        Command::new(root().join("tools/helm/plain.sh")).arg("--check"),
        "",
    );
    assert!(ok, "{out}");
}

#[test]
fn values_that_would_grant_cluster_admin_are_refused() {
    let out = render(&["operator.allowedRoles={admin,cluster-admin}"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("allowedRoles"));
}

/// The homes API is registered only with the CA that kube-apiserver verifies it by: never
/// without one (which would need `insecureSkipTLSVerify`), never with something that is not
/// base64.
#[test]
fn the_homes_api_needs_its_ca_bundle() {
    let out = render(&["homesApi.enabled=true"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("homesApi.caBundle"));
    let out = render(&["homesApi.enabled=true", "homesApi.caBundle=not base64!"]);
    assert!(!out.status.success());
    let chart = documents(&template(&[
        "homesApi.enabled=true",
        "homesApi.caBundle=Y2E=",
    ]));
    let service = chart
        .iter()
        .find(|o| o["kind"] == "APIService")
        .expect("an APIService");
    assert_eq!(service["spec"]["caBundle"], "Y2E=");
    assert_eq!(service["spec"]["service"]["name"], "homestead-homes-api");
    assert!(service["spec"].get("insecureSkipTLSVerify").is_none());
}

#[test]
fn null_ids_leave_the_uid_to_the_platform() {
    // OpenShift's restricted-v2 assigns the uid; every Deployment must then state none, and
    // stay non-root.
    let every = [
        "scim.enabled=true",
        "homesApi.enabled=true",
        "homesApi.caBundle=Y2E=",
    ];
    let pods = |sets: &[&str]| -> Vec<Value> {
        documents(&template(sets))
            .into_iter()
            .filter(|o| o["kind"] == "Deployment")
            .map(|d| d["spec"]["template"]["spec"]["securityContext"].clone())
            .collect()
    };
    let stated = pods(&every);
    assert_eq!(
        stated.len(),
        3,
        "the operator, SCIM and homes API Deployments"
    );
    for context in &stated {
        assert_eq!(context["runAsUser"], 65532, "{context}");
        assert_eq!(context["runAsGroup"], 65532, "{context}");
    }
    let platform = [
        &every[..],
        &[
            "podSecurityContext.runAsUser=null",
            "podSecurityContext.runAsGroup=null",
        ],
    ]
    .concat();
    for context in pods(&platform) {
        assert!(context.get("runAsUser").is_none(), "{context}");
        assert!(context.get("runAsGroup").is_none(), "{context}");
        assert_eq!(context["runAsNonRoot"], true, "{context}");
        assert_eq!(
            context["seccompProfile"]["type"], "RuntimeDefault",
            "{context}"
        );
    }
    assert!(!render(&["podSecurityContext.runAsUser=0"]).status.success());
}
#[test]
fn values_that_would_break_the_policies_cel_are_refused() {
    // Each goes into a CEL string literal of an admission policy.
    for set in [
        "operator.reservedNamespaces={it's}",
        "networkPolicy.tenantExternalCIDRs={0.0.0.0/0'}",
        "tenantServices.allowedTypes={Headless}",
    ] {
        let out = render(&[set]);
        assert!(!out.status.success(), "{set} rendered");
    }
}

#[test]
fn namespace_patterns_that_are_no_namespace_names_are_refused() {
    // They go into the admission policy's CEL as a raw string: a quote would break the policy
    // and, with it, every write of the operator.
    // An unbalanced class would not compile as RE2 (and the policy would refuse every write).
    for pattern in [
        "it's-*",
        "user-.*",
        "User-*",
        "lab-[a-m*",
        "lab-]",
        "lab-[]",
    ] {
        let out = render(&[&format!("operator.allowedNamespaces={{{pattern}}}")]);
        assert!(!out.status.success(), "{pattern} rendered");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("allowedNamespaces"), "{pattern}: {stderr}");
    }
}

fn kubectl(
    plane: &ControlPlane,
    identity: &str,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String) {
    common::run_with_stdin(
        plane.kubectl(identity).unwrap().args(args),
        stdin.unwrap_or_default(),
    )
}

/// Waits (at most 60 s) until every CRD named in `crds` is Established.
fn established(plane: &ControlPlane, crds: &[&str]) {
    let names: Vec<String> = crds.iter().map(|c| format!("crd/{c}")).collect();
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend(names.iter().map(String::as_str));
    let (ok, out) = kubectl(plane, ADMIN, &args, None);
    assert!(ok, "{out}");
}

fn can_i(plane: &ControlPlane, identity: &str, args: &[&str]) -> String {
    let (_, out) = kubectl(plane, identity, &[&["auth", "can-i"], args].concat(), None);
    out.lines().next().unwrap_or_default().trim().to_owned()
}

#[tokio::test]
async fn helm_install_yields_a_working_crd_rbac_and_admission_policy() {
    // A control plane of its own, with nothing installed: the chart brings everything.
    let plane = ControlPlane::start(Options::default()).await.unwrap();

    // Everything the chart renders, monitoring included (prometheus-operator's own CRDs,
    // from its Go module), is accepted by the API server (server-side dry run).
    let crds = tool("tools/monitoring/prometheus-operator-crds.sh");
    for crd in [
        "monitoring.coreos.com_servicemonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
    ] {
        let path = crds.join(crd);
        let (ok, out) = kubectl(
            &plane,
            ADMIN,
            &["apply", "--server-side", "-f", path.to_str().unwrap()],
            None,
        );
        assert!(ok, "{out}");
    }
    let (ok, out) = kubectl(
        &plane,
        ADMIN,
        &["create", "namespace", "homestead-system"],
        None,
    );
    assert!(ok, "{out}");
    established(
        &plane,
        &[
            "servicemonitors.monitoring.coreos.com",
            "prometheusrules.monitoring.coreos.com",
        ],
    );
    let everything = template(&[
        "scim.enabled=true",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
    ]);
    // Homestead's CRDs are part of the output (templates); the chart renders no object of them,
    // so a dry run that does not really create them is complete.
    let (ok, out) = kubectl(
        &plane,
        ADMIN,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&everything),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("prometheusrule.monitoring.coreos.com/homestead created (server dry run)"),
        "{out}"
    );

    // A real install.
    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &plane.dir().join("helm.kubeconfig"))
        .unwrap();
    let out = helm()
        .args([
            "install",
            "homestead",
            "charts/homestead",
            "--namespace",
            "homestead-system",
        ])
        .args(["--set", "scim.enabled=true", "--wait=false"])
        // A class, as `--allowed-namespace` reads it (the glob crate's `[a-m]`).
        .args(["--set", "operator.allowedNamespaces={user-*,lab-[a-m]*}"])
        .args([
            "--set",
            "operator.reservedNamespaces={user-finance,lab-audit}",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm install: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    established(&plane, &["users.homestead.dev", "profiles.homestead.dev"]);

    // The operator's identity may do its job and no more.
    assert_eq!(can_i(&plane, OPERATOR, &["create", "namespaces"]), "yes");
    assert_eq!(can_i(&plane, OPERATOR, &["patch", "users/status"]), "yes");
    assert_eq!(
        can_i(&plane, OPERATOR, &["bind", "clusterroles/edit"]),
        "yes"
    );
    assert_eq!(
        can_i(&plane, OPERATOR, &["bind", "clusterroles/cluster-admin"]),
        "no"
    );
    assert_eq!(can_i(&plane, OPERATOR, &["get", "secrets", "-A"]), "no");
    assert_eq!(
        can_i(
            &plane,
            OPERATOR,
            &["patch", "leases/homestead-leader", "-n", "homestead-system"]
        ),
        "yes"
    );
    assert_eq!(
        can_i(
            &plane,
            OPERATOR,
            &["create", "events.events.k8s.io", "-n", "default"]
        ),
        "yes"
    );
    // The SCIM identity: Users and DirectoryGroups, nothing else.
    assert_eq!(
        can_i(&plane, SCIM, &["create", "users.homestead.dev"]),
        "yes"
    );
    assert_eq!(
        can_i(&plane, SCIM, &["create", "directorygroups.homestead.dev"]),
        "yes"
    );
    assert_eq!(
        can_i(&plane, SCIM, &["create", "profiles.homestead.dev"]),
        "no"
    );
    assert_eq!(can_i(&plane, SCIM, &["create", "namespaces"]), "no");

    // The admission policies are in force (their bindings take a moment to be served).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kube-taken\n  labels:\n    app.kubernetes.io/managed-by: homestead\n    homestead.dev/user: x\n";
        let (ok, out) = kubectl(
            &plane,
            OPERATOR,
            &["create", "--dry-run=server", "-f", "-"],
            Some(namespace),
        );
        if !ok && out.contains("reserved namespace") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the operator could create kube-taken: {out}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The operator's server-side dry-run create of a Homestead Namespace `name`.
    let create_namespace = |name: &str| {
        let namespace = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    app.kubernetes.io/managed-by: homestead\n    homestead.dev/user: x\n    pod-security.kubernetes.io/enforce: baseline\n"
        );
        kubectl(
            &plane,
            OPERATOR,
            &["create", "--dry-run=server", "-f", "-"],
            Some(&namespace),
        )
    };
    // The names the operator may create are operator.allowedNamespaces, written into the policy.
    // operator.reservedNamespaces reach the policy too: the API server refuses the operator
    // those names even where the pattern allows them.
    for name in ["user-finance", "lab-audit"] {
        let (ok, out) = create_namespace(name);
        assert!(
            !ok && out.contains(
                "reserved namespace (default, kube-*, homestead-system, user-finance, lab-audit)"
            ),
            "{name}: {out}"
        );
    }
    for (name, admitted) in [
        ("user-x", true),
        ("lab-b", true),
        ("lab-x", false),
        ("labs-x", false),
        ("other-x", false),
    ] {
        let (ok, out) = create_namespace(name);
        if admitted {
            assert!(ok, "{name}: {out}");
        } else {
            assert!(
                !ok && out.contains("whose names match ^(user-.*|lab-[a-m].*|ws-.*)$"),
                "{name}: {out}"
            );
        }
    }
    let user = &format!(
        "apiVersion: {}\nkind: User\nmetadata:\n  name: sneaky\nspec:\n  identity:\n    username: sneaky@example.com\n  role: edit\n",
        homestead_api::API_VERSION
    );
    let (ok, out) = kubectl(
        &plane,
        SCIM,
        &["create", "--dry-run=server", "-f", "-"],
        Some(user),
    );
    assert!(!ok && out.contains("may not set profile, role"), "{out}");
    plane.stop();
}

#[test]
fn alerts_pass_promtool_checks_and_their_unit_tests() {
    let promtool = tool("tools/promtool/install.sh");
    for args in [
        vec!["check", "rules", "charts/homestead/files/alerts.yaml"],
        vec!["test", "rules", "tools/monitoring/alerts_test.yaml"],
    ] {
        let (ok, out) =
            common::run_with_stdin(Command::new(&promtool).args(&args).current_dir(root()), "");
        assert!(ok, "promtool {args:?}: {out}");
    }
}

/// With `monitoring.prometheusRule.runbookBaseUrl`, every alert links to its own section of
/// docs/troubleshooting.md, and that section exists (a heading named after the alert, whose
/// anchor is the name in lower case).
#[test]
fn every_alert_links_to_its_runbook() {
    let base = "https://docs.example.org/troubleshooting.md";
    let chart = documents(&template(&[
        "monitoring.prometheusRule.enabled=true",
        &format!("monitoring.prometheusRule.runbookBaseUrl={base}"),
    ]));
    let rule = chart
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    let page = std::fs::read_to_string(root().join("docs/troubleshooting.md")).unwrap();
    let mut alerts = 0;
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let alert = rule["alert"].as_str().unwrap();
            assert_eq!(
                rule["annotations"]["runbook_url"],
                format!("{base}#{}", alert.to_lowercase()),
                "{alert}"
            );
            assert!(
                page.lines().any(|l| l == format!("### {alert}")),
                "docs/troubleshooting.md has no section for {alert}"
            );
            alerts += 1;
        }
    }
    assert!(alerts >= 7, "{alerts} alerts");
    // Without the value, no link to nowhere.
    let plain = documents(&template(&["monitoring.prometheusRule.enabled=true"]));
    let rule = plain
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .unwrap();
    assert!(!serde_json::to_string(rule).unwrap().contains("runbook_url"));
}

/// `helm` with `args` against `plane`'s API server as the admin; returns its output, panics
/// with it if Helm fails.
fn helm_on(plane: &ControlPlane, args: &[&str]) -> String {
    let kubeconfig = plane
        .write_kubeconfig(ADMIN, &plane.dir().join("helm.kubeconfig"))
        .unwrap();
    let out = helm()
        .args(args)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A copy of the chart at `dir` as an earlier release had it: CRDs without the DirectoryGroup,
/// Share and Workspace CRDs and without the User fields `givenName` and `familyName` (all added since).
fn previous_release(dir: &Path) {
    let (ok, out) = common::run_with_stdin(
        Command::new("cp")
            .arg("-r")
            .arg(root().join("charts/homestead"))
            .arg(dir),
        "",
    );
    assert!(ok, "{out}");
    let crds = dir.join("files/crds.yaml");
    let older: Vec<String> = documents(&std::fs::read_to_string(&crds).unwrap())
        .into_iter()
        .filter(|crd| {
            crd["metadata"]["name"] != "directorygroups.homestead.dev"
                && crd["metadata"]["name"] != "shares.homestead.dev"
                && crd["metadata"]["name"] != "workspaces.homestead.dev"
        })
        .map(|mut crd| {
            if crd["metadata"]["name"] == "users.homestead.dev" {
                let spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
                    ["spec"]["properties"]
                    .as_object_mut()
                    .unwrap();
                assert!(spec.remove("givenName").is_some() && spec.remove("familyName").is_some());
            }
            serde_saphyr::to_string(&crd).unwrap()
        })
        .collect();
    assert_eq!(older.len(), 2);
    std::fs::write(&crds, older.join("---\n")).unwrap();
}

#[tokio::test]
async fn helm_upgrade_brings_new_crd_fields_and_uninstall_keeps_crds_and_users() {
    let plane = ControlPlane::start(Options::default()).await.unwrap();
    let previous = plane.dir().join("chart-previous");
    previous_release(&previous);
    let release = ["--namespace", "homestead-system", "--create-namespace"];
    let _ = helm_on(
        &plane,
        &[
            &["install", "homestead", previous.to_str().unwrap()],
            &release[..],
        ]
        .concat(),
    );
    established(&plane, &["users.homestead.dev", "profiles.homestead.dev"]);
    let (ok, _) = kubectl(
        &plane,
        ADMIN,
        &["get", "crd", "directorygroups.homestead.dev"],
        None,
    );
    assert!(!ok, "the earlier release has no DirectoryGroups");
    let named = &format!(
        "apiVersion: {}\nkind: User\nmetadata:\n  name: probe\nspec:\n  identity:\n    username: ada@example.com\n  givenName: Ada\n",
        homestead_api::API_VERSION
    );
    let given_name = |plane: &ControlPlane| {
        let (ok, out) = kubectl(
            plane,
            ADMIN,
            &[
                "create",
                "--dry-run=server",
                "--validate=ignore",
                "-o",
                "jsonpath={.spec.givenName}",
                "-f",
                "-",
            ],
            Some(named),
        );
        assert!(ok, "{out}");
        out
    };
    assert_eq!(given_name(&plane), "", "the earlier CRD prunes givenName");
    let (ok, out) = kubectl(
        &plane,
        ADMIN,
        &["create", "-f", "-"],
        Some(
            &named
                .replace("  givenName: Ada\n", "")
                .replace("probe", "ada"),
        ),
    );
    assert!(ok, "{out}");

    // The upgrade brings the new CRD and the new field, and its notes say how to check it and
    // how kube-prometheus-stack picks monitoring up.
    let notes = helm_on(
        &plane,
        &[&["upgrade", "homestead", "charts/homestead"], &release[..]].concat(),
    );
    assert!(
        notes.contains("rollout status deployment/homestead")
            && notes.contains("monitoring.serviceMonitor.enabled=true"),
        "{notes}"
    );
    established(&plane, &["directorygroups.homestead.dev"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while given_name(&plane) != "Ada" {
        assert!(
            std::time::Instant::now() < deadline,
            "givenName is not served after the upgrade"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Uninstalling keeps the CRDs and every User (helm.sh/resource-policy: keep).
    let _ = helm_on(
        &plane,
        &["uninstall", "homestead", "--namespace", "homestead-system"],
    );
    for crd in [
        "users.homestead.dev",
        "profiles.homestead.dev",
        "directorygroups.homestead.dev",
    ] {
        let (ok, out) = kubectl(&plane, ADMIN, &["get", "crd", crd], None);
        assert!(ok, "{crd} is gone after helm uninstall: {out}");
    }
    let (ok, out) = kubectl(&plane, ADMIN, &["get", "user", "ada"], None);
    assert!(ok, "the User is gone after helm uninstall: {out}");
    plane.stop();
}

#[test]
fn artifact_hub_lists_every_crd_the_chart_installs() {
    let chart = read("charts/homestead/Chart.yaml").remove(0);
    let listed: Vec<Value> = serde_saphyr::from_str(
        chart["annotations"]["artifacthub.io/crds"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let mut listed: Vec<String> = listed
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["name"].as_str().unwrap(),
                c["kind"].as_str().unwrap()
            )
        })
        .collect();
    let mut installed: Vec<String> = read("charts/homestead/files/crds.yaml")
        .iter()
        .map(|crd| {
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
            format!("{} {kind}", crd["metadata"]["name"].as_str().unwrap())
        })
        .collect();
    listed.sort();
    installed.sort();
    assert_eq!(listed, installed);
}

#[test]
fn the_chart_readme_is_generated_from_its_values() {
    let (ok, out) = common::run_with_stdin(
        Command::new(root().join("tools/helm/docs.sh")).arg("--check"),
        "",
    );
    assert!(ok, "{out}");
}

#[test]
fn the_packaged_chart_lints_and_renders() {
    let dir = std::env::temp_dir().join(format!("homestead-package-{}", std::process::id()));
    let out = helm()
        .args(["package", "charts/homestead", "--destination"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chart = read("charts/homestead/Chart.yaml").remove(0);
    let package = dir.join(format!(
        "homestead-{}.tgz",
        chart["version"].as_str().unwrap()
    ));
    for args in [
        vec!["lint", "--strict"],
        vec!["template", "homestead", "--set", "scim.enabled=true"],
    ] {
        let out = helm().args(&args).arg(&package).output().unwrap();
        assert!(
            out.status.success(),
            "helm {args:?} of the package: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn full_and_name_overrides_rename_every_object_and_what_refers_to_it() {
    let objects = documents(&template(&[
        "fullnameOverride=hs",
        "nameOverride=hsn",
        "scim.enabled=true",
        "networkPolicy.enabled=true",
        "networkPolicy.apiServerCIDRs={10.0.0.1/32}",
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
    ]));
    for object in objects
        .iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
    {
        let name = object["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("hs"), "{:?} keeps its name", key(object));
    }
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    // The identities the admission policies match are the ServiceAccounts the Pods run as.
    let operator = find("Deployment", "hs");
    let scim = find("Deployment", "hs-scim");
    assert_eq!(
        operator["spec"]["template"]["spec"]["serviceAccountName"],
        "hs"
    );
    assert_eq!(
        scim["spec"]["template"]["spec"]["serviceAccountName"],
        "hs-scim"
    );
    for name in ["hs-operator-bounds", "hs-operator-namespaced"] {
        let policy = serde_json::to_string(&find("ValidatingAdmissionPolicy", name)).unwrap();
        assert!(
            policy.contains("system:serviceaccount:homestead-system:hs'"),
            "{policy}"
        );
    }
    let scim_bounds =
        serde_json::to_string(&find("ValidatingAdmissionPolicy", "hs-scim-bounds")).unwrap();
    assert!(scim_bounds.contains("system:serviceaccount:homestead-system:hs-scim'"));
    // Selectors select the Pods, and the Lease the operator takes is the one it may update.
    for deployment in [operator, scim] {
        let selector = deployment["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap();
        let labels = &deployment["spec"]["template"]["metadata"]["labels"];
        for (k, v) in selector {
            assert_eq!(&labels[k], v, "{k}");
        }
    }
    assert_eq!(
        operator["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "hsn"
    );
    let args =
        serde_json::to_string(&operator["spec"]["template"]["spec"]["containers"][0]["args"])
            .unwrap();
    assert!(args.contains("--lease-name=hs-leader"), "{args}");
    let role = find("Role", "hs-leader-election");
    assert!(
        serde_json::to_string(role)
            .unwrap()
            .contains("\"hs-leader\"")
    );
    let binding = find("ClusterRoleBinding", "hs");
    assert_eq!(binding["subjects"][0]["name"], "hs");
    assert_eq!(binding["roleRef"]["name"], "hs");
}

/// Issue 61, B8: with `networkPolicy.apiServerCIDRs: []` the homes API's serving port admitted
/// any address while the docs said a tenant Pod could not even connect. Now the schema refuses
/// an enabled NetworkPolicy without the API server's addresses, naming the field.
#[test]
fn an_enabled_network_policy_needs_the_api_servers_addresses() {
    let refused = render(&[
        "networkPolicy.enabled=true",
        "homesApi.enabled=true",
        "homesApi.caBundle=Cg==",
    ]);
    assert!(
        !refused.status.success(),
        "an enabled NetworkPolicy without apiServerCIDRs rendered"
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("apiServerCIDRs"), "{stderr}");
    let rendered = documents(&template(&[
        "networkPolicy.enabled=true",
        "networkPolicy.apiServerCIDRs={10.0.0.1/32}",
        "homesApi.enabled=true",
        "homesApi.caBundle=Cg==",
    ]));
    let homes = rendered
        .iter()
        .find(|o| {
            o["kind"] == "NetworkPolicy"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("homes-api"))
        })
        .expect("the homes API's NetworkPolicy");
    let from = serde_json::to_string(&homes["spec"]["ingress"]).unwrap();
    assert!(from.contains("10.0.0.1/32"), "{from}");
}
