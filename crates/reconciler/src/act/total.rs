//! The slices of an owner's total quota (docs/quota.md): reading them as the API server has them
//! and moving them ([`rebalance`]), every shrink before any growth, so they add up to at most
//! the total after every single write (docs/design.md rule 27).
//!
//! The caller holds the owner's lock for the whole call ([`crate::context::Context`]'s
//! `total_lock`): two moves of one owner's slices never interleave in this replica, and the
//! leader-election fence keeps other replicas from writing at all. The slices are read with a
//! list, never from a cache, so a move always starts from what the last one wrote.

use std::collections::BTreeMap;
use std::time::Instant;

use homestead_api::{ANNOTATION_TOTAL, LABEL_TOTAL, LABEL_TOTAL_OWNER, TOTAL_QUOTA_NAME};
use homestead_model::workspace::Owner;
use k8s_openapi::api::core::v1::{ResourceQuota, ResourceQuotaSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use super::Cluster;
use crate::error::{Error, Result};
use crate::plan::total::{Amounts, Slice, amounts, plan, quantity};
use homestead_api::Verb;

/// The value of [`LABEL_TOTAL`] for `owner`: `user` or `group`.
pub fn owner_kind(owner: &Owner) -> &'static str {
    match owner {
        Owner::User(_) => "user",
        Owner::Group(_) => "group",
    }
}

/// The owner a slice's labels name, if it carries both [`LABEL_TOTAL`] and
/// [`LABEL_TOTAL_OWNER`].
pub fn owner_of_slice(quota: &ResourceQuota) -> Option<Owner> {
    let labels = quota.labels();
    let name = labels.get(LABEL_TOTAL_OWNER)?.clone();
    match labels.get(LABEL_TOTAL)?.as_str() {
        "user" => Some(Owner::User(name)),
        "group" => Some(Owner::Group(name)),
        _ => None,
    }
}

/// The label selector of all of `owner`'s slices.
fn selector(owner: &Owner) -> String {
    format!(
        "{LABEL_TOTAL}={},{LABEL_TOTAL_OWNER}={}",
        owner_kind(owner),
        owner.name()
    )
}

/// The total as [`ANNOTATION_TOTAL`] writes it: `resource=milli-units` pairs joined by `,`.
pub fn fingerprint(total: &Amounts) -> String {
    let pairs: Vec<String> = total.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.join(",")
}

/// A slice as the API server has it, and the metadata to write it back with.
struct Listed {
    slice: Slice,
    labels: BTreeMap<String, String>,
    /// The total it was cut from ([`ANNOTATION_TOTAL`]).
    cut_from: Option<String>,
}

/// A home that must have a slice even if it has none yet: its namespace and the labels its
/// slice carries (Homestead's, its holder's, and the owner's).
pub struct Home {
    /// The home's namespace.
    pub namespace: String,
    /// The labels of its slice.
    pub labels: BTreeMap<String, String>,
}

/// What one [`rebalance`] did.
#[derive(Debug, Default)]
pub struct Moved {
    /// The slices as they are now (hard as written), by namespace.
    pub slices: Vec<Slice>,
    /// Writes made (0: the slices stayed as they were).
    pub writes: usize,
    /// Slices found full in some resource while the total had room for it.
    pub full_with_room: usize,
}

