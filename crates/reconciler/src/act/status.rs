//! The one status writer: server-side apply of a status subresource with field manager
//! `homestead` ([`Cluster::apply_status`]), for Users, Profiles and DirectoryGroups alike; and the
//! User's status write (`Cluster::write_status`), which sends the status a plan computed only
//! when it changed, and queues the Events that report it (docs/design.md rules 9, 11, 16).

use std::time::Duration;

use homestead_api::{AppliedProfile, CONDITION_EXPIRING, Change, FIELD_MANAGER, User, Verb};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::Cluster;
use super::client::failed;
use super::recent::user_key;
use crate::error::Result;
use crate::plan::status::{
    Outcome, condition, convergence_print, desired_status, events_for, fingerprint, is_transition,
    profile_reference, status_matches,
};

impl Cluster {
    /// Writes `outcome` into `user`'s status by server-side apply on the status subresource
    /// (field manager `homestead`), only if it differs from the current status, then queues
    /// the Events [`events_for`] says: one on a transition of `Ready` (Normal when ready, else
    /// Warning) summing up the changes made, else one per change.
    ///
    /// Returns when to look again, if the write was left out because this replica wrote the
    /// same status moments ago and the User watch has not delivered it yet (less than
    /// [`super::recent::RECENT`]): if the cache still does not show it then, someone else
    /// changed the status since, and it is written again.
    ///
    /// # Errors
    /// [`Error::Kube`] with [`Verb::PatchStatus`] when the patch fails; no Event is queued then.
    pub(crate) async fn write_status(
        &self,
        user: &User,
        outcome: Outcome,
    ) -> Result<Option<Duration>> {
        let written = match self.patch_status(user, &outcome).await? {
            Write::Made => true,
            Write::Unneeded => false,
            Write::Unconfirmed(left) => return Ok(Some(left)),
        };
        if written && outcome.reason.is_ready() {
            let print = convergence_print(user.metadata.generation, outcome.profile.as_ref());
            self.recent.convergence.remember(user_key(user), print);
        }
        let transition = written && is_transition(user, &outcome);
        if transition {
            self.metrics.observe_ready(user, outcome.reason);
        }
        for (type_, reason, note) in events_for(transition, &outcome) {
            // A move between Profiles is related to the Profile moved to.
            let related = (reason == Change::ProfileChanged.as_str())
                .then(|| outcome.profile.as_ref().map(profile_reference))
                .flatten();
            self.publish_related(user, type_, reason, note, related);
        }
        if let Some((true, _, message)) = &outcome.expiring
            && written
            && condition(user, CONDITION_EXPIRING).is_none_or(|c| c.status != "True")
        {
            self.publish(
                user,
                EventType::Normal,
                Change::Expiring.as_str(),
                message.clone(),
            );
        }
        Ok(None)
    }

    /// The status write of [`Cluster::write_status`]: none when the cached status already
    /// matches, nor when this replica wrote the same status moments ago and the User watch has
    /// not delivered it yet ([`super::recent::RecentWrites`]).
    async fn patch_status(&self, user: &User, outcome: &Outcome) -> Result<Write> {
        let desired = desired_status(user, outcome, Time(k8s_openapi::jiff::Timestamp::now()));
        let (name, key) = (user.name_any(), user_key(user));
        if user
            .status
            .as_ref()
            .is_some_and(|s| status_matches(s, &desired))
        {
            self.recent.statuses.forget(&key);
            self.recent.convergence.forget(&key);
            return Ok(Write::Unneeded);
        }
        let print = fingerprint(&desired);
        if let Some(left) = self.recent.statuses.unconfirmed(&key, print) {
            return Ok(Write::Unconfirmed(left));
        }
        self.apply_status::<User>(&name, &desired).await?;
        self.recent.statuses.remember(key, print);
        Ok(Write::Made)
    }

    /// Whether this replica wrote a `Ready=True` status for `user`'s current generation with the
    /// Profile `applied` moments ago, and the User watch has not delivered it yet: a reconcile
    /// triggered by the echo of its own write must not take the User for moved or respecified.
    pub fn converged_moments_ago(&self, user: &User, applied: Option<&AppliedProfile>) -> bool {
        let print = convergence_print(user.metadata.generation, applied);
        self.recent
            .convergence
            .unconfirmed(&user_key(user), print)
            .is_some()
    }

    /// Sets the status of the cluster-scoped `K` named `name` to `status`, by server-side apply
    /// on its status subresource (field manager `homestead`), if this replica may write.
    ///
    /// # Errors
    /// [`crate::Error::NotLeader`] when it may not; [`crate::Error::Kube`] with
    /// [`Verb::PatchStatus`] when the API server refuses.
    pub async fn apply_status<K>(&self, name: &str, status: &impl serde::Serialize) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.apply_status_as::<K>(name, status, FIELD_MANAGER).await
    }

    /// [`Cluster::apply_status`] under the field manager `manager`: the fields of `status` are
    /// that manager's, and the fields it owned and `status` leaves out are removed (server-side
    /// apply, <https://kubernetes.io/docs/reference/using-api/server-side-apply/>); other
    /// managers' fields stay.
    ///
    /// # Errors
    /// As [`Cluster::apply_status`].
    pub async fn apply_status_as<K>(
        &self,
        name: &str,
        status: &impl serde::Serialize,
        manager: &str,
    ) -> Result<()>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        Api::<K>::all(self.client.clone())
            .patch_status(
                name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(failed(Verb::PatchStatus, K::kind(&()), name))?;
        Ok(())
    }
}

/// What [`Cluster::patch_status`] did.
enum Write {
    /// Wrote the status.
    Made,
    /// Nothing: the cached status already matches.
    Unneeded,
    /// Nothing: this replica wrote the same status moments ago; look again after this long.
    Unconfirmed(Duration),
}
