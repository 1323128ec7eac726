//! The watches of [`declared::WATCHES`], opened and wired: Users (the User Controller's own
//! watch); the Namespaces, ResourceQuotas, LimitRanges and NetworkPolicies labelled as
//! Homestead's; every RoleBinding, since revoking access means removing the ones a person made
//! too; Namespaces handed over for adoption and retained ones; Profiles, DirectoryGroups and
//! Shares (the Profile and DirectoryGroup watches also wake their status Controllers, which
//! read the same caches). A watch that
//! keeps a cache (kube-runtime's reflector, or for Namespaces, RoleBindings, LimitRanges,
//! NetworkPolicies, Users, Shares and Workspaces the model's compact one, `homestead_model::store`) feeds it and the triggers alike, except for changes no reconcile needs to
//! see: a change to a User's status alone (Homestead's own) or to what the cache drops of it, a
//! Profile's status (to all but its status Controller), a quota's usage, the first delivery
//! of a Namespace or RoleBinding exactly as Homestead created it (the reconcile that created it
//! went on from there), and the first list of the managed, Profile and DirectoryGroup watches
//! (every Controller reconciles what its own watch lists first: [`after_first_list`]). A
//! RoleBinding reaches its
//! User through its Namespace (whose labels tenants cannot write), never through a label on the
//! RoleBinding itself; so does a LimitRange or NetworkPolicy, through its own label only while
//! its Namespace is not cached yet. Which deliveries are echoes of Homestead's own writes is decided next to
//! the code that makes those writes: [`status::triggers_reconcile`] beside the status write,
//! [`crate::act::recent::OwnCreates::touched_except_echoes`] beside the memory of creates, and
//! [`ProfileIndex::observe`] beside the Profile index, and the next holder of an identity by
//! [`Identities::observe`]; this module only wires watches to them.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

use crate::act::recent::Recent;
use crate::flows::provision::RESYNC;
use crate::plan::config::Config;
use crate::plan::ownership::user_of;
use crate::plan::share::share_of_binding;
use crate::plan::status;
use crate::runtime::backlog::Backlog;
use crate::runtime::keyed::Keyed;
use crate::runtime::workspaces::WorkspaceWakes;
use crate::state::Caches;
use crate::state::ShareIndex;
use crate::state::cache::{
    CachedGuard, CachedLimitRange, CachedNamespace, CachedNetworkPolicy, CachedRoleBinding,
    CachedShare,
};
use crate::state::declared::{self, Watch};
use crate::state::index::ProfileIndex;
use homestead_api::{DirectoryGroup, LABEL_ADOPT_FOR, Profile, User};
use homestead_model::identity::Identities;
use homestead_model::packed::as_kept;
use homestead_model::store::{Compact, CompactStore, compact_store, key};
use homestead_model::trim::{trim, trim_user};
use homestead_model::watched::Watched;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::ExponentialBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

/// The Controllers and caches the operator runs.
pub struct Controllers {
    /// The Controller over Users.
    pub users: Keyed<User>,
    /// The Controller over retained Namespaces (labelled `homestead.dev/retained-from`), which
    /// keeps every RoleBinding out of them ([`keep_retained_revoked`](crate::flows::offboard::keep_retained_revoked)).
    pub retained: Controller<Namespace>,
    /// The Controller over Profile statuses: triggered by a Profile's own changes and by the
    /// changes of its Users ([`ProfileIndex::observe`]).
    pub profile_statuses: Controller<Profile>,
    /// The Controller over DirectoryGroup statuses: triggered by a group's own changes and by
    /// every change of a Profile's spec.
    pub group_statuses: Controller<DirectoryGroup>,
    /// The Controller over Shares: triggered by a Share's spec, its RoleBinding, every change
    /// of its home's owner and of its grantees (Users, and DirectoryGroups' members), and every
    /// change of a Profile's spec (all Shares: a limit may have changed).
    pub shares: Keyed<CachedShare>,
    /// The Controller over Workspaces ([`super::workspaces`]).
    pub workspaces: Keyed<homestead_api::Workspace>,
    /// The Controller over the slices of total quotas ([`total_controller`]).
    pub totals: Controller<ResourceQuota>,
    /// The caches reconciles read.
    pub caches: Caches,
    /// What waits for the User and the Share Controllers: every reconcile they start must be
    /// reported to its Backlog ([`Backlog::started`]).
    pub backlogs: (Backlog<User>, Backlog<CachedShare>),
}

/// A Controller over the statuses of `K` (Profiles or DirectoryGroups: few objects) in `cache`,
/// the cache of the managed watch of `K` ([`managed_watches`]), which wakes it through
/// `touched` for every object it sees come, change or go, its first list included; one
/// reconcile at a time, debounced by [`STATUS_DEBOUNCE`] so a bulk import of Users costs a few
/// status writes, not one per User, and run for every object every [`RESYNC`]. It has no watch
/// nor cache of its own: a second copy of every DirectoryGroup held 1.8 MiB at 1,200 groups
/// (docs/performance.md, "At scale").
fn status_controller<K>(cache: Store<K>, touched: UnboundedReceiver<ObjectRef<K>>) -> Controller<K>
where
    K: Watched,
{
    Controller::for_stream(futures::stream::empty(), cache)
        .reconcile_on(touched)
        .with_config(
            controller::Config::default()
                .concurrency(1)
                .debounce(STATUS_DEBOUNCE),
        )
        .reconcile_all_on(every(RESYNC))
}

/// How long the status controllers wait for an object's triggers to settle before they
/// reconcile it.
const STATUS_DEBOUNCE: Duration = Duration::from_secs(1);

/// The caches of the objects Homestead manages, Profiles and DirectoryGroups, and the events
/// of their watches that trigger a User's reconcile (each stream boxed: one per watch).
struct Managed {
    namespaces: CompactStore<CachedNamespace>,
    role_bindings: CompactStore<CachedRoleBinding>,
    quotas: Store<ResourceQuota>,
    limit_ranges: CompactStore<CachedLimitRange>,
    network_policies: CompactStore<CachedNetworkPolicy>,
    profiles: Store<Profile>,
    groups: Store<DirectoryGroup>,
    events: ManagedEvents,
}

/// The trigger streams of [`Managed`]'s watches.
struct ManagedEvents {
    namespaces: BoxStream<'static, Result<CachedNamespace, watcher::Error>>,
    role_bindings: BoxStream<'static, Result<CachedRoleBinding, watcher::Error>>,
    quotas: BoxStream<'static, Result<ResourceQuota, watcher::Error>>,
    limit_ranges: BoxStream<'static, Result<CachedLimitRange, watcher::Error>>,
    network_policies: BoxStream<'static, Result<CachedNetworkPolicy, watcher::Error>>,
    profiles: BoxStream<'static, Result<Profile, watcher::Error>>,
    groups: BoxStream<'static, Result<DirectoryGroup, watcher::Error>>,
    /// Every group's members as the group watch last showed them, its first list included.
    memberships: GroupMemberships,
}

