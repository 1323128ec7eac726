//! The oracle: reads only the cluster (objects, SubjectAccessReviews as each person, the API
//! server's audit log, the leader Lease) and the workload's model, never the operator's code or
//! metrics, and names every promise it finds broken. Each check stands for a sentence of
//! docs/security.md or docs/design.md (listed in docs/soak.md) and allows the delay that
//! sentence allows, measured from the change the API server accepted, moved past faults.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, Seek};
use std::path::PathBuf;

use futures::StreamExt;
use homestead_api::{LABEL_ADOPT_FOR, LABEL_SHARE, Share, User};
use homestead_testenv::OPERATOR;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::common::{TENANT_GROUP, TENANTS};
use crate::faults::LEASE;
use crate::model::{Clock, Model, READY_ALLOWED, REVOCATION_ALLOWED};

/// Namespaces nobody may give Homestead: the cluster's own.
const RESERVED: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];
/// The roles Homestead's RoleBindings may grant (`--allowed-role`).
const ALLOWED_ROLES: [&str; 3] = ["admin", "edit", "view"];

/// A broken promise: which check, about what, when it was seen, and what was seen.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Violation {
    pub check: String,
    pub key: String,
    pub at: f64,
    pub detail: String,
}

/// What the cluster looked like at one moment.
pub struct Snapshot {
    pub at: f64,
    pub users: Vec<User>,
    /// The Users listed again after everything else: which User holds an identity is judged
    /// from both lists.
    pub users_again: Vec<User>,
    pub namespaces: BTreeMap<String, Namespace>,
    pub bindings: Vec<RoleBinding>,
    /// Every Share.
    pub shares: Vec<Share>,
    /// Every Workspace.
    pub workspaces: Vec<homestead_api::Workspace>,
    /// Every DirectoryGroup.
    pub groups: Vec<homestead_api::DirectoryGroup>,
    /// Every slice of a total quota (`homestead.dev/total-owner`).
    pub slices: Vec<k8s_openapi::api::core::v1::ResourceQuota>,
}

/// The audit log, read as it grows: who created each RoleBinding, and the operator's writes.
pub struct Audit {
    path: PathBuf,
    offset: u64,
    /// (namespace, name) of a RoleBinding to the user whose create of it succeeded.
    pub creators: BTreeMap<(String, String), String>,
    /// The operator's successful writes so far (resource, namespace, name, verb).
    pub operator_writes: Vec<(String, String, String, String)>,
}

