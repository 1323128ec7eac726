//! The split of an owner's total quota (`Profile.spec.totalQuota`) into one slice per home
//! (docs/quota.md): pure arithmetic over exact quantities, no I/O.
//!
//! Each home of the owner has a ResourceQuota `homestead-total` whose `spec.hard` is its slice;
//! the API server's quota admission keeps each home's use within its slice, so as long as the
//! slices add up to at most the total, no interleaving of creates in different homes can use
//! more than the total (docs/design.md rule 27). [`plan`] gives the slices to move to and the
//! order to write them in (every shrink before any growth), [`Split::is_due`] says whether a
//! move is worth its writes: only when a home is short of room that another home holds, or the
//! slices do not (or no longer) fit the total.

use std::collections::BTreeMap;

use homestead_api::{HomeSlice, TotalQuotaStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::plan::quantity::{nano_value, round_up_to_milli};

/// Milli-units (10^-3 of a resource's base unit: `1` is 1000, `500m` is 500), the scale the
/// API server stores every resource quantity at.
pub type Milli = i128;

/// Resource names to amounts in milli-units.
pub type Amounts = BTreeMap<String, Milli>;

/// One home's slice as the API server has it: its ResourceQuota's `spec.hard` and
/// `status.used`, in milli-units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// The home's namespace.
    pub namespace: String,
    /// The slice (`spec.hard`); empty for a home that has none yet.
    pub hard: Amounts,
    /// What the home uses (`status.used`), as far as the quota system has counted.
    pub used: Amounts,
}

/// Writes of slices, as (index into the slices, the new hard), in order.
pub type Writes = Vec<(usize, Amounts)>;

/// The slices to move to: one per input slice, in the same order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// The new `spec.hard` of each slice.
    pub targets: Vec<Amounts>,
    /// Whether writing `targets` is worth it (see [`Split::is_due`]).
    due: bool,
}

impl Split {
    /// Whether the slices should move to the targets now: a home has no slice (or not for every
    /// resource of the total), the slices add up to more than the total (it was lowered), or a
    /// home has less than half the free room the targets would give it while others hold it.
    /// Otherwise the slices stay as they are: a create or delete does not move every slice.
    pub fn is_due(&self) -> bool {
        self.due
    }

    /// The writes that move `slices` to the targets, in order, as (index into `slices`, the
    /// new hard): first every slice that shrinks in some resource, to the smaller of its old
    /// and new value in each (a resource it did not limit stays unlimited until the second
    /// pass); then every slice to its target. Written in this order the slices add up to at
    /// most the total after every single write, per resource, counting a missing slice as 0.
    pub fn writes(&self, slices: &[Slice]) -> Writes {
        let (mut shrinks, grows) = self.phases(slices);
        shrinks.extend(grows);
        shrinks
    }

    /// [`Split::writes`] in its two phases: (every shrink, every growth). The API server
    /// enforces a ResourceQuota's `status.hard`, which kube-controller-manager copies from its
    /// `spec.hard` a moment after each write; so the growths wait until every shrink is
    /// enforced.
    pub fn phases(&self, slices: &[Slice]) -> (Writes, Writes) {
        let mut now: Vec<Amounts> = slices.iter().map(|s| s.hard.clone()).collect();
        let mut out = Vec::new();
        for (i, target) in self.targets.iter().enumerate() {
            let lower: Amounts = target
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), (*v).min(*now[i].get(k)?))))
                .collect();
            let shrinks = now[i]
                .iter()
                .any(|(k, v)| lower.get(k).is_none_or(|l| l < v));
            if !now[i].is_empty() && shrinks {
                out.push((i, lower.clone()));
                now[i] = lower;
            }
        }
        let mut grows = Vec::new();
        for (i, target) in self.targets.iter().enumerate() {
            if *target != now[i] {
                grows.push((i, target.clone()));
            }
        }
        (out, grows)
    }
}

/// The total's `hard` in milli-units, or the first resource whose value is not a quantity.
///
/// # Errors
/// The name of a resource whose value does not parse (the CRD's schema refuses such values, so
/// only an object written around it has one).
pub fn amounts(hard: &BTreeMap<String, Quantity>) -> Result<Amounts, String> {
    hard.iter()
        .map(|(k, v)| match nano_value(&v.0) {
            Some(nano) => Ok((k.clone(), round_up_to_milli(nano) / 1_000_000)),
            None => Err(k.clone()),
        })
        .collect()
}