/// Starts the watches of [`Managed`], each as [`declared`] describes it, leaving out the echoes
/// of the creates `recent` remembers and each watch's first list ([`after_first_list`]; the
/// groups' first list only teaches the [`GroupMemberships`] it creates); a Profile's change
/// also wakes every DirectoryGroup's status (through `statuses`) and every Share (through
/// `wake_all_shares`). Every Profile and DirectoryGroup the watches see come, change or go, the
/// first lists included, wakes its own status (through `statuses`).
fn managed_watches(
    client: &Client,
    recent: &Recent,
    wake_all_shares: UnboundedSender<()>,
    statuses: StatusWakes,
) -> Managed {
    let (namespaces, namespace_events) = namespace_watch(client, recent);
    let (role_bindings, role_binding_events) = role_binding_watch(client, recent);
    let (quotas, quota_events) = quota_watch(client);
    let (limit_ranges, limit_range_events) =
        compact_watch::<CachedLimitRange>(client, &declared::LIMIT_RANGES);
    let (network_policies, network_policy_events) =
        compact_watch::<CachedNetworkPolicy>(client, &declared::NETWORK_POLICIES);
    let (profiles, profile_events) = profile_watch(client, statuses.all_groups, statuses.profiles);
    let profile_events = profile_events.inspect(move |_| {
        let _ = wake_all_shares.unbounded_send(());
    });
    let memberships = GroupMemberships::default();
    let (groups, group_events) = group_watch(client, memberships.clone(), statuses.groups);
    Managed {
        namespaces,
        role_bindings,
        quotas,
        limit_ranges,
        network_policies,
        profiles,
        groups,
        events: ManagedEvents {
            namespaces: namespace_events.boxed(),
            role_bindings: role_binding_events.boxed(),
            quotas: quota_events.boxed(),
            limit_ranges: after_first_list(limit_range_events)
                .touched_objects()
                .boxed(),
            network_policies: after_first_list(network_policy_events)
                .touched_objects()
                .boxed(),
            profiles: profile_events.boxed(),
            groups: group_events.boxed(),
            memberships,
        },
    }
}

/// The senders the watches wake the status Controllers through ([`status_controller`]): a
/// Profile's status, a DirectoryGroup's, every DirectoryGroup's (a Profile changed).
struct StatusWakes {
    profiles: UnboundedSender<ObjectRef<Profile>>,
    groups: UnboundedSender<ObjectRef<DirectoryGroup>>,
    all_groups: UnboundedSender<()>,
}

/// The receiving ends of [`StatusWakes`], in its order.
type StatusTriggers = (
    UnboundedReceiver<ObjectRef<Profile>>,
    UnboundedReceiver<ObjectRef<DirectoryGroup>>,
    UnboundedReceiver<()>,
);

/// The wakes of the status Controllers and their triggers.
fn status_wakes() -> (StatusWakes, StatusTriggers) {
    let (profiles, profile_triggers) = futures::channel::mpsc::unbounded();
    let (groups, group_triggers) = futures::channel::mpsc::unbounded();
    let (all_groups, all_group_triggers) = futures::channel::mpsc::unbounded();
    let wakes = StatusWakes {
        profiles,
        groups,
        all_groups,
    };
    (
        wakes,
        (profile_triggers, group_triggers, all_group_triggers),
    )
}

/// The Profile and DirectoryGroup status Controllers over the caches of `managed`, woken by
/// `triggers`.
fn status_controllers(
    managed: &Managed,
    triggers: StatusTriggers,
) -> (Controller<Profile>, Controller<DirectoryGroup>) {
    let (profiles, groups, all_groups) = triggers;
    (
        status_controller(managed.profiles.clone(), profiles),
        status_controller(managed.groups.clone(), groups).reconcile_all_on(all_groups),
    )
}

/// Sends every object `event` brings (come, changed, gone, or listed) to `wake`.
fn wake_touched<K: Watched>(event: &watcher::Event<K>, wake: &UnboundedSender<ObjectRef<K>>) {
    if let watcher::Event::Apply(object)
    | watcher::Event::InitApply(object)
    | watcher::Event::Delete(object) = event
    {
        let _ = wake.unbounded_send(ObjectRef::from_obj(object));
    }
}

/// The senders a User's watch and its triggers wake other reconciles through.
struct Wakers {
    /// The retained Namespaces (their Controller's cache), and the sender that wakes that
    /// Controller for one of them (a RoleBinding appeared there).
    retained: (Store<Namespace>, UnboundedSender<ObjectRef<Namespace>>),
    /// A Share (its RoleBinding, a grantee or its home changed).
    share: UnboundedSender<ObjectRef<CachedShare>>,
    /// The Workspaces a change concerns.
    workspaces: WorkspaceWakes,
}

/// The Controller over Users (`users`, the cache `user_events` keeps; every User once the
/// cache has listed, a walk of the cache (`Keyed::sweeps_once_listed`); a User's later changes
/// come through `backlog`, the stream yields only the watch's errors), `concurrency` reconciles
/// at once (0: unbounded), triggered also by every change to a managed object after its
/// watch's first list (`events`), by a Namespace handed to a User for adoption, by a change to a
/// Profile's spec (for exactly that Profile's Users, from the `caches`' index, and the members
/// of the directory groups it names), to a DirectoryGroup's spec (for the members who joined or
/// left it and are Users, all of them when it is renamed or deleted:
/// [`users_of_group_change`]), by the Users `identity_triggers` names, through `backlog`, and
/// for every User once every [`RESYNC`], a batch at a time (`paced_resync`).
fn user_controller(
    (users, user_events): (
        CompactStore<User>,
        impl futures::Stream<Item = Result<User, watcher::Error>> + Send + 'static,
    ),
    concurrency: u16,
    (caches, events): (&Caches, ManagedEvents),
    wakers: Wakers,
    triggers: (&Client, UnboundedReceiver<ObjectRef<User>>, &Backlog<User>),
) -> Keyed<User> {
    let (client, identity_triggers, backlog) = triggers;
    let (members, in_groups) = (caches.index.clone(), caches.groups.clone());
    let (memberships, known_users) = (events.memberships, users.clone());
    let (group_shares, wake_group_shares) = (caches.share_index.clone(), wakers.share.clone());
    let every_user = users.clone();
    let resync = paced_resync(move || every_user.keys(), RESYNC);
    let (retained, wake_retained) = wakers.retained;
    let ws = wakers.workspaces;
    let of_binding = user_of_role_binding(
        caches.namespaces.clone(),
        retained,
        wake_retained,
        (wakers.share, ws.clone()),
    );
    let (ws_of_profile, ws_of_group) = (ws.clone(), ws.clone());
    let ws_of_quota = ws.clone();
    let of_limits = holder_of_guard(caches.namespaces.clone(), ws.clone());
    let of_isolation = holder_of_guard(caches.namespaces.clone(), ws.clone());
    Keyed::new(users, concurrency)
        .sweeps_once_listed()
        .watches_stream(user_events, |user| Some(ObjectRef::from_obj(&user)))
        .watches_stream(events.namespaces, move |ns| {
            if let Some(workspace) = ns.workspace() {
                ws.workspace(&workspace.name);
            }
            ns.user()
        })
        .watches_stream(events.role_bindings, of_binding)
        .watches_stream(adoption_watch(client), |ns| {
            ns.labels()
                .get(LABEL_ADOPT_FOR)
                .map(|user| ObjectRef::new(user))
        })
        .watches_stream(events.quotas, move |o| {
            ws_of_quota.of_object(&o);
            user_of(&o)
        })
        .watches_stream(events.limit_ranges, of_limits)
        .watches_stream(events.network_policies, of_isolation)
        .watches_stream(events.profiles, move |profile| {
            ws_of_profile.all();
            users_of_profile(&members, &in_groups, &profile)
                .into_iter()
                .map(|user| ObjectRef::new(&user))
        })
        .watches_stream(events.groups, move |group| {
            ws_of_group.of_group(&group.name_any());
            for share in group_shares.of_group(&group.name_any()) {
                let _ = wake_group_shares.unbounded_send(share);
            }
            users_of_group_change(&memberships, &known_users, &group)
        })
        .reconcile_on(backlog.requests())
        .reconcile_on(resync)
        .reconcile_on(identity_triggers)
}