impl Audit {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            creators: BTreeMap::new(),
            operator_writes: Vec::new(),
        }
    }

    /// Skips what the log holds so far: the next [`Audit::read`] sees only what comes after.
    pub fn skip_to_end(&mut self) {
        self.offset = std::fs::metadata(&self.path).map_or(0, |m| m.len());
    }

    /// Reads the events written since the last call.
    pub fn read(&mut self) {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return;
        };
        if file.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut reader = std::io::BufReader::new(file);
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            if !line.ends_with('\n') {
                break; // half-written; read it whole next time
            }
            self.offset += line.len() as u64;
            if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                self.take(&event);
            }
            line.clear();
        }
    }

    fn take(&mut self, e: &serde_json::Value) {
        let ok = e["responseStatus"]["code"]
            .as_u64()
            .is_some_and(|c| c < 300);
        let verb = e["verb"].as_str().unwrap_or_default();
        if !ok
            || !matches!(
                verb,
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
        {
            return;
        }
        let r = &e["objectRef"];
        let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
        let (resource, namespace, name) = (field("resource"), field("namespace"), field("name"));
        let user = e["user"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if resource == "rolebindings" && matches!(verb, "create" | "patch") && !name.is_empty() {
            self.creators
                .entry((namespace.clone(), name.clone()))
                .or_insert_with(|| user.clone());
        }
        if resource == "rolebindings" && verb == "delete" {
            self.creators.remove(&(namespace.clone(), name.clone()));
        }
        if user == OPERATOR && !r["subresource"].is_string() {
            self.operator_writes
                .push((resource, namespace, name, verb.to_owned()));
        } else if user == OPERATOR {
            self.operator_writes.push((
                format!(
                    "{resource}/{}",
                    r["subresource"].as_str().unwrap_or_default()
                ),
                namespace,
                name,
                verb.to_owned(),
            ));
        }
    }
}

/// How long each revocation took, from the accepted change to the first observation of no
/// binding and no access, in seconds.
#[derive(Default)]
pub struct Delays {
    measured: BTreeSet<(String, String)>,
    pub revocations: Vec<f64>,
}

/// The oracle's state between ticks.
pub struct Oracle {
    pub admin: Client,
    pub clock: Clock,
    pub audit: Audit,
    pub delays: Delays,
    /// Findings first seen at, by key, for checks that allow a delay from first sight.
    first_seen: BTreeMap<String, f64>,
    /// Keys already reported, so one broken promise is one violation.
    reported: BTreeSet<String>,
    last_renew: Option<String>,
    /// Each owner's slices of its total as the last snapshot saw them.
    totals: BTreeMap<String, crate::totals::Seen>,
}

/// A namespace in which nobody may have access: whose, since when, and why.
struct Revoked {
    namespace: String,
    /// The User it is about, if any is left.
    user: Option<String>,
    owner: String,
    since: f64,
    why: &'static str,
    /// A home handed over (docs/handover.md): only its leaver (`owner`) must have no access;
    /// the successor has.
    leaver_only: bool,
}

/// The label of a retained namespace (docs/handover.md: a handover that falls back retains).
const RETAINED_FROM: &str = "homestead.dev/retained-from";

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

impl Oracle {
    pub fn new(admin: Client, clock: Clock, audit: PathBuf) -> Self {
        Self {
            admin,
            clock,
            audit: Audit::new(audit),
            delays: Delays::default(),
            first_seen: BTreeMap::new(),
            reported: BTreeSet::new(),
            last_renew: None,
            totals: BTreeMap::new(),
        }
    }

    /// Lists what the checks read. Fails if the API server does not answer (a fault).
    pub async fn snapshot(&self) -> Result<Snapshot, kube::Error> {
        let at = self.clock.now();
        let users = Api::<User>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let namespaces = Api::<Namespace>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|n| (n.name_any(), n))
            .collect();
        let bindings = Api::<RoleBinding>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let shares = Api::<Share>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let workspaces = Api::<homestead_api::Workspace>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let groups = Api::<homestead_api::DirectoryGroup>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let slices = Api::<k8s_openapi::api::core::v1::ResourceQuota>::all(self.admin.clone())
            .list(&ListParams::default().labels("homestead.dev/total-owner"))
            .await?
            .items;
        let users_again = Api::<User>::all(self.admin.clone())
            .list(&ListParams::default())
            .await?
            .items;
        Ok(Snapshot {
            at,
            users,
            users_again,
            namespaces,
            bindings,
            shares,
            workspaces,
            groups,
            slices,
        })
    }

    /// Marks faults healed once the leader Lease is renewed after they ended.
    pub async fn observe_lease(&mut self, model: &std::sync::Mutex<Model>) {
        let Ok(Some(lease)) = Api::<Lease>::namespaced(self.admin.clone(), "homestead-system")
            .get_opt(LEASE)
            .await
        else {
            return;
        };
        let renew = lease
            .spec
            .and_then(|s| s.renew_time)
            .map(|t| (t.0.to_string(), self.clock.at(t.0.into())));
        let Some((stamp, renewed)) = renew else {
            return;
        };
        if self.last_renew.as_ref() == Some(&stamp) {
            return;
        }
        self.last_renew = Some(stamp);
        let now = self.clock.now();
        for fault in &mut model.lock().unwrap().faults {
            if fault.healed.is_none() && fault.end.is_some_and(|end| renewed >= end) {
                fault.healed = Some(now);
            }
        }
    }

    /// Runs every check on `snap` against the model as it was before the snapshot began
    /// (`before`) and as it is after the checks' own reviews (`model`): a snapshot is not
    /// atomic, so a revocation counts only if it stood from before the snapshot to after the
    /// reviews, and readiness is judged from the latest change. Returns the new violations.
    pub async fn check(
        &mut self,
        snap: &Snapshot,
        before: &Model,
        model: &std::sync::Mutex<Model>,
    ) -> Vec<Violation> {
        self.audit.read();
        let mut found = Vec::new();
        self.revocation(snap, before, &mut found).await;
        let after = model.lock().unwrap().clone();
        let standing: BTreeSet<String> = Self::revoked(snap, &after)
            .into_iter()
            .filter(|r| !r.user.as_ref().is_some_and(|u| after.unsettled(u, snap.at)))
            .map(|r| format!("{} {:.3}", r.namespace, r.since))
            .collect();
        found.retain(|v| {
            let key = v.key.split_once(' ').map_or("", |(_, k)| k);
            standing.contains(key)
        });
        self.sources(snap, &after, &mut found);
        self.workspace_sources(snap, &after, &mut found);
        self.handed(snap, &after, &mut found);
        for (key, detail) in crate::totals::check(&snap.slices, &mut self.totals) {
            found.push(Violation {
                check: "total-never-exceeded".into(),
                key,
                at: snap.at,
                detail,
            });
        }
        self.readiness(snap, &after, &mut found);
        self.foreign(&after, &mut found);
        found
            .into_iter()
            .filter(|v| self.reported.insert(v.key.clone()))
            .collect()
    }

    /// The namespaces that must grant nobody anything at `t`, per the model: a User
    /// suspended, deactivated, expired or offboarding; a User whose username an older live
    /// User has (`DuplicateIdentity`); a namespace offboarded while it exists.
    fn revoked(snap: &Snapshot, model: &Model) -> Vec<Revoked> {
        let mut out = Vec::new();
        let (holders, holders_again) = (holders(&snap.users), holders(&snap.users_again));
        let younger = |u: &User| {
            let key = lower(&u.spec.identity.username);
            [&holders, &holders_again]
                .iter()
                .all(|h| h.get(&key).is_some_and(|holder| *holder != u.name_any()))
        };
        for u in &snap.users {
            let Some(m) = model.users.get(&u.name_any()) else {
                continue;
            };
            if u.metadata.uid.is_none() {
                continue;
            }
            let namespace = u
                .status
                .as_ref()
                .and_then(|s| s.namespace.clone())
                .unwrap_or_else(|| m.namespace.clone());
            // A namespace another holds (a Workspace, say the successor's after a handover,
            // or another User) is not this User's to revoke: it is refused there (a false
            // violation seed 875707 found when a new User took a leaver's name).
            let held_by_other = snap.namespaces.get(&namespace).is_some_and(|n| {
                let labels = n.labels();
                labels.contains_key("homestead.dev/workspace")
                    || labels
                        .get("homestead.dev/user")
                        .is_some_and(|owner| *owner != u.name_any())
            });
            if held_by_other {
                continue;
            }
            if let Some(since) = m.revoked_since(snap.at) {
                let handed = m.deleting_at.is_some() && m.successor.is_some();
                out.push(Revoked {
                    namespace,
                    user: Some(u.name_any()),
                    owner: m.username.clone(),
                    since,
                    why: if handed {
                        "handed over"
                    } else {
                        "suspended, deactivated, expired or offboarding"
                    },
                    leaver_only: handed,
                });
            } else if younger(u) {
                out.push(Revoked {
                    namespace,
                    user: Some(u.name_any()),
                    owner: m.username.clone(),
                    since: m.created_at,
                    why: "its username belongs to an older User",
                    leaver_only: false,
                });
            }
        }
        for o in &model.offboarded {
            let Some(ns) = snap
                .namespaces
                .get(&o.namespace)
                .filter(|n| o.uid.is_some() && n.uid() == o.uid)
            else {
                continue;
            };
            // A handover that fell back to Retain leaves a retained namespace: nobody's.
            let handed = o.successor.is_some() && !ns.labels().contains_key(RETAINED_FROM);
            out.push(Revoked {
                namespace: o.namespace.clone(),
                user: Some(o.user.clone()),
                owner: o.owner.clone(),
                since: o.since,
                why: match (handed, o.retain) {
                    (true, _) => "handed over",
                    (false, true) => "retained",
                    (false, false) => "offboarded",
                },
                leaver_only: handed,
            });
        }
        // A squatted namespace is not Homestead's to revoke: a User naming it is refused. Once
        // handed to one of the Users naming it, only that User's revocation concerns it: the
        // others are refused and own nothing there (a false violation seed 678341 found when a
        // refused duplicate naming an adopted namespace was suspended).
        out.retain(|r| {
            !model.squatted.contains(&r.namespace)
                && snap.namespaces.contains_key(&r.namespace)
                && model
                    .adopted
                    .get(&r.namespace)
                    .is_none_or(|adopter| r.user.as_deref() == Some(adopter.as_str()))
        });
        out
    }

    /// `revocation-removes-every-binding` and `revoked-means-no-access`.
    async fn revocation(&mut self, snap: &Snapshot, model: &Model, found: &mut Vec<Violation>) {
        let revoked = Self::revoked(snap, model);
        for r in &revoked {
            if r.leaver_only {
                self.leaver(r, model, snap.at, found).await;
                continue;
            }
            let bindings: Vec<&RoleBinding> = snap
                .bindings
                .iter()
                .filter(|b| b.namespace().as_deref() == Some(r.namespace.as_str()))
                .collect();
            let who = subjects_of(r, &bindings);
            let allowed = self.who_may_get_pods(&r.namespace, who).await;
            let key = (r.namespace.clone(), format!("{:.3}", r.since));
            if bindings.is_empty() && allowed.is_empty() {
                // The first look that finds it done bounds how long it took.
                if self.delays.measured.insert(key) {
                    self.delays.revocations.push((snap.at - r.since).max(0.0));
                }
                continue;
            }
            // Access but no binding in the snapshot: a binding created after the snapshot was
            // read and before the SubjectAccessReviews were asked (the platform's grant in a
            // retained namespace, say). The next look sees it and judges it from when it
            // appeared; access in a namespace comes from its RoleBindings alone here.
            if bindings.is_empty() {
                continue;
            }
            // A binding that appears in a namespace revoked long ago (rule 17: "any RoleBinding
            // that appears in it is removed") is due 2 s after it appeared, not after `since`.
            let overdue = self.overdue(r, &bindings, snap.at, model);
            let Some(deadline) = model.deadline(r.since, REVOCATION_ALLOWED) else {
                continue;
            };
            if snap.at <= deadline || (overdue.is_empty() && !bindings.is_empty()) {
                continue;
            }
            let late = snap.at - r.since;
            if !overdue.is_empty() {
                found.push(Violation {
                    check: "revocation-removes-every-binding".into(),
                    key: format!("bindings {} {:.3}", r.namespace, r.since),
                    at: snap.at,
                    detail: format!(
                        "{} ({}, since {:.1} s) still holds {} {:.1} s later",
                        r.namespace,
                        r.why,
                        r.since,
                        overdue
                            .iter()
                            .map(|b| b.name_any())
                            .collect::<Vec<_>>()
                            .join(", "),
                        late
                    ),
                });
            }
            if !allowed.is_empty() {
                found.push(Violation {
                    check: "revoked-means-no-access".into(),
                    key: format!("access {} {:.3}", r.namespace, r.since),
                    at: snap.at,
                    detail: format!(
                        "{} ({}, since {:.1} s): {} may get pods there {:.1} s later",
                        r.namespace,
                        r.why,
                        r.since,
                        allowed.join(", "),
                        late
                    ),
                });
            }
        }
    }

    /// `handover-ends-leaver-access`: in a home handed over (`r`), the leaver's identity may not
    /// get pods 2 s after the deletion was accepted (docs/handover.md), unless a live User of
    /// the model holds that identity again.
    async fn leaver(&mut self, r: &Revoked, model: &Model, at: f64, found: &mut Vec<Violation>) {
        let again = model
            .users
            .values()
            .any(|u| u.deleting_at.is_none() && u.username.eq_ignore_ascii_case(&r.owner));
        let Some(deadline) = model.deadline(r.since, REVOCATION_ALLOWED) else {
            return;
        };
        if again || at <= deadline {
            return;
        }
        let allowed = self
            .who_may_get_pods(&r.namespace, [identity(&r.owner)].into())
            .await;
        if !allowed.is_empty() {
            found.push(Violation {
                check: "handover-ends-leaver-access".into(),
                key: format!("leaver {} {:.3}", r.namespace, r.since),
                at,
                detail: format!(
                    "{} (handed over since {:.1} s): its leaver {} may get pods there {:.1} s later",
                    r.namespace,
                    r.since,
                    r.owner,
                    at - r.since
                ),
            });
        }
    }

    /// `handed-home-has-one-owner`: every namespace handed over (docs/handover.md, design rule
    /// 28) that is still there has exactly one owner 5 s after the deletion was accepted (and
    /// for as long as it stays wrong after that): its successor's Workspace (label
    /// `homestead.dev/workspace` naming a Workspace that exists), or, when the handover fell
    /// back, the retained label alone; never a User's label beside another, never none.
    fn handed(&mut self, snap: &Snapshot, model: &Model, found: &mut Vec<Violation>) {
        let mut seen = BTreeSet::new();
        for o in model.offboarded.iter().filter(|o| o.successor.is_some()) {
            let Some(ns) = snap.namespaces.get(&o.namespace).filter(|n| {
                o.uid.is_some() && n.uid() == o.uid && n.metadata.deletion_timestamp.is_none()
            }) else {
                continue;
            };
            let labels = ns.labels();
            let owners: Vec<&str> = [
                "homestead.dev/user",
                "homestead.dev/workspace",
                RETAINED_FROM,
            ]
            .into_iter()
            .filter(|l| labels.contains_key(*l))
            .collect();
            let workspace = labels.get("homestead.dev/workspace");
            let missing =
                workspace.is_some_and(|w| !snap.workspaces.iter().any(|x| x.name_any() == *w));
            if owners.len() == 1 && !missing {
                continue;
            }
            let key = format!("handed {} {:.3}", o.namespace, o.since);
            seen.insert(key.clone());
            let first = *self.first_seen.entry(key.clone()).or_insert(snap.at);
            let due = model
                .deadline(o.since.max(first), READY_ALLOWED)
                .is_some_and(|d| snap.at > d);
            if due {
                found.push(Violation {
                    check: "handed-home-has-one-owner".into(),
                    key,
                    at: snap.at,
                    detail: format!(
                        "{} (handed from {} to {:?} at {:.1} s) has owners {owners:?}{}",
                        o.namespace,
                        o.user,
                        o.successor,
                        o.since,
                        if missing {
                            format!(", and Workspace {workspace:?} is not there")
                        } else {
                            String::new()
                        }
                    ),
                });
            }
        }
        self.first_seen
            .retain(|k, _| !k.starts_with("handed ") || seen.contains(k));
    }

    /// The RoleBindings among `bindings` (in the revoked namespace `r`) past their deadline: 2 s
    /// after the revocation, or after the binding appeared if it appeared later (rule 17: "any
    /// RoleBinding that appears in it is removed").
    fn overdue<'a>(
        &mut self,
        r: &Revoked,
        bindings: &[&'a RoleBinding],
        at: f64,
        model: &Model,
    ) -> Vec<&'a RoleBinding> {
        bindings
            .iter()
            .copied()
            .filter(|b| {
                let key = format!("rb {}/{} {:?}", r.namespace, b.name_any(), b.uid());
                let appeared = *self.first_seen.entry(key).or_insert(at);
                model
                    .deadline(r.since.max(appeared), REVOCATION_ALLOWED)
                    .is_some_and(|d| at > d)
            })
            .collect()
    }

    /// The identities among `who` that a SubjectAccessReview allows to get pods in `namespace`.
    async fn who_may_get_pods(
        &self,
        namespace: &str,
        who: BTreeSet<(String, Vec<String>)>,
    ) -> Vec<String> {
        let api: Api<SubjectAccessReview> = Api::all(self.admin.clone());
        futures::stream::iter(who)
            .map(|(user, groups)| {
                let api = api.clone();
                let review = SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: Some(user.clone()),
                        groups: Some(groups),
                        resource_attributes: Some(ResourceAttributes {
                            namespace: Some(namespace.to_owned()),
                            verb: Some("get".into()),
                            resource: Some("pods".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                async move {
                    let answer = api.create(&PostParams::default(), &review).await.ok()?;
                    answer.status?.allowed.then_some(user)
                }
            })
            .buffer_unordered(8)
            .filter_map(std::future::ready)
            .collect()
            .await
    }

    /// `every-access-has-a-source`: in a Homestead namespace, Homestead's RoleBinding names
    /// the namespace's person with an allow-listed role, and every other RoleBinding was made
    /// by that person or a ServiceAccount of the namespace.
    fn sources(&mut self, snap: &Snapshot, model: &Model, found: &mut Vec<Violation>) {
        let owners: BTreeMap<String, (String, String)> = snap
            .users
            .iter()
            .filter(|u| model.users.contains_key(&u.name_any()))
            .map(|u| {
                (
                    u.name_any(),
                    (
                        u.spec.identity.username.clone(),
                        u.uid().unwrap_or_default(),
                    ),
                )
            })
            .collect();
        let mut seen = BTreeSet::new();
        for b in &snap.bindings {
            let Some(ns) = b.namespace() else { continue };
            let Some(namespace) = snap.namespaces.get(&ns) else {
                continue;
            };
            let labels = namespace.labels();
            if labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str)
                != Some("homestead")
            {
                continue;
            }
            let Some(owner) = labels.get("homestead.dev/user").and_then(|u| owners.get(u)) else {
                continue;
            };
            let name = b.name_any();
            let homestead = b
                .labels()
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str)
                == Some("homestead");
            let problem = if homestead && b.labels().contains_key(LABEL_SHARE) {
                share_binding_problem(b, snap)
            } else if homestead {
                homestead_binding_problem(b, &ns, &owner.0)
            } else {
                self.creator_problem(&ns, &name, &owner.0)
            };
            let Some(detail) = problem else { continue };
            let key = format!(
                "source {ns}/{name} {}",
                b.metadata.resource_version.clone().unwrap_or_default()
            );
            seen.insert(key.clone());
            let first = *self.first_seen.entry(key.clone()).or_insert(snap.at);
            // A rewrite of Homestead's binding is repaired like any drift: allow that delay.
            if model
                .deadline(first, REVOCATION_ALLOWED)
                .is_some_and(|d| snap.at > d)
            {
                found.push(Violation {
                    check: "every-access-has-a-source".into(),
                    key,
                    at: snap.at,
                    detail,
                });
            }
        }
        self.first_seen
            .retain(|k, _| !k.starts_with("source ") || seen.contains(k));
    }

    /// Every access in a workspace has a source, and only the workspace's people have one
    /// (docs/workspaces.md): each User bound by Homestead's two bindings in a namespace labelled
    /// `homestead.dev/workspace` is one [`crate::workspaces::expected`] lets in, with that role,
    /// judged from the cluster alone: nobody outside the group, nobody in a workspace that is
    /// refused (over its owner's limit, made for someone else) or whose group is gone. Allows
    /// the revocation delay from when it is first seen.
    fn workspace_sources(&mut self, snap: &Snapshot, model: &Model, found: &mut Vec<Violation>) {
        let holders = holders(&snap.users);
        let now = k8s_openapi::jiff::Timestamp::now();
        let all = (&snap.users[..], &snap.groups[..], &snap.workspaces[..]);
        let mut seen = BTreeSet::new();
        for b in &snap.bindings {
            let Some(ns) = b.namespace() else { continue };
            let Some(label) = snap
                .namespaces
                .get(&ns)
                .and_then(|n| n.labels().get("homestead.dev/workspace").cloned())
            else {
                continue;
            };
            let name = b.name_any();
            if name != "homestead-workspace-admins" && name != "homestead-workspace-members" {
                continue;
            }
            let expected = snap
                .workspaces
                .iter()
                .find(|w| w.name_any() == label)
                .map(|w| crate::workspaces::expected(w, all, &holders, now))
                .unwrap_or_default();
            for subject in b.subjects.iter().flatten().filter(|s| s.kind == "User") {
                let role = &b.role_ref.name;
                if expected.get(&subject.name) == Some(role) {
                    continue;
                }
                let key = format!("workspace {ns}/{name} {} {role}", subject.name);
                seen.insert(key.clone());
                let first = *self.first_seen.entry(key.clone()).or_insert(snap.at);
                if model
                    .deadline(first, REVOCATION_ALLOWED)
                    .is_some_and(|d| snap.at > d)
                {
                    found.push(Violation {
                        check: "workspace-access-has-a-source".into(),
                        key,
                        at: snap.at,
                        detail: format!(
                            "{} has {role} in workspace {label} ({ns}) through {name}; the workspace lets in {expected:?}",
                            subject.name
                        ),
                    });
                }
            }
        }
        self.first_seen
            .retain(|k, _| !k.starts_with("workspace ") || seen.contains(k));
    }

    /// Why the RoleBinding `ns/name`, not Homestead's, has no source: its creator (from the
    /// audit log) is not the namespace's owner `owner`, their own ServiceAccount, the platform's
    /// administrator or the operator; `None` when it has one, or when its creator is unknown.
    fn creator_problem(&self, ns: &str, name: &str, owner: &str) -> Option<String> {
        match self.audit.creators.get(&(ns.to_owned(), name.to_owned())) {
            None => None,
            Some(creator) => {
                let own_sa = creator.starts_with(&format!("system:serviceaccount:{ns}:"));
                // The platform's administrators may grant access anywhere.
                let platform = creator == homestead_testenv::ADMIN;
                (!lower(creator).eq(&lower(owner)) && !own_sa && !platform && creator != OPERATOR)
                    .then(|| format!("{ns}/{name} was made by {creator}, not by {}", owner))
            }
        }
    }

    /// `every-user-has-ready`: a Ready condition for the User's current generation within
    /// [`READY_ALLOWED`] of the workload's last change to it.
    fn readiness(&mut self, snap: &Snapshot, model: &Model, found: &mut Vec<Violation>) {
        for u in &snap.users {
            let Some(m) = model.users.get(&u.name_any()) else {
                continue;
            };
            if model.unsettled(&u.name_any(), snap.at) {
                continue;
            }
            let Some(deadline) = model.deadline(m.changed_at, READY_ALLOWED) else {
                continue;
            };
            if snap.at <= deadline {
                continue;
            }
            let ready = u.ready_condition().is_some();
            let current = u.metadata.deletion_timestamp.is_some()
                || u.status.as_ref().and_then(|s| s.observed_generation) == u.metadata.generation;
            if ready && current {
                continue;
            }
            found.push(Violation {
                check: "every-user-has-ready".into(),
                key: format!("ready {} {:?}", u.name_any(), u.metadata.generation),
                at: snap.at,
                detail: format!(
                    "User {} (generation {:?}, last changed at {:.1} s): Ready {}, observedGeneration {:?}",
                    u.name_any(),
                    u.metadata.generation,
                    m.changed_at,
                    if ready { "present" } else { "missing" },
                    u.status.as_ref().and_then(|s| s.observed_generation)
                ),
            });
        }
    }

    /// `foreign-namespaces-untouched`: the operator never wrote a namespace the platform made
    /// by hand or a reserved one, nor anything in them (Events and its Lease aside).
    fn foreign(&mut self, model: &Model, found: &mut Vec<Violation>) {
        let foreign = |ns: &str| model.squatted.contains(ns) || RESERVED.contains(&ns);
        for (resource, namespace, name, verb) in &self.audit.operator_writes {
            let hit = (resource == "namespaces" && foreign(name))
                || (foreign(namespace) && !matches!(resource.as_str(), "events" | "leases"));
            if hit {
                found.push(Violation {
                    check: "foreign-namespaces-untouched".into(),
                    key: format!("foreign {resource} {namespace} {name} {verb}"),
                    at: self.clock.now(),
                    detail: format!("the operator's {verb} of {resource} {namespace}/{name}"),
                });
            }
        }
        self.audit.operator_writes.clear();
    }

    /// After quiescence: `converged`, the cluster equals what the model asks for.
    pub fn converged(snap: &Snapshot, model: &Model) -> Vec<String> {
        let mut wrong = Vec::new();
        let revoked: BTreeSet<String> = Self::revoked(snap, model)
            .into_iter()
            .map(|r| r.namespace)
            .collect();
        let in_cluster: BTreeMap<String, &User> =
            snap.users.iter().map(|u| (u.name_any(), u)).collect();
        for (name, m) in &model.users {
            if m.deleting_at.is_some() {
                if in_cluster.contains_key(name) {
                    wrong.push(format!("User {name} was deleted and is still there"));
                }
                continue;
            }
            let Some(u) = in_cluster.get(name) else {
                wrong.push(format!("User {name} is missing"));
                continue;
            };
            let namespace = snap.namespaces.get(&m.namespace);
            let owned = namespace.is_some_and(|n| {
                n.labels().get("homestead.dev/user") == Some(name)
                    && n.annotations().get("homestead.dev/user-uid") == u.uid().as_ref()
            });
            let homestead: Vec<&RoleBinding> = homestead_bindings(snap, &m.namespace)
                .into_iter()
                .filter(|b| !b.labels().contains_key(LABEL_SHARE))
                .collect();
            let reason = u
                .ready_condition()
                .map(|c| c.reason.clone())
                .unwrap_or_default();
            if !owned {
                // Someone else's namespace (made by hand, retained, or another User's); but
                // one the platform handed to this User is adopted, unless another User holds
                // its username.
                let handed = namespace.is_some_and(|n| {
                    n.labels().get(LABEL_ADOPT_FOR) == Some(name)
                        && n.metadata.deletion_timestamp.is_none()
                });
                if reason != "DuplicateIdentity" && (reason != "NamespaceConflict" || handed) {
                    wrong.push(format!(
                        "User {name} does not own {}{} and says {reason:?}",
                        m.namespace,
                        if handed { ", handed to it," } else { "" }
                    ));
                }
                continue;
            }
            if revoked.contains(&m.namespace) {
                continue; // checked by the revocation checks
            }
            wrong.extend(shares_converged(snap, &m.namespace, u));
            let role = m.expected_role(name, model);
            let right = homestead.len() == 1
                && homestead[0].role_ref.name == role
                && homestead[0]
                    .subjects
                    .iter()
                    .flatten()
                    .any(|s| s.kind == "User" && s.name == m.username);
            if !right || reason == "DuplicateIdentity" {
                wrong.push(format!(
                    "User {name} ({}, Ready reason {reason:?}) should have one RoleBinding granting {role} in {}; has {:?}",
                    m.username,
                    m.namespace,
                    homestead
                        .iter()
                        .map(|b| format!("{} {} {:?}", b.name_any(), b.role_ref.name, b.subjects.iter().flatten().map(|s| s.name.clone()).collect::<Vec<_>>()))
                        .collect::<Vec<_>>()
                ));
            }
        }
        wrong.extend(unknown_users(snap, model));
        wrong
    }
}

