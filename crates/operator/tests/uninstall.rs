//! Uninstall safety (docs/design.md rule 7): deleting the `users.homestead.dev` CRD while the
//! operator runs releases every User as `Retain`; no person's namespace is deleted, even those
//! whose User says `deletionPolicy: Delete` and whose Namespace carried an owner reference.
//! Its own test binary, hence its own control plane: it deletes the CRD.

mod common;

use homestead_api::User;
use std::time::Duration;

use common::*;
use homestead_api::{CRD_NAME, LABEL_RETAINED_FROM};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn deleting_the_crd_deletes_no_namespace() {
    let s = Scenario::new();
    let c = admin().await;
    let people = ["uninst-ann", "uninst-ben"];
    for name in people {
        s.create(
            &c,
            &User::test(name).with_spec(json!({ "deletionPolicy": "Delete" })),
        )
        .await;
    }
    for name in people {
        wait_reason(&c, name, "Provisioned").await;
        let data = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("data".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &format!("user-{name}"));
        cms.create(&PostParams::default(), &data).await.unwrap();
    }
    let namespaces: Api<Namespace> = Api::all(c.clone());
    assert_eq!(
        namespaces
            .get("user-uninst-ann")
            .await
            .unwrap()
            .owner_references()
            .len(),
        1
    );

    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    crds.delete(CRD_NAME, &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&crds, CRD_NAME, 90).await;
    // Give the garbage collector time to act on any owner reference left behind.
    tokio::time::sleep(Duration::from_secs(5)).await;

    for name in people {
        let ns_name = format!("user-{name}");
        let ns = namespaces.get(&ns_name).await.unwrap();
        assert!(
            ns.metadata.deletion_timestamp.is_none(),
            "{ns_name} is being deleted"
        );
        assert!(
            ns.owner_references().is_empty(),
            "{ns_name} still has an owner reference"
        );
        assert_eq!(
            ns.labels().get(LABEL_RETAINED_FROM).map(String::as_str),
            Some(name)
        );
        let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ns_name);
        assert!(
            cms.get_opt("data").await.unwrap().is_some(),
            "data lost in {ns_name}"
        );
        let rbs: Api<RoleBinding> = Api::namespaced(c.clone(), &ns_name);
        assert!(
            rbs.get_opt("homestead-user").await.unwrap().is_none(),
            "access kept in {ns_name}"
        );
    }
}
