//! The Workspace Controller's watch and the wakes other watches send it ([`WORKSPACES`]'s
//! entry and the `workspaces` wakes of the others in [`crate::state::declared`]): an object
//! labelled `homestead.dev/workspace` wakes its Workspace; a User's change wakes the Workspaces
//! it owns, administers or is a member of through their group; a DirectoryGroup's change wakes
//! the Workspaces it owns; a Profile's change wakes every Workspace (few: a Profile can be any
//! of theirs). Every Workspace is reconciled again every resync (`flows::provision::RESYNC`).
//!
//! [`WORKSPACES`]: crate::state::declared::WORKSPACES

use futures::channel::mpsc::UnboundedSender;
use homestead_api::{DirectoryGroup, LABEL_WORKSPACE, Workspace};
use homestead_model::workspace::Owner;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

/// Sends the Workspaces a change concerns to the Workspace Controller.
#[derive(Clone)]
pub struct WorkspaceWakes {
    workspaces: Store<Workspace>,
    groups: Store<DirectoryGroup>,
    wake: UnboundedSender<ObjectRef<Workspace>>,
    all: UnboundedSender<()>,
}

impl WorkspaceWakes {
    /// The wakes of the Workspaces in `workspaces` (the Workspace Controller's cache; `groups`:
    /// the cache the wakes look members up in), each sent to `wake`, all of them to `all`.
    pub fn new(
        workspaces: Store<Workspace>,
        groups: Store<DirectoryGroup>,
        wake: UnboundedSender<ObjectRef<Workspace>>,
        all: UnboundedSender<()>,
    ) -> Self {
        Self {
            workspaces,
            groups,
            wake,
            all,
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
    /// lists them): a scan of the Workspaces, each group looked up in the cache.
    pub fn of_user(&self, user: &str) {
        for workspace in self.workspaces.state() {
            let concerned = match Owner::of(&workspace) {
                Some(Owner::User(owner)) => owner == user,
                Some(Owner::Group(group)) => {
                    workspace.spec.admins.iter().any(|a| a == user)
                        || self
                            .groups
                            .get(&ObjectRef::new(&group))
                            .is_some_and(|g| g.spec.members.iter().any(|m| m == user))
                }
                None => false,
            };
            if concerned {
                let _ = self
                    .wake
                    .unbounded_send(ObjectRef::from_obj(workspace.as_ref()));
            }
        }
    }

    /// The other self-service Workspaces of `workspace`'s owner (a person), as references.
    pub fn self_service_of(&self, workspace: &Workspace) -> Vec<ObjectRef<Workspace>> {
        let Some(owner) = workspace.spec.owner.user.as_deref() else {
            return Vec::new();
        };
        let self_service = |w: &Workspace| {
            w.labels()
                .get(homestead_api::LABEL_SELF_SERVICE)
                .map(String::as_str)
                == Some("true")
        };
        self.workspaces
            .state()
            .into_iter()
            .filter(|w| w.spec.owner.user.as_deref() == Some(owner) && self_service(w))
            .filter(|w| w.metadata.name != workspace.metadata.name)
            .map(|w| ObjectRef::from_obj(w.as_ref()))
            .collect()
    }

    /// The Workspaces the DirectoryGroup `group` owns.
    pub fn of_group(&self, group: &str) {
        for workspace in self.workspaces.state() {
            if workspace.spec.owner.group.as_deref() == Some(group) {
                let _ = self
                    .wake
                    .unbounded_send(ObjectRef::from_obj(workspace.as_ref()));
            }
        }
    }

    /// Every Workspace.
    pub fn all(&self) {
        let _ = self.all.unbounded_send(());
    }
}