/// After quiescence, the Shares in `namespace` (the home of `owner`, live and not revoked): each
/// grants exactly what it says (its role, to its User grantees with access) while it has not
/// expired and is within the default limits (at most `edit`), and nothing otherwise.
fn shares_converged(snap: &Snapshot, namespace: &str, owner: &User) -> Vec<String> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut wrong = Vec::new();
    let open = owner.ready_condition().is_some_and(|c| c.status == "True");
    for share in snap
        .shares
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(namespace))
    {
        let binding = format!("homestead-share-{}", share.name_any());
        let found = snap
            .bindings
            .iter()
            .find(|b| b.namespace().as_deref() == Some(namespace) && b.name_any() == binding);
        let want: Vec<String> = active_grantees(share, snap, now)
            .into_iter()
            .map(str::to_owned)
            .collect();
        // A second either side of expiry is not judged.
        let left = share.spec.expires_at.0.duration_since(now).as_secs();
        if left.abs() < 2 {
            continue;
        }
        let grants = open
            && left > 0
            && share.spec.role != "admin"
            && !want.is_empty()
            && made_for_others(share, snap, owner).is_none();
        let mut has: Vec<String> = found
            .map(|b| {
                b.subjects
                    .iter()
                    .flatten()
                    .map(|s| s.name.clone())
                    .collect()
            })
            .unwrap_or_default();
        has.sort();
        let right = if grants {
            found.is_some_and(|b| b.role_ref.name == share.spec.role) && has == want
        } else {
            found.is_none()
        };
        if !right {
            wrong.push(format!(
                "Share {namespace}/{} ({} to {want:?}, {left} s left, home open: {open}) should {}; its binding binds {has:?}",
                share.name_any(),
                share.spec.role,
                if grants { "grant exactly that" } else { "grant nothing" }
            ));
        }
    }
    wrong
}

