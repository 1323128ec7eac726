//! Faults: the leader SIGKILLed (and started again, as a Deployment would) or SIGSTOPped for a
//! while, every replica SIGKILLed and started again at once (a cold start beside large groups),
//! and the API server restarted (every watch breaks). Two operator replicas run, so a
//! kill or a long stop is a leader change. Each fault is a window in the model; it heals when
//! an operator renews the leader Lease after the fault ended, which the oracle observes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use homestead_testenv::{ControlPlane, Supervised};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::Api;
use serde::{Deserialize, Serialize};

use crate::common::{operator_pid, spawn_operator};
use crate::model::{API_RECOVERY_ALLOWED, Clock, FaultWindow, Model, RECOVERY_ALLOWED};
use crate::workload::Outcome;

/// One fault, with its random choices.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the leader; start it again after this many milliseconds.
    KillLeader { restart_after_ms: u64 },
    /// SIGSTOP the leader for this many milliseconds (past the Lease's 15 s, a standby leads).
    StopLeader { ms: u64 },
    /// Stop kube-apiserver and start it again (etcd keeps the data).
    RestartApiserver,
    /// SIGKILL every replica at once and start them all again after this many milliseconds,
    /// as a rollout or a node loss does: the new leader starts with empty caches, while the
    /// ballast groups (main.rs) are still listing.
    RestartAll { restart_after_ms: u64 },
}

impl Fault {
    pub fn draw(rng: &mut fastrand::Rng) -> Self {
        match rng.u32(..10) {
            0..4 => Fault::KillLeader {
                restart_after_ms: rng.u64(500..3000),
            },
            4..8 => Fault::StopLeader {
                ms: if rng.u32(..3) == 0 {
                    rng.u64(16_000..24_000)
                } else {
                    rng.u64(1_000..8_000)
                },
            },
            8 => Fault::RestartAll {
                restart_after_ms: rng.u64(200..2000),
            },
            _ => Fault::RestartApiserver,
        }
    }
}

/// One operator replica: its process, Lease identity (a new one after a kill, as a new Pod's)
/// and metrics address.
pub struct Replica {
    pub name: &'static str,
    pub pod: Mutex<String>,
    pub address: String,
    pub process: &'static Mutex<Supervised>,
    /// How often it was started again: after a kill, or after it exited (a replica that loses
    /// its Lease exits so a fresh one takes over).
    pub restarts: Mutex<u32>,
    /// Set while a fault owns the process (between a kill and the new start).
    pub in_fault: std::sync::atomic::AtomicBool,
}

impl Replica {
    /// Counts one more start and returns the log name for it (`<name>-<n>`).
    fn next_log(&self) -> &'static str {
        let mut restarts = self.restarts.lock().unwrap();
        *restarts += 1;
        format!("{}-{restarts}", self.name).leak()
    }

    /// Starts the replica again, as the kubelet restarts a container that exited: same Pod
    /// name and Lease identity. Returns whether it had exited.
    pub fn restart_if_exited(&self) -> bool {
        use std::sync::atomic::Ordering;
        if self.in_fault.load(Ordering::SeqCst) || self.process.lock().unwrap().is_running() {
            return false;
        }
        let pod = self.pod.lock().unwrap().clone();
        let log = self.next_log();
        *self.process.lock().unwrap() = spawn_operator(log, &pod, &self.address);
        true
    }
}

/// The operator replicas and the control plane faults are injected into.
pub struct Faults {
    pub plane: &'static ControlPlane,
    pub replicas: Vec<Replica>,
    pub admin: Client,
}

/// The name of the operator's leader Lease (in `homestead-system`).
pub const LEASE: &str = "homestead-leader";

impl Faults {
    /// The replica holding the Lease, if one does and is known.
    async fn leader(&self) -> Option<&Replica> {
        let lease = Api::<Lease>::namespaced(self.admin.clone(), "homestead-system")
            .get_opt(LEASE)
            .await
            .ok()??;
        let holder = lease.spec?.holder_identity?;
        self.replicas
            .iter()
            .find(|r| *r.pod.lock().unwrap() == holder)
    }