/// Every Controller the operator runs and the caches reconciles read, from the watches of
/// [`declared::WATCHES`]: the Controller over Users ([`user_controller`]); the Controller over
/// retained Namespaces, triggered by their own watch (few objects) and by every RoleBinding that
/// appears in one, through the one RoleBinding watch both share; the Controller over Shares;
/// the Profile and DirectoryGroup status Controllers. `config` says which Profile a User
/// without `spec.profile` uses; `index` is kept from the User watch; `recent` names the echoes
/// of this replica's own creates, which trigger nothing.
pub fn controllers(
    client: &Client,
    concurrency: u16,
    config: &Config,
    index: &ProfileIndex,
    recent: &Recent,
) -> Controllers {
    let (user_backlog, share_backlog) = backlogs(concurrency);
    let share_index = ShareIndex::default();
    let (wake_share, share_wakes) = futures::channel::mpsc::unbounded();
    let (wake_all_shares, all_share_wakes) = futures::channel::mpsc::unbounded();
    let shares = share_controller(
        client,
        concurrency,
        &share_index,
        (share_wakes, all_share_wakes),
        &share_backlog,
    );
    let (statuses, status_triggers) = status_wakes();
    let wake_profiles = statuses.profiles.clone();
    let managed = managed_watches(client, recent, wake_all_shares, statuses);
    let (retained, wake_retained) = retained_controller(client);
    let (workspaces, wake_workspaces) = workspace_controller(
        client,
        concurrency,
        managed.groups.clone(),
        (share_index.clone(), wake_share.clone()),
    );
    let (wake_users, identity_triggers) = futures::channel::mpsc::unbounded();
    let identities = Identities::default();
    let (users, user_events) = user_watch(
        client,
        config,
        index,
        wake_profiles,
        (identities.clone(), wake_users),
        (share_index.clone(), wake_share.clone()),
        (&user_backlog, wake_workspaces.clone()),
    );
    let (profile_statuses, group_statuses) = status_controllers(&managed, status_triggers);
    let caches = Caches {
        namespaces: managed.namespaces,
        role_bindings: managed.role_bindings,
        quotas: managed.quotas,
        limit_ranges: managed.limit_ranges,
        network_policies: managed.network_policies,
        profiles: managed.profiles,
        groups: managed.groups,
        identities,
        users: users.clone(),
        index: index.clone(),
        shares: shares.store(),
        share_index,
        workspaces: workspaces.store(),
        workspace_index: wake_workspaces.index(),
    };
    let wakers = Wakers {
        retained: (retained.store(), wake_retained),
        share: wake_share,
        workspaces: wake_workspaces,
    };
    let users = user_controller(
        (users, user_events),
        concurrency,
        (&caches, managed.events),
        wakers,
        (client, identity_triggers, &user_backlog),
    );
    Controllers {
        caches,
        users,
        retained,
        profile_statuses,
        group_statuses,
        shares,
        workspaces,
        totals: total_controller(client),
        backlogs: (user_backlog, share_backlog),
    }
}

/// The Controller over the slices of total quotas (ResourceQuotas labelled
/// `homestead.dev/total-owner`, whole: a move reads their use), woken by every change, usage
/// included, settled for [`SLICE_DEBOUNCE`] so a burst of creates in a home costs one look. A
/// slice deleted (its home retained, handed over, or gone) wakes another slice of its owner, so
/// the owner's `status.total` stops listing it. Each slice is looked at again every few minutes
/// (`flows::total`).
fn total_controller(client: &Client) -> Controller<ResourceQuota> {
    let (slices, writer) = reflector::store();
    let remaining = slices.clone();
    let events = reflector::reflector(
        writer,
        watcher(
            Api::<ResourceQuota>::all(client.clone()),
            config_of(&declared::TOTALS),
        ),
    )
    .backoff(watch_backoff())
    .filter_map(move |event| {
        std::future::ready(match event {
            Ok(watcher::Event::Apply(q) | watcher::Event::InitApply(q)) => Some(Ok(q)),
            Ok(watcher::Event::Delete(q)) => sibling(&remaining, &q).map(Ok),
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => Some(Err(e)),
        })
    });
    Controller::for_stream(events, slices)
        .with_config(controller::Config::default().debounce(SLICE_DEBOUNCE))
}

/// Another slice in `slices` of the owner of `deleted`, if one remains.
fn sibling(slices: &Store<ResourceQuota>, deleted: &ResourceQuota) -> Option<ResourceQuota> {
    let owner = crate::act::total::owner_of_slice(deleted)?;
    slices
        .state()
        .into_iter()
        .find(|q| crate::act::total::owner_of_slice(q).as_ref() == Some(&owner))
        .map(|q| q.as_ref().clone())
}

/// How long a slice's changes settle before it is looked at.
const SLICE_DEBOUNCE: Duration = Duration::from_millis(200);

/// The Backlogs of the User and the Share Controllers for `concurrency` reconciles at once (0:
/// unbounded): each lets twice as many through, so its Controller never waits on it.
fn backlogs(concurrency: u16) -> (Backlog<User>, Backlog<CachedShare>) {
    let window = match concurrency {
        0 => usize::MAX,
        n => 2 * usize::from(n),
    };
    (Backlog::new(window), Backlog::new(window))
}

/// The Workspace Controller over its own watch (every Workspace), `concurrency` reconciles at
/// once (0: unbounded), and the [`WorkspaceWakes`] that trigger it (`groups`: the cache the
/// wakes look members up in); every Workspace once its cache has listed (a walk of the cache,
/// `Keyed::sweeps_once_listed`, not the first list's events), then again every [`RESYNC`].
/// Each change of a Workspace, once cached, wakes the Shares `shares` has in its namespace (through
/// `wake_share`).
fn workspace_controller(
    client: &Client,
    concurrency: u16,
    groups: Store<DirectoryGroup>,
    (shares, wake_share): (ShareIndex, UnboundedSender<ObjectRef<CachedShare>>),
) -> (Keyed<homestead_api::Workspace>, WorkspaceWakes) {
    let (wake, wakes) = futures::channel::mpsc::unbounded();
    let (all, every_one) = futures::channel::mpsc::unbounded();
    // Packed and trimmed (no managedFields): a thousand workspaces cost a few hundred bytes
    // each, not their history.
    let (store, events) = compact_watch::<homestead_api::Workspace>(client, &declared::WORKSPACES);
    let wakes_of = WorkspaceWakes::new(store.clone(), groups, wake.clone(), all);
    // Once the cache has a Workspace's change (its status: opened, suspended), the Shares in
    // its namespace are judged again: they grant only while it is open; and its owner's other
    // self-service Workspaces, which count it against their `max` (the siblings' own watch
    // may deliver the change before this cache has it: one refused beyond `max` must see the
    // older one gone).
    let siblings = wakes_of.clone();
    let sibling_wake = wake;
    let mut listed = false;
    let events = events.inspect_ok(move |event| {
        siblings.observe(event);
        if let Some(w) = changed_after_first_list(event, &mut listed) {
            if let Some(namespace) = w.status.as_ref().and_then(|s| s.namespace.as_deref()) {
                for share in shares.in_namespace(namespace) {
                    let _ = wake_share.unbounded_send(share);
                }
            }
            for sibling in siblings.self_service_of(w) {
                let _ = sibling_wake.unbounded_send(sibling);
            }
        }
    });
    let of_sibling = wakes_of.clone();
    let sibling_events = watcher(
        Api::<homestead_api::Workspace>::all(client.clone()),
        config_of(&declared::WORKSPACE_SIBLINGS),
    )
    .touched_objects()
    .backoff(watch_backoff());
    let mut listed = false;
    let controller = Keyed::new(store, concurrency)
        .sweeps_once_listed()
        .watches_stream(events, move |event| {
            changed_after_first_list(&event, &mut listed).map(ObjectRef::from_obj)
        })
        .watches_stream(sibling_events, move |workspace| {
            of_sibling.self_service_of(&workspace)
        })
        .reconcile_on(wakes)
        .reconcile_all_on(every_one)
        .reconcile_all_on(every(RESYNC));
    (controller, wakes_of)
}

