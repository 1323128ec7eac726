//! The Workspace Controller's watch and the wakes other watches send it ([`WORKSPACES`]'s
//! entry and the `workspaces` wakes of the others in [`crate::state::declared`]): an object
//! labelled `homestead.dev/workspace` wakes its Workspace; a User's change wakes the Workspaces
//! it owns, administers or is a member of through their group; a DirectoryGroup's change wakes
//! the Workspaces it owns; a Profile's change wakes every Workspace (few: a Profile can be any
//! of theirs). Every Workspace is reconciled again every resync (`flows::provision::RESYNC`).
//! The wakes find Workspaces by owner and admin in the model's index of names
//! ([`NameIndex`], the kind of index the homes API keeps), kept from the Workspace watch: the cache packs each
//! Workspace ([`homestead_model::packed`]), and a User's change would otherwise decode them all.
//!
//! [`WORKSPACES`]: crate::state::declared::WORKSPACES

use futures::channel::mpsc::UnboundedSender;
use homestead_api::{DirectoryGroup, LABEL_WORKSPACE, Workspace};
use homestead_model::names::NameIndex;
use homestead_model::store::CompactStore;
use homestead_model::workspace::Owner;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::plan::workspace::is_self_service;

/// Sends the Workspaces a change concerns to the Workspace Controller.
#[derive(Clone)]
pub struct WorkspaceWakes {
    /// The Workspace Controller's cache (packed: read one Workspace at a time).
    workspaces: CompactStore<Workspace>,
    /// The Workspaces by the User or DirectoryGroup that owns each and by their admins, kept
    /// from the Workspace watch ([`WorkspaceWakes::observe`]).
    index: NameIndex<Workspace>,
    groups: Store<DirectoryGroup>,
    wake: UnboundedSender<ObjectRef<Workspace>>,
    all: UnboundedSender<()>,
}

impl WorkspaceWakes {
    /// The wakes of the Workspaces in `workspaces` (the Workspace Controller's cache, whose
    /// watch feeds [`WorkspaceWakes::observe`]; `groups`: the cache the wakes look members up
    /// in), each sent to `wake`, all of them to `all`.
    pub fn new(
        workspaces: CompactStore<Workspace>,
        groups: Store<DirectoryGroup>,
        wake: UnboundedSender<ObjectRef<Workspace>>,
        all: UnboundedSender<()>,
    ) -> Self {
        Self {
            workspaces,
            index: NameIndex::default(),
            groups,
            wake,
            all,
        }
    }

    /// The index of Workspaces by owner and admin these wakes keep (a shared handle).
    pub fn index(&self) -> NameIndex<Workspace> {
        self.index.clone()
    }

    /// Keeps the index of owners and admins in step with one event of the Workspace watch.
    pub fn observe(&self, event: &watcher::Event<Workspace>) {
        self.index.observe(event);
    }

    /// The Workspace labelled on `object` (`homestead.dev/workspace`), if any.
    pub fn of_object<K: Resource>(&self, object: &K) {
        if let Some(name) = object.labels().get(LABEL_WORKSPACE) {
            let _ = self.wake.unbounded_send(ObjectRef::new(name));
        }
    }

    /// The Workspace `name`.
    pub fn workspace(&self, name: &str) {
        let _ = self.wake.unbounded_send(ObjectRef::new(name));
    }

    /// The Workspaces the User `user` owns, administers, or is a member of (its owner group
    /// lists them): from the index, each owner group looked up in the cache.
    pub fn of_user(&self, user: &str) {
        let is_member = |group: &str| {
            self.groups
                .get(&ObjectRef::new(group))
                .is_some_and(|g| g.spec.members.iter().any(|m| m == user))
        };
        let named = self.index.of_user(user, None);
        for workspace in named.into_iter().chain(self.index.of_groups(is_member)) {
            let _ = self.wake.unbounded_send(workspace);
        }
    }

