//! The shipped uninstall path loses nothing: `kubectl delete -k manifests/` removes the operator,
//! its RBAC and its admission policy, and leaves the CRD, every User and every person's
//! namespace and data as they were. Its own test binary: it deletes the operator's RBAC.

mod common;

use std::time::Duration;

use common::*;
use homestead_api::{CRD_NAME, User};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test]
async fn deleting_the_kustomization_keeps_the_crd_users_and_namespaces() {
    let s = Scenario::new();
    let c = admin().await;
    let people = ["kz-ann", "kz-ben"];
    for name in people {
        s.create(
            &c,
            &User::test(name).with_spec(json!({ "deletionPolicy": "Delete" })),
        )
        .await;
    }
    for name in people {
        wait_reason(&c, name, "Provisioned").await;
        let data: ConfigMap =
            serde_json::from_value(json!({ "metadata": { "name": "data" } })).unwrap();
        Api::<ConfigMap>::namespaced(c.clone(), &format!("user-{name}"))
            .create(&PostParams::default(), &data)
            .await
            .unwrap();
    }
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../manifests");
    let (ok, out) = kubectl(
        &["delete", "-k", root, "--wait=false", "--ignore-not-found"],
        "",
    );
    assert!(ok, "{out}");
    assert!(out.contains("validatingadmissionpolicy"), "{out}");
    assert!(
        !out.contains("customresourcedefinition"),
        "the CRD must not be in the kustomization: {out}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;

    let crd = Api::<CustomResourceDefinition>::all(c.clone())
        .get(CRD_NAME)
        .await
        .unwrap();
    assert!(crd.metadata.deletion_timestamp.is_none());
    for name in people {
        let u = Api::<User>::all(c.clone()).get(name).await.unwrap();
        assert!(
            u.metadata.deletion_timestamp.is_none(),
            "{name} is being deleted"
        );
        let ns = Api::<Namespace>::all(c.clone())
            .get(&format!("user-{name}"))
            .await
            .unwrap();
        assert!(
            ns.metadata.deletion_timestamp.is_none(),
            "user-{name} is being deleted"
        );
        let data = Api::<ConfigMap>::namespaced(c.clone(), &format!("user-{name}"))
            .get_opt("data")
            .await
            .unwrap();
        assert!(data.is_some(), "data lost in user-{name}");
    }
}
