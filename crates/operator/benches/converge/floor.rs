//! The floors Homestead is measured against: a client that makes only the unavoidable requests,
//! bounded as Homestead is (its identity, its objects, the admission policies) or bare, and their
//! runs before and after Homestead's.

use super::*;

/// Which of Homestead's safety layers a floor carries (docs/performance.md, "Where the cost
/// goes"): the bounded floor all three; the bare floor neither the identity nor the objects
/// (the policies stay bound, but match none of its requests).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Floor {
    /// Whether the operator's identity makes every request but HR's: RBAC for a
    /// ServiceAccount, API priority and fairness, and the admission policies' match conditions.
    /// Without it, the cluster admin (RBAC allows it at once; exempt from API priority and
    /// fairness; no policy matches it).
    pub(crate) identity: bool,
    /// Whether the Namespace and RoleBinding are Homestead's (ownership and Pod Security
    /// labels, annotations, owner references). Without it, the least that gives a person
    /// access: a Namespace with a name, a RoleBinding with a roleRef and a subject.
    pub(crate) objects: bool,
    /// Whether the operator's admission policies are bound. Without it, their bindings are
    /// deleted before the floor runs (on a control plane of its own only).
    pub(crate) policies: bool,
}

impl Floor {
    /// Homestead's identity, objects and admission policies.
    pub(crate) const BOUNDED: Self = Self {
        identity: true,
        objects: true,
        policies: true,
    };
    /// The admin and the least objects (the policies stay bound, matching no request of it).
    /// Users named `bare-00042`.
    pub(crate) const BARE: Self = Self {
        identity: false,
        objects: false,
        policies: true,
    };

    /// The bounded floor without the layers `HOMESTEAD_BENCH_FLOOR_WITHOUT` names
    /// (comma-separated `identity`, `objects`, `policies`), to measure what each costs.
    ///
    /// # Panics
    /// On any other name, and for `objects` without `policies` or `identity` (the policies
    /// would refuse the least objects).
    pub(crate) fn from_env() -> Self {
        let mut floor = Self::BOUNDED;
        let without = std::env::var("HOMESTEAD_BENCH_FLOOR_WITHOUT").unwrap_or_default();
        for layer in without.split(',').map(str::trim).filter(|l| !l.is_empty()) {
            match layer {
                "identity" => floor.identity = false,
                "objects" => floor.objects = false,
                "policies" => floor.policies = false,
                other => panic!(
                    "HOMESTEAD_BENCH_FLOOR_WITHOUT: no layer {other:?} (identity, objects, policies)"
                ),
            }
        }
        assert!(
            floor.objects || !floor.identity || !floor.policies,
            "HOMESTEAD_BENCH_FLOOR_WITHOUT=objects needs policies (or identity) too: the \
             operator's admission policies refuse the least objects"
        );
        floor
    }

    /// The run label and User name prefix.
    pub(crate) fn run(self) -> &'static str {
        if self == Self::BARE { "bare" } else { "floor" }
    }
}

