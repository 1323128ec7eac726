//! Team workspaces at scale (`HOMESTEAD_BENCH_WORKSPACES=N`, docs/performance.md): N
//! DirectoryGroups of [`MEMBERS`] bench Users each and N team Workspaces owned by them (the
//! first member their admin, the others members), made `IN_FLIGHT` at a time once Homestead's
//! Users are Ready, timed until every Workspace is `Ready=True`, with the operator's peak RSS.
//! Beside it, before the operator first starts, the floor makes the same writes for as many
//! workspaces itself: the group and the Workspace as the platform, then as the operator the
//! finalizer, the Namespace (Pod Security `restricted`), the NetworkPolicy of isolation (a team
//! no Profile selects gets the directory's floor), the two RoleBindings and the status; its
//! objects are removed before Homestead starts.

use super::*;
use homestead_api::{DirectoryGroup, Workspace};

/// Members of each bench group.
pub(crate) const MEMBERS: usize = 10;

/// `HOMESTEAD_BENCH_WORKSPACES`: how many team workspaces, if any.
pub(crate) fn workspaces_from_env() -> usize {
    std::env::var("HOMESTEAD_BENCH_WORKSPACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The group and Workspace `j` of `run` (`floor` or `homestead`), its members the Users
/// `run-<j*MEMBERS ..>` (wrapping around `users`).
fn team(run: &str, j: usize, users: usize) -> (DirectoryGroup, Workspace) {
    let member = |k: usize| format!("{run}-{:05}", (j * MEMBERS + k) % users.max(1));
    let members: Vec<String> = (0..MEMBERS).map(member).collect();
    let name = format!("{run}-team-{j:05}");
    let group: DirectoryGroup = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "DirectoryGroup",
        "metadata": { "name": name },
        "spec": { "displayName": name, "members": members },
    }))
    .expect("a valid DirectoryGroup");
    let workspace: Workspace = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
        "metadata": { "name": name, "labels": { RUN_LABEL: run },
            "annotations": { "homestead.dev/created-by": ADMIN } },
        "spec": { "owner": { "group": name }, "admins": [members[0]], "reason": "bench" },
    }))
    .expect("a valid Workspace");
    (group, workspace)
}

/// Label telling the two runs' Workspaces apart.
const RUN_LABEL: &str = "bench.homestead.dev/run";