/// The User holding each username (lower-cased): the oldest by creationTimestamp, then name.
fn holders(users: &[User]) -> BTreeMap<String, String> {
    let mut oldest: BTreeMap<String, (String, String)> = BTreeMap::new();
    for u in users {
        let created = u
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default();
        let candidate = (created, u.name_any());
        oldest
            .entry(lower(&u.spec.identity.username))
            .and_modify(|h| {
                if candidate < *h {
                    h.clone_from(&candidate);
                }
            })
            .or_insert(candidate);
    }
    oldest.into_iter().map(|(k, (_, name))| (k, name)).collect()
}

/// A person and their groups, as the API server authenticates them.
fn identity(username: &str) -> (String, Vec<String>) {
    let mut groups = vec!["system:authenticated".to_owned()];
    if TENANTS.iter().any(|t| t.eq_ignore_ascii_case(username)) {
        groups.push(TENANT_GROUP.to_owned());
    }
    (username.to_owned(), groups)
}

fn service_account(namespace: &str) -> (String, Vec<String>) {
    service_account_named(namespace, "default")
}

fn service_account_named(namespace: &str, name: &str) -> (String, Vec<String>) {
    (
        format!("system:serviceaccount:{namespace}:{name}"),
        vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_owned(),
        ],
    )
}