/// The object of `event` if it is a change to pass on: an applied or deleted object, or one a
/// re-list after the first delivers (the API server lost the watch's place: what the watch
/// missed comes as `InitApply`, a change like any other); never one of the first list (every
/// Controller reconciles what its own first list has). `listed` says whether the first list
/// has ended; the caller keeps it from one event to the next.
fn changed_after_first_list<'a, K>(
    event: &'a watcher::Event<K>,
    listed: &mut bool,
) -> Option<&'a K> {
    match event {
        watcher::Event::Apply(object) | watcher::Event::Delete(object) => Some(object),
        watcher::Event::InitApply(object) if *listed => Some(object),
        watcher::Event::InitDone => {
            *listed = true;
            None
        }
        watcher::Event::InitApply(_) | watcher::Event::Init => None,
    }
}

/// The Controller over Shares (their own watch, indexed into `index` by grantee and namespace),
/// `concurrency` reconciles at once (0: unbounded), every Share once its cache has listed (a
/// walk of the cache, `Keyed::sweeps_once_listed`), triggered through `backlog` by a new Share
/// or a change of a Share's spec (its status is Homestead's own), and directly by the Shares
/// sent to `wakes`, by every `()` sent to `all`, and for every Share once every [`RESYNC`], a
/// batch at a time (`paced_resync`).
fn share_controller(
    client: &Client,
    concurrency: u16,
    index: &ShareIndex,
    (wakes, all): (
        futures::channel::mpsc::UnboundedReceiver<ObjectRef<CachedShare>>,
        futures::channel::mpsc::UnboundedReceiver<()>,
    ),
    backlog: &Backlog<CachedShare>,
) -> Keyed<CachedShare> {
    let (store, events) = share_watch(client, index, backlog);
    let cache = store.clone();
    let resync = paced_resync(move || cache.keys(), RESYNC);
    Keyed::new(store, concurrency)
        .sweeps_once_listed()
        .watches_stream(events, |share| Some(ObjectRef::from_obj(&share)))
        .reconcile_on(backlog.requests())
        .reconcile_on(wakes)
        .reconcile_on(resync)
        .reconcile_all_on(all)
}

/// The Share watch, trimmed to [`CachedShare`] and reflected into the returned cache by hand,
/// to compare each Share's generation with its cached version's before the cache moves on:
/// the Shares that are new, deleted or changed in their spec are queued in `backlog`; the
/// returned stream drives the watch and yields only its errors. Keeps `index` current.
fn share_watch(
    client: &Client,
    index: &ShareIndex,
    backlog: &Backlog<CachedShare>,
) -> (
    CompactStore<CachedShare>,
    impl futures::Stream<Item = Result<CachedShare, watcher::Error>> + Send + 'static,
) {
    let (store, mut writer) = compact_store::<CachedShare>();
    let events = watcher(
        Api::<CachedShare>::all(client.clone()),
        config_of(&declared::SHARES),
    )
    .modify(trim_object::<CachedShare>);
    let (cached, indexed, backlog) = (store.clone(), index.clone(), backlog.clone());
    let cache = store.clone();
    let events = relist_in_place(events, move |seen| {
        cache.filtered(|namespace, name| !seen.contains(&key(namespace, name)))
    })
    .map_ok(move |event| {
        let changed = match &event {
            watcher::Event::Apply(share) | watcher::Event::InitApply(share) => {
                let (namespace, name) = share.namespace_and_name();
                cached
                    .get(namespace, name)
                    .is_none_or(|old| old.metadata.generation != share.metadata.generation)
            }
            watcher::Event::Delete(_) => true,
            watcher::Event::Init | watcher::Event::InitDone => false,
        };
        // `relist_in_place` already turned a re-list into updates and deletions.
        writer.apply(&event);
        indexed.observe(&event);
        // Not the first list's (`InitApply`): the Controller walks its cache once listed.
        if let watcher::Event::Apply(share) | watcher::Event::Delete(share) = &event
            && changed
        {
            backlog.push(&ObjectRef::from_obj(share));
        }
    })
    .backoff(watch_backoff())
    .try_filter_map(|()| std::future::ready(Ok(None)));
    (store, events)
}

/// The Controller over retained Namespaces (labelled `homestead.dev/retained-from`), and the
/// sender that wakes it for one of them (a RoleBinding appeared there).
fn retained_controller(
    client: &Client,
) -> (Controller<Namespace>, UnboundedSender<ObjectRef<Namespace>>) {
    let (wake, triggers) = futures::channel::mpsc::unbounded();
    let retained = Controller::new(
        Api::<Namespace>::all(client.clone()),
        config_of(&declared::RETAINED),
    )
    .reconcile_on(triggers);
    (retained, wake)
}

/// The User watch, trimmed ([`trim_user`]) and reflected into the returned cache by hand
/// rather than with `reflect`, to compare each User with its cached version before the cache
/// moves on: the Users whose change [`triggers_reconcile`] are queued in `backlog` (the
/// returned stream drives the watch and yields only its errors), and keeps
/// `index` (Profile to Users) current, with `config`'s default Profile for Users naming none,
/// sending each Profile whose status a User event may change to `wake_profiles`; and keeps
/// `identities` (which User holds each identity) current, sending the other Users of an
/// identity a User took or gave up to `wake_users`.
fn user_watch(
    client: &Client,
    config: &Config,
    index: &ProfileIndex,
    wake_profiles: UnboundedSender<ObjectRef<Profile>>,
    (identities, wake_users): (Identities, UnboundedSender<ObjectRef<User>>),
    (shares, wake_shares): (ShareIndex, UnboundedSender<ObjectRef<CachedShare>>),
    (backlog, workspaces): (&Backlog<User>, WorkspaceWakes),
) -> (
    CompactStore<User>,
    impl futures::Stream<Item = Result<User, watcher::Error>> + Send + 'static,
) {
    let (users, mut writer) = compact_store::<User>();
    let user_events = watcher(
        Api::<User>::all(client.clone()),
        config_of(&declared::USERS).any_semantic(),
    )
    .modify(trim_and_keep);
    let indexed = index.clone();
    let default_profile = config.default_profile.clone();
    let cached = users.clone();
    let backlog = backlog.clone();
    let listed = users.clone();
    let user_events = relist_in_place(user_events, move |seen| {
        listed.filtered(|_, name| !seen.contains(name))
    })
    .inspect(move |event| {
        let Ok(event) = event else { return };
        for profile in indexed.observe(default_profile.as_deref(), event) {
            let _ = wake_profiles.unbounded_send(profile);
        }
        for user in identities.observe(event) {
            let _ = wake_users.unbounded_send(ObjectRef::new(&user));
        }
    })
    .map_ok(move |event| {
        let before = match &event {
            watcher::Event::Apply(user) | watcher::Event::InitApply(user) => {
                cached.get(None, &user.name_any())
            }
            _ => None,
        };
        let trigger = triggers_reconcile(before.as_ref(), &event);
        let total_only = only_total_changed(before.as_ref(), &event);
        // `relist_in_place` already turned a re-list into updates and deletions.
        writer.apply(&event);
        // After the cache has the change: the Shares it concerns read it there. Not on the
        // first list (`relist_in_place` turns re-lists into `Apply`): the Share Controller
        // lists every Share then (why: `after_first_list`).
        if let watcher::Event::Apply(user) | watcher::Event::Delete(user) = &event
            && !total_only
        {
            let home = user.status.as_ref().and_then(|s| s.namespace.as_deref());
            for share in shares.of_user(&user.name_any(), home) {
                let _ = wake_shares.unbounded_send(share);
            }
        }
        // Not on the first list: the Workspace Controller lists every Workspace then.
        if let watcher::Event::Apply(user) | watcher::Event::Delete(user) = &event
            && !total_only
        {
            workspaces.of_user(&user.name_any());
        }
        (event, trigger)
    })
    .backoff(watch_backoff())
    .try_filter_map(move |(event, trigger)| {
        // Not the first list's (`InitApply`: `relist_in_place` turns later lists into `Apply`):
        // the Controller walks its cache once listed (`sweeps_once_listed`).
        if let watcher::Event::Apply(user) = event
            && trigger
        {
            backlog.push(&ObjectRef::from_obj(&user));
        }
        std::future::ready(Ok(None))
    });
    (users, user_events)
}

