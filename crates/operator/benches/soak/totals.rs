//! Total quotas in the soak (docs/soak.md, docs/quota.md): every soak Profile gives its owners a
//! total of [`TOTAL_PODS`] Pods across their homes; tenants create several Pods at once in one of
//! their homes (their own, a personal workspace, a team's), or delete them; and the oracle's
//! check that an owner's slices never add up to more than the total they were cut from, and that
//! the owner's use never grows past it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::workload::{Actors, Op, Outcome};

/// The total every soak Profile gives: Pods across all of an owner's homes.
pub const TOTAL_PODS: i64 = 4;

/// The Profile field that gives it.
pub fn total_quota() -> serde_json::Value {
    json!({ "hard": { "pods": TOTAL_PODS.to_string() } })
}

/// The namespace of a tenant's home `home`: 0 their own, then their personal workspaces, then
/// the team workspaces (default workspace prefix `ws-`).
fn home_namespace(actors: &Actors, tenant: usize, home: u32) -> Option<String> {
    let personal = crate::workspaces::PERSONAL_NAMES;
    match home {
        0 => actors.tenant_namespace(tenant),
        h if h <= personal => Some(format!(
            "ws-{}",
            crate::workspaces::personal_name(tenant, h - 1)
        )),
        h => Some(format!(
            "ws-{}",
            crate::workspaces::team_name((h - personal - 1) % crate::workspaces::TEAM_NAMES)
        )),
    }
}

/// How many homes [`home_namespace`] numbers.
pub const HOMES: u32 = 1 + crate::workspaces::PERSONAL_NAMES + crate::workspaces::TEAM_NAMES;

/// A Pod every Pod Security level admits, counted by quota, that never runs (no node matches).
fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "nodeSelector": { "homestead.dev/no-such-node": "true" },
            "securityContext": { "runAsNonRoot": true, "runAsUser": 1000,
                "seccompProfile": { "type": "RuntimeDefault" } },
            "containers": [{ "name": "c", "image": "busybox",
                "securityContext": { "allowPrivilegeEscalation": false,
                    "capabilities": { "drop": ["ALL"] } } }],
        },
    }))
    .expect("a valid Pod")
}

impl Actors {
    /// `TenantPods`: the tenant creates `count` Pods at once in one of their homes, or deletes
    /// every Pod there. A create refused by quota is expected; what counts is what the oracle
    /// sees.
    pub async fn pods_op(&self, op: &Op) -> Outcome {
        let Op::TenantPods {
            tenant,
            home,
            count,
            delete,
        } = op
        else {
            unreachable!("not a Pod operation")
        };
        // From `home` on, the first of the tenant's homes that lets them in (their own may be
        // suspended, a workspace refused or gone).
        let mut tried = Vec::new();
        for h in (0..HOMES).map(|i| (home + i) % HOMES) {
            let Some(ns) = home_namespace(self, *tenant, h) else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(self.tenants[*tenant].clone(), &ns);
            let outcome = if *delete {
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                };
                Outcome::from(api.delete_collection(&params, &ListParams::default()).await)
            } else {
                self.create_pods(&api, &ns, *count).await
            };
            if outcome.ok || !outcome.detail.contains("cannot ") {
                return outcome;
            }
            tried.push(ns);
        }
        Outcome::refused(format!("no access in {tried:?}"))
    }

    /// Creates `count` Pods at once through `api` (namespace `ns`).
    async fn create_pods(&self, api: &Api<Pod>, ns: &str, count: u32) -> Outcome {
        let stamp = self.clock.now().to_bits();
        let creates = (0..count).map(|i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &pod(&format!("soak-{stamp:x}-{i}")))
                    .await
            }
        });
        let results = futures::future::join_all(creates).await;
        let made = results.iter().filter(|r| r.is_ok()).count();
        let first_error = results.into_iter().find_map(Result::err);
        match (made, first_error) {
            (0, Some(error)) => Outcome::refused(error),
            (made, error) => Outcome::ok(format!(
                "{made} of {count} Pods made in {ns}{}",
                error.map(|e| format!("; {e}")).unwrap_or_default()
            )),
        }
    }
}

