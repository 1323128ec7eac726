//! `homestead doctor`'s network isolation check, with real traffic: a NetworkPolicy is only
//! words unless the cluster's network plugin enforces it, and nothing in the API says whether
//! it does (<https://kubernetes.io/docs/concepts/services-networking/network-policies/#prerequisites>).
//!
//! The check makes two namespaces, `homestead-doctor-<id>-home` with the very NetworkPolicy an
//! isolated Profile gives a home ([`isolation_spec`]) and `homestead-doctor-<id>-away` with
//! none, each labelled `homestead.dev/doctor=probe` and Pod Security `restricted`; starts a
//! `homestead probe serve` Pod in each, from Homestead's own image; then three
//! `homestead probe connect` Pods:
//!
//! - within the home, to the home's server: must get through (else the probe proves nothing);
//! - from away, to the home's server: must be blocked (ingress);
//! - from the home, to away's server: must be blocked (egress).
//!
//! and removes both namespaces (and any a stopped run left) when done.

use std::time::Duration;

use homestead_reconciler::plan::desired::isolation_spec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;

use super::check::{Check, Verdict};
use crate::args::{PROBE_PORT, ProbeWant};

const NAME: &str = "network isolation";

/// The label (with value `probe`) on the namespaces the check makes.
pub const PROBE_LABEL: &str = "homestead.dev/doctor";

/// How long a probe Pod may take to start, and a client to finish.
const WAIT: Duration = Duration::from_secs(90);

/// How long a client keeps trying, in seconds (a policy takes a moment to be applied).
const WITHIN_SECONDS: u64 = 30;

/// How one probe came out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The client saw what it wanted; what it said.
    Met(String),
    /// It did not; what it said.
    Missed(String),
}

/// The three probes' outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probes {
    /// Home to home (wanted: reached).
    pub within: Probe,
    /// Away to home (wanted: blocked).
    pub into_home: Probe,
    /// Home to away (wanted: blocked).
    pub out_of_home: Probe,
}

/// Runs the check for the Profiles `isolated` (their names), with the probe image `image` or
/// else the image of the operator's Deployment `deployment` (namespace, name).
pub async fn check(
    client: &Client,
    image: Option<String>,
    deployment: (&str, &str),
    isolated: &[String],
) -> Check {
    let image = match image {
        Some(image) => image,
        None => match operator_image(client, deployment).await {
            Some(image) => image,
            None => {
                return Check::with(
                    NAME,
                    Verdict::Warn,
                    format!(
                        "Profiles {} isolate their homes; enforcement not checked: no image for the probe Pods",
                        isolated.join(", ")
                    ),
                    format!(
                        "pass --probe-image with Homestead's image as the nodes pull it (no Deployment {} in {} to take it from; --fullname names it)",
                        deployment.1, deployment.0
                    ),
                );
            }
        },
    };
    let run = Run::new(client.clone());
    eprintln!(
        "network isolation: trying real traffic between probe Pods of {image} in {} and {} (a minute at most, unless Pods do not start)",
        run.home, run.away
    );
    let started = std::time::Instant::now();
    let outcome = run.probe(&image).await;
    run.remove().await;
    judge(&outcome, isolated, &image, started.elapsed().as_secs_f64())
}