/// [`trim_user`], then the User as its packed cache gives it back ([`as_kept`]), so each event is
/// compared with the cached User alike.
fn trim_and_keep(user: &mut User) {
    trim_user(user);
    *user = as_kept(user);
}

/// The watch of Homestead's Namespaces (`managed`) into its compact cache, with the deletions
/// it reports remembered in `recent` until the name comes back (an offboarding then trusts the
/// cache's word that a Namespace is gone, [`Gone::note`](crate::act::recent::Gone::note)) and
/// the echoes of this replica's own creates left out.
fn namespace_watch(
    client: &Client,
    recent: &Recent,
) -> (
    CompactStore<CachedNamespace>,
    impl futures::Stream<Item = Result<CachedNamespace, watcher::Error>> + Send + 'static,
) {
    let (namespaces, events) = compact_watch::<CachedNamespace>(client, &declared::NAMESPACES);
    let gone = recent.namespaces_gone.clone();
    let events = after_first_list(events).inspect_ok(move |event| gone.note(event));
    (
        namespaces,
        recent.namespaces.clone().touched_except_echoes(events),
    )
}

/// The watch of every RoleBinding into its compact cache, the echoes of this replica's own
/// creates left out.
fn role_binding_watch(
    client: &Client,
    recent: &Recent,
) -> (
    CompactStore<CachedRoleBinding>,
    impl futures::Stream<Item = Result<CachedRoleBinding, watcher::Error>> + Send + 'static,
) {
    let (role_bindings, events) =
        compact_watch::<CachedRoleBinding>(client, &declared::ROLE_BINDINGS);
    let events = recent
        .role_bindings
        .clone()
        .touched_except_echoes(after_first_list(events));
    (role_bindings, events)
}

/// The Namespaces the platform labelled `homestead.dev/adopt-for=<User>` (few, and only until
/// adopted), by their metadata alone and cached nowhere: each one that appears or changes
/// wakes the User it names, whose reconcile adopts it (docs/adoption.md).
fn adoption_watch(
    client: &Client,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<Namespace>, watcher::Error>> + Send + 'static
{
    watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config_of(&declared::ADOPTIONS),
    )
    .touched_objects()
    .backoff(watch_backoff())
}

/// The cache of Homestead's ResourceQuotas (selected by `managed`), and the quotas whose
/// labels, owner references or spec changed: quota status moves with every pod that comes or
/// goes, and only what Homestead sets matters (of a slice of a total quota, only its labels and
/// the total it was cut from: moving it is the slices' Controller's).
fn quota_watch(
    client: &Client,
) -> (
    Store<ResourceQuota>,
    impl futures::Stream<Item = Result<ResourceQuota, watcher::Error>> + Send + 'static,
) {
    let (quotas, events) = cached_watch(client, &declared::QUOTAS, trim_quota);
    let events = changes_of(
        events,
        |q: &ResourceQuota| {
            // A slice of a total quota moves with its owner's use (its own Controller's
            // business); its home cares only whose it is and which total it was cut from.
            if q.metadata.name.as_deref() == Some(homestead_api::TOTAL_QUOTA_NAME) {
                return fingerprint(&(&q.metadata.labels, &q.metadata.annotations));
            }
            fingerprint(&(&q.metadata.labels, &q.metadata.owner_references, &q.spec))
        },
        |_| {},
    );
    (quotas, events)
}

/// Maps a LimitRange or NetworkPolicy of Homestead's to the User whose Namespace (in
/// `namespaces`) it is in, and wakes the Workspace whose Namespace it is in through `workspaces`:
/// the Namespace's labels are the ones tenants cannot write. While the Namespace is not cached
/// yet (its watch lags; its arrival, an echo of this replica's create, wakes nobody), the
/// guard's own holder label decides instead. `None` (no User woken) for a guard in a
/// Workspace's home, or in a Namespace no longer Homestead's (retained) with no holder label.
fn holder_of_guard<K: Send + Sync + 'static>(
    namespaces: CompactStore<CachedNamespace>,
    workspaces: WorkspaceWakes,
) -> impl Fn(CachedGuard<K>) -> Option<ObjectRef<User>> + Send + Sync + 'static {
    move |guard| {
        let namespace = guard.metadata.namespace.as_deref()?;
        let Some(cached) = namespaces.get(None, namespace) else {
            if let Some(workspace) = guard.workspace() {
                workspaces.workspace(&workspace.name);
            }
            return guard.user();
        };
        if let Some(workspace) = cached.workspace() {
            workspaces.workspace(&workspace.name);
        }
        cached.user()
    }
}

/// Maps a RoleBinding to the User whose Namespace (in `namespaces`) it is in. One in a retained
/// Namespace (in `retained`) is nobody's User's any more: it wakes the retained Namespaces'
/// Controller through `wake` instead, which removes it. One named as a Share's
/// (`homestead-share-<name>`) also wakes that Share through `wake_share` (a tenant's edit is
/// undone, a deletion repaired).
fn user_of_role_binding(
    namespaces: CompactStore<CachedNamespace>,
    retained: Store<Namespace>,
    wake: futures::channel::mpsc::UnboundedSender<ObjectRef<Namespace>>,
    (wake_share, workspaces): (UnboundedSender<ObjectRef<CachedShare>>, WorkspaceWakes),
) -> impl Fn(CachedRoleBinding) -> Option<ObjectRef<User>> + Send + Sync + 'static {
    move |rb| {
        let namespace = rb.metadata.namespace.as_deref()?;
        if let Some(share) = rb.metadata.name.as_deref().and_then(share_of_binding) {
            let _ = wake_share.unbounded_send(ObjectRef::new(share).within(namespace));
        }
        let retained_namespace = ObjectRef::<Namespace>::new(namespace);
        if retained.get(&retained_namespace).is_some() {
            let _ = wake.unbounded_send(retained_namespace);
            return None;
        }
        let cached = namespaces.get(None, namespace)?;
        if let Some(workspace) = cached.workspace() {
            workspaces.workspace(&workspace.name);
        }
        cached.user()
    }
}

/// The Profile cache, and the Profiles whose spec changed or that came or went (each also sent
/// to `wake_groups`: which Profile a group selects may change with it): a Profile's status is
/// Homestead's own count of its Users; only its spec (generation) and its existence change
/// what its Users get.
fn profile_watch(
    client: &Client,
    wake_groups: UnboundedSender<()>,
    wake_status: UnboundedSender<ObjectRef<Profile>>,
) -> (
    Store<Profile>,
    impl futures::Stream<Item = Result<Profile, watcher::Error>> + Send + 'static,
) {
    let (profiles, events) = cached_watch(client, &declared::PROFILES, trim_object::<Profile>);
    let events = events.inspect_ok(move |event| wake_touched(event, &wake_status));
    let events = changes_of(
        events,
        |p: &Profile| fingerprint(&p.metadata.generation),
        |_| {},
    )
    .inspect(move |_| {
        let _ = wake_groups.unbounded_send(());
    });
    (profiles, events)
}

/// The DirectoryGroup cache, and the groups whose spec changed or that came or went (the
/// status is Homestead's own member count). A deleted group is passed on as a group with no
/// members: everyone in it left. The first list's groups go only to `memberships`, so their
/// first change concerns only who joined or left.
fn group_watch(
    client: &Client,
    memberships: GroupMemberships,
    wake_status: UnboundedSender<ObjectRef<DirectoryGroup>>,
) -> (
    Store<DirectoryGroup>,
    impl futures::Stream<Item = Result<DirectoryGroup, watcher::Error>> + Send + 'static,
) {
    let (groups, events) = cached_watch(client, &declared::GROUPS, trim_object::<DirectoryGroup>);
    let events = events.inspect_ok(move |event| wake_touched(event, &wake_status));
    let events = events.map_ok(|event| match event {
        watcher::Event::Delete(mut group) => {
            group.spec.members.clear();
            watcher::Event::Delete(group)
        }
        other => other,
    });
    let events = changes_of(
        events,
        |g: &DirectoryGroup| fingerprint(&g.metadata.generation),
        move |g| {
            memberships.affected(g);
        },
    );
    (groups, events)
}

