#![allow(dead_code)] // each of the two benches that include it uses a part
//! The phases of the Shares benchmark (`main.rs`), shared with `just bench-scale`
//! (`benches/converge/scale.rs`): Shares made by a floor client or by Homestead, a change of a
//! large group, and the homes API under load, over the bench Users [`People`] names.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::common::{self, each, memory_mib};
use futures::{StreamExt, TryStreamExt};
use homestead_api::{
    ANNOTATION_CREATED_BY, CONDITION_READY, DirectoryGroup, FIELD_MANAGER, GranteeStatus, Share,
    ShareReason, ShareStatus, Workspace,
};
use homestead_reconciler::plan::share::{ShareRef, desired_binding};
use homestead_testenv::{ADMIN, ControlPlane, OPERATOR};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// How a benchmark names its Users: `<prefix>-00042`, identity `<prefix>-42@example.com`, home
/// `user-<prefix>-00042`.
#[derive(Clone, Copy)]
pub(crate) struct People {
    pub(crate) prefix: &'static str,
}

impl People {
    /// User `i`'s name.
    pub(crate) fn name(self, i: usize) -> String {
        format!("{}-{i:05}", self.prefix)
    }

    /// User `i`'s identity (`spec.username`).
    pub(crate) fn identity(self, i: usize) -> String {
        format!("{}-{i}@example.com", self.prefix)
    }

    /// User `i`'s home namespace.
    pub(crate) fn home(self, i: usize) -> String {
        format!("user-{}", self.name(i))
    }
}

/// Label telling the sides' Shares apart (`floor-a`, `homestead`, `floor-b`, `group`).
pub(crate) const SIDE: &str = "bench-side";
/// Members of the group named by [`GROUP_SHARES`] Shares.
pub(crate) const GROUP_MEMBERS: usize = 1000;
/// Shares naming the group.
pub(crate) const GROUP_SHARES: usize = 100;

/// People asking the homes API at once, in the load phase.
pub(crate) const PEOPLE: usize = 50;
/// Requests of each kind each of them makes.
pub(crate) const ASKS: usize = 40;

/// The Share of `side` in User `owner`'s home, to the Users `to` (or the group), for a week.
fn bench_share(people: People, side: &str, owner: usize, to: Value) -> Share {
    let until = (Timestamp::now() + SignedDuration::from_hours(24 * 7))
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap();
    serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Share",
        "metadata": {
            "name": format!("{side}-{owner:05}"),
            "namespace": people.home(owner),
            "labels": { SIDE: side },
            "annotations": { ANNOTATION_CREATED_BY: ADMIN },
        },
        "spec": { "to": to, "role": "view", "expiresAt": until.to_string(),
                  "reason": "benchmark: working together" },
    }))
    .unwrap()
}

/// Starts a watch of the Shares of `side` and returns once it has listed; the task ends when
/// `count` of them are `Ready=True` (or, with `count` 0, none is left).
pub(crate) async fn watch_shares(
    client: &Client,
    side: &str,
    count: usize,
) -> tokio::task::JoinHandle<()> {
    let config = watcher::Config::default().labels(&format!("{SIDE}={side}"));
    let mut events = watcher(Api::<Share>::all(client.clone()), config).boxed();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let (mut present, mut ready) = (HashSet::new(), HashSet::new());
        let mut listed = Some(listed_tx);
        let mut done = false;
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                watcher::Event::Apply(s) | watcher::Event::InitApply(s) => {
                    let key = (s.namespace(), s.name_any());
                    present.insert(key.clone());
                    if is_ready(&s) {
                        ready.insert(key);
                    } else {
                        ready.remove(&key);
                    }
                }
                watcher::Event::Delete(s) => {
                    let key = (s.namespace(), s.name_any());
                    present.remove(&key);
                    ready.remove(&key);
                }
                watcher::Event::InitDone => {
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
                    done = true;
                }
                watcher::Event::Init => {}
            }
            let complete = if count == 0 {
                present.is_empty()
            } else {
                ready.len() == count
            };
            if done && complete {
                return;
            }
        }
    });
    let _ = listed_rx.await;
    task
}