/// The verdict on the probes (or on why they did not run): pass when traffic flowed within the
/// home and was blocked both ways across its edge.
pub fn judge(
    outcome: &Result<Probes, String>,
    isolated: &[String],
    image: &str,
    seconds: f64,
) -> Check {
    let profiles = isolated.join(", ");
    let probes = match outcome {
        Ok(probes) => probes,
        Err(why) => {
            return Check::with(
                NAME,
                Verdict::Warn,
                format!("Profiles {profiles} isolate their homes; enforcement not checked: {why}"),
                format!(
                    "the probe Pods run {image} as their command `homestead probe`: pass --probe-image with Homestead's image as the nodes pull it, or see why the Pods did not run"
                ),
            );
        }
    };
    let enforce = "the NetworkPolicy is written but nothing enforces it: use a network plugin that enforces NetworkPolicies (Calico, Cilium, kube-router, ...) before relying on isolation, then run doctor again";
    match probes {
        Probes {
            within: Probe::Missed(said),
            ..
        } => Check::with(
            NAME,
            Verdict::Warn,
            format!(
                "inconclusive: a probe Pod could not reach another in its own isolated namespace ({said})"
            ),
            "check Pod networking between Pods on the cluster (the network plugin), then run doctor again",
        ),
        Probes {
            into_home: Probe::Missed(said),
            ..
        } => Check::with(
            NAME,
            Verdict::Fail,
            format!(
                "NOT enforced: a Pod in another namespace reached a Pod of an isolated home ({said}); Profiles {profiles} promise otherwise"
            ),
            enforce,
        ),
        Probes {
            out_of_home: Probe::Missed(said),
            ..
        } => Check::with(
            NAME,
            Verdict::Fail,
            format!(
                "NOT enforced for egress: a Pod of an isolated home reached a Pod in another namespace ({said}); Profiles {profiles} promise otherwise"
            ),
            enforce,
        ),
        Probes { .. } => Check::pass(
            NAME,
            format!(
                "enforced for Profiles {profiles}: with a home's isolation policy, Pods in another namespace could not reach a Pod inside, nor it them; within the home they could ({seconds:.0} s, probe Pods of {image})"
            ),
        ),
    }
}

/// The image of the operator's Deployment `(namespace, name)`, if there is one.
async fn operator_image(client: &Client, (namespace, name): (&str, &str)) -> Option<String> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .ok()??;
    deployment
        .spec?
        .template
        .spec?
        .containers
        .into_iter()
        .next()?
        .image
}

/// One run of the check: its two namespaces.
struct Run {
    client: Client,
    home: String,
    away: String,
}

impl Run {
    fn new(client: Client) -> Self {
        let (home, away) = Self::new_names();
        Self { client, home, away }
    }