/// The Users a change to `profile` concerns: those `index` has for it, and the members of the
/// directory groups its `spec.directory` names (as cached in `groups`), by name.
fn users_of_profile(
    index: &ProfileIndex,
    groups: &Store<DirectoryGroup>,
    profile: &Profile,
) -> HashSet<String> {
    let mut users: HashSet<String> = index.users_of(&profile.name_any()).into_iter().collect();
    if let Some(directory) = &profile.spec.directory {
        for group in groups.state() {
            if directory.groups.contains(&group.spec.display_name) {
                users.extend(group.spec.members.iter().cloned());
            }
        }
    }
    users
}

/// Whether a User watch event should trigger the User's reconcile: an applied User whose
/// change is not the echo of Homestead's own status write ([`status::triggers_reconcile`],
/// judged against the User's cached version from before the event).
/// Whether `event` changes nothing of its User but `status.total` (docs/quota.md), which the
/// slices' Controller writes as use moves: no Share or Workspace reads it, so none is woken.
fn only_total_changed(before: Option<&User>, event: &watcher::Event<User>) -> bool {
    let watcher::Event::Apply(user) = event else {
        return false;
    };
    let Some(before) = before else {
        return false;
    };
    let without_total = |u: &User| {
        u.status
            .clone()
            .map(|s| homestead_api::UserStatus { total: None, ..s })
    };
    before.metadata == user.metadata
        && before.spec == user.spec
        && without_total(before) == without_total(user)
        && before.status.as_ref().map(|s| &s.total) != user.status.as_ref().map(|s| &s.total)
}

fn triggers_reconcile(before: Option<&User>, event: &watcher::Event<User>) -> bool {
    match event {
        watcher::Event::Apply(user) | watcher::Event::InitApply(user) => {
            status::triggers_reconcile(before, user)
        }
        _ => false,
    }
}

/// The members of each DirectoryGroup as the group watch last showed them (its first list
/// included; shared by the watch and the User Controller's trigger), to tell which Users a
/// change concerns: those who joined or left (everyone in it when its name changed,
/// since the Profiles that name it may then be others). Without this, a change to a group of
/// 10,000 would reconcile all 10,000 for each member added.
#[derive(Clone, Default)]
struct GroupMemberships(std::sync::Arc<std::sync::Mutex<HashMap<Box<str>, Members>>>);

/// A group's display name and member names, sorted without repeats: a boxed slice (0.7 MiB for
/// 21,000 memberships, where hash sets of strings took 1.3: docs/performance.md, "A leaner echo
/// memory and group memberships").
type Members = (Box<str>, Box<[Box<str>]>);

impl GroupMemberships {
    /// The names of the Users `group`'s change concerns (a deleted group comes with no
    /// members), and `group` remembered as it is now.
    fn affected(&self, group: &DirectoryGroup) -> Vec<String> {
        let mut members: Vec<Box<str>> = group
            .spec
            .members
            .iter()
            .map(|m| m.as_str().into())
            .collect();
        members.sort_unstable();
        members.dedup();
        let mut known = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (display_name, before) = known.remove(group.name_any().as_str()).unwrap_or_default();
        let only_in = |these: &[Box<str>], those: &[Box<str>]| {
            these
                .iter()
                .filter(|m| those.binary_search(m).is_err())
                .map(|m| m.to_string())
                .collect::<Vec<_>>()
        };
        let mut affected = only_in(&before, &members);
        affected.extend(only_in(&members, &before));
        if *display_name != *group.spec.display_name {
            // Renamed: the members who stayed too.
            let stayed = before.iter().filter(|m| members.binary_search(m).is_ok());
            affected.extend(stayed.map(|m| m.to_string()));
        }
        if !members.is_empty() {
            known.insert(
                group.name_any().into(),
                (group.spec.display_name.as_str().into(), members.into()),
            );
        }
        affected
    }
}

/// How many Users [`paced_resync`] queues at once: enough to keep every reconcile slot busy.
const RESYNC_BATCH: usize = 64;

/// Every object of a compact cache (Users, Shares), by the keys `keys` gives
/// ([`CompactStore::keys`]), once every `period`, [`RESYNC_BATCH`] at a time, the batches spread
/// over nine tenths of the period; the first round starts one `period` after the operator (whose
/// first list reconciled everyone). A round takes the keys the cache has when it starts and makes
/// each batch's references as it goes: a key is 16 bytes and its text, where a reference is 96
/// bytes and its strings, and a round holds its list for nine tenths of the period (1.8 MiB of
/// references for 10,000 Users and 10,000 Shares in a heap profile, docs/performance.md
/// "Workspaces packed"). One deleted since is skipped by the Controller, one created since waits
/// for the next round (its own watch event reconciled it).
///
/// kube-runtime's `reconcile_all_on` queues every object at once, and its scheduler keeps the
/// memory of its largest queue for good: at 10,000 Users the operator's RSS went from 46 to
/// 51 MiB at the first resync and stayed there (docs/performance.md, Memory). Paced, the queue
/// holds a batch or two.
fn paced_resync<K: Watched>(
    keys: impl Fn() -> Vec<Box<str>> + Send + Sync + 'static,
    period: Duration,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let start = tokio::time::Instant::now() + period;
    let keys = std::sync::Arc::new(keys);
    futures::stream::unfold(start, move |start| {
        let keys = keys.clone();
        async move {
            tokio::time::sleep_until(start).await;
            Some((paced(keys(), period * 9 / 10), start + period))
        }
    })
    .flatten()
}

/// The object a compact cache's key (`namespace/name`, or `name`) names.
fn reference_of<K: Watched>(key: &str) -> ObjectRef<K> {
    match key.split_once('/') {
        Some((namespace, name)) => ObjectRef::new(name).within(namespace),
        None => ObjectRef::new(key),
    }
}

/// A copy of every object of `cache` whose [`key`] is not in `listed`.
fn unlisted<K: Watched>(cache: &Store<K>, listed: &HashSet<String>) -> Vec<K> {
    cache
        .state()
        .iter()
        .filter(|o| !listed.contains(&key(o.meta().namespace.as_deref(), &o.name_any())))
        .map(|o| o.as_ref().clone())
        .collect()
}

/// The objects `keys` names ([`reference_of`]), [`RESYNC_BATCH`] at a time, the batches evenly
/// spread over `span` (the first at once).
fn paced<K: Watched>(
    keys: Vec<Box<str>>,
    span: Duration,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let batches = keys.len().div_ceil(RESYNC_BATCH).max(1);
    let gap = span / u32::try_from(batches).unwrap_or(u32::MAX);
    let mut keys = keys.into_iter();
    futures::stream::unfold(true, move |first| {
        let batch: Vec<ObjectRef<K>> = keys
            .by_ref()
            .take(RESYNC_BATCH)
            .map(|key| reference_of(&key))
            .collect();
        async move {
            if batch.is_empty() {
                return None;
            }
            if !first {
                tokio::time::sleep(gap).await;
            }
            Some((futures::stream::iter(batch), false))
        }
    })
    .flatten()
}

/// A stream that yields once every `period`, first after one `period`.
fn every(period: Duration) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}