fn is_ready(share: &Share) -> bool {
    share
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION_READY))
        .is_some_and(|c| c.status == "True")
}

/// The floor: `count` Shares of `side` made with exactly the requests they need (see the module
/// docs); returns the time until a watch saw all `Ready=True`.
pub(crate) async fn floor(
    people: People,
    (admin, operator): (&Client, &Client),
    side: &str,
    count: usize,
) -> Duration {
    let watch = watch_shares(admin, side, count).await;
    let started = Instant::now();
    each(count, |i| {
        let (admin, operator) = (admin.clone(), operator.clone());
        async move {
            let grantee = (i + 1) % count;
            let share = bench_share(people, side, i, json!([{ "user": people.name(grantee) }]));
            let ns = share.namespace().unwrap();
            let created = Api::<Share>::namespaced(admin, &ns)
                .create(&PostParams::default(), &share)
                .await?;
            let username = people.identity(grantee);
            let binding = desired_binding(ShareRef::of(&created), (homestead_api::LABEL_USER, &people.name(i)), std::slice::from_ref(&username));
            Api::<RoleBinding>::namespaced(operator.clone(), &ns)
                .create(&PostParams::default(), &binding)
                .await?;
            let status = floor_status(&created, &username, &people.name(grantee));
            let patch = json!({ "apiVersion": homestead_api::API_VERSION, "kind": "Share", "status": status });
            Api::<Share>::namespaced(operator, &ns)
                .patch_status(
                    &created.name_any(),
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&patch),
                )
                .await?;
            Ok(())
        }
    })
    .await;
    watch.await.unwrap();
    started.elapsed()
}

/// A uid of the length the API server gives (36 characters): the floor writes the uids
/// Homestead records in a Share's status (its owner's and its User grantee's) without looking
/// them up, so its status writes are as large as Homestead's.
const FLOOR_UID: &str = "00000000-0000-4000-8000-000000000000";

/// The status Homestead writes for an active Share to one User.
fn floor_status(share: &Share, username: &str, grantee: &str) -> ShareStatus {
    let now = Time(Timestamp::now());
    ShareStatus {
        conditions: vec![Condition {
            type_: CONDITION_READY.to_owned(),
            status: "True".to_owned(),
            reason: ShareReason::Active.as_str().to_owned(),
            message: format!(
                "{} has role \"view\" here until {}",
                grantee, share.spec.expires_at.0
            ),
            observed_generation: share.metadata.generation,
            last_transition_time: now.clone(),
        }],
        observed_generation: share.metadata.generation,
        grantees: vec![GranteeStatus {
            user: Some(grantee.to_owned()),
            username: Some(username.to_owned()),
            active: Some(1),
            uid: Some(FLOOR_UID.to_owned()),
            ..GranteeStatus::default()
        }],
        to: Some(grantee.to_owned()),
        expires_at: Some(share.spec.expires_at.clone()),
        renewed_at: share.metadata.creation_timestamp.clone(),
        owner_uid: Some(FLOOR_UID.to_owned()),
    }
}

/// Deletes the Shares of `side` and waits until they are gone.
pub(crate) async fn delete_side(admin: &Client, side: &str) {
    let watch = watch_shares(admin, side, 0).await;
    let shares = Api::<Share>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("{SIDE}={side}")))
        .await
        .unwrap();
    let items = shares.items;
    each(items.len(), |i| {
        let (admin, share) = (admin.clone(), items[i].clone());
        async move {
            Api::<Share>::namespaced(admin, &share.namespace().unwrap())
                .delete(&share.name_any(), &DeleteParams::background())
                .await?;
            Ok(())
        }
    })
    .await;
    watch.await.unwrap();
}