    /// The other self-service Workspaces of `workspace`'s owner (a person), as references.
    pub fn self_service_of(&self, workspace: &Workspace) -> Vec<ObjectRef<Workspace>> {
        let Some(owner) = workspace.spec.owner.user.as_deref() else {
            return Vec::new();
        };
        let name = workspace.name_any();
        let owner_of = Some(Owner::User(owner.to_owned()));
        self.index
            .of_user(owner, None)
            .into_iter()
            .filter(|other| other.name != name)
            .filter(|other| {
                self.workspaces
                    .get(None, &other.name)
                    .is_some_and(|w| is_self_service(&w) && Owner::of(&w) == owner_of)
            })
            .collect()
    }

    /// The Workspaces the DirectoryGroup `group` owns.
    pub fn of_group(&self, group: &str) {
        for workspace in self.index.of_group(group) {
            let _ = self.wake.unbounded_send(workspace);
        }
    }

    /// Every Workspace.
    pub fn all(&self) {
        let _ = self.all.unbounded_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{FutureExt, StreamExt};
    use homestead_api::LABEL_SELF_SERVICE;
    use homestead_model::store::compact_store;
    use kube::runtime::reflector;
    use serde_json::json;

    fn workspace(
        name: &str,
        owner: serde_json::Value,
        admins: &[&str],
        labels: &[&str],
    ) -> Workspace {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|l| ((*l).to_owned(), json!("true")))
            .collect();
        serde_json::from_value(json!({
            "metadata": { "name": name, "labels": labels },
            "spec": { "owner": owner, "admins": admins, "reason": "team" },
        }))
        .unwrap()
    }

    /// The names woken so far, sorted.
    fn woken(
        wakes: &mut futures::channel::mpsc::UnboundedReceiver<ObjectRef<Workspace>>,
    ) -> Vec<String> {
        let mut names = Vec::new();
        while let Some(Some(w)) = wakes.next().now_or_never() {
            names.push(w.name);
        }
        names.sort();
        names
    }

    #[test]
    fn the_wakes_find_workspaces_by_owner_admin_member_and_sibling() {
        let (groups, mut group_writer) = reflector::store::<DirectoryGroup>();
        group_writer.apply_watcher_event(&watcher::Event::Apply(
            DirectoryGroup::test("platform", "Platform").with_members(&["bob"]),
        ));
        let (wake, mut wakes) = futures::channel::mpsc::unbounded();
        let (all, _every) = futures::channel::mpsc::unbounded();
        let (workspaces, mut writer) = compact_store::<Workspace>();
        let ws = WorkspaceWakes::new(workspaces, groups, wake, all);
        let team = workspace("team", json!({ "group": "platform" }), &["ada"], &[]);
        let mine = workspace("mine", json!({ "user": "ada" }), &[], &[LABEL_SELF_SERVICE]);
        let more = workspace("more", json!({ "user": "ada" }), &[], &[LABEL_SELF_SERVICE]);
        for w in [&team, &mine, &more] {
            writer.insert(w.clone());
            ws.observe(&watcher::Event::Apply(w.clone()));
        }
        ws.of_user("ada");
        assert_eq!(
            woken(&mut wakes),
            ["mine", "more", "team"],
            "owner and admin"
        );
        ws.of_user("bob");
        assert_eq!(woken(&mut wakes), ["team"], "a member of the owner group");
        ws.of_user("eve");
        assert!(woken(&mut wakes).is_empty(), "nobody's else");
        ws.of_group("platform");
        assert_eq!(woken(&mut wakes), ["team"]);
        let siblings: Vec<String> = ws
            .self_service_of(&mine)
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(siblings, ["more"]);
        // A deleted Workspace and a changed admin are seen.
        writer.apply(&watcher::Event::Delete(more.clone()));
        ws.observe(&watcher::Event::Delete(more));
        assert!(ws.self_service_of(&mine).is_empty());
        ws.observe(&watcher::Event::Apply(workspace(
            "team",
            json!({ "group": "platform" }),
            &["eve"],
            &[],
        )));
        ws.of_user("ada");
        assert_eq!(
            woken(&mut wakes),
            ["mine"],
            "no longer an admin of the team's"
        );
        ws.of_user("eve");
        assert_eq!(woken(&mut wakes), ["team"]);
    }
}
