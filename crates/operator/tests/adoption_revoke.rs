//! Adoption with `--revoke-adopted-role-bindings` (docs/adoption.md): handing a namespace over
//! removes the RoleBindings people made there before Homestead, and the access they gave, and
//! nothing else. Its own test binary: its operator runs with that flag.

mod common;

use common::*;
use homestead_api::{LABEL_ADOPT_FOR, User};
use homestead_testenv::free_port;
use serde_json::json;

#[tokio::test]
async fn adopting_with_revocation_removes_the_access_given_before_and_nothing_else() {
    install();
    let address = format!("127.0.0.1:{}", free_port().unwrap());
    let operator = spawn_operator_with(
        "homestead",
        "homestead-revoke",
        &address,
        &["--revoke-adopted-role-bindings=true"],
    );
    wait_until_ready(&operator, || {
        http_get(&address, "/readyz").map(|(code, _)| code) == Some(200)
    });
    let s = Scenario::new();
    let c = admin().await;
    let (ns, user) = ("e2e-revoke-legacy", "e2e-revoke-owner");
    s.track_namespace(ns);
    let before = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings, namespace: {ns}}}
data: {{model: v7}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: legacy-dev, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: dave@example.com}}]
"#
    );
    let (ok, out) = kubectl(&["apply", "-f", "-"], &before);
    assert!(ok, "{out}");
    assert_eq!(can_get_pods("dave@example.com", ns), "yes");

    s.create(
        &c,
        &User::test(user).with_spec(json!({ "namespace": { "name": ns } })),
    )
    .await;
    wait_reason(&c, user, "NamespaceConflict").await;
    let (ok, out) = kubectl(
        &[
            "label",
            "namespace",
            ns,
            &format!("{LABEL_ADOPT_FOR}={user}"),
        ],
        "",
    );
    assert!(ok, "{out}");
    wait_reason(&c, user, "Provisioned").await;

    // The binding made before is gone, and with it dave's access; the owner has theirs.
    eventually(
        "the binding made before adoption to be revoked",
        10,
        || async {
            let (found, _) = kubectl(&["-n", ns, "get", "rolebinding", "legacy-dev"], "");
            (!found).then_some(())
        },
    )
    .await;
    assert_eq!(can_get_pods("dave@example.com", ns), "no");
    assert_eq!(can_get_pods("e2e-revoke-owner@example.com", ns), "yes");
    // Nothing else: the data stays, and the handing-over label is used up.
    let (ok, data) = kubectl(
        &[
            "-n",
            ns,
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.model}",
        ],
        "",
    );
    assert!(ok && data == "v7", "{data}");
    let (_, label) = kubectl(
        &[
            "get",
            "namespace",
            ns,
            "-o",
            &format!(
                "jsonpath={{.metadata.labels.{}}}",
                LABEL_ADOPT_FOR.replace('.', "\\.")
            ),
        ],
        "",
    );
    assert_eq!(label, "");
    // The Event says what was removed.
    eventually("the Event naming the revoked binding", 10, || async {
        user_events(&c, user)
            .await
            .into_iter()
            .find(|(_, _, note)| {
                note.contains("removed its RoleBindings made before adoption")
                    && note.contains("legacy-dev")
            })
    })
    .await;
}