/// The objects of `events` that are new, deleted, or changed in what `key` fingerprints;
/// updates that change nothing else (status, resourceVersion) are dropped. The objects of the
/// watch's first list are remembered and handed to `listed`, not passed on
/// ([`after_first_list`]).
fn changes_of<K, S>(
    events: S,
    key: impl Fn(&K) -> u64 + Send + 'static,
    mut listed: impl FnMut(&K) + Send + 'static,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
    let mut first_list = true;
    events.filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::InitApply(o)) if first_list => {
                let id = (
                    o.meta().namespace.clone(),
                    o.meta().name.clone().unwrap_or_default(),
                );
                seen.insert(id, key(&o));
                listed(&o);
                None
            }
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let id = (
                    o.meta().namespace.clone(),
                    o.meta().name.clone().unwrap_or_default(),
                );
                let print = key(&o);
                (seen.insert(id, print) != Some(print)).then_some(Ok(o))
            }
            Ok(watcher::Event::Delete(o)) => {
                let id = (
                    o.meta().namespace.clone(),
                    o.meta().name.clone().unwrap_or_default(),
                );
                seen.remove(&id);
                Some(Ok(o))
            }
            Ok(watcher::Event::InitDone) => {
                first_list = false;
                None
            }
            Ok(watcher::Event::Init) => None,
            Err(e) => Some(Err(e)),
        };
        std::future::ready(changed)
    })
}

/// `events` from the end of the watch's first list on (its errors always), for the trigger
/// streams of the managed watches: what they list first triggers no other Controller. Each
/// Controller reconciles every object its own watch lists first (the Controllers over keys walk
/// their cache for it: `Keyed::sweeps_once_listed`), and no reconcile runs before every cache
/// has listed (docs/design.md, rule 29), so every User is reconciled once after a restart, with
/// every cache complete. Passing on the other watches' first
/// lists too would queue every User again, straight into kube-runtime's scheduler (past the
/// [`Backlog`]), and the members of every directory group, Users or not: after a leader
/// change, the soak saw real Users wait behind 80,000 reconcile requests for members of large
/// groups who are no Users. Later re-lists (the API server lost the watch's place) are passed
/// on: they may carry changes the watch missed.
fn after_first_list<K, S>(
    events: S,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut listed = false;
    events.filter(move |event| {
        let pass = listed || event.is_err();
        if matches!(event, Ok(watcher::Event::InitDone)) {
            listed = true;
        }
        std::future::ready(pass)
    })
}

/// The Users a change to `group` concerns ([`GroupMemberships::affected`]) that are in `users`:
/// a member who is no User (yet) has nothing to reconcile, and one who becomes one is
/// reconciled then and reads the group as it is by that time. A directory group may list
/// thousands who have no User here; each would be a request kube-runtime drops as not found.
fn users_of_group_change(
    memberships: &GroupMemberships,
    users: &CompactStore<User>,
    group: &DirectoryGroup,
) -> Vec<ObjectRef<User>> {
    memberships
        .affected(group)
        .into_iter()
        .filter(|user| users.contains(None, user))
        .map(|user| ObjectRef::new(&user))
        .collect()
}

/// A 64-bit fingerprint of `value`'s JSON form.
fn fingerprint(value: &impl serde::Serialize) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// The watcher configuration of `watch`: its label selector ([`declared::Selects`]), its
/// initial state streamed or paged ([`super::lists`]).
fn config_of(watch: &Watch) -> watcher::Config {
    let config = super::lists::config();
    match watch.selects.label_selector() {
        Some(selector) => config.labels(&selector),
        None => config,
    }
}

/// How watches retry after an error (the API server gone, a re-list refused): exponentially from
/// 0.5 s to at most 5 s, with jitter, starting over after 10 s without error. kube-runtime's
/// default (client-go's, up to 30 s and reset only after 2 min) left Users unreconciled for over
/// a minute after an API server restart; 4 watches retrying every 5 s cost the API server
/// less than one request a second.
fn watch_backoff() -> impl Backoff + 'static {
    ResetTimerBackoff::new(
        ExponentialBackoff::from(
            backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(5))
                .with_factor(2.0)
                .with_jitter()
                .without_max_times(),
        ),
        Duration::from_secs(10),
    )
}

/// A reflector cache of `K` objects matching `config`, each cut down by `trim` to what
/// reconciles read, and the stream of its watch events that feeds both the cache and the
/// Controller's triggers. The initial list is paged (kube-runtime's default: 500 objects a
/// page), so a re-list never holds a whole cluster's response at once.
fn cached_watch<K>(
    client: &Client,
    watch: &Watch,
    trim: fn(&mut K),
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Watched,
{
    let (store, writer) = reflector::store();
    let events = watcher(Api::all(client.clone()), config_of(watch)).modify(trim);
    let cache = store.clone();
    let stream = relist_in_place(events, move |seen| unlisted(&cache, seen))
        .reflect(writer)
        .backoff(watch_backoff());
    (store, stream)
}

/// A compact cache ([`CompactStore`]) of `K` objects matching `config`, trimmed as
/// [`cached_watch`]'s are, and the stream of its watch events that feeds both the cache and
/// the Controller's triggers; a re-list updates the cache in place, and the objects it no
/// longer lists come out of the stream as deletions (as [`relist_in_place`] does for
/// reflector caches).
fn compact_watch<K>(
    client: &Client,
    watch: &Watch,
) -> (
    CompactStore<K>,
    impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
)
where
    K: Compact + Watched,
{
    let (store, mut writer) = compact_store();
    let events = watcher(Api::all(client.clone()), config_of(watch))
        .modify(trim_object::<K>)
        .flat_map(move |event| {
            let gone = event.as_ref().map(|e| writer.apply(e)).unwrap_or_default();
            let gone = gone.into_iter().map(|o| Ok(watcher::Event::Delete(o)));
            futures::stream::iter(std::iter::once(event).chain(gone))
        })
        .backoff(watch_backoff());
    (store, events)
}

/// Turns every re-list after the first into updates of the cache in place: each listed object
/// replaces its cached one as it arrives (`Apply`), and once the list is complete, objects
/// the list no longer had are removed (`Delete`, which also triggers their User's reconcile).
///
/// kube-runtime's reflector instead fills a second map during a re-list and swaps it in at
/// the end, so readers never see a half-listed cache, at the cost of holding every object
/// twice; after an API server restart, every watch re-lists at once, and the operator's
/// memory nearly doubled. Reconciles do not need the atomic swap: each cached object is some
/// recent state of that object either way, which is all a cache ever promises them. The
/// first list still goes through unchanged, so [`Store::wait_until_ready`] means what it says.
fn relist_in_place<K, S>(
    events: S,
    unlisted: impl Fn(&HashSet<String>) -> Vec<K> + Send + 'static,
) -> impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    // `None` until the first list is done; then the keys listed so far by the current re-list.
    let mut relisted: Option<HashSet<String>> = None;
    let key = |o: &K| key(o.meta().namespace.as_deref(), &o.name_any());
    events.flat_map(move |event| {
        let out = match (event, relisted.as_mut()) {
            (Ok(watcher::Event::InitDone), None) => {
                relisted = Some(HashSet::new());
                vec![Ok(watcher::Event::InitDone)]
            }
            (event, None) => vec![event],
            (Ok(watcher::Event::Init), Some(seen)) => {
                seen.clear();
                Vec::new()
            }
            (Ok(watcher::Event::InitApply(o)), Some(seen)) => {
                seen.insert(key(&o));
                vec![Ok(watcher::Event::Apply(o))]
            }
            (Ok(watcher::Event::InitDone), Some(seen)) => {
                let gone = unlisted(seen)
                    .into_iter()
                    .map(|o| Ok(watcher::Event::Delete(o)))
                    .collect();
                *seen = HashSet::new();
                gone
            }
            (event, Some(_)) => vec![event],
        };
        futures::stream::iter(out)
    })
}

/// [`trim`] for any kind: drops what is left of `managedFields`, the last-applied annotation
/// and the resourceVersion once the watch has read it.
fn trim_object<K: Resource>(object: &mut K) {
    trim(object.meta_mut());
}