/// Moves `owner`'s slices of `total` (ResourceQuota `hard` keys to quantities) to where use
/// is: lists every slice of the owner (with `home`'s, created if it has none), splits the total
/// anew when [`plan`] finds it due, and writes the changed slices in order, each awaited before
/// the next. A slice in a namespace that is not `writable` (not a home Homestead holds) is
/// left as it is and counted as held. The caller holds the owner's lock.
///
/// # Errors
/// [`Error::Kube`] with [`Verb::Get`] when the slices cannot be listed, [`Verb::Apply`] when a
/// write fails (the writes before it stand; they keep the slices within the total). A total
/// with a value that is not a quantity moves nothing.
pub async fn rebalance(
    cluster: &Cluster,
    owner: &Owner,
    total: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    home: Option<Home>,
    writable: impl Fn(&str) -> bool,
) -> Result<Moved> {
    let started = Instant::now();
    let total = match amounts(total) {
        Ok(total) => total,
        Err(resource) => {
            // The CRD's schema refuses such a value; only an object written around it has one.
            tracing::warn!(%owner, resource, "the total quota has a value that is not a quantity");
            return Ok(Moved::default());
        }
    };
    let print = fingerprint(&total);
    let home_namespace = home.as_ref().map(|h| h.namespace.clone());
    let listed = with_home(list(cluster, owner).await?, home);
    let writable = |ns: &str| writable(ns) || home_namespace.as_deref() == Some(ns);
    let (mut listed, total) = without_fixed(listed, total, writable);
    listed.sort_by(|a, b| a.slice.namespace.cmp(&b.slice.namespace));
    let slices: Vec<Slice> = listed.iter().map(|l| l.slice.clone()).collect();
    let split = plan(&total, &slices);
    let full_with_room = full_with_room(&total, &slices);
    let stale = |l: &Listed| l.cut_from.as_deref() != Some(print.as_str());
    if !split.is_due() && !listed.iter().any(stale) {
        return Ok(Moved {
            slices,
            writes: 0,
            full_with_room,
        });
    }
    let writes = write_in_phases(cluster, &listed, &split, &print).await?;
    let metrics = &cluster.metrics().total;
    metrics.rebalances.inc();
    metrics.writes.inc_by(writes.len() as u64);
    metrics.full_with_room.inc_by(full_with_room as u64);
    metrics
        .rebalance_seconds
        .observe(started.elapsed().as_secs_f64());
    let slices = slices
        .into_iter()
        .zip(split.targets)
        .map(|(s, hard)| Slice { hard, ..s })
        .collect();
    let writes = writes.len();
    Ok(Moved {
        slices,
        writes,
        full_with_room,
    })
}

/// Writes the slices of `split` (over `listed`, cut from the total printed `print`): every
/// shrink, then, once each is enforced ([`enforced`]), every growth; a slice that keeps its hard
/// but was cut from another total is written last (its hard unchanged), so every slice names
/// the total it fits. Returns the writes made.
///
/// # Errors
/// A failed write or read, or a shrink not enforced in time: no growth is written then.
async fn write_in_phases(
    cluster: &Cluster,
    listed: &[Listed],
    split: &crate::plan::total::Split,
    print: &str,
) -> Result<crate::plan::total::Writes> {
    let slices: Vec<Slice> = listed.iter().map(|l| l.slice.clone()).collect();
    let (shrinks, mut grows) = split.phases(&slices);
    for (i, l) in listed.iter().enumerate() {
        let written = |w: &[(usize, Amounts)]| w.iter().any(|(j, _)| *j == i);
        if l.cut_from.as_deref() != Some(print) && !written(&shrinks) && !written(&grows) {
            grows.push((i, split.targets[i].clone()));
        }
    }
    for (i, hard) in &shrinks {
        cluster
            .apply(&slice_object(&listed[*i], hard, print))
            .await?;
    }
    for (i, hard) in &shrinks {
        enforced(cluster, &listed[*i].slice.namespace, hard).await?;
    }
    for (i, hard) in &grows {
        cluster
            .apply(&slice_object(&listed[*i], hard, print))
            .await?;
    }
    Ok([shrinks, grows].concat())
}

/// Waits until the slice in `namespace` is enforced at `hard` or below: the API server's quota
/// admission checks a ResourceQuota's `status.hard`, which kube-controller-manager's quota
/// controller copies from `spec.hard` after each write (within milliseconds when it keeps
/// up). Reads the slice every [`ENFORCED_POLL`], for at most [`ENFORCED_WAIT`].
///
/// # Errors
/// [`Error::Kube`] with [`Verb::Get`] when a read fails; [`Error::NotEnforced`] when the
/// shrink is not enforced in time (the move stops before any growth; it is tried again).
async fn enforced(cluster: &Cluster, namespace: &str, hard: &Amounts) -> Result<()> {
    let api: Api<ResourceQuota> = Api::namespaced(cluster.client().clone(), namespace);
    let started = Instant::now();
    loop {
        let quota = api
            .get_opt(TOTAL_QUOTA_NAME)
            .await
            .map_err(|source| Error::Kube {
                verb: Verb::Get,
                kind: ResourceQuota::kind(&()),
                name: format!("{namespace}/{TOTAL_QUOTA_NAME}"),
                source,
            })?;
        let Some(quota) = quota else {
            // Gone (its namespace with it): it enforces nothing any more.
            return Ok(());
        };
        let status = quota.status.as_ref().and_then(|s| s.hard.as_ref());
        let at_most = status
            .map(amounts)
            .and_then(|a| a.ok())
            .is_some_and(|now| hard.iter().all(|(k, v)| now.get(k).is_some_and(|n| n <= v)));
        if at_most {
            return Ok(());
        }
        if started.elapsed() > ENFORCED_WAIT {
            return Err(Error::NotEnforced(format!(
                "{namespace}/{TOTAL_QUOTA_NAME}"
            )));
        }
        tokio::time::sleep(ENFORCED_POLL).await;
    }
}

