//! `homestead release`: every person released before Homestead's CRDs are removed
//! (docs/operations.md, "Uninstall").
//!
//! A User carries Homestead's finalizer, so deleting the `users.homestead.dev` CRD waits until
//! the operator has released every User; the operator treats each as `deletionPolicy: Retain`
//! while its CRD is being deleted (access revoked, namespace and data kept, labelled
//! `homestead.dev/retained-from`, owner reference removed). That takes a running operator with
//! its RBAC, which `helm uninstall` removes before the CRDs: hence this command, run by the
//! chart's `pre-delete` hook when `crds.keep=false`, while everything still runs.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use homestead_api::{CRD_NAME, LABEL_RETAINED_FROM, User};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::wait::{await_condition, conditions};

use crate::args::ReleaseArgs;
use crate::doctor::{self, Verdict};

/// How often the number of Users still to release is said while waiting.
const PROGRESS: Duration = Duration::from_secs(10);

/// `homestead release`: checks that an operator leads, deletes the CRD `users.homestead.dev`
/// and waits until it is gone (`args.timeout`). Exit 0 when it is gone (or was not there).
///
/// # Errors
/// When no operator leads (nothing is deleted then), when the CRD cannot be read or deleted,
/// or when Users are left at the timeout (named, at most ten).
pub async fn run(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let client = args.cluster.client().await?;
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let Some(crd) = crds
        .get_opt(CRD_NAME)
        .await
        .with_context(|| format!("reading the CRD {CRD_NAME}"))?
    else {
        println!("no CRD {CRD_NAME}: no User to release");
        return Ok(ExitCode::SUCCESS);
    };
    let lease = doctor::lease(
        &client,
        &args.operator.operator_namespace,
        &args.operator.lease(),
    )
    .await;
    if lease.verdict != Verdict::Pass {
        bail!(
            "no operator leads ({}): deleting {CRD_NAME} now would leave it and every User waiting on Homestead's finalizer; start the operator first (fix: {})",
            lease.found,
            lease.fix.unwrap_or_default()
        );
    }
    println!("operator: {}", lease.found);
    let users = left(&client).await?;
    let uid = crd.metadata.uid.clone().unwrap_or_default();
    if crd.metadata.deletion_timestamp.is_none() {
        crds.delete(CRD_NAME, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting the CRD {CRD_NAME}"))?;
    }
    println!(
        "deleting the CRD {CRD_NAME}: the operator releases each of {} Users as Retain (access revoked; namespace and data kept, labelled {LABEL_RETAINED_FROM})",
        users.len()
    );
    let gone = await_condition(crds, CRD_NAME, conditions::is_deleted(&uid));
    tokio::pin!(gone);
    let deadline = tokio::time::Instant::now() + args.timeout;
    let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS, PROGRESS);
    loop {
        tokio::select! {
            done = &mut gone => {
                done.with_context(|| format!("watching the CRD {CRD_NAME}"))?;
                println!(
                    "every User released and {CRD_NAME} gone; their namespaces stay: kubectl get namespaces -l {LABEL_RETAINED_FROM}"
                );
                return Ok(ExitCode::SUCCESS);
            }
            _ = progress.tick() => {
                if let Ok(users) = left(&client).await {
                    println!("{} Users still to release", users.len());
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                let users = left(&client).await.unwrap_or_default();
                bail!(
                    "{} Users not released within {} s ({}{}): see the operator's log and docs/troubleshooting.md, \"User stuck Terminating\"",
                    users.len(),
                    args.timeout.as_secs(),
                    users.iter().take(10).cloned().collect::<Vec<_>>().join(", "),
                    if users.len() > 10 { ", ..." } else { "" }
                );
            }
        }
    }
}

/// The names of the Users there are (none once the CRD is gone).
async fn left(client: &Client) -> anyhow::Result<Vec<String>> {
    match Api::<User>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list
            .items
            .into_iter()
            .filter_map(|u| u.metadata.name)
            .collect()),
        Err(kube::Error::Api(status)) if status.is_not_found() => Ok(Vec::new()),
        Err(error) => Err(error).context("listing Users"),
    }
}