/// The identities of `share`'s User grantees that have access at `now` (in `snap`: not
/// suspended, deactivated, expired or offboarding), sorted, each once.
fn active_grantees<'a>(
    share: &Share,
    snap: &'a Snapshot,
    now: k8s_openapi::jiff::Timestamp,
) -> BTreeSet<&'a str> {
    let holders = holders(&snap.users);
    let ns = share.namespace().unwrap_or_default();
    let owner = home_owner(snap, &ns);
    share
        .spec
        .to
        .iter()
        .filter_map(|g| g.user.as_deref())
        .filter_map(|name| snap.users.iter().find(|u| u.name_any() == name))
        .filter(|u| {
            u.metadata.deletion_timestamp.is_none()
                && u.spec.suspension().is_none()
                && u.spec.valid_until.as_ref().is_none_or(|t| t.0 > now)
                // Never a User refused as DuplicateIdentity (design rule 26), never the home's
                // own owner (a Share to oneself would outlast a downgrade).
                && holders.get(&lower(&u.spec.identity.username)) == Some(&u.name_any())
                && owner.is_none_or(|o| {
                    !lower(&o.spec.identity.username).eq(&lower(&u.spec.identity.username))
                })
        })
        .map(|u| u.spec.identity.username.as_str())
        .collect()
}