/// `milli` as a quantity: whole units without a suffix (`30`), else milli-units (`1500m`).
pub fn quantity(milli: Milli) -> Quantity {
    if milli % 1000 == 0 {
        Quantity((milli / 1000).to_string())
    } else {
        Quantity(format!("{milli}m"))
    }
}

/// The slices of `total` for the homes `slices` (sorted by namespace by the caller for a
/// deterministic split), per resource of the total:
///
/// - While the homes use less than the total, each keeps what it uses, gets a unit of room
///   while there is one for every home, an even part of half the rest, and a part of the other
///   half in proportion to its use (evenly while nothing is used; in whole units when the total
///   is whole; the remainder to the busiest homes), so no slice is ever below its use and room
///   goes where use grows without leaving the other homes none.
/// - When they use the total or more (it was lowered), the total is shared in proportion to use:
///   the slices still add up to at most the total, and every home is full until use drops.
///
/// A resource the total no longer has is dropped from every slice.
pub fn plan(total: &Amounts, slices: &[Slice]) -> Split {
    let mut targets = vec![Amounts::new(); slices.len()];
    let mut due = false;
    for (resource, &limit) in total {
        let used: Vec<Milli> = slices
            .iter()
            .map(|s| s.used.get(resource).copied().unwrap_or(0).max(0))
            .collect();
        let hard: Vec<Option<Milli>> = slices
            .iter()
            .map(|s| s.hard.get(resource).copied())
            .collect();
        let split = split_one(limit, &used);
        let held: Milli = hard.iter().map(|h| h.unwrap_or(0)).sum();
        due |= held > limit || hard.iter().any(Option::is_none);
        // Short of room: less than half the free room the split would give it, which only
        // happens while another home holds more than its part.
        due |= (0..slices.len()).any(|i| {
            let (now, then) = (hard[i].unwrap_or(0) - used[i], split[i] - used[i]);
            split[i] > hard[i].unwrap_or(0) && now * 2 < then
        });
        for (target, value) in targets.iter_mut().zip(split) {
            target.insert(resource.clone(), value);
        }
    }
    due |= slices
        .iter()
        .any(|s| s.hard.keys().any(|k| !total.contains_key(k)));
    Split { targets, due }
}

/// The split of one resource's `limit` among homes using `used` (milli-units each).
fn split_one(limit: Milli, used: &[Milli]) -> Vec<Milli> {
    let n = Milli::try_from(used.len()).unwrap_or(Milli::MAX);
    if n == 0 {
        return Vec::new();
    }
    let in_use: Milli = used.iter().sum();
    // Whole units when the total is whole: a count (pods, services) takes no fraction.
    let step = if limit % 1000 == 0 { 1000 } else { 1 };
    if in_use >= limit {
        // Lowered below use: in proportion to use, rounded down to a step.
        return used
            .iter()
            .map(|u| {
                if in_use == 0 {
                    0
                } else {
                    u * limit / in_use / step * step
                }
            })
            .collect();
    }
    let free = limit - in_use;
    // A unit of room for every home while there is that much, so a home nobody uses yet can
    // start; half the rest evenly, so a burst in several homes at once finds room in each; the
    // other half in proportion to use (evenly while nothing is used), so room goes where use
    // grows; what rounding leaves, a unit at a time to the busiest homes first.
    let reserve = if free >= n * step { step } else { 0 };
    let rest = free - reserve * n;
    let (even, by_use) = if in_use == 0 {
        (rest, 0)
    } else {
        (rest / 2, rest - rest / 2)
    };
    let extra: Vec<Milli> = used
        .iter()
        .map(|u| {
            let share = even / n + if in_use == 0 { 0 } else { by_use * u / in_use };
            reserve + share / step * step
        })
        .collect();
    let mut left = (free - extra.iter().sum::<Milli>()) / step;
    let mut busiest: Vec<usize> = (0..used.len()).collect();
    busiest.sort_by_key(|i| std::cmp::Reverse(used[*i]));
    let mut split: Vec<Milli> = used.iter().zip(&extra).map(|(u, e)| u + e).collect();
    for i in busiest.into_iter().cycle() {
        if left <= 0 {
            break;
        }
        split[i] += step;
        left -= 1;
    }
    split
}

