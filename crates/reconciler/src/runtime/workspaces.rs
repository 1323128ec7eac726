//! The Workspace Controller's watch and the wakes other watches send it ([`WORKSPACES`]'s
//! entry and the `workspaces` wakes of the others in [`crate::state::declared`]): an object
//! labelled `homestead.dev/workspace` wakes its Workspace; a User's change wakes the Workspaces
//! it owns, administers or is a member of through their group; a DirectoryGroup's change wakes
//! the Workspaces it owns; a Profile's change wakes every Workspace (few: a Profile can be any
//! of theirs). Every Workspace is reconciled again every resync (`flows::provision::RESYNC`).
//! The wakes read each Workspace's owner, admins and self-service label from their own small
//! map, kept from the Workspace watch: the cache packs each Workspace
//! ([`homestead_model::packed`]), and a User's change would otherwise decode them all.
//!
//! [`WORKSPACES`]: crate::state::declared::WORKSPACES

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::channel::mpsc::UnboundedSender;
use homestead_api::{DirectoryGroup, LABEL_WORKSPACE, Workspace};
use homestead_model::workspace::Owner;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::plan::workspace::is_self_service;

/// Of one Workspace, what tells which changes concern it: its owner, its admins and whether it
/// is self-service (a hundred bytes, where the packed Workspace must be decoded to read them).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    owner: Option<Owner>,
    admins: Box<[Box<str>]>,
    self_service: bool,
}

impl Shape {
    fn of(workspace: &Workspace) -> Self {
        Self {
            owner: Owner::of(workspace),
            admins: workspace
                .spec
                .admins
                .iter()
                .map(|a| a.as_str().into())
                .collect(),
            self_service: is_self_service(workspace),
        }
    }
}

/// Sends the Workspaces a change concerns to the Workspace Controller.
#[derive(Clone)]
pub struct WorkspaceWakes {
    /// The [`Shape`] of every Workspace the Workspace watch has delivered, by name.
    shapes: Arc<Mutex<HashMap<Box<str>, Shape>>>,
    groups: Store<DirectoryGroup>,
    wake: UnboundedSender<ObjectRef<Workspace>>,
    all: UnboundedSender<()>,
}

impl WorkspaceWakes {
    /// The wakes of the Workspaces the Workspace watch delivers to [`WorkspaceWakes::observe`]
    /// (`groups`: the cache the wakes look members up in), each sent to `wake`, all of them to
    /// `all`.
    pub fn new(
        groups: Store<DirectoryGroup>,
        wake: UnboundedSender<ObjectRef<Workspace>>,
        all: UnboundedSender<()>,
    ) -> Self {
        Self {
            shapes: Arc::default(),
            groups,
            wake,
            all,
        }
    }

    fn shapes(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Shape>> {
        self.shapes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps what the wakes read of each Workspace as the Workspace watch's `event` says (a
    /// re-list's leftovers come as deletions: the compact cache's watch makes them so).
    pub fn observe(&self, event: &watcher::Event<Workspace>) {
        match event {
            watcher::Event::Apply(w) | watcher::Event::InitApply(w) => {
                let shape = Shape::of(w);
                let mut shapes = self.shapes();
                if shapes.get(w.name_any().as_str()) != Some(&shape) {
                    shapes.insert(w.name_any().into(), shape);
                }
            }
            watcher::Event::Delete(w) => {
                self.shapes().remove(w.name_any().as_str());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
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
    /// lists them): a scan of the Workspaces' shapes, each group looked up in the cache.
    pub fn of_user(&self, user: &str) {
        let concerned: Vec<ObjectRef<Workspace>> = self
            .shapes()
            .iter()
            .filter(|(_, shape)| match &shape.owner {
                Some(Owner::User(owner)) => owner == user,
                Some(Owner::Group(group)) => {
                    shape.admins.iter().any(|a| &**a == user)
                        || self
                            .groups
                            .get(&ObjectRef::new(group))
                            .is_some_and(|g| g.spec.members.iter().any(|m| m == user))
                }
                None => false,
            })
            .map(|(name, _)| ObjectRef::new(name))
            .collect();
        for workspace in concerned {
            let _ = self.wake.unbounded_send(workspace);
        }
    }

    /// The other self-service Workspaces of `workspace`'s owner (a person), as references.
    pub fn self_service_of(&self, workspace: &Workspace) -> Vec<ObjectRef<Workspace>> {
        let Some(owner) = workspace.spec.owner.user.as_deref() else {
            return Vec::new();
        };
        let name = workspace.name_any();
        self.shapes()
            .iter()
            .filter(|(other, shape)| {
                shape.self_service
                    && matches!(&shape.owner, Some(Owner::User(o)) if o == owner)
                    && ***other != *name
            })
            .map(|(other, _)| ObjectRef::new(other))
            .collect()
    }

    /// The Workspaces the DirectoryGroup `group` owns.
    pub fn of_group(&self, group: &str) {
        let owned: Vec<ObjectRef<Workspace>> = self
            .shapes()
            .iter()
            .filter(|(_, shape)| matches!(&shape.owner, Some(Owner::Group(g)) if g == group))
            .map(|(name, _)| ObjectRef::new(name))
            .collect();
        for workspace in owned {
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
    fn the_wakes_find_workspaces_by_owner_admin_member_and_sibling_from_the_watch_alone() {
        let (groups, mut group_writer) = reflector::store::<DirectoryGroup>();
        group_writer.apply_watcher_event(&watcher::Event::Apply(
            DirectoryGroup::test("platform", "Platform").with_members(&["bob"]),
        ));
        let (wake, mut wakes) = futures::channel::mpsc::unbounded();
        let (all, _every) = futures::channel::mpsc::unbounded();
        let ws = WorkspaceWakes::new(groups, wake, all);
        let team = workspace("team", json!({ "group": "platform" }), &["ada"], &[]);
        let mine = workspace("mine", json!({ "user": "ada" }), &[], &[LABEL_SELF_SERVICE]);
        let more = workspace("more", json!({ "user": "ada" }), &[], &[LABEL_SELF_SERVICE]);
        for w in [&team, &mine, &more] {
            ws.observe(&watcher::Event::InitApply(w.clone()));
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