/// Creates the Shares of `side` in the homes of Users `0..count`, Share `i` to `to(i)`, as the
/// admin.
async fn create_shares(
    people: People,
    admin: &Client,
    side: &str,
    count: usize,
    to: impl Fn(usize) -> Value,
) {
    each(count, |i| {
        let (admin, share) = (admin.clone(), bench_share(people, side, i, to(i)));
        async move {
            Api::<Share>::namespaced(admin, &share.namespace().unwrap())
                .create(&PostParams::default(), &share)
                .await?;
            Ok(())
        }
    })
    .await;
}

/// Homestead's Shares: created like the floor's, timed until all are `Ready=True`.
pub(crate) async fn homestead(people: People, admin: &Client, count: usize) -> Duration {
    let watch = watch_shares(admin, "homestead", count).await;
    let started = Instant::now();
    create_shares(
        people,
        admin,
        "homestead",
        count,
        |i| json!([{ "user": people.name((i + 1) % count) }]),
    )
    .await;
    watch.await.unwrap();
    started.elapsed()
}

/// The audit events of the operator's requests received between `from` and `to` (inclusive),
/// every stage, from the control plane's audit log.
pub(crate) fn operator_requests(
    plane: &ControlPlane,
    from: Timestamp,
    to: Timestamp,
) -> impl Iterator<Item = Value> {
    use std::io::BufRead;
    let file = std::fs::File::open(plane.dir().join("audit.log")).unwrap();
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|line| line.contains(OPERATOR))
        .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
        .filter(|e| e["user"]["username"] == OPERATOR)
        .filter(move |e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
                .is_some_and(|t| t >= from && t <= to)
        })
}

