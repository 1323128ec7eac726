//! What every flow shares, passed to each reconcile as `Arc<Context>`: the [`Cluster`] (this
//! replica's fenced door to the API server), the operator's [`Config`], the [`Caches`] its
//! watches fill, its [`Metrics`] and the per-User backoff. Its fields are private: a flow asks
//! for what it needs by intent ([`Context::resolve`], [`Context::ready_to_write`],
//! [`Context::retry_delay`]) or reads one part ([`Context::cluster`], [`Context::caches`],
//! [`Context::config`]). The context sits above act and state and below the flows
//! (docs/development.md, "Layers").

use std::sync::Arc;
use std::time::Duration;

use homestead_api::{DIRECTORY_FLOOR_PROFILE, DirectoryGroup, Profile, User};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use tracing::warn;

use crate::act::Cluster;
use crate::error::{Backoffs, Error};
use crate::metrics::Metrics;
use crate::plan::config::Config;
use crate::plan::profile::{Resolved, choose, directory_floor, resolve};
use crate::plan::validate::Refusal;
use crate::state::Caches;
use crate::state::cache::CachedShare;

/// How many large RoleBindings ([`Context::large_write`]) are written at once: two (eight
/// before) took the peak of a 1,000-member group's change named by 100 Shares from about 6 to
/// about 3 MiB above the operator's steady state, for 1-2 s more (docs/performance.md, "Memory").
pub const LARGE_WRITES: usize = 2;
/// Subjects above which a RoleBinding counts as large.
pub const LARGE_BINDING: usize = 100;

/// How many owners' total-quota locks are kept before the idle ones are forgotten.
pub const TOTAL_LOCKS_KEPT: usize = 256;

/// Everything a reconcile needs, shared by all reconciles as `Arc<Context>`.
pub struct Context {
    /// The fenced client, the memory of recent writes and the Event queue.
    cluster: Cluster,
    /// The operator's configuration.
    config: Config,
    /// The caches the watches fill.
    caches: Caches,
    /// The operator's Prometheus metrics.
    metrics: Metrics,
    /// Retry delays of Users whose reconcile failed.
    backoffs: Backoffs,
    /// Retry delays of Profiles whose status write failed.
    profile_backoffs: Backoffs<Profile>,
    /// Retry delays of DirectoryGroups whose status write failed.
    group_backoffs: Backoffs<DirectoryGroup>,
    /// Retry delays of Shares whose reconcile failed.
    share_backoffs: Backoffs<CachedShare>,
    /// Per-Workspace backoff after failures.
    workspace_backoffs: Backoffs<homestead_api::Workspace>,
    /// Permits for writing a large RoleBinding ([`Context::large_write`]).
    large_writes: tokio::sync::Semaphore,
    /// One lock per owner of a total quota ([`Context::total_lock`]).
    totals: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Whether every cache has seen its first list; reconciles wait for it, so nothing is
    /// written from a half-filled cache after a restart.
    synced: tokio::sync::watch::Sender<bool>,
}

