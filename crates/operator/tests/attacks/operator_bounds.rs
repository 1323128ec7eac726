//! The operator itself, as if compromised (docs/design.md rule 15): every rule of the admission
//! policies that bound its ServiceAccount holds on its own.

use super::*;

/// Each rule of the operator's two admission policies (`homestead-operator-bounds` for its
/// Namespace writes, `homestead-operator-namespaced` for what it writes inside them) refuses a
/// write that breaks that rule alone, and the writes Homestead makes pass: as the operator's
/// identity, whatever its RBAC allows (dry runs, so nothing is kept).
#[tokio::test]
async fn every_rule_of_the_operator_policies_holds_on_its_own() {
    let s = Scenario::new();
    let c = admin().await;
    let ours = "user-atk-rules";
    let (theirs, retained) = ("atk-rules-theirs", "atk-rules-retained");
    let handed = "atk-rules-handed";
    let homesteads = json!({ "app.kubernetes.io/managed-by": "homestead",
        "homestead.dev/user": "atk-rules", "pod-security.kubernetes.io/enforce": "baseline" });
    for (name, labels) in [
        (ours, homesteads.clone()),
        (theirs, json!({})),
        (
            retained,
            json!({ "homestead.dev/retained-from": "atk-rules" }),
        ),
        (handed, json!({ "homestead.dev/adopt-for": "atk-rules" })),
    ] {
        s.track_namespace(name);
        let ns = json!({ "metadata": { "name": name, "labels": labels } });
        Api::<Namespace>::all(c.clone())
            .create(&PostParams::default(), &serde_json::from_value(ns).unwrap())
            .await
            .unwrap();
    }
    let operator = env().plane.client(OPERATOR).await.unwrap();
    let namespaces = Api::<Namespace>::all(operator.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let dry_delete = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    // A dry-run create, as the operator, of Namespace `name` labelled `labels`.
    let create = |name: &str, labels: Value| {
        let namespace: Namespace =
            serde_json::from_value(json!({ "metadata": { "name": name, "labels": labels } }))
                .unwrap();
        let (namespaces, dry) = (namespaces.clone(), dry.clone());
        async move { namespaces.create(&dry, &namespace).await }
    };
    let without = |key: &str| {
        let mut labels = homesteads.clone();
        labels.as_object_mut().unwrap().remove(key);
        labels
    };

    // homestead-operator-bounds: one broken rule at a time, then what Homestead creates.
    let reserved = create("kube-atk-rules", homesteads.clone()).await;
    assert!(forbidden(reserved, "reserved namespace"));
    let outside = create("atk-rules-new", homesteads.clone()).await;
    assert!(forbidden(outside, "names match"));
    let label_rule = "labelled app.kubernetes.io/managed-by";
    for key in ["app.kubernetes.io/managed-by", "homestead.dev/user"] {
        let unlabelled = create("user-atk-rules-new", without(key)).await;
        assert!(forbidden(unlabelled, label_rule), "{key}");
    }
    let mut someone_elses = homesteads.clone();
    someone_elses["app.kubernetes.io/managed-by"] = json!("helm");
    let foreign = create("user-atk-rules-new", someone_elses).await;
    assert!(forbidden(foreign, label_rule));
    let no_enforce = create(
        "user-atk-rules-new",
        without("pod-security.kubernetes.io/enforce"),
    );
    assert!(forbidden(no_enforce.await, "enforce Pod Security"));
    create("user-atk-rules-new", homesteads.clone())
        .await
        .expect("a Namespace as Homestead creates it");
    // Updates and deletes are judged by the labels the Namespace has before the request.
    let relabel = Patch::Merge(json!({ "metadata": { "labels": homesteads.clone() } }));
    let patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let claimed = namespaces.patch(theirs, &patch, &relabel).await;
    assert!(forbidden(
        claimed,
        "only update or delete Namespaces labelled so"
    ));
    let deleted = namespaces.delete(theirs, &dry_delete).await;
    assert!(forbidden(
        deleted,
        "only update or delete Namespaces labelled so"
    ));
    namespaces
        .patch(ours, &patch, &relabel)
        .await
        .expect("an update of Homestead's Namespace");
    // Adoption: a Namespace the platform handed to atk-rules may become atk-rules's, by an
    // update, and nobody else's; it may not be deleted.
    let mut for_another = homesteads.clone();
    for_another["homestead.dev/user"] = json!("atk-rules-other");
    let to_another = Patch::Merge(json!({ "metadata": { "labels": for_another } }));
    let taken = namespaces.patch(handed, &patch, &to_another).await;
    assert!(forbidden(taken, "for that User"));
    let deleted = namespaces.delete(handed, &dry_delete).await;
    assert!(forbidden(deleted, "for that User"));
    namespaces
        .patch(handed, &patch, &relabel)
        .await
        .expect("the adoption of a Namespace handed to the User");
    namespaces
        .delete(ours, &dry_delete)
        .await
        .expect("a delete of Homestead's Namespace");

    // homestead-operator-namespaced: where, whom and which role.
    let binding = |subject: Value| -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": { "name": "atk-rules" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "edit" },
            "subjects": [subject],
        }))
        .unwrap()
    };
    let person = json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                         "name": "atk-rules" });
    let bindings = |ns: &str| Api::<RoleBinding>::namespaced(operator.clone(), ns);
    for ns in [theirs, retained] {
        let outside = bindings(ns).create(&dry, &binding(person.clone())).await;
        assert!(forbidden(outside, "may only write RoleBindings"), "{ns}");
    }
    let robot = json!({ "kind": "ServiceAccount", "name": "default", "namespace": ours });
    let robot = bindings(ours).create(&dry, &binding(robot)).await;
    assert!(forbidden(robot, "people and their groups"));
    bindings(ours)
        .create(&dry, &binding(person))
        .await
        .expect("a RoleBinding as Homestead creates it");
    // (Deleting RoleBindings in a retained namespace, the standing revocation rule, is allowed:
    // retain_offboarding_leaves_no_binding_a_racing_tenant_made.)
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": { "name": "atk-rules" }, "spec": { "hard": { "pods": "1" } } }))
    .unwrap();
    let quotas = |ns: &str| Api::<ResourceQuota>::namespaced(operator.clone(), ns);
    let outside = quotas(theirs).create(&dry, &quota).await;
    assert!(forbidden(
        outside,
        "may only write RoleBindings, ResourceQuotas"
    ));
    quotas(ours)
        .create(&dry, &quota)
        .await
        .expect("a ResourceQuota in Homestead's Namespace");
}
