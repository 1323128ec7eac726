//! Proves, on the real servers, that the local control plane does what the integration tests of
//! the operator rely on: namespace deletion, garbage collection, RBAC enforcement, aggregated
//! roles, default ServiceAccounts, the aggregation layer's front proxy, clean stop.

use std::path::Path;
use std::time::Duration;

use homestead_testenv::{ADMIN, ControlPlane, Identity, Options};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};

/// A tenant with no permissions at all until a test grants some.
const TENANT: &str = "tenant-tess@example.com";

fn shared() -> &'static ControlPlane {
    ControlPlane::shared(|o| o.identity(Identity::new(TENANT)))
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    }
}

/// Waits up to `secs` seconds for the object to be gone.
async fn gone<K>(api: &Api<K>, name: &str, uid: Option<String>, secs: u64)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let uid = uid.unwrap_or_default();
    let deleted = await_condition(api.clone(), name, conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(secs), deleted)
        .await
        .unwrap_or_else(|_| panic!("{name} still exists after {secs} s"))
        .expect("watch failed");
}

#[tokio::test]
async fn deleted_namespace_disappears() {
    let client = shared().client(ADMIN).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta("testenv-ns-delete"),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "testenv-ns-delete");
    configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: meta("content"),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();

    namespaces
        .delete("testenv-ns-delete", &DeleteParams::default())
        .await
        .unwrap();
    // Without the namespace controller the namespace would stay Terminating forever.
    gone(&namespaces, "testenv-ns-delete", ns.metadata.uid, 60).await;
}

#[tokio::test]
async fn dependent_of_deleted_owner_is_garbage_collected() {
    let client = shared().client(ADMIN).await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let owner = configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: meta("testenv-gc-owner"),
                ..ConfigMap::default()
            },
        )
        .await
        .unwrap();
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "testenv-gc-owner".into(),
                uid: owner.metadata.uid.clone().unwrap(),
                ..OwnerReference::default()
            }]),
            ..meta("testenv-gc-dependent")
        },
        ..ConfigMap::default()
    };
    let dependent = configmaps
        .create(&PostParams::default(), &dependent)
        .await
        .unwrap();

    configmaps
        .delete("testenv-gc-owner", &DeleteParams::background())
        .await
        .unwrap();
    // The garbage collector may first need a discovery sync (every 30 s).
    gone(
        &configmaps,
        "testenv-gc-dependent",
        dependent.metadata.uid,
        90,
    )
    .await;
}

#[tokio::test]
async fn rbac_is_enforced_for_token_identities() {
    let plane = shared();
    let tenant: Api<Namespace> = Api::all(plane.client(TENANT).await.unwrap());
    match tenant.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403 Forbidden before any grant, got {other:?}"),
    }

    // A plain ClusterRole of the test's own (the aggregated roles are checked below).
    let admin = plane.client(ADMIN).await.unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    let role = ClusterRole {
        metadata: meta("testenv-configmap-reader"),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["list".into()],
            ..PolicyRule::default()
        }]),
        aggregation_rule: None,
    };
    roles.create(&PostParams::default(), &role).await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin);
    let binding = ClusterRoleBinding {
        metadata: meta("testenv-tenant-view"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: "testenv-configmap-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "User".into(),
            name: TENANT.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        }]),
    };
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let configmaps: Api<ConfigMap> =
        Api::namespaced(plane.client(TENANT).await.unwrap(), "default");
    let mut allowed = configmaps.list(&Default::default()).await;
    for _ in 0..50 {
        if allowed.is_ok() {
            break;
        }
        // The RBAC authorizer's informer needs a moment to see the new binding.
        tokio::time::sleep(Duration::from_millis(100)).await;
        allowed = configmaps.list(&Default::default()).await;
    }
    bindings
        .delete("testenv-tenant-view", &DeleteParams::default())
        .await
        .unwrap();
    roles
        .delete("testenv-configmap-reader", &DeleteParams::default())
        .await
        .unwrap();
    allowed.expect("the tenant was granted list on ConfigMaps");
    match tenant.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("the grant covers ConfigMaps only, yet listing Namespaces gave {other:?}"),
    }
}