/// The live User whose home `namespace` is (its status names it), if any.
fn home_owner<'a>(snap: &'a Snapshot, namespace: &str) -> Option<&'a User> {
    snap.users.iter().find(|u| {
        u.metadata.deletion_timestamp.is_none()
            && u.status.as_ref().and_then(|s| s.namespace.as_deref()) == Some(namespace)
    })
}

/// Why `share`, in the home of `owner`, grants nothing whatever its grantees (design rule 26):
/// a grantee is the owner (`SelfShare`), a grantee's name now belongs to another User than the
/// one its status recorded (`GranteeReplaced`), or the home has another owner than the one it
/// was made under (`HandedOver`).
fn made_for_others(share: &Share, snap: &Snapshot, owner: &User) -> Option<&'static str> {
    let status = share.status.as_ref();
    let users = share.spec.to.iter().filter_map(|g| g.user.as_deref());
    let mut found = users
        .clone()
        .filter_map(|name| snap.users.iter().find(|u| u.name_any() == name));
    if users.clone().any(|name| name == owner.name_any())
        || found.any(|u| lower(&u.spec.identity.username) == lower(&owner.spec.identity.username))
    {
        return Some("a Share to its own owner");
    }
    if let (Some(made_under), Some(uid)) =
        (status.and_then(|s| s.owner_uid.as_deref()), owner.uid())
        && made_under != uid
    {
        return Some("a Share made under another owner");
    }
    let replaced = status.into_iter().flat_map(|s| &s.grantees).any(|g| {
        let (Some(name), Some(made_for)) = (g.user.as_deref(), g.uid.as_deref()) else {
            return false;
        };
        snap.users
            .iter()
            .find(|u| u.name_any() == name)
            .and_then(|u| u.uid())
            .is_some_and(|now| now != made_for)
    });
    replaced.then_some("a Share whose grantee is now another User")
}