/// How often [`enforced`] reads a shrunken slice.
const ENFORCED_POLL: std::time::Duration = std::time::Duration::from_millis(20);
/// How long [`enforced`] waits for kube-controller-manager to enforce a shrink.
const ENFORCED_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `listed` with `home`'s slice, empty, when it has none yet.
fn with_home(mut listed: Vec<Listed>, home: Option<Home>) -> Vec<Listed> {
    if let Some(home) = home
        && !listed.iter().any(|l| l.slice.namespace == home.namespace)
    {
        listed.push(Listed {
            slice: Slice {
                namespace: home.namespace,
                ..Slice::default()
            },
            labels: home.labels,
            cut_from: None,
        });
    }
    listed
}

/// `listed` without the slices Homestead may not write (in a namespace that is not
/// `writable`: not a home it holds, say one created a moment ago and not yet cached), and
/// `total` less what those hold: they keep it, the others share the rest.
fn without_fixed(
    listed: Vec<Listed>,
    mut total: Amounts,
    writable: impl Fn(&str) -> bool,
) -> (Vec<Listed>, Amounts) {
    let (listed, fixed): (Vec<Listed>, Vec<Listed>) = listed
        .into_iter()
        .partition(|l| writable(&l.slice.namespace));
    for held in &fixed {
        for (resource, limit) in &mut total {
            let hard = held.slice.hard.get(resource).copied().unwrap_or(*limit);
            *limit = (*limit - hard).max(0);
        }
    }
    (listed, total)
}

/// How many of `slices` are full in some resource of `total` while the slices together use
/// less of it than the total: a create there is refused though another home has room.
fn full_with_room(total: &Amounts, slices: &[Slice]) -> usize {
    slices
        .iter()
        .filter(|s| {
            total.iter().any(|(k, limit)| {
                let used = |s: &Slice| s.used.get(k).copied().unwrap_or(0);
                let in_use: i128 = slices.iter().map(used).sum();
                let hard = s.hard.get(k).copied();
                hard.is_some_and(|h| used(s) >= h) && in_use < *limit
            })
        })
        .count()
}

/// Every slice of `owner`, read from the API server.
///
/// # Errors
/// [`Error::Kube`] with [`Verb::Get`] (a list).
async fn list(cluster: &Cluster, owner: &Owner) -> Result<Vec<Listed>> {
    let what = format!("{TOTAL_QUOTA_NAME} of {owner}");
    let quotas: Vec<ResourceQuota> = cluster.list_labelled(&selector(owner), &what).await?;
    Ok(quotas
        .into_iter()
        .filter(|q| q.name_any() == TOTAL_QUOTA_NAME)
        .filter_map(|q| {
            let namespace = q.namespace()?;
            let of = |field: Option<&BTreeMap<String, _>>| {
                field.map(amounts).and_then(|a| a.ok()).unwrap_or_default()
            };
            let hard = of(q.spec.as_ref().and_then(|s| s.hard.as_ref()));
            let used = of(q.status.as_ref().and_then(|s| s.used.as_ref()));
            Some(Listed {
                slice: Slice {
                    namespace,
                    hard,
                    used,
                },
                cut_from: q.annotations().get(ANNOTATION_TOTAL).cloned(),
                labels: q.metadata.labels.unwrap_or_default(),
            })
        })
        .collect())
}

/// The ResourceQuota `homestead-total` of `listed` with `hard`, cut from the total printed
/// `print`.
fn slice_object(listed: &Listed, hard: &Amounts, print: &str) -> ResourceQuota {
    ResourceQuota {
        metadata: ObjectMeta {
            name: Some(TOTAL_QUOTA_NAME.to_owned()),
            namespace: Some(listed.slice.namespace.clone()),
            labels: Some(listed.labels.clone()),
            annotations: Some([(ANNOTATION_TOTAL.to_owned(), print.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(ResourceQuotaSpec {
            hard: Some(
                hard.iter()
                    .map(|(k, v)| (k.clone(), quantity(*v)))
                    .collect(),
            ),
            ..ResourceQuotaSpec::default()
        }),
        status: None,
    }
}
