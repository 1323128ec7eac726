//! When a User, a Share or a Workspace is reconciled again without a watch event: [`Requeue`],
//! the User, Share and Workspace flows' answer to the runner over keys (`runtime::keyed`).

use std::time::Duration;

use kube::runtime::controller::Action;

/// When a User, a Share or a Workspace is reconciled again without a watch event triggering it: after a
/// delay, or only on a change (kube-runtime's `Action`, whose delay only kube-runtime's
/// Controller can read; Users, Shares and Workspaces run on Homestead's own runner, `runtime::keyed`). Many
/// triggers for one object before its turn still make one reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requeue(Option<Duration>);

impl Requeue {
    /// Again after `delay`, unless a watch event comes first.
    pub const fn after(delay: Duration) -> Self {
        Self(Some(delay))
    }

    /// Only when a watch event (or the periodic resync) triggers it.
    pub const fn on_change() -> Self {
        Self(None)
    }

    /// The delay, if any.
    pub const fn delay(self) -> Option<Duration> {
        self.0
    }
}

impl From<Option<Duration>> for Requeue {
    /// After the delay if there is one, else on a change.
    fn from(delay: Option<Duration>) -> Self {
        Self(delay)
    }
}

impl From<Requeue> for Action {
    fn from(requeue: Requeue) -> Self {
        requeue.0.map_or_else(Action::await_change, Action::requeue)
    }
}