/// Homestead: creates `count` teams over the `users` Ready bench Users while `operator` runs;
/// prints and returns the time until every Workspace is `Ready=True`, and prints the operator's
/// peak RSS.
pub(crate) async fn homestead_workspaces(
    admin: &Client,
    operator: &Operator,
    count: usize,
    users: usize,
) -> Duration {
    let workspaces: Api<Workspace> = Api::all(admin.clone());
    let groups: Api<DirectoryGroup> = Api::all(admin.clone());
    let rss_before = memory_mib(operator.pid(), "VmHWM");
    let started = Instant::now();
    each(count, |j| {
        let (groups, workspaces) = (groups.clone(), workspaces.clone());
        async move {
            let (group, workspace) = team("homestead", j, users);
            groups.create(&PostParams::default(), &group).await?;
            workspaces
                .create(&PostParams::default(), &workspace)
                .await
                .map(drop)
        }
    })
    .await;
    let created = started.elapsed();
    loop {
        let list = workspaces
            .list(&kube::api::ListParams::default().labels(&format!("{RUN_LABEL}=homestead")))
            .await
            .expect("a list of Workspaces");
        let ready = list
            .items
            .iter()
            .filter(|w| {
                w.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count();
        if ready == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let up = started.elapsed();
    println!(
        "homestead: {count} team workspaces of {MEMBERS} members over {users} Users: all created in {}, all Ready in {}; operator peak RSS {:.1} MiB (before them {rss_before:.1} MiB), RSS now {:.1} MiB",
        secs(created),
        secs(up),
        memory_mib(operator.pid(), "VmHWM"),
        memory_mib(operator.pid(), "VmRSS"),
    );
    up
}

/// The floor: the same writes for `count` teams, made directly, `IN_FLIGHT` at a time: as the
/// platform (`admin`) the group and the Workspace; as the operator (`operator`) the finalizer,
/// the Namespace, the admins' and members' RoleBindings and the status. Prints the time,
/// removes what it made, and returns the time.
pub(crate) async fn floor_workspaces(
    admin: &Client,
    operator: &Client,
    count: usize,
    users: usize,
) -> Duration {
    let started = Instant::now();
    each(count, |j| {
        let (admin, operator) = (admin.clone(), operator.clone());
        async move { floor_team(&admin, &operator, j, users).await }
    })
    .await;
    let up = started.elapsed();
    println!(
        "floor: {count} team workspaces of {MEMBERS} members (the same writes): all done in {}",
        secs(up)
    );
    // Remove them: no finalizer, no Workspace, no group; the namespaces go with theirs.
    each(count, |j| {
        let admin = admin.clone();
        async move {
            let name = format!("floor-team-{j:05}");
            let workspaces: Api<Workspace> = Api::all(admin.clone());
            let patch = json!({ "metadata": { "finalizers": null } });
            workspaces
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            workspaces.delete(&name, &DeleteParams::default()).await?;
            Api::<DirectoryGroup>::all(admin.clone())
                .delete(&name, &DeleteParams::default())
                .await?;
            Api::<Namespace>::all(admin)
                .delete(&format!("ws-{name}"), &DeleteParams::default())
                .await
                .map(drop)
        }
    })
    .await;
    // Their namespaces are gone before Homestead starts, so its run does not pay for their
    // deletion.
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let theirs = kube::api::ListParams::default().labels("homestead.dev/workspace");
    while !namespaces
        .list(&theirs)
        .await
        .expect("a list of Namespaces")
        .items
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    up
}

/// One floor team `j`: its seven writes.
async fn floor_team(
    admin: &Client,
    operator: &Client,
    j: usize,
    users: usize,
) -> Result<(), kube::Error> {
    let (group, workspace) = team("floor", j, users);
    let name = workspace.name_any();
    Api::<DirectoryGroup>::all(admin.clone())
        .create(&PostParams::default(), &group)
        .await?;
    let created = Api::<Workspace>::all(admin.clone())
        .create(&PostParams::default(), &workspace)
        .await?;
    let workspaces: Api<Workspace> = Api::all(operator.clone());
    let finalizer = json!({ "metadata": { "finalizers": [FINALIZER] } });
    workspaces
        .patch(&name, &PatchParams::default(), &Patch::Merge(&finalizer))
        .await?;
    let namespace = format!("ws-{name}");
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": { "name": namespace, "labels": {
            LABEL_MANAGED_BY: MANAGED_BY, "homestead.dev/workspace": name,
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/warn": "restricted",
            "pod-security.kubernetes.io/audit": "restricted" },
            "annotations": { "homestead.dev/workspace-uid": created.uid().unwrap_or_default() } },
    }))
    .expect("a valid Namespace");
    Api::<Namespace>::all(operator.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let members = &group.spec.members;
    let bindings: Api<RoleBinding> = Api::namespaced(operator.clone(), &namespace);
    for (binding, role, who) in [
        ("homestead-workspace-admins", "admin", &members[..1]),
        ("homestead-workspace-members", "edit", &members[1..]),
    ] {
        let subjects: Vec<Value> = who
            .iter()
            .map(|m| json!({ "kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": format!("{m}@example.com") }))
            .collect();
        let rb: RoleBinding = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": binding, "namespace": namespace,
                "labels": { LABEL_MANAGED_BY: MANAGED_BY, "homestead.dev/workspace": name } },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": subjects,
        }))
        .expect("a valid RoleBinding");
        bindings.create(&PostParams::default(), &rb).await?;
    }
    // A team no Profile selects is isolated (the directory's floor): its NetworkPolicy too.
    let isolation = k8s_openapi::api::networking::v1::NetworkPolicy {
        metadata: kube::api::ObjectMeta {
            name: Some("homestead-isolation".to_owned()),
            namespace: Some(namespace.clone()),
            labels: Some(
                [
                    (LABEL_MANAGED_BY, MANAGED_BY),
                    ("homestead.dev/workspace", name.as_str()),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(homestead_reconciler::plan::desired::isolation_spec(&[])),
    };
    Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(
        operator.clone(),
        &namespace,
    )
    .create(&PostParams::default(), &isolation)
    .await?;
    let status = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
        "status": { "namespace": namespace, "owner": format!("group {name}"),
            "conditions": [{ "type": "Ready", "status": "True", "reason": "Provisioned",
                "message": "bench", "lastTransitionTime": Timestamp::now().to_string() }] },
    });
    workspaces
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await
        .map(drop)
}