/// The `status.total` of an owner whose Profile's total is `hard`, over its homes' `slices`
/// (sorted by namespace): the total as the Profile says it; `used`, the sum of the homes' use
/// of each of its resources; and each home's slice and use of them (as quantities in the form
/// [`quantity`] writes, so a status read back compares equal).
pub fn status(hard: &BTreeMap<String, Quantity>, slices: &[Slice]) -> TotalQuotaStatus {
    let of = |amounts: &Amounts| -> BTreeMap<String, Quantity> {
        amounts
            .iter()
            .filter(|(k, _)| hard.contains_key(*k))
            .map(|(k, v)| (k.clone(), quantity(*v)))
            .collect()
    };
    let used = hard
        .keys()
        .map(|k| {
            let sum = slices.iter().filter_map(|s| s.used.get(k)).sum();
            (k.clone(), quantity(sum))
        })
        .collect();
    TotalQuotaStatus {
        hard: hard.clone(),
        used,
        homes: slices
            .iter()
            .map(|s| HomeSlice {
                namespace: s.namespace.clone(),
                hard: of(&s.hard),
                used: of(&s.used),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_sums_the_use_of_the_totals_resources_and_lists_each_slice() {
        let hard: BTreeMap<String, Quantity> = [
            ("pods".to_owned(), Quantity("30".into())),
            ("requests.cpu".to_owned(), Quantity("2".into())),
        ]
        .into();
        let slices = [
            slice(
                "a",
                &[("pods", 20_000)],
                &[("pods", 4_000), ("services", 1_000)],
            ),
            slice(
                "b",
                &[("pods", 10_000)],
                &[("pods", 3_000), ("requests.cpu", 500)],
            ),
        ];
        let status = status(&hard, &slices);
        let q = |s: &str| Quantity(s.into());
        assert_eq!(status.hard, hard);
        assert_eq!(
            status.used,
            [("pods".into(), q("7")), ("requests.cpu".into(), q("500m"))].into()
        );
        assert_eq!(status.homes[0].namespace, "a");
        assert_eq!(status.homes[0].hard, [("pods".into(), q("20"))].into());
        // Use of a resource the total does not count is left out.
        assert_eq!(status.homes[0].used, [("pods".into(), q("4"))].into());
        assert_eq!(status.homes[1].used.len(), 2);
    }

    fn slice(namespace: &str, hard: &[(&str, Milli)], used: &[(&str, Milli)]) -> Slice {
        let map = |pairs: &[(&str, Milli)]| pairs.iter().map(|(k, v)| ((*k).into(), *v)).collect();
        Slice {
            namespace: namespace.into(),
            hard: map(hard),
            used: map(used),
        }
    }

    fn pods(n: Milli) -> Amounts {
        [("pods".to_owned(), n * 1000)].into()
    }

    #[test]
    fn new_homes_share_the_total_evenly_in_whole_units() {
        let homes: Vec<Slice> = (0..7).map(|i| slice(&format!("h{i}"), &[], &[])).collect();
        let split = plan(&pods(30), &homes);
        assert!(split.is_due());
        let parts: Vec<Milli> = split.targets.iter().map(|t| t["pods"] / 1000).collect();
        assert_eq!(parts, [5, 5, 4, 4, 4, 4, 4]);
    }

    #[test]
    fn a_home_short_of_room_takes_from_homes_with_room_and_no_slice_drops_below_use() {
        let homes = [
            slice("a", &[("pods", 15_000)], &[("pods", 14_000)]),
            slice("b", &[("pods", 15_000)], &[("pods", 2_000)]),
        ];
        let split = plan(&pods(30), &homes);
        assert!(split.is_due());
        // A unit each; of the other 12, 6 evenly and 6 in proportion to use (14:2); the
        // rounding to the busiest.
        assert_eq!(
            split.targets[0]["pods"],
            14_000 + 1_000 + 3_000 + 5_000 + 1_000
        );
        assert_eq!(split.targets[1]["pods"], 2_000 + 1_000 + 3_000);
        // b shrinks first, then a grows: never more than 30 between the writes.
        let order: Vec<usize> = split.writes(&homes).iter().map(|(i, _)| *i).collect();
        assert_eq!(order, [1, 0]);
        let (shrinks, grows) = split.phases(&homes);
        assert_eq!((shrinks[0].0, grows[0].0), (1, 0));
    }

    #[test]
    fn a_create_in_a_home_with_room_moves_nothing() {
        let homes = [
            slice("a", &[("pods", 15_000)], &[("pods", 4_000)]),
            slice("b", &[("pods", 15_000)], &[("pods", 3_000)]),
        ];
        assert!(!plan(&pods(30), &homes).is_due());
    }

    #[test]
    fn a_full_total_moves_nothing() {
        let homes = [
            slice("a", &[("pods", 10_000)], &[("pods", 10_000)]),
            slice("b", &[("pods", 20_000)], &[("pods", 20_000)]),
        ];
        let split = plan(&pods(30), &homes);
        assert!(!split.is_due());
        assert!(split.writes(&homes).is_empty());
    }

    #[test]
    fn a_lowered_total_is_shared_in_proportion_to_use_and_fits() {
        let homes = [
            slice("a", &[("pods", 20_000)], &[("pods", 20_000)]),
            slice("b", &[("pods", 20_000)], &[("pods", 10_000)]),
        ];
        let split = plan(&pods(15), &homes);
        assert!(split.is_due());
        let sum: Milli = split.targets.iter().map(|t| t["pods"]).sum();
        assert!(sum <= 15_000, "{split:?}");
        assert_eq!(split.targets[0]["pods"], 10_000);
        // Whole Pods even when the proportion is not (a count takes no fraction: the API
        // server refuses `1500m` pods).
        let homes = [
            slice("a", &[("pods", 5_000)], &[("pods", 3_000)]),
            slice("b", &[("pods", 1_000)], &[("pods", 1_000)]),
        ];
        let split = plan(&pods(3), &homes);
        assert!(
            split.targets.iter().all(|t| t["pods"] % 1000 == 0),
            "{split:?}"
        );
        assert!(split.targets.iter().map(|t| t["pods"]).sum::<Milli>() <= 3_000);
    }

    #[test]
    fn fractional_totals_split_in_milli_units_and_print_as_quantities() {
        let total = amounts(&[("requests.cpu".to_owned(), Quantity("1500m".into()))].into());
        let total = total.unwrap();
        let homes = [slice("a", &[], &[]), slice("b", &[], &[])];
        let split = plan(&total, &homes);
        assert_eq!(split.targets[0]["requests.cpu"], 750);
        assert_eq!(quantity(750).0, "750m");
        assert_eq!(quantity(3000).0, "3");
        let memory = amounts(&[("limits.memory".to_owned(), Quantity("1Gi".into()))].into());
        assert_eq!(memory.unwrap()["limits.memory"], 1_073_741_824_000);
    }

    #[test]
    fn a_resource_gone_from_the_total_is_dropped_from_every_slice() {
        let homes = [slice("a", &[("pods", 30_000), ("services", 2_000)], &[])];
        let split = plan(&pods(30), &homes);
        assert!(split.is_due());
        assert_eq!(split.targets[0], pods(30));
    }

    /// Every sequence of writes in the order given keeps the sum within the total, for many
    /// generated starting points (a deterministic walk, no randomness needed).
    #[test]
    fn every_prefix_of_the_writes_fits_the_total() {
        for seed in 0..500_i128 {
            let n = 1 + (seed % 6) as usize;
            let total = 10 + seed % 23;
            let mut held = 0;
            let homes: Vec<Slice> = (0..n)
                .map(|i| {
                    let i = i as i128;
                    let hard = ((seed * 7 + i * 13) % (total + 1)).min(total - held);
                    held += hard;
                    let used = (seed * 3 + i * 5) % (hard + 1);
                    if (seed + i) % 5 == 0 {
                        // A new home: no slice yet, nothing in use.
                        held -= hard;
                        return slice(&format!("h{i}"), &[], &[]);
                    }
                    slice(
                        &format!("h{i}"),
                        &[("pods", hard * 1000)],
                        &[("pods", used * 1000)],
                    )
                })
                .collect();
            let split = plan(&pods(total), &homes);
            let mut now: Vec<Milli> = homes
                .iter()
                .map(|s| s.hard.get("pods").copied().unwrap_or(0))
                .collect();
            for (i, target) in split.writes(&homes) {
                now[i] = target.get("pods").copied().unwrap_or(0);
                let sum: Milli = now.iter().sum();
                assert!(sum <= total * 1000, "seed {seed}: {now:?} > {total}");
            }
            for (s, t) in homes.iter().zip(&split.targets) {
                let used = s.used.get("pods").copied().unwrap_or(0);
                assert!(t["pods"] >= used, "seed {seed}: below use");
                assert_eq!(t["pods"] % 1000, 0, "seed {seed}: a fraction of a Pod");
            }
            assert_eq!(
                now,
                split.targets.iter().map(|t| t["pods"]).collect::<Vec<_>>()
            );
        }
    }
}