impl Context {
    /// A Context writing through `cluster`, configured by `config`, reading `caches`, counting
    /// in `metrics`, with fresh backoff state; reconciles wait for [`Context::mark_synced`].
    pub fn new(cluster: Cluster, config: Config, caches: Caches, metrics: Metrics) -> Self {
        Self {
            cluster,
            config,
            caches,
            metrics,
            backoffs: Backoffs::default(),
            profile_backoffs: Backoffs::default(),
            group_backoffs: Backoffs::default(),
            share_backoffs: Backoffs::default(),
            workspace_backoffs: Backoffs::default(),
            large_writes: tokio::sync::Semaphore::new(LARGE_WRITES),
            totals: std::sync::Mutex::default(),
            synced: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Waits for, and holds until dropped, the lock of `owner`'s total quota: whoever moves an
    /// owner's slices holds it from reading them to the last write (docs/quota.md), so two
    /// moves of one owner never interleave. Locks nobody holds or waits for are forgotten once
    /// there are more than [`TOTAL_LOCKS_KEPT`].
    pub async fn total_lock(
        &self,
        owner: &homestead_model::workspace::Owner,
    ) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self
                .totals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if locks.len() > TOTAL_LOCKS_KEPT {
                locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            }
            locks.entry(owner.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// This replica's door to the API server.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The operator's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The caches the watches fill.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// The operator's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// `user` with its Profile applied: the Profile [`choose`] picks from the cached Profiles
    /// and DirectoryGroups, then [`resolve`]d.
    ///
    /// # Errors
    /// The [`Refusal`]s of [`resolve`].
    pub fn resolve(&self, user: &User) -> Result<Resolved, Refusal> {
        let profiles = self.caches.profiles();
        let groups = self.caches.groups();
        let choice = choose(user, &self.config, &profiles, &groups);
        resolve(user, choice.as_ref(), &self.config, |name| {
            self.caches
                .profile(name)
                .or_else(|| (name == DIRECTORY_FLOOR_PROFILE).then(|| Arc::new(directory_floor())))
        })
    }

    /// Marks every cache as synced: reconciles may proceed.
    pub fn mark_synced(&self) {
        self.synced.send_replace(true);
    }

    /// Waits until [`Context::mark_synced`] was called.
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = synced.wait_for(|synced| *synced).await;
    }

    /// Waits until every cache has synced; then whether this replica may write (it holds the
    /// leader-election Lease). A standby touches nothing.
    pub async fn ready_to_write(&self) -> bool {
        self.wait_synced().await;
        self.cluster.may_write()
    }

    /// After a failed reconcile of `user`: counts `error` by [`Error::metric_label`] in
    /// `homestead_reconcile_errors_total`, logs it as a warning, and returns the delay before
    /// the retry (per-User exponential backoff with jitter: 1 s, 2 s, 4 s, ... up to 5 min).
    pub fn retry_delay(&self, user: &User, error: &Error) -> Duration {
        let reason = error.metric_label().as_str();
        self.metrics.errors.with_label_values(&[reason]).inc();
        let delay = self.backoffs.next_delay(ObjectRef::from_obj(user));
        warn!(
            user = %user.name_any(),
            %reason,
            retry_in_seconds = delay.as_secs_f64(),
            "reconcile failed: {error}"
        );
        delay
    }

    /// Forgets `user`'s failures after a successful reconcile.
    pub fn succeeded(&self, user: &ObjectRef<User>) {
        self.backoffs.reset(user);
    }

    /// Retry delays of Profiles whose status write failed.
    pub fn profile_backoffs(&self) -> &Backoffs<Profile> {
        &self.profile_backoffs
    }

    /// Retry delays of DirectoryGroups whose status write failed.
    pub fn group_backoffs(&self) -> &Backoffs<DirectoryGroup> {
        &self.group_backoffs
    }

    /// Retry delays of Shares whose reconcile failed.
    pub fn share_backoffs(&self) -> &Backoffs<CachedShare> {
        &self.share_backoffs
    }

    /// The per-Workspace backoff after failed reconciles.
    pub fn workspace_backoffs(&self) -> &Backoffs<homestead_api::Workspace> {
        &self.workspace_backoffs
    }

    /// Waits for one of [`LARGE_WRITES`] permits to reconcile a Share whose RoleBinding may have
    /// `subjects` subjects, when they are more than [`LARGE_BINDING`] (a Share to a large
    /// group): each such reconcile holds a few hundred kilobytes (the resolved subjects, the
    /// binding, its JSON, the API server's answer), and a change to a group of 1,000 named by
    /// 100 Shares would otherwise hold them all at once (a heap profile saw 3.6 MiB of subjects
    /// and bindings waiting for a permit taken after they were built). `None` for a small one,
    /// which goes on at once.
    pub async fn large_write(&self, subjects: usize) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if subjects <= LARGE_BINDING {
            return None;
        }
        // The semaphore lives as long as the Context and is never closed.
        self.large_writes.acquire().await.ok()
    }
}

#[cfg(test)]
pub(crate) mod test {
    //! A [`Context`] on a mock API server ([`tower_test`]), with caches the test fills itself.

