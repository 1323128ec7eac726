//! The wire forms of `homes.homestead.dev/v1alpha1` (docs/homes.md): a `Home` object, a
//! `HomeList`, the server-side `Table` kubectl asks for
//! (<https://kubernetes.io/docs/reference/using-api/api-concepts/#receiving-resources-as-tables>),
//! and the discovery documents an aggregated API server serves
//! (<https://kubernetes.io/docs/concepts/overview/kubernetes-api/#discovery-api>).

use std::collections::BTreeMap;

use homestead_api::{HomeSlice, TotalQuotaStatus};
use homestead_model::homes::{Home, HomeState, Via};
use homestead_model::roles::role_within;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, GroupVersionForDiscovery, Time,
};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// The API group.
pub const GROUP: &str = "homes.homestead.dev";
/// Its one version.
pub const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`.
pub const GROUP_VERSION: &str = "homes.homestead.dev/v1alpha1";

fn state(state: HomeState) -> &'static str {
    match state {
        HomeState::Active => "Active",
        HomeState::Suspended => "Suspended",
        HomeState::Expired => "Expired",
        HomeState::NotReady => "NotReady",
    }
}

/// One namespace the caller can use, all ways in merged: the highest role among them
/// (`role_within`), every way in, and the latest end (none if any way in does not end).
#[derive(Debug, PartialEq)]
pub struct Merged {
    /// The namespace, and the object's name.
    pub namespace: String,
    /// The highest role.
    pub role: String,
    /// Every way in, joined by `, `.
    pub via: String,
    /// When the last way in ends; `None` if one never does.
    pub until: Option<Time>,
    /// The caller's own home's state if it is their home, else `Active`.
    pub state: HomeState,
    /// Since when: the earliest way in.
    pub since: Option<Time>,
    /// The total quota this home has a slice of, as its owner's status says (docs/quota.md):
    /// for the caller's own home and the workspaces they own, administer or are a member of
    /// (never for a home only shared with them).
    pub total: Option<TotalQuotaStatus>,
}

/// The caller, as every `Home` names them (what `kubectl get homes -o yaml` shows of
/// "who am I"): their User and the Profile their home was reconciled with.
#[derive(Debug, Default, PartialEq)]
pub struct Person {
    /// The User's `metadata.name`.
    pub user: String,
    /// The Profile's name, if one applies.
    pub profile: Option<String>,
}

/// `homes` (sorted by namespace) merged into one per namespace.
pub fn merged(homes: &[Home]) -> Vec<Merged> {
    let mut merged: Vec<Merged> = Vec::new();
    for home in homes {
        match merged.last_mut() {
            Some(last) if last.namespace == home.namespace => {
                if role_within(&last.role, &home.role) {
                    last.role.clone_from(&home.role);
                }
                last.via = format!("{}, {}", last.via, home.via.describe());
                last.until = match (last.until.take(), &home.until) {
                    (Some(a), Some(b)) => Some(if b.0 > a.0 { b.clone() } else { a }),
                    _ => None,
                };
                if home.via == Via::OwnHome {
                    last.state = home.state;
                }
                last.since = match (last.since.take(), &home.since) {
                    (Some(a), Some(b)) => Some(if b.0 < a.0 { b.clone() } else { a }),
                    (a, b) => a.or_else(|| b.clone()),
                };
            }
            _ => merged.push(Merged {
                namespace: home.namespace.clone(),
                role: home.role.clone(),
                via: home.via.describe(),
                until: home.until.clone(),
                state: home.state,
                since: home.since.clone(),
                total: None,
            }),
        }
    }
    merged
}

/// The object's metadata: its name, and its creation as the earliest way in (kubectl's AGE).
fn metadata(home: &Merged) -> Value {
    json!({ "name": home.namespace, "creationTimestamp": home.since })
}

/// One `Home` object as served: written straight to JSON (no `serde_json::Value` tree on the
/// way), field by field as [`object`] documents.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HomeObject<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: HomeMetadata<'a>,
    role: &'a str,
    via: &'a str,
    state: &'static str,
    user: &'a str,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "optional_time"
    )]
    until: Option<&'a Time>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total: Option<Usage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slice: Option<Usage<'a>>,
}

/// A `Home`'s metadata: its name, and its creation as the earliest way in (`null` if unknown).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct HomeMetadata<'a> {
    name: &'a str,
    #[serde(serialize_with = "optional_time")]
    creation_timestamp: Option<&'a Time>,
}

/// `time` as `Time` serializes it (RFC 3339 in UTC, whole seconds: `2026-12-04T18:00:00Z`),
/// through [`rfc3339`]; a time before year 0 through `Time` itself.
fn optional_time<S: serde::Serializer>(
    time: &Option<&Time>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        None => serializer.serialize_none(),
        Some(time) => match rfc3339(time) {
            // ASCII digits and punctuation only.
            Some(text) => serializer.serialize_some(std::str::from_utf8(&text).unwrap_or_default()),
            None => serializer.serialize_some(time),
        },
    }
}

/// `time` as `Time` writes it, `%Y-%m-%dT%H:%M:%SZ` in UTC with the fraction dropped, written
/// digit by digit: jiff's `strtime`, which `Time` uses, reads its format string on every call,
/// and was a quarter of a list's CPU once Shares were decoded once (docs/performance.md, "The
/// homes API's CPU per list"). `None` before year 0 (jiff's times end in year 9999).
fn rfc3339(time: &Time) -> Option<[u8; 20]> {
    let utc = k8s_openapi::jiff::tz::Offset::UTC.to_datetime(time.0);
    let year = u16::try_from(utc.year()).ok()?;
    let mut text = *b"0000-00-00T00:00:00Z";
    let mut put = |at: usize, digits: usize, mut value: u16| {
        for i in (at..at + digits).rev() {
            text[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year);
    // Each of these is below 100 and not negative in a civil date and time.
    let two = |v: i8| v.unsigned_abs().into();
    put(5, 2, two(utc.month()));
    put(8, 2, two(utc.day()));
    put(11, 2, two(utc.hour()));
    put(14, 2, two(utc.minute()));
    put(17, 2, two(utc.second()));
    Some(text)
}

/// Quantities by resource name: what is allowed and what is used.
#[derive(Debug, serde::Serialize)]
struct Usage<'a> {
    hard: &'a BTreeMap<String, Quantity>,
    used: &'a BTreeMap<String, Quantity>,
}

/// One `Home` object of `person`: `apiVersion`, `kind`, `metadata` (name, creationTimestamp),
/// `role`, `via`, `state`, `user`; `until`, `profile`, and `total` and `slice` (each `hard` and
/// `used`) only when there is one.
pub fn object<'a>(home: &'a Merged, person: &'a Person) -> HomeObject<'a> {
    HomeObject {
        api_version: GROUP_VERSION,
        kind: "Home",
        metadata: HomeMetadata {
            name: &home.namespace,
            creation_timestamp: home.since.as_ref(),
        },
        role: &home.role,
        via: &home.via,
        state: state(home.state),
        user: &person.user,
        until: home.until.as_ref(),
        profile: person.profile.as_deref(),
        total: home.total.as_ref().map(|total| Usage {
            hard: &total.hard,
            used: &total.used,
        }),
        slice: slice_of(home).map(|slice| Usage {
            hard: &slice.hard,
            used: &slice.used,
        }),
    }
}

/// The home's own slice of its owner's total, if the total lists one for it.
fn slice_of(home: &Merged) -> Option<&HomeSlice> {
    let total = home.total.as_ref()?;
    total.homes.iter().find(|s| s.namespace == home.namespace)
}

/// Use against limits for people: `pods 4/10, requests.cpu 500m/2`, a resource of `hard` at a
/// time (one not counted yet as `0`).
fn usage(hard: &BTreeMap<String, Quantity>, used: &BTreeMap<String, Quantity>) -> String {
    let pairs: Vec<String> = hard
        .iter()
        .map(|(k, h)| {
            let used = used.get(k).map_or("0", |q| q.0.as_str());
            format!("{k} {used}/{}", h.0)
        })
        .collect();
    pairs.join(", ")
}

/// A `HomeList` as served (see [`list`]).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HomeList<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: ListMetadata,
    items: Vec<HomeObject<'a>>,
}

/// A list's metadata: the `resourceVersion` a watch may start from.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ListMetadata {
    resource_version: String,
}

/// A `HomeList` of `person`'s homes at `resource_version`, each as [`object`].
pub fn list<'a>(homes: &'a [Merged], person: &'a Person, resource_version: String) -> HomeList<'a> {
    HomeList {
        api_version: GROUP_VERSION,
        kind: "HomeList",
        metadata: ListMetadata { resource_version },
        items: homes.iter().map(|home| object(home, person)).collect(),
    }
}

/// A duration as kubectl prints an age (`45s`, `12m`, `5h`, `40d`, `2y`; apimachinery's
/// `ShortHumanDuration`): whole units, the largest that keeps the number readable.
pub fn age(seconds: i64) -> String {
    let seconds = seconds.max(0);
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    if seconds < 60 {
        format!("{seconds}s")
    } else if minutes < 60 {
        format!("{minutes}m")
    } else if hours < 48 {
        format!("{hours}h")
    } else if days < 730 {
        format!("{days}d")
    } else {
        format!("{}y", days / 365)
    }
}

/// The server-side `Table` (`meta.k8s.io/v1`) of `homes` at `now`: NAME, ROLE, VIA, UNTIL,
/// AGE, and STATE, SLICE and TOTAL (priority 1: `-o wide` only; `-` without a total), each row
/// carrying its object's metadata.
pub fn table(homes: &[Merged], now: Timestamp) -> Value {
    let column = |name: &str, priority: i32, description: &str| {
        json!({ "name": name, "type": "string", "format": if name == "Name" { "name" } else { "" },
                "priority": priority, "description": description })
    };
    let rows: Vec<Value> = homes
        .iter()
        .map(|home| {
            let until = home
                .until
                .as_ref()
                .map_or("-".to_owned(), |t| t.0.to_string());
            let age = home.since.as_ref().map_or("<unknown>".to_owned(), |t| {
                age(now.duration_since(t.0).as_secs())
            });
            let slice = slice_of(home).map_or("-".to_owned(), |s| usage(&s.hard, &s.used));
            let total = home
                .total
                .as_ref()
                .map_or("-".to_owned(), |t| usage(&t.hard, &t.used));
            json!({
                "cells": [home.namespace, home.role, home.via, until, age, state(home.state),
                          slice, total],
                "object": {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": metadata(home),
                },
            })
        })
        .collect();
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "Table",
        "metadata": { "resourceVersion": "" },
        "columnDefinitions": [
            column("Name", 0, "The namespace."),
            column("Role", 0, "The ClusterRole you have there (the highest, with several ways in)."),
            column("Via", 0, "Your ways in: own home, a share, a group's share."),
            column("Until", 0, "When the last way in ends, if it does."),
            column("Age", 0, "Since your first way in."),
            column("State", 1, "Your own home's state."),
            column("Slice", 1, "This home's slice of its owner's total quota: used/hard."),
            column("Total", 1, "Its owner's total quota across all their homes: used/hard."),
        ],
        "rows": rows,
    })
}

/// `/apis/homes.homestead.dev/v1alpha1`: one resource, `homes`, cluster-scoped, read-only.
pub fn resource_list() -> APIResourceList {
    APIResourceList {
        group_version: GROUP_VERSION.to_owned(),
        resources: vec![APIResource {
            name: "homes".to_owned(),
            singular_name: "home".to_owned(),
            kind: "Home".to_owned(),
            namespaced: false,
            verbs: ["get", "list", "watch"].map(str::to_owned).to_vec(),
            // As Homestead's CRDs: `kubectl get hshome`, and `kubectl get homestead` lists
            // homes beside Users, Profiles, DirectoryGroups and Shares.
            short_names: Some(vec!["hshome".to_owned()]),
            categories: Some(vec!["homestead".to_owned()]),
            ..APIResource::default()
        }],
    }
}

/// `/apis/homes.homestead.dev`: the group and its one version.
pub fn group() -> APIGroup {
    let version = GroupVersionForDiscovery {
        group_version: GROUP_VERSION.to_owned(),
        version: VERSION.to_owned(),
    };
    APIGroup {
        name: GROUP.to_owned(),
        preferred_version: Some(version.clone()),
        versions: vec![version],
        server_address_by_client_cidrs: None,
    }
}

/// `/apis`: the groups this server serves (the one).
pub fn group_list() -> APIGroupList {
    APIGroupList {
        groups: vec![group()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The times of a `Home` are written as `Time` writes them: whole seconds in UTC, the
    /// fraction dropped (not rounded), years padded to four digits; digit by digit from year 0
    /// on, by `Time` itself before.
    #[test]
    fn times_are_written_as_time_writes_them() {
        #[derive(serde::Serialize)]
        struct Fast<'a>(#[serde(serialize_with = "optional_time")] Option<&'a Time>);
        for (text, written) in [
            ("2026-12-04T18:00:00Z", Some("2026-12-04T18:00:00Z")),
            (
                "2026-12-04T18:07:09.999999999Z",
                Some("2026-12-04T18:07:09Z"),
            ),
            ("2026-12-31T23:59:59-05:30", Some("2027-01-01T05:29:59Z")),
            ("2027-01-01T01:00:00+05:30", Some("2026-12-31T19:30:00Z")),
            ("1970-01-01T00:00:00Z", Some("1970-01-01T00:00:00Z")),
            ("1969-12-31T23:59:59.5Z", Some("1969-12-31T23:59:59Z")),
            ("0042-02-28T01:02:03Z", Some("0042-02-28T01:02:03Z")),
            ("0000-01-01T00:00:00Z", Some("0000-01-01T00:00:00Z")),
            ("9999-12-30T21:59:59Z", Some("9999-12-30T21:59:59Z")),
            ("-000001-01-01T00:00:00Z", None),
        ] {
            let time = Time(text.parse().unwrap());
            let fast = rfc3339(&time);
            assert_eq!(
                fast.as_ref().map(|t| std::str::from_utf8(t).unwrap()),
                written,
                "{text}"
            );
            assert_eq!(
                serde_json::to_string(&Fast(Some(&time))).unwrap(),
                serde_json::to_string(&time).unwrap(),
                "{text}"
            );
        }
        assert_eq!(serde_json::to_string(&Fast(None)).unwrap(), "null");
    }

    fn homes() -> Vec<Home> {
        let until = Time("2026-12-03T00:00:00Z".parse().unwrap());
        vec![
            Home {
                namespace: "team-data".into(),
                role: "edit".into(),
                via: Via::Group {
                    group: "analysts".into(),
                    share: "q4".into(),
                },
                until: Some(until),
                state: HomeState::Active,
                since: Some(Time("2026-11-20T00:00:00Z".parse().unwrap())),
            },
            Home {
                namespace: "team-data".into(),
                role: "view".into(),
                via: Via::Share("review".into()),
                until: Some(Time("2026-12-04T00:00:00Z".parse().unwrap())),
                state: HomeState::Active,
                since: Some(Time("2026-11-18T00:00:00Z".parse().unwrap())),
            },
            Home {
                namespace: "user-alice".into(),
                role: "admin".into(),
                via: Via::OwnHome,
                until: None,
                state: HomeState::Suspended,
                since: None,
            },
        ]
    }

    #[test]
    fn a_namespace_with_several_ways_in_is_one_home_with_the_highest_role() {
        let merged = merged(&homes());
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].role, "edit");
        assert_eq!(merged[0].via, "group analysts (share q4), share review");
        assert_eq!(merged[1].state, HomeState::Suspended);
        assert_eq!(
            merged[0].since,
            Some(Time("2026-11-18T00:00:00Z".parse().unwrap())),
            "the earlier way in"
        );
        let person = Person {
            user: "bob".into(),
            profile: Some("engineer".into()),
        };
        let list = serde_json::to_value(list(&merged, &person, "7".into())).unwrap();
        assert_eq!(
            (&list["apiVersion"], &list["kind"]),
            (&json!(GROUP_VERSION), &json!("HomeList"))
        );
        assert_eq!(list["metadata"], json!({ "resourceVersion": "7" }));
        assert_eq!(list["items"][0]["apiVersion"], GROUP_VERSION);
        assert_eq!(list["items"][0]["kind"], "Home");
        assert_eq!(
            (&list["items"][0]["role"], &list["items"][0]["state"]),
            (&json!("edit"), &json!("Active"))
        );
        assert_eq!(list["items"][0]["user"], "bob");
        assert_eq!(list["items"][0]["profile"], "engineer");
        assert_eq!(
            list["items"][0]["metadata"]["creationTimestamp"],
            "2026-11-18T00:00:00Z"
        );
        assert_eq!(list["items"][0]["metadata"]["name"], "team-data");
        assert_eq!(
            list["items"][0]["until"], "2026-12-04T00:00:00Z",
            "the later end"
        );
        assert!(
            list["items"][1].get("until").is_none(),
            "an own home does not end"
        );
        let nobody = serde_json::to_value(object(&merged[1], &Person::default())).unwrap();
        assert!(nobody.get("profile").is_none(), "no Profile: no field");
        assert_eq!(
            nobody["metadata"].get("creationTimestamp"),
            Some(&Value::Null),
            "an unknown creation is null, as before"
        );
    }

    #[test]
    fn the_table_has_kubectls_columns_and_a_row_per_home() {
        let now = "2026-11-28T00:00:00Z".parse().unwrap();
        let table = table(&merged(&homes()), now);
        let columns: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                "Name", "Role", "Via", "Until", "Age", "State", "Slice", "Total"
            ]
        );
        assert_eq!(
            table["rows"][1]["cells"],
            json!([
                "user-alice",
                "admin",
                "own home",
                "-",
                "<unknown>",
                "Suspended",
                "-",
                "-"
            ])
        );
        assert_eq!(table["rows"][0]["cells"][4], "10d");
        assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "team-data");
    }

    #[test]
    fn a_home_with_a_total_shows_its_slice_and_the_total_as_used_of_hard() {
        let q = |s: &str| Quantity(s.into());
        let mut home = merged(&homes()).remove(1);
        home.total = Some(TotalQuotaStatus {
            hard: [("pods".into(), q("30")), ("requests.cpu".into(), q("2"))].into(),
            used: [("pods".into(), q("21"))].into(),
            homes: vec![HomeSlice {
                namespace: "user-alice".into(),
                hard: [("pods".into(), q("12"))].into(),
                used: [("pods".into(), q("9"))].into(),
            }],
        });
        let now = "2026-11-28T00:00:00Z".parse().unwrap();
        let table = table(std::slice::from_ref(&home), now);
        assert_eq!(table["rows"][0]["cells"][6], "pods 9/12");
        assert_eq!(table["rows"][0]["cells"][7], "pods 21/30, requests.cpu 0/2");
        let object = serde_json::to_value(object(&home, &Person::default())).unwrap();
        assert_eq!(object["slice"]["hard"]["pods"], "12");
        assert_eq!(object["total"]["used"]["pods"], "21");
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let ages: Vec<String> = [0, 59, 60, 3599, 3600, 47 * 3600, 48 * 3600, 800 * 86_400]
            .into_iter()
            .map(age)
            .collect();
        assert_eq!(ages, ["0s", "59s", "1m", "59m", "1h", "47h", "2d", "2y"]);
    }

    #[test]
    fn discovery_serves_one_read_only_cluster_scoped_resource() {
        let resources = resource_list();
        assert_eq!(resources.group_version, "homes.homestead.dev/v1alpha1");
        assert_eq!(resources.resources.len(), 1);
        assert!(!resources.resources[0].namespaced);
        assert_eq!(resources.resources[0].verbs, ["get", "list", "watch"]);
        assert_eq!(
            group_list().groups[0]
                .preferred_version
                .as_ref()
                .map(|v| v.version.as_str()),
            Some("v1alpha1")
        );
    }
}