/// One owner's slices as one snapshot saw them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The uids of the slices.
    uids: BTreeSet<String>,
    /// The total they were cut from (annotation `homestead.dev/total`).
    total: String,
    /// Pods in use across them.
    used: i64,
}

/// Pods in a quantity map, whole (the soak's totals are whole Pods).
fn pods(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i64 {
    map.and_then(|m| m.get("pods"))
        .and_then(|q| q.0.parse().ok())
        .unwrap_or(0)
}

/// The total of a slice's annotation, in Pods (`pods=4000`: milli-units).
fn total_pods(print: &str) -> Option<i64> {
    let milli: i64 = print
        .split(',')
        .find_map(|pair| pair.strip_prefix("pods="))?
        .parse()
        .ok()?;
    Some(milli / 1000)
}

/// The violations among every owner's `slices` (ResourceQuotas labelled
/// `homestead.dev/total-owner`) against what the last snapshot saw (`last`, updated): the
/// slices of an owner that all name one total add up to more than it (each slice counted at the
/// larger of its `spec.hard` and its enforced `status.hard`); or, with the same slices
/// and total as last time, the owner's use grew past both the total and its use then (a create
/// admitted beyond the total). Returns (key, detail) pairs.
pub fn check(slices: &[ResourceQuota], last: &mut BTreeMap<String, Seen>) -> Vec<(String, String)> {
    let mut owners: BTreeMap<String, Vec<&ResourceQuota>> = BTreeMap::new();
    for q in slices
        .iter()
        .filter(|q| q.metadata.deletion_timestamp.is_none())
    {
        let labels = q.labels();
        if let (Some(kind), Some(owner)) = (
            labels.get("homestead.dev/total"),
            labels.get("homestead.dev/total-owner"),
        ) {
            owners.entry(format!("{kind} {owner}")).or_default().push(q);
        }
    }
    let mut found = Vec::new();
    let mut now = BTreeMap::new();
    for (owner, quotas) in owners {
        let prints: BTreeSet<&str> = quotas
            .iter()
            .filter_map(|q| {
                q.annotations()
                    .get("homestead.dev/total")
                    .map(String::as_str)
            })
            .collect();
        // A move to a new total in progress names two: nothing to judge until it ends.
        let Some(print) = prints.first().copied().filter(|_| prints.len() == 1) else {
            continue;
        };
        let Some(total) = total_pods(print) else {
            continue;
        };
        // What each slice says and what the API server enforces (`status.hard`, copied from
        // the spec a moment after each write): the larger of the two.
        let hard: i64 = quotas
            .iter()
            .map(|q| {
                let spec = pods(q.spec.as_ref().and_then(|s| s.hard.as_ref()));
                spec.max(pods(q.status.as_ref().and_then(|s| s.hard.as_ref())))
            })
            .sum();
        let used: i64 = quotas
            .iter()
            .map(|q| pods(q.status.as_ref().and_then(|s| s.used.as_ref())))
            .sum();
        if hard > total {
            found.push((
                format!("slices {owner} {hard}"),
                format!(
                    "the slices of {owner} add up to {hard} Pods, more than their total {total}"
                ),
            ));
        }
        let seen = Seen {
            uids: quotas.iter().filter_map(|q| q.uid()).collect(),
            total: print.to_owned(),
            used,
        };
        if let Some(before) = last.get(&owner)
            && before.uids == seen.uids
            && before.total == seen.total
            && used > total.max(before.used)
        {
            found.push((
                format!("use {owner} {used}"),
                format!(
                    "{owner} uses {used} Pods across its homes, over its total {total} (it used {} before)",
                    before.used
                ),
            ));
        }
        now.insert(owner, seen);
    }
    *last = now;
    found
}