/// Why the RoleBinding `b` of a Share (labelled `homestead.dev/share`) grants what its Share
/// does not (design rule 22): no such Share, a Share past `expiresAt`, another role, or a
/// subject who is not the identity of one of its User grantees with access now (not suspended,
/// deactivated, expired or offboarding). Sustained past the allowed delay, a violation.
fn share_binding_problem(b: &RoleBinding, snap: &Snapshot) -> Option<String> {
    let ns = b.namespace().unwrap_or_default();
    let name = b.labels().get(LABEL_SHARE).cloned().unwrap_or_default();
    let Some(share) = snap
        .shares
        .iter()
        .find(|s| s.namespace().as_deref() == Some(&ns) && s.name_any() == name)
    else {
        return Some(format!(
            "{ns}/{} grants for a Share {name} that does not exist",
            b.name_any()
        ));
    };
    if share.spec.expires_at.0 <= k8s_openapi::jiff::Timestamp::now() {
        return Some(format!(
            "{ns}/{} still grants after the Share expired",
            b.name_any()
        ));
    }
    if b.role_ref.name != share.spec.role || share.spec.role == "admin" {
        return Some(format!(
            "{ns}/{} grants {} for a Share of {} (the limit is edit)",
            b.name_any(),
            b.role_ref.name,
            share.spec.role
        ));
    }
    if let Some(why) = home_owner(snap, &ns).and_then(|owner| made_for_others(share, snap, owner)) {
        return Some(format!("{ns}/{} grants for {why}", b.name_any()));
    }
    let active = active_grantees(share, snap, k8s_openapi::jiff::Timestamp::now());
    let strangers: Vec<&str> = b
        .subjects
        .iter()
        .flatten()
        .map(|s| s.name.as_str())
        .filter(|s| !active.contains(s))
        .collect();
    (!strangers.is_empty()).then(|| {
        format!(
            "{ns}/{} of Share {name} binds {strangers:?}, not its grantees with access {active:?}",
            b.name_any()
        )
    })
}