#[tokio::test]
async fn aggregated_roles_carry_their_rules_and_namespaces_get_a_service_account() {
    let admin = shared().client(ADMIN).await.unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    for name in ["admin", "edit", "view"] {
        let aggregated = await_condition(roles.clone(), name, |role: Option<&ClusterRole>| {
            role.and_then(|r| r.rules.as_ref()).is_some_and(|rules| {
                rules
                    .iter()
                    .any(|r| r.resources.iter().flatten().any(|x| x == "configmaps"))
            })
        });
        tokio::time::timeout(Duration::from_secs(60), aggregated)
            .await
            .unwrap_or_else(|_| panic!("ClusterRole {name} never got its aggregated rules"))
            .unwrap();
    }
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta("testenv-sa"),
                ..Namespace::default()
            },
        )
        .await
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin, "testenv-sa");
    let created = await_condition(accounts, "default", |sa: Option<&ServiceAccount>| {
        sa.is_some()
    });
    tokio::time::timeout(Duration::from_secs(60), created)
        .await
        .expect("the serviceaccount controller made the default ServiceAccount")
        .unwrap();
    namespaces
        .delete("testenv-sa", &DeleteParams::default())
        .await
        .unwrap();
}

/// The aggregation layer (docs/design.md, the homes API): kube-apiserver publishes the
/// front-proxy CA and the one allowed name where an extension API server reads them, and a
/// request with the front-proxy client certificate is taken as whoever `X-Remote-User` and
/// `X-Remote-Group` name, which is why an extension server must accept those headers from that
/// certificate alone.
#[tokio::test]
async fn the_front_proxy_is_published_and_speaks_for_the_caller() {
    let plane = shared();
    let admin = plane.client(ADMIN).await.unwrap();
    let published: ConfigMap = Api::namespaced(admin, "kube-system")
        .get("extension-apiserver-authentication")
        .await
        .unwrap();
    let data = published.data.unwrap_or_default();
    let ca = std::fs::read_to_string(plane.dir().join("front-proxy-ca.crt")).unwrap();
    assert_eq!(
        data.get("requestheader-client-ca-file").map(|s| s.trim()),
        Some(ca.trim())
    );
    assert_eq!(
        data.get("requestheader-allowed-names").map(String::as_str),
        Some(r#"["front-proxy-client"]"#)
    );

    let mut kubeconfig: Kubeconfig = plane.kubeconfig(ADMIN).unwrap();
    for named in &mut kubeconfig.auth_infos {
        let auth = named.auth_info.get_or_insert_default();
        auth.token = None;
        auth.client_certificate = Some(
            plane
                .dir()
                .join("front-proxy-client.crt")
                .display()
                .to_string(),
        );
        auth.client_key = Some(
            plane
                .dir()
                .join("front-proxy-client.key")
                .display()
                .to_string(),
        );
    }
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
    config.headers = vec![
        (
            "X-Remote-User".try_into().unwrap(),
            "alice@example.com".try_into().unwrap(),
        ),
        (
            "X-Remote-Group".try_into().unwrap(),
            "analysts".try_into().unwrap(),
        ),
    ];
    let proxied = kube::Client::try_from(config).unwrap();
    let review: SelfSubjectReview = Api::all(proxied)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review.status.and_then(|s| s.user_info).unwrap_or_default();
    assert_eq!(user.username.as_deref(), Some("alice@example.com"));
    assert!(
        user.groups.iter().flatten().any(|g| g == "analysts"),
        "groups: {:?}",
        user.groups
    );
}

/// Command lines of running processes that mention `dir`.
fn processes_mentioning(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(&needle))
        .collect()
}

#[tokio::test]
async fn stop_leaves_no_process_and_no_directory() {
    let plane = ControlPlane::start(Options::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = plane.dir().to_owned();
    let running = processes_mentioning(&dir);
    for name in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        assert!(
            running.iter().any(|c| c.contains(&format!("/{name} "))),
            "{name} not running; its log:\n{log}"
        );
    }
    plane.stop();
    assert_eq!(processes_mentioning(&dir), Vec::<String>::new());
    assert!(!dir.exists(), "{} was not removed", dir.display());
}