    use crate::act::fence::Fence;
    use crate::act::recent::Recent;
    use crate::state::cache::{
        CachedLimitRange, CachedNamespace, CachedNetworkPolicy, CachedRoleBinding,
    };
    use homestead_api::{DirectoryGroup, Profile};
    use homestead_model::store::{CompactWriter, compact_store};
    use k8s_openapi::api::core::v1::ResourceQuota;
    use kube::runtime::events::Reporter;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher;
    use kube::{Client, Resource};
    use tower_test::mock;

    use super::*;

    /// The API server side of a test [`Context`]: receives each request and answers it.
    pub type ApiServer =
        mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;

    /// The cache writers of a test [`Context`].
    pub struct Writers {
        pub namespaces: CompactWriter<CachedNamespace>,
        pub role_bindings: CompactWriter<CachedRoleBinding>,
        pub quotas: Writer<ResourceQuota>,
        pub limit_ranges: CompactWriter<CachedLimitRange>,
        pub network_policies: CompactWriter<CachedNetworkPolicy>,
        pub profiles: Writer<Profile>,
        pub groups: Writer<DirectoryGroup>,
    }

    impl Writers {
        /// Puts `object` into its cache, in the cache's form, as a watch event would.
        pub fn insert<K>(writer: &mut Writer<K>, object: impl Into<K>)
        where
            K: Resource<DynamicType = ()> + Clone + 'static,
        {
            writer.apply_watcher_event(&watcher::Event::Apply(object.into()));
        }
    }

    impl Context {
        /// The per-User backoff state.
        pub fn backoffs(&self) -> &Backoffs {
            &self.backoffs
        }

        /// The configuration, to change before the first reconcile.
        pub fn config_mut(&mut self) -> &mut Config {
            &mut self.config
        }

        /// A Context with the default [`Config`], empty caches and a client whose requests
        /// go to the returned [`ApiServer`].
        pub fn test() -> (Self, ApiServer, Writers) {
            Self::test_fenced(Fence::always())
        }

        /// [`Context::test`] writing only while `fence` is held.
        pub fn test_fenced(fence: Fence) -> (Self, ApiServer, Writers) {
            let (service, server) = mock::pair();
            let client = Client::new(service, "default");
            let (namespaces, ns_writer) = compact_store();
            let (role_bindings, rb_writer) = compact_store();
            let (quotas, quota_writer) = reflector::store();
            let (limit_ranges, limit_range_writer) = compact_store();
            let (network_policies, network_policy_writer) = compact_store();
            let (profiles, profile_writer) = reflector::store();
            let (groups, group_writer) = reflector::store();
            let registry = prometheus::Registry::new();
            let metrics = Metrics::new(&registry).expect("fresh registry");
            let reporter = Reporter {
                controller: "homestead".into(),
                instance: Some("test".into()),
            };
            let cluster = Cluster::new(
                client,
                &reporter,
                Arc::new(fence),
                Recent::default(),
                metrics.clone(),
            );
            let context = Self::new(
                cluster,
                Config::default(),
                Caches {
                    namespaces,
                    role_bindings,
                    quotas,
                    limit_ranges,
                    network_policies,
                    profiles,
                    groups,
                    identities: homestead_model::identity::Identities::default(),
                    users: homestead_model::store::compact_store().0,
                    index: crate::state::index::ProfileIndex::default(),
                    shares: homestead_model::store::compact_store().0,
                    share_index: crate::state::ShareIndex::default(),
                    workspaces: homestead_model::store::compact_store().0,
                    workspace_index: homestead_model::names::NameIndex::default(),
                },
                metrics,
            );
            context.mark_synced();
            let writers = Writers {
                namespaces: ns_writer,
                role_bindings: rb_writer,
                quotas: quota_writer,
                limit_ranges: limit_range_writer,
                network_policies: network_policy_writer,
                profiles: profile_writer,
                groups: group_writer,
            };
            (context, server, writers)
        }
    }
}