/// Why Homestead's RoleBinding `b` in `ns` is not the source it should be: it must bind an
/// allow-listed role to the namespace's owner `owner` (and groups that are not `system:`).
fn homestead_binding_problem(b: &RoleBinding, ns: &str, owner: &str) -> Option<String> {
    let name = b.name_any();
    let subjects_ok = b.subjects.iter().flatten().all(|s| {
        s.kind == "User" && s.name == owner || s.kind == "Group" && !s.name.starts_with("system:")
    });
    let role_ok = ALLOWED_ROLES.contains(&b.role_ref.name.as_str());
    (!subjects_ok || !role_ok).then(|| {
        format!(
            "Homestead's {ns}/{name} grants {} to {:?}, not to {}",
            b.role_ref.name,
            b.subjects
                .iter()
                .flatten()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>(),
            owner
        )
    })
}

/// Who might get Pods in the revoked namespace `r`: its owner, its default ServiceAccount, and
/// every subject of `bindings` (a Group as a member of it).
fn subjects_of(r: &Revoked, bindings: &[&RoleBinding]) -> BTreeSet<(String, Vec<String>)> {
    let mut who: BTreeSet<(String, Vec<String>)> = BTreeSet::new();
    who.insert(identity(&r.owner));
    who.insert(service_account(&r.namespace));
    for b in bindings {
        for s in b.subjects.iter().flatten() {
            match s.kind.as_str() {
                "User" => {
                    who.insert(identity(&s.name));
                }
                "Group" => {
                    who.insert(("soak-group-member".into(), vec![s.name.clone()]));
                }
                _ => {
                    let ns = s.namespace.clone().unwrap_or(r.namespace.clone());
                    who.insert(service_account_named(&ns, &s.name));
                }
            }
        }
    }
    who
}

/// Homestead's RoleBindings (labelled as Homestead's) in `namespace`.
fn homestead_bindings<'a>(snap: &'a Snapshot, namespace: &str) -> Vec<&'a RoleBinding> {
    snap.bindings
        .iter()
        .filter(|b| {
            b.namespace().as_deref() == Some(namespace)
                && b.labels()
                    .get("app.kubernetes.io/managed-by")
                    .map(String::as_str)
                    == Some("homestead")
        })
        .collect()
}

/// The Users of the soak's prefixes that the workload never made.
fn unknown_users(snap: &Snapshot, model: &Model) -> Vec<String> {
    let mut wrong = Vec::new();
    for u in &snap.users {
        let soak = ["hr-", "idp-", "roster-"]
            .iter()
            .any(|p| u.name_any().starts_with(p));
        if soak && !model.users.contains_key(&u.name_any()) {
            wrong.push(format!(
                "User {} exists but the workload never made it",
                u.name_any()
            ));
        }
    }
    wrong
}