/// Deletes, as `admin`, the bindings of the operator's admission policies and waits until the
/// API server admits, as `operator`, a Namespace they would refuse (a dry run).
pub(crate) async fn unbind_operator_policies(admin: &Client, operator: &Client) {
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone());
    for name in ["homestead-operator-bounds", "homestead-operator-namespaced"] {
        bindings
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let unlabelled: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": "user-unbound" } })).unwrap();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = Api::<Namespace>::all(operator.clone())
        .create(&dry_run, &unlabelled)
        .await
    {
        assert!(Instant::now() < deadline, "the policies still apply: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The least Namespace and RoleBinding that give `user` ClusterRole `edit` in `ns`.
pub(crate) fn bare_objects(user: &User, ns: &str) -> (Namespace, RoleBinding) {
    let namespace = serde_json::from_value(json!({ "metadata": { "name": ns } })).unwrap();
    let binding = serde_json::from_value(json!({
        "metadata": { "name": "homestead-user", "namespace": ns },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                       "name": user.spec.identity.username }],
    }))
    .unwrap();
    (namespace, binding)
}

/// A floor: provisions `count` Users with only the unavoidable requests (create the User, add
/// the finalizer, create the Namespace and the RoleBinding, write the status). `admin` creates
/// each User, as HR would; the rest is made as [`Floor`] says, by `operator` or by `admin`.
/// Returns the time until a User watch has seen every one `Ready=True`: measured exactly as
/// Homestead's time is, the watch's cost to the API server included.
pub(crate) async fn floor_provision(
    admin: &Client,
    operator: &Client,
    count: usize,
    floor: Floor,
) -> Duration {
    let operator = if floor.identity { operator } else { admin };
    let run = floor.run();
    let hr: Api<User> = Api::all(admin.clone());
    let users: Api<User> = Api::all(operator.clone());
    // `HOMESTEAD_BENCH_FLOOR_EVENT=1`: the floor also publishes the one Event per User that
    // Homestead does, as Homestead does, to measure what that Event costs.
    let recorder = std::env::var("HOMESTEAD_BENCH_FLOOR_EVENT")
        .is_ok_and(|v| v == "1")
        .then(|| {
            let reporter = Reporter {
                controller: "homestead".into(),
                instance: Some("floor".into()),
            };
            Recorder::new(operator.clone(), reporter)
        });
    // `HOMESTEAD_BENCH_FLOOR_WATCH=1`: the floor also holds the watches an operator needs
    // (Users; Namespaces labelled as Homestead's; RoleBindings), reading and dropping every
    // event, to measure what serving them costs the API server.
    let watches = std::env::var("HOMESTEAD_BENCH_FLOOR_WATCH")
        .is_ok_and(|v| v == "1")
        .then(|| operator_watches(operator));
    let ready = watch_users(admin, run, count, is_ready).await;
    let started = Instant::now();
    each(count, |i| {
        let clients = (hr.clone(), users.clone(), operator.clone());
        floor_user(clients, (run, i), floor, recorder.clone())
    })
    .await;
    ready.await.unwrap();
    let elapsed = started.elapsed();
    for watch in watches.into_iter().flatten() {
        watch.abort();
    }
    elapsed
}

/// One User of a floor run: created by HR (`clients.0`), then as the floor's identity
/// (`clients.1` for Users, `clients.2` for the rest) the finalizer, the Namespace and the
/// RoleBinding (Homestead's objects, or the bare ones) and the `Ready` status; and, with
/// `recorder`, the Event Homestead would publish.
pub(crate) async fn floor_user(
    (hr, users, client): (Api<User>, Api<User>, Client),
    (run, i): (&str, usize),
    floor: Floor,
    recorder: Option<Recorder>,
) -> kube::Result<()> {
    let user = hr
        .create(&PostParams::default(), &bench_user(run, i))
        .await?;
    let name = user.name_any();
    // As the operator's own field manager, never HR's: the User then keeps the three
    // managedFields entries it has under Homestead (HR's, the finalizer's, the
    // status's), not two.
    let finalizer = json!({ "metadata": { "finalizers": [FINALIZER] } });
    let operator_patch = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    users
        .patch(&name, &operator_patch, &Patch::Merge(&finalizer))
        .await?;
    let ns = format!("user-{name}");
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let (namespace, binding) = if floor.objects {
        (
            desired_namespace(&user, &ns, PodSecurity::default(), Traits::default()),
            desired_role_binding(&user, &ns),
        )
    } else {
        bare_objects(&user, &ns)
    };
    Api::<Namespace>::all(client.clone())
        .create(&post, &namespace)
        .await?;
    Api::<RoleBinding>::namespaced(client, &ns)
        .create(&post, &binding)
        .await?;
    // The bounded floor's Ready condition says what Homestead's says; the bare floor's
    // the least.
    let who = &user.spec.identity.username;
    let profile = if scale::on() {
        scale::applied_profile(i)
    } else {
        bench_profile(1)
    };
    let message = if floor.objects {
        let name = profile.as_ref().map_or(PROFILE, |p| p.name.as_str());
        format!(
            "namespace {ns:?} provisioned (Profile {name:?}); {who:?} has ClusterRole \"edit\" there"
        )
    } else {
        "provisioned".to_owned()
    };
    let outcome = Outcome::new(&ns, Reason::Provisioned, message.clone())
        .with_profile(profile)
        .with_role("edit");
    let status = json!({
        "apiVersion": homestead_api::API_VERSION, "kind": "User",
        "status": desired_status(&user, &outcome, Time(Timestamp::now())),
    });
    users
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await?;
    if let Some(recorder) = recorder {
        floor_event(&recorder, &user, &ns, message).await?;
    }
    Ok(())
}

/// The Event Homestead's provisioning of `user` in `ns` publishes: `message`, and the changes
/// summed up by the same `events_for`, published by `recorder`.
pub(crate) async fn floor_event(
    recorder: &Recorder,
    user: &User,
    ns: &str,
    message: String,
) -> kube::Result<()> {
    // The Event Homestead's provisioning publishes: its message, and the changes
    // summed up by the same `events_for`.
    let who = &user.spec.identity.username;
    let granted = format!("bound ClusterRole \"edit\" to {who:?} in namespace {ns:?}");
    let outcome = Outcome::new(ns, Reason::Provisioned, message).with_changes(vec![
        (
            Change::NamespaceCreated,
            format!("created namespace {ns:?}"),
        ),
        (Change::AccessGranted, granted),
    ]);
    for (type_, reason, note) in events_for(true, &outcome) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Reconcile".into(),
            secondary: None,
        };
        recorder.publish(&event, &user.object_ref(&())).await?;
    }
    Ok(())
}