    /// A run's two namespace names, from the clock (`homestead-doctor-<6 hex>-home|away`).
    fn new_names() -> (String, String) {
        let id = Timestamp::now().as_millisecond().rem_euclid(1 << 24);
        (
            format!("homestead-doctor-{id:06x}-home"),
            format!("homestead-doctor-{id:06x}-away"),
        )
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    async fn probe(&self, image: &str) -> Result<Probes, String> {
        let create = PostParams::default();
        let namespaces = Api::<Namespace>::all(self.client.clone());
        self.remove_leftovers(&namespaces).await;
        for name in [&self.home, &self.away] {
            namespaces
                .create(&create, &probe_namespace(name))
                .await
                .map_err(|e| format!("cannot create the namespace {name}: {e}"))?;
        }
        let policy = NetworkPolicy {
            metadata: ObjectMeta {
                name: Some("homestead-isolation".to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(isolation_spec(&[])),
        };
        Api::<NetworkPolicy>::namespaced(self.client.clone(), &self.home)
            .create(&create, &policy)
            .await
            .map_err(|e| format!("cannot create the NetworkPolicy in {}: {e}", self.home))?;
        let serve = ["probe".to_owned(), "serve".to_owned()];
        for namespace in [&self.home, &self.away] {
            self.start(namespace, "server", image, &serve).await?;
        }
        let home_server = self.address(&self.home, "server").await?;
        let away_server = self.address(&self.away, "server").await?;
        let clients = [
            (&self.home, "within", &home_server, ProbeWant::Reached),
            (&self.away, "into-home", &home_server, ProbeWant::Blocked),
            (&self.home, "out-of-home", &away_server, ProbeWant::Blocked),
        ];
        for (namespace, name, address, want) in clients {
            let want = match want {
                ProbeWant::Reached => "reached",
                ProbeWant::Blocked => "blocked",
            };
            let args = [
                "probe".to_owned(),
                "connect".to_owned(),
                address.clone(),
                format!("--want={want}"),
                format!("--within-seconds={WITHIN_SECONDS}"),
            ];
            self.start(namespace, name, image, &args).await?;
        }
        Ok(Probes {
            within: self.finished(&self.home, "within").await?,
            into_home: self.finished(&self.away, "into-home").await?,
            out_of_home: self.finished(&self.home, "out-of-home").await?,
        })
    }

    async fn start(
        &self,
        namespace: &str,
        name: &str,
        image: &str,
        args: &[String],
    ) -> Result<(), String> {
        self.pods(namespace)
            .create(&PostParams::default(), &probe_pod(name, image, args))
            .await
            .map(drop)
            .map_err(|e| format!("cannot create the Pod {namespace}/{name}: {e}"))
    }

    /// Waits until the Pod runs; its `IP:port`.
    async fn address(&self, namespace: &str, name: &str) -> Result<String, String> {
        let pods = self.pods(namespace);
        let running = await_condition(pods.clone(), name, conditions::is_pod_running());
        match tokio::time::timeout(WAIT, running).await {
            Ok(Ok(Some(pod))) => pod
                .status
                .and_then(|s| s.pod_ip)
                .map(|ip| format!("{ip}:{PROBE_PORT}"))
                .ok_or_else(|| format!("the Pod {namespace}/{name} runs without an IP")),
            _ => Err(self.stuck(namespace, name).await),
        }
    }

    /// Waits until the client Pod has finished; how it came out.
    async fn finished(&self, namespace: &str, name: &str) -> Result<Probe, String> {
        let pods = self.pods(namespace);
        let done = await_condition(pods, name, |pod: Option<&Pod>| {
            phase(pod).is_some_and(|p| p == "Succeeded" || p == "Failed")
        });
        let pod = match tokio::time::timeout(WAIT, done).await {
            Ok(Ok(Some(pod))) => pod,
            _ => return Err(self.stuck(namespace, name).await),
        };
        let terminated = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref()?.first()?.state.as_ref())
            .and_then(|s| s.terminated.clone());
        let said = terminated
            .as_ref()
            .and_then(|t| t.message.clone())
            .unwrap_or_default()
            .trim()
            .to_owned();
        match (phase(Some(&pod)), terminated.map(|t| t.exit_code)) {
            (Some("Succeeded"), _) => Ok(Probe::Met(said)),
            (_, Some(1)) => Ok(Probe::Missed(said)),
            (_, code) => Err(format!(
                "the probe Pod {namespace}/{name} failed (exit code {code:?}): {said}"
            )),
        }
    }

    /// Why the Pod has not got where it should: the container's waiting reason, or the Pod's
    /// unmet condition, or its phase.
    async fn stuck(&self, namespace: &str, name: &str) -> String {
        let pod = match self.pods(namespace).get_opt(name).await {
            Ok(Some(pod)) => pod,
            Ok(None) => return format!("the Pod {namespace}/{name} is gone"),
            Err(e) => return format!("cannot read the Pod {namespace}/{name}: {e}"),
        };
        let status = pod.status.unwrap_or_default();
        let waiting = status
            .container_statuses
            .iter()
            .flatten()
            .find_map(|c| c.state.as_ref()?.waiting.clone())
            .map(|w| {
                format!(
                    "{}: {}",
                    w.reason.unwrap_or_default(),
                    w.message.unwrap_or_default()
                )
            });
        let condition = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.status == "False" && c.message.is_some())
            .map(|c| format!("{}: {}", c.type_, c.message.clone().unwrap_or_default()));
        let why = waiting
            .or(condition)
            .unwrap_or_else(|| format!("phase {}", status.phase.unwrap_or_default()));
        format!(
            "the probe Pod {namespace}/{name} did not get going within {} s ({})",
            WAIT.as_secs(),
            why.trim_end_matches([' ', ':'])
        )
    }

    async fn remove_leftovers(&self, namespaces: &Api<Namespace>) {
        let selector = ListParams::default().labels(&format!("{PROBE_LABEL}=probe"));
        let Ok(old) = namespaces.list_metadata(&selector).await else {
            return;
        };
        for name in old.into_iter().filter_map(|n| n.metadata.name) {
            if is_probe_namespace(&name) {
                let _ = namespaces.delete(&name, &DeleteParams::background()).await;
            }
        }
    }

    /// Removes both namespaces (without waiting for them to go).
    async fn remove(&self) {
        let namespaces = Api::<Namespace>::all(self.client.clone());
        for name in [&self.home, &self.away] {
            if let Err(error) = namespaces.delete(name, &DeleteParams::background()).await
                && !matches!(&error, kube::Error::Api(s) if s.is_not_found())
            {
                eprintln!(
                    "cannot remove the probe namespace {name} ({error}): delete it by hand, or the next run of doctor will"
                );
            }
        }
    }
}

/// Whether `name` is one a run of the check makes (`homestead-doctor-<6 hex>-home|away`): a
/// leftover is removed only when it carries the label and has that name, so a label put on
/// someone's namespace by mistake never gets it deleted.
fn is_probe_namespace(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("homestead-doctor-") else {
        return false;
    };
    let Some((id, side)) = rest.split_once('-') else {
        return false;
    };
    id.len() == 6 && id.bytes().all(|b| b.is_ascii_hexdigit()) && matches!(side, "home" | "away")
}

fn phase(pod: Option<&Pod>) -> Option<&str> {
    pod?.status.as_ref()?.phase.as_deref()
}

fn probe_namespace(name: &str) -> Namespace {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            PROBE_LABEL: "probe",
            "pod-security.kubernetes.io/enforce": "restricted",
        }},
    }))
    .expect("a valid Namespace")
}