/// [`trim_object`] for a ResourceQuota, and without its status: `status.hard` and
/// `status.used` (two maps of quantities, over 1 KB per quota) move with every pod and are
/// never read; drift is judged on `spec.hard` alone.
fn trim_quota(quota: &mut ResourceQuota) {
    trim_object(quota);
    quota.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relist_after_the_first_passes_its_objects_on_as_changes() {
        let mut listed = false;
        let user = User::test("ada");
        let names = |events: &[watcher::Event<User>], listed: &mut bool| -> Vec<String> {
            events
                .iter()
                .filter_map(|e| changed_after_first_list(e, listed))
                .map(|u| u.name_any())
                .collect()
        };
        let first = [
            watcher::Event::Init,
            watcher::Event::InitApply(user.clone()),
            watcher::Event::InitDone,
        ];
        assert!(
            names(&first, &mut listed).is_empty(),
            "the first list is no change"
        );
        let later = [
            watcher::Event::Apply(user.clone()),
            watcher::Event::Init,
            watcher::Event::InitApply(User::test("bob")),
            watcher::Event::InitDone,
            watcher::Event::Delete(user),
        ];
        assert_eq!(names(&later, &mut listed), ["ada", "bob", "ada"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_queues_every_user_a_batch_at_a_time_spread_over_its_period() {
        let (users, mut writer) = compact_store::<User>();
        for i in 0..130 {
            writer.insert(User::test(&format!("u{i:03}")));
        }
        let period = Duration::from_secs(100);
        let started = tokio::time::Instant::now();
        let mut resync = std::pin::pin!(paced_resync::<User>(move || users.keys(), period));
        let mut round = Vec::new();
        for _ in 0..130 {
            let user = resync.next().await.unwrap();
            round.push((user.name, started.elapsed().as_secs()));
        }
        let names: HashSet<_> = round.iter().map(|(name, _)| name.clone()).collect();
        assert_eq!(names.len(), 130, "every User once");
        // Three batches (64, 64, 2) over 90 s: at 100 s (one period after the start), 130 s
        // and 160 s.
        let at = |i: usize| round[i].1;
        assert_eq!((at(0), at(63)), (100, 100));
        assert_eq!((at(64), at(127)), (130, 130));
        assert_eq!((at(128), at(129)), (160, 160));
        // The next round starts one period after this one did.
        resync.next().await.unwrap();
        assert_eq!(started.elapsed().as_secs(), 200);
    }

    fn group(display_name: &str, members: &[&str]) -> DirectoryGroup {
        DirectoryGroup::test("eng", display_name).with_members(members)
    }

    fn affected(memberships: &GroupMemberships, group: &DirectoryGroup) -> Vec<String> {
        let mut users = memberships.affected(group);
        users.sort();
        users
    }

    #[test]
    fn a_group_change_concerns_who_joined_or_left_or_everyone_on_a_rename() {
        let memberships = GroupMemberships::default();
        assert_eq!(
            affected(&memberships, &group("Eng", &["a", "b"])),
            ["a", "b"]
        );
        assert_eq!(
            affected(&memberships, &group("Eng", &["b", "c"])),
            ["a", "c"],
            "a left, c joined; b is where it was"
        );
        assert_eq!(
            affected(&memberships, &group("Engineering", &["b", "c"])),
            ["b", "c"],
            "renamed: other Profiles may name it now"
        );
        assert_eq!(
            affected(&memberships, &group("Engineering", &[])),
            ["b", "c"],
            "deleted (no members)"
        );
        assert_eq!(
            affected(&memberships, &group("Engineering", &["d"])),
            ["d"],
            "forgotten once empty"
        );
        assert_eq!(
            affected(&memberships, &group("Research", &["e", "d"])),
            ["d", "e"],
            "renamed as e joined: who stayed and who joined"
        );
    }

    #[test]
    fn a_member_named_twice_counts_once() {
        let memberships = GroupMemberships::default();
        assert_eq!(
            affected(&memberships, &group("Eng", &["b", "a", "a"])),
            ["a", "b"]
        );
        assert_eq!(affected(&memberships, &group("Eng", &["b"])), ["a"]);
    }

    /// The events a watch yields for a first list of `listed`, then `after`.
    fn first_list_then(
        listed: Vec<DirectoryGroup>,
        after: Vec<watcher::Event<DirectoryGroup>>,
    ) -> impl futures::Stream<Item = Result<watcher::Event<DirectoryGroup>, watcher::Error>>
    + Send
    + 'static {
        let first = std::iter::once(watcher::Event::Init)
            .chain(listed.into_iter().map(watcher::Event::InitApply))
            .chain(std::iter::once(watcher::Event::InitDone));
        futures::stream::iter(first.chain(after).map(Ok))
    }

    fn names<K: Resource>(objects: Vec<Result<K, watcher::Error>>) -> Vec<String> {
        objects.into_iter().map(|o| o.unwrap().name_any()).collect()
    }

    #[test]
    fn a_group_change_queues_only_its_members_who_are_users() {
        let (users, mut writer) = compact_store::<User>();
        writer.apply(&watcher::Event::Apply(User::test("ada")));
        writer.apply(&watcher::Event::Apply(User::test("bob")));
        let memberships = GroupMemberships::default();
        let queued = |group: &DirectoryGroup| {
            let mut names: Vec<String> = users_of_group_change(&memberships, &users, group)
                .into_iter()
                .map(|user| user.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            queued(&group("Eng", &["ada", "ballast-1", "ballast-2"])),
            ["ada"],
            "a new group: its members who are Users"
        );
        assert_eq!(
            queued(&group("Eng", &["ada", "bob", "ballast-3"])),
            ["bob"],
            "bob joined; ballast-1 and -2 left and ballast-3 joined, none a User"
        );
    }

    #[tokio::test]
    async fn a_first_list_triggers_nothing_and_a_later_re_list_does() {
        let (a, b) = (group("A", &["x"]), group("B", &["y"]));
        let relist = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(b.clone()),
            watcher::Event::InitDone,
        ];
        let events = first_list_then(vec![a, b.clone()], relist);
        let passed: Vec<_> = after_first_list(events).collect().await;
        let passed: Vec<_> = passed.into_iter().map(Result::unwrap).collect();
        assert!(
            matches!(
                passed.as_slice(),
                [
                    watcher::Event::Init,
                    watcher::Event::InitApply(_),
                    watcher::Event::InitDone
                ]
            ),
            "only the re-list: {passed:?}"
        );
    }

    #[tokio::test]
    async fn changes_after_a_first_list_are_measured_against_it() {
        let eng = DirectoryGroup::test("eng", "Eng")
            .with_members(&["a", "b"])
            .with_generation(1);
        let ops = DirectoryGroup::test("ops", "Ops")
            .with_members(&["c"])
            .with_generation(1);
        let memberships = GroupMemberships::default();
        let learned = memberships.clone();
        let later = vec![
            // Its status written: the same generation.
            watcher::Event::Apply(ops.clone()),
            // b left, d joined.
            watcher::Event::Apply(
                DirectoryGroup::test("eng", "Eng")
                    .with_members(&["a", "d"])
                    .with_generation(2),
            ),
        ];
        let changed: Vec<_> = changes_of(
            first_list_then(vec![eng, ops], later),
            |g: &DirectoryGroup| fingerprint(&g.metadata.generation),
            move |g| {
                learned.affected(g);
            },
        )
        .collect()
        .await;
        let changed = changed.into_iter().map(Result::unwrap).collect::<Vec<_>>();
        assert_eq!(
            names(changed.iter().cloned().map(Ok).collect()),
            ["eng"],
            "the first list and an update of the same generation pass nothing on"
        );
        assert_eq!(
            affected(&memberships, &changed[0]),
            ["b", "d"],
            "the first list was learned: only who left or joined"
        );
    }
}