    /// Starts `fault` now and heals it in the background; records its window in the model.
    pub fn inject(
        self: &Arc<Self>,
        fault: Fault,
        model: &Arc<Mutex<Model>>,
        clock: Clock,
    ) -> Outcome {
        let index = {
            let mut model = model.lock().unwrap();
            model.faults.push(FaultWindow {
                what: format!("{fault:?}"),
                start: clock.now(),
                end: None,
                healed: None,
                recovery: match fault {
                    Fault::RestartApiserver => API_RECOVERY_ALLOWED,
                    _ => RECOVERY_ALLOWED,
                },
            });
            model.faults.len() - 1
        };
        let (faults, model) = (self.clone(), model.clone());
        tokio::spawn(async move {
            let detail = faults.run(&fault).await;
            let mut model = model.lock().unwrap();
            let end = clock.now();
            model.faults[index].end = Some(end);
            model.faults[index].what += &format!(": {detail}");
            // A leader stopped for less than its Lease resumes leading at once; otherwise the
            // oracle sees the fault healed when a leader renews the Lease again.
            if matches!(fault, Fault::StopLeader { ms } if ms < 15_000) {
                model.faults[index].healed = Some(end);
            }
        });
        Outcome {
            ok: true,
            detail: "injected".into(),
        }
    }

    async fn run(&self, fault: &Fault) -> String {
        match fault {
            Fault::KillLeader { restart_after_ms } => {
                let Some(replica) = self.leader().await else {
                    return "no leader to kill".into();
                };
                let pod = replica.pod.lock().unwrap().clone();
                let Some(pid) = operator_pid(&replica.address) else {
                    return format!("{pod} not running");
                };
                signal("-KILL", pid);
                tokio::time::sleep(Duration::from_millis(*restart_after_ms)).await;
                let restarts = {
                    let mut restarts = replica.restarts.lock().unwrap();
                    *restarts += 1;
                    *restarts
                };
                // A new Pod: a name, a Lease identity and a log of its own. The other replica
                // or this one takes the Lease once the killed leader's expires.
                let log: &'static str = format!("{}-{restarts}", replica.name).leak();
                let new_pod = format!("{}-{restarts}", replica.name);
                *replica.process.lock().unwrap() = spawn_operator(log, &new_pod, &replica.address);
                *replica.pod.lock().unwrap() = new_pod.clone();
                format!("killed {pod} ({pid}) and started {new_pod}")
            }
            Fault::StopLeader { ms } => {
                let Some(replica) = self.leader().await else {
                    return "no leader to stop".into();
                };
                let pod = replica.pod.lock().unwrap().clone();
                let Some(pid) = operator_pid(&replica.address) else {
                    return format!("{pod} not running");
                };
                signal("-STOP", pid);
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                signal("-CONT", pid);
                format!("stopped {pod} ({pid}) for {ms} ms")
            }
            Fault::RestartAll { restart_after_ms } => {
                use std::sync::atomic::Ordering;
                let mut killed = Vec::new();
                for replica in &self.replicas {
                    replica.in_fault.store(true, Ordering::SeqCst);
                    if let Some(pid) = operator_pid(&replica.address) {
                        signal("-KILL", pid);
                        killed.push(pid);
                    }
                }
                tokio::time::sleep(Duration::from_millis(*restart_after_ms)).await;
                let mut started = Vec::new();
                for replica in &self.replicas {
                    let log = replica.next_log();
                    let pod = log.to_owned();
                    *replica.process.lock().unwrap() = spawn_operator(log, &pod, &replica.address);
                    *replica.pod.lock().unwrap() = pod.clone();
                    replica.in_fault.store(false, Ordering::SeqCst);
                    started.push(pod);
                }
                format!("killed every replica ({killed:?}) and started {started:?}")
            }
            Fault::RestartApiserver => match self.plane.restart_apiserver().await {
                Ok(()) => "kube-apiserver restarted".into(),
                Err(e) => format!("kube-apiserver restart failed: {e}"),
            },
        }
    }

    /// Every replica's peak resident memory (VmHWM), in bytes, where it runs.
    pub fn peak_rss(&self) -> Vec<(String, u64)> {
        self.replicas
            .iter()
            .filter_map(|r| {
                let pid = operator_pid(&r.address)?;
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                let kib: u64 = status
                    .lines()
                    .find(|l| l.starts_with("VmHWM:"))?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                Some((r.name.to_owned(), kib * 1024))
            })
            .collect()
    }
}

fn signal(which: &str, pid: u32) {
    let _ = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status();
}