/// A probe Pod meeting Pod Security's `restricted` level: Homestead's image (its entrypoint is
/// `homestead`) with `args`, no ServiceAccount token, a little CPU and memory, never restarted.
fn probe_pod(name: &str, image: &str, args: &[String]) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {PROBE_LABEL: "probe"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "probe",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": args,
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {
                    "requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"memory": "64Mi"},
                },
            }],
        },
    }))
    .expect("a valid Pod")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(within: Probe, into_home: Probe, out_of_home: Probe) -> Check {
        let probes = Probes {
            within,
            into_home,
            out_of_home,
        };
        judge(&Ok(probes), &["intern".to_owned()], "img", 9.0)
    }

    fn met() -> Probe {
        Probe::Met("ok".to_owned())
    }

    fn missed(said: &str) -> Probe {
        Probe::Missed(said.to_owned())
    }

    #[test]
    fn only_namespaces_a_run_names_count_as_leftovers() {
        let run = Run::new_names();
        assert!(is_probe_namespace(&run.0) && is_probe_namespace(&run.1));
        for other in [
            "team-ml",
            "homestead-system",
            "homestead-doctor-",
            "homestead-doctor-abc-home",
            "homestead-doctor-00ff0g-home",
            "homestead-doctor-00ff00-data",
            "homestead-doctor-00ff00-home-x",
        ] {
            assert!(!is_probe_namespace(other), "{other}");
        }
    }

    #[test]
    fn blocked_both_ways_and_open_within_passes() {
        let check = judged(met(), met(), met());
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
        assert!(check.found.starts_with("enforced for Profiles intern"));
    }

    #[test]
    fn traffic_into_or_out_of_a_home_fails_and_names_the_fix() {
        let into = judged(met(), missed("10.0.0.5:8080: reached"), met());
        assert_eq!(into.verdict, Verdict::Fail);
        assert!(into.found.contains("10.0.0.5:8080: reached"), "{into:?}");
        assert!(into.fix.unwrap().contains("network plugin that enforces"));
        let out = judged(met(), met(), missed("reached"));
        assert_eq!(out.verdict, Verdict::Fail);
        assert!(out.found.starts_with("NOT enforced for egress"), "{out:?}");
    }

    #[test]
    fn no_traffic_within_the_home_proves_nothing() {
        // Everything blocked, the home's own traffic too: not a pass, not a failure of isolation.
        let check = judged(missed("blocked"), met(), met());
        assert_eq!(check.verdict, Verdict::Warn);
        assert!(check.found.starts_with("inconclusive"), "{check:?}");
    }

    #[test]
    fn probes_that_did_not_run_warn_with_the_reason() {
        let check = judge(
            &Err("ErrImagePull: not found".to_owned()),
            &["intern".to_owned()],
            "img",
            90.0,
        );
        assert_eq!(check.verdict, Verdict::Warn);
        assert!(check.found.contains("ErrImagePull: not found"), "{check:?}");
        assert!(check.fix.unwrap().contains("--probe-image"));
    }
}