/// Watches, as `client`, what Homestead's operator watches of a provisioning (every User,
/// the Namespaces labelled as Homestead's, every RoleBinding), dropping every event.
pub(crate) fn operator_watches(client: &Client) -> Vec<tokio::task::JoinHandle<()>> {
    fn drain<K>(api: Api<K>, config: watcher::Config) -> tokio::task::JoinHandle<()>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    {
        tokio::spawn(watcher(api, config).for_each(|_| async {}))
    }
    let managed = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    vec![
        drain(Api::<User>::all(client.clone()), watcher::Config::default()),
        drain(Api::<Namespace>::all(client.clone()), managed),
        drain(
            Api::<RoleBinding>::all(client.clone()),
            watcher::Config::default(),
        ),
    ]
}

/// The floor's offboarding of `count` Users: `admin` deletes each User (its finalizer holds
/// it); `operator` deletes its Namespace, and removes the finalizer as soon as the Namespace
/// watch reports it gone. Returns the time until every User is gone.
pub(crate) async fn floor_offboard(admin: &Client, operator: &Client, count: usize) -> Duration {
    let hr: Api<User> = Api::all(admin.clone());
    let users: Api<User> = Api::all(operator.clone());
    let client = operator;
    let gone = watch_users(admin, "floor", 0, |_| false).await;
    let releaser = {
        let users = users.clone();
        let namespaces = watcher(Api::<Namespace>::all(client.clone()), Default::default());
        tokio::spawn(async move {
            namespaces
                .try_filter_map(|e| async move {
                    Ok(match e {
                        watcher::Event::Delete(ns) => ns
                            .name_any()
                            .strip_prefix("user-")
                            .filter(|n| n.starts_with("floor-"))
                            .map(str::to_owned),
                        _ => None,
                    })
                })
                .map_err(|e| panic!("namespace watch: {e}"))
                .try_for_each_concurrent(IN_FLIGHT, |name: String| {
                    let users = users.clone();
                    async move {
                        let release = json!({ "metadata": { "finalizers": null } });
                        users
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                            .await
                            .unwrap();
                        Ok::<(), ()>(())
                    }
                })
                .await
        })
    };
    let started = Instant::now();
    each(count, |i| {
        let (hr, client) = (hr.clone(), client.clone());
        async move {
            let name = format!("floor-{i:05}");
            hr.delete(&name, &DeleteParams::default()).await?;
            Api::<Namespace>::all(client)
                .delete(&format!("user-{name}"), &DeleteParams::background())
                .await
                .map(drop)
        }
    })
    .await;
    gone.await.unwrap();
    releaser.abort();
    started.elapsed()
}

/// `HOMESTEAD_BENCH_QUICK=bare`: the bare floor's provisioning alone on a fresh control plane,
/// with its CPU per User.
pub(crate) async fn bare_only(count: usize) {
    let plane = install();
    let admin = plane.client(ADMIN).await.unwrap();
    create_profile(&admin).await;
    println!("{count} Users, {IN_FLIGHT} in flight, one local control plane\n");
    wait_until_the_garbage_collector_knows_users(&admin).await;
    let start = cpu_seconds(plane, None);
    let sent_before = watch_counters(&admin).await;
    let profile = profile_apiserver(&admin, "bare");
    let bare_up = floor_provision(&admin, &admin, count, Floor::BARE).await;
    let end = cpu_seconds(plane, None);
    let sent_after = watch_counters(&admin).await;
    profiled(profile).await;
    println!("bare floor: provisioned in {}", secs(bare_up));
    print_watch_counters("bare floor", &sent_before, &sent_after, count);
    print_cpu(
        "bare floor: CPU while provisioning",
        &start,
        &end,
        count,
        bare_up,
    );
}