/// The operator's writes (verb and resource) received from `from` on, from the audit log.
pub(crate) fn operator_writes(plane: &ControlPlane, from: Timestamp, to: Timestamp) -> Vec<String> {
    operator_requests(plane, from, to)
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete" | "deletecollection")
            )
        })
        .filter(|e| e["objectRef"]["resource"] != "leases")
        .map(|e| {
            let sub = e["objectRef"]["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default();
            format!(
                "{} {}{sub}",
                e["verb"].as_str().unwrap_or_default(),
                e["objectRef"]["resource"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// Counts of each distinct item of `writes`, as `verb resource: n` lines.
pub(crate) fn tally(writes: &[String]) -> String {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for w in writes {
        *counts.entry(w.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the group phase measured.
pub(crate) struct GroupChange {
    /// Members of the group.
    pub(crate) members: usize,
    /// RoleBindings that name it: one per Share, and the members' binding of its Workspace.
    pub(crate) bindings: usize,
    /// From the change to the last of them binding the new member.
    pub(crate) took: Duration,
    /// The operator's writes from the change until 5 s after the last binding.
    pub(crate) writes: Vec<String>,
}

impl GroupChange {
    /// The operator's writes of RoleBindings among [`Self::writes`].
    pub(crate) fn binding_writes(&self) -> usize {
        self.writes
            .iter()
            .filter(|w| w.ends_with(" rolebindings"))
            .count()
    }
}

/// The team Workspace the bench group owns, when [`group_change`] makes one.
const GROUP_WORKSPACE: &str = "bench-team";

/// The group phase: [`GROUP_MEMBERS`] members named by [`GROUP_SHARES`] Shares (and, with
/// `workspace`, owning a team Workspace); one member replaced; the time until every RoleBinding
/// that names the group binds the new member, and the operator's writes meanwhile.
pub(crate) async fn group_change(
    people: People,
    plane: &ControlPlane,
    admin: &Client,
    count: usize,
    workspace: bool,
) -> GroupChange {
    let members = GROUP_MEMBERS.min(count.saturating_sub(1));
    let shares = GROUP_SHARES.min(count);
    let groups: Api<DirectoryGroup> = Api::all(admin.clone());
    let names: Vec<String> = (0..members).map(|i| people.name(i)).collect();
    let group = DirectoryGroup::test("bench-team", "Bench team")
        .with_members(&names.iter().map(String::as_str).collect::<Vec<_>>());
    let group = DirectoryGroup::new("bench-team", group.spec);
    groups.create(&PostParams::default(), &group).await.unwrap();
    let watch = watch_shares(admin, "group", shares).await;
    create_shares(
        people,
        admin,
        "group",
        shares,
        |_| json!([{ "group": "bench-team" }]),
    )
    .await;
    watch.await.unwrap();
    if workspace {
        team_workspace(admin, &names[0]).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Replace the last member with the next User.
    let newcomer = people.identity(members);
    let mut changed = names.clone();
    changed.pop();
    changed.push(people.name(members));
    // Watches of the bindings that name the group, listed before the change, see each bind the
    // newcomer.
    let bindings = |labels: &str| {
        let config = watcher::Config::default().labels(labels);
        watcher(Api::<RoleBinding>::all(admin.clone()), config).boxed()
    };
    let mut share_events = bindings("homestead.dev/share");
    let mut workspace_events = bindings(&format!("homestead.dev/workspace={GROUP_WORKSPACE}"));
    for events in [&mut share_events, &mut workspace_events] {
        while let Some(event) = events.try_next().await.unwrap() {
            if matches!(event, watcher::Event::InitDone) {
                break;
            }
        }
    }
    let mut events = futures::stream::select(share_events, workspace_events);
    let expected = shares + usize::from(workspace);
    let from = Timestamp::now();
    let started = Instant::now();
    groups
        .patch(
            "bench-team",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "members": changed } })),
        )
        .await
        .unwrap();
    let mut updated = HashSet::new();
    while updated.len() < expected {
        let event = tokio::time::timeout(Duration::from_secs(120), events.try_next())
            .await
            .expect("every binding of the group updated within 120 s")
            .unwrap()
            .expect("the watch goes on");
        if let watcher::Event::Apply(b) = event
            && (b.name_any().starts_with("homestead-share-group-")
                || b.name_any() == "homestead-workspace-members")
            && b.subjects.iter().flatten().any(|s| s.name == newcomer)
        {
            updated.insert((b.namespace(), b.name_any()));
        }
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    GroupChange {
        members,
        bindings: expected,
        took,
        writes: operator_writes(plane, from, Timestamp::now()),
    }
}

/// Creates the team Workspace [`GROUP_WORKSPACE`] owned by the bench group, `admin_user` its
/// admin, and waits (at most 120 s) until it is `Ready=True`.
async fn team_workspace(admin: &Client, admin_user: &str) {
    let workspaces: Api<Workspace> = Api::all(admin.clone());
    let workspace: Workspace = serde_json::from_value(json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "Workspace",
        "metadata": { "name": GROUP_WORKSPACE,
            "annotations": { ANNOTATION_CREATED_BY: ADMIN } },
        "spec": { "owner": { "group": "bench-team" }, "admins": [admin_user],
                  "reason": "benchmark: a large team" },
    }))
    .unwrap();
    workspaces
        .create(&PostParams::default(), &workspace)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = workspaces
            .get(GROUP_WORKSPACE)
            .await
            .unwrap()
            .status
            .is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == CONDITION_READY && c.status == "True")
            });
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the bench group's Workspace never became Ready"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The `p`-th percentile (0-100) of `sorted`, by the nearest rank.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// The time of one GET of `path` through kube-apiserver as `client`'s person; panics unless it
/// succeeds.
async fn timed_get(client: &Client, path: &str) -> Duration {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let started = Instant::now();
    let body = client.request_text(request).await.unwrap();
    let took = started.elapsed();
    assert!(body.contains("\"kind\""), "{path}: {body}");
    took
}

/// What the load phase measured.
pub(crate) struct HomesLoad {
    /// p99 of `kubectl get homes` over p99 of `kubectl get namespace <own>`.
    pub(crate) p99_ratio: f64,
    /// The homes API's resident set after the load, and its peak since it started, MiB.
    pub(crate) rss: f64,
    pub(crate) peak: f64,
}

/// The load phase (see the module docs): the homes API run and registered, then `people` people
/// at once asking for their homes and their own Namespace, alternately, [`ASKS`] times each.
pub(crate) async fn homes_load(who: People, plane: &ControlPlane, people: usize) -> HomesLoad {
    let state = plane.dir().join("homes-bench");
    std::fs::create_dir_all(&state).unwrap();
    let _ = std::fs::remove_file(state.join("bin"));
    std::os::unix::fs::symlink(plane.bin_dir(), state.join("bin")).unwrap();
    plane
        .write_kubeconfig(ADMIN, &state.join("admin.kubeconfig"))
        .unwrap();
    plane
        .write_kubeconfig(
            homestead_testenv::HOMES_API,
            &state.join("homes-api.kubeconfig"),
        )
        .unwrap();
    let port = homestead_testenv::free_port().unwrap().to_string();
    let metrics = format!("127.0.0.1:{}", homestead_testenv::free_port().unwrap());
    let script = common::repo_root().join("tools/homes-api/up-local.sh");
    let up = std::process::Command::new(script)
        .arg(&state)
        .arg(env!("CARGO_BIN_EXE_homestead"))
        .args([&port, &metrics])
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "up-local.sh: {}{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
    let pid: u32 = std::fs::read_to_string(state.join("homes-api.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    println!(
        "homes API: registered, every User, Share and DirectoryGroup cached: RSS {:.1} MiB",
        memory_mib(pid, "VmRSS")
    );
    let mut clients = Vec::new();
    for i in 0..people {
        clients.push((i, plane.client(&who.identity(i)).await.unwrap()));
    }
    let homes = "/apis/homes.homestead.dev/v1alpha1/homes";
    // One of each first, so every connection is open before the clock runs.
    for (i, client) in &clients {
        timed_get(client, homes).await;
        timed_get(client, &format!("/api/v1/namespaces/{}", who.home(*i))).await;
    }
    let started = Instant::now();
    let asked = futures::future::join_all(clients.into_iter().map(|(i, client)| async move {
        let own = format!("/api/v1/namespaces/{}", who.home(i));
        let (mut theirs, mut namespace) = (Vec::new(), Vec::new());
        for _ in 0..ASKS {
            theirs.push(timed_get(&client, homes).await);
            namespace.push(timed_get(&client, &own).await);
        }
        (theirs, namespace)
    }))
    .await;
    let elapsed = started.elapsed();
    let (mut theirs, mut namespace): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    for (a, b) in asked {
        theirs.extend(a);
        namespace.extend(b);
    }
    theirs.sort();
    namespace.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "homes: {people} people at once, {} requests in {:.1} s; kubectl get homes p50 {:.1} ms p99 {:.1} ms; \
         get namespace <own> p50 {:.1} ms p99 {:.1} ms; p99 ratio {:.2}x",
        theirs.len() + namespace.len(),
        elapsed.as_secs_f64(),
        ms(percentile(&theirs, 50)),
        ms(percentile(&theirs, 99)),
        ms(percentile(&namespace, 50)),
        ms(percentile(&namespace, 99)),
        ms(percentile(&theirs, 99)) / ms(percentile(&namespace, 99))
    );
    let load = HomesLoad {
        p99_ratio: ms(percentile(&theirs, 99)) / ms(percentile(&namespace, 99)),
        rss: memory_mib(pid, "VmRSS"),
        peak: memory_mib(pid, "VmHWM"),
    };
    println!(
        "homes API: RSS {:.1} MiB, peak {:.1} MiB",
        load.rss, load.peak
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    load
}