/// The floor's first provisioning and offboarding, before Homestead runs.
#[derive(Default)]
pub(crate) struct FirstFloor {
    /// Create to all Ready.
    pub(crate) up: Duration,
    /// Delete to all gone.
    pub(crate) down: Duration,
    /// CPU before and after its provisioning.
    pub(crate) cpu: (Cpu, Cpu),
    /// From its first create to its last Ready, and from then to its offboarding's end.
    pub(crate) provisioning: (Timestamp, Timestamp),
    pub(crate) offboarding: (Timestamp, Timestamp),
}

/// The floor's provisioning, then (unless `mode.quick`) its offboarding, as `operator` with
/// `floor`'s safety layers.
pub(crate) async fn first_floor(
    plane: &ControlPlane,
    clients: (&Client, &Client),
    count: usize,
    floor: Floor,
    mode: &Mode,
) -> FirstFloor {
    let (admin, operator) = clients;
    let mut run = FirstFloor::default();
    let t0 = Timestamp::now();
    let cpu_start = cpu_seconds(plane, None);
    let sent_before = watch_counters(admin).await;
    let mut profile = None;
    if !mode.quick {
        profile = profile_apiserver(admin, "floor");
        run.up = floor_provision(admin, operator, count, floor).await;
        if floor == Floor::BOUNDED {
            println!("floor: provisioned in {}", secs(run.up));
        } else {
            println!("floor ({floor:?}): provisioned in {}", secs(run.up));
        }
    }
    run.cpu = (cpu_start, cpu_seconds(plane, None));
    let sent_after = watch_counters(admin).await;
    profiled(profile).await;
    if !mode.quick {
        print_watch_counters("floor", &sent_before, &sent_after, count);
    }
    let t1 = Timestamp::now();
    if !mode.quick && !mode.floor_only {
        run.down = floor_offboard(admin, operator, count).await;
        println!("floor: offboarded in {}", secs(run.down));
    }
    run.provisioning = (t0, t1);
    run.offboarding = (t1, Timestamp::now());
    run
}

/// The floors after Homestead: the bounded floor again and the bare floor.
#[derive(Default)]
pub(crate) struct Floors {
    /// Cores busy with nothing to do before the floor again.
    pub(crate) background: f64,
    /// The bounded floor again: create to all Ready, and its CPU.
    pub(crate) again: Duration,
    pub(crate) cpu_again: (Cpu, Cpu),
    /// The bare floor: create to all Ready, and its CPU.
    pub(crate) bare: Duration,
    pub(crate) cpu_bare: (Cpu, Cpu),
}

/// The bounded floor again, then the bare floor last, on the control plane as every run left
/// it: its Users would be reconciled by Homestead earlier, and cleaning them up takes the
/// namespace controller as long as an offboarding. So it may be slower than on a fresh control
/// plane, which flatters Homestead's ratio to it; `HOMESTEAD_BENCH_QUICK=bare` measures it on a
/// fresh one.
pub(crate) async fn floors_again(
    plane: &ControlPlane,
    clients: (&Client, &Client),
    count: usize,
) -> Floors {
    let (admin, operator) = clients;
    let background = background_cpu(plane, None).await;
    let start = cpu_seconds(plane, None);
    let profile = profile_apiserver(admin, "floor-again");
    let again = floor_provision(admin, operator, count, Floor::BOUNDED).await;
    let cpu_again = (start, cpu_seconds(plane, None));
    println!("floor again: provisioned in {}", secs(again));
    profiled(profile).await;
    let start = cpu_seconds(plane, None);
    let bare = floor_provision(admin, operator, count, Floor::BARE).await;
    let cpu_bare = (start, cpu_seconds(plane, None));
    println!("bare floor: provisioned in {}\n", secs(bare));
    Floors {
        background,
        again,
        cpu_again,
        bare,
        cpu_bare,
    }
}
