//! `homestead share` (`kubectl homestead share`): a person shares their home in one command
//! (docs/sharing.md). The admission policy `homestead-share-owner` wants the annotation
//! `homestead.dev/created-by` to name whoever creates a Share; this asks the API server who
//! that is (a SelfSubjectReview, `authentication.k8s.io/v1`) and fills it in, so nobody types
//! their own identity by hand. Creates the Share with a request that fails if it exists; writes
//! nothing else. Only the operator turns it into access.

use std::io::Write;

use anyhow::Context as _;
use homestead_api::{ANNOTATION_CREATED_BY, Share, ShareSpec};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp, Unit};
use kube::api::{Api, PostParams};

use crate::args::{AccessFormat, ShareArgs};

/// Creates the Share `args` describe and prints it as `args.output` says.
///
/// # Errors
/// When the cluster cannot be reached, the API server does not say who the caller is, or it
/// refuses the Share (RBAC, the schema, or an admission policy; its message names the rule).
pub async fn run(args: ShareArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut config = args.cluster.config().await?;
    if let Some(identity) = &args.impersonate {
        config.auth_info.impersonate = Some(identity.clone());
    }
    let client =
        kube::Client::try_from(config).context("connecting to the Kubernetes API server")?;
    let me = whoami(&client).await?;
    let share = desired(&args, &me, Timestamp::now())?;
    let params = PostParams {
        dry_run: args.dry_run,
        field_manager: Some("homestead-share".to_owned()),
    };
    let created = Api::<Share>::namespaced(client, &args.namespace)
        .create(&params, &share)
        .await
        .with_context(|| format!("creating Share {}/{}", args.namespace, args.name))?;
    print(
        &created,
        args.output,
        args.dry_run,
        std::io::stdout().lock(),
    )?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Who the API server says the caller of `client` is (a SelfSubjectReview,
/// `authentication.k8s.io/v1`): their username.
///
/// # Errors
/// When the request fails or the answer names nobody.
pub(crate) async fn whoami(client: &kube::Client) -> anyhow::Result<String> {
    Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("asking the API server who you are (SelfSubjectReview)")?
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .context("the API server did not say who you are")
}

/// The Share `args` describe, created by `creator` at `now`: `spec.expiresAt` is `now` plus
/// `--for`, to the second.
///
/// # Errors
/// When `--for` is too long to add to `now`.
fn desired(args: &ShareArgs, creator: &str, now: Timestamp) -> anyhow::Result<Share> {
    let lasts = SignedDuration::try_from(args.duration).context("--for is too long")?;
    let until = now
        .checked_add(lasts)
        .context("--for is too long")?
        .round(Unit::Second)?;
    let mut share = Share::new(
        &args.name,
        ShareSpec {
            to: args.to.clone(),
            role: args.role.clone(),
            expires_at: Time(until),
            reason: args.reason.clone(),
        },
    );
    share.metadata.namespace = Some(args.namespace.clone());
    share.metadata.annotations =
        Some([(ANNOTATION_CREATED_BY.to_owned(), creator.to_owned())].into());
    Ok(share)
}

/// Writes `share` to `out`: one line for `table` (`dry_run` says it was only checked), the whole
/// object for JSON and YAML.
///
/// # Errors
/// When writing fails.
fn print(
    share: &Share,
    format: AccessFormat,
    dry_run: bool,
    mut out: impl Write,
) -> anyhow::Result<()> {
    match format {
        AccessFormat::Json => serde_json::to_writer_pretty(&mut out, share)?,
        AccessFormat::Yaml => out.write_all(serde_saphyr::to_string(share)?.as_bytes())?,
        AccessFormat::Table | AccessFormat::Csv => {
            let to: Vec<String> = share
                .spec
                .to
                .iter()
                .map(|g| match (&g.user, &g.group) {
                    (Some(user), _) => user.clone(),
                    (_, Some(group)) => format!("group {group}"),
                    _ => String::new(),
                })
                .collect();
            writeln!(
                out,
                "share.homestead.dev/{} {} in {}: {} for {}, role {}, until {} (created by {}); \
                 Homestead grants it within the limits in force: kubectl get share {} -n {}",
                share.metadata.name.as_deref().unwrap_or_default(),
                if dry_run {
                    "checked (dry run)"
                } else {
                    "created"
                },
                share.metadata.namespace.as_deref().unwrap_or_default(),
                share.spec.reason,
                to.join(", "),
                share.spec.role,
                share.spec.expires_at.0,
                share
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_CREATED_BY))
                    .map_or("", String::as_str),
                share.metadata.name.as_deref().unwrap_or_default(),
                share.metadata.namespace.as_deref().unwrap_or_default(),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn args(line: &[&str]) -> ShareArgs {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            share: ShareArgs,
        }
        Wrap::parse_from(std::iter::once("share").chain(line.iter().copied())).share
    }

    #[test]
    fn the_share_names_its_creator_and_ends_when_asked() {
        let args = args(&[
            "review",
            "-n",
            "user-alice",
            "--to",
            "user:bob",
            "--to",
            "group:analysts",
            "--role",
            "edit",
            "--for",
            "7d",
            "--reason",
            "the Q4 model",
        ]);
        let now: Timestamp = "2026-11-27T10:00:00.600Z".parse().unwrap();
        let share = desired(&args, "alice@example.com", now).unwrap();
        assert_eq!(share.metadata.namespace.as_deref(), Some("user-alice"));
        assert_eq!(
            share.metadata.annotations.unwrap()[ANNOTATION_CREATED_BY],
            "alice@example.com"
        );
        assert_eq!(share.spec.expires_at.0.to_string(), "2026-12-04T10:00:01Z");
        assert_eq!(share.spec.to[0].user.as_deref(), Some("bob"));
        assert_eq!(share.spec.to[1].group.as_deref(), Some("analysts"));
        assert_eq!(share.spec.role, "edit");
    }

    #[test]
    fn a_grantee_without_its_kind_is_refused_on_the_command_line() {
        #[derive(clap::Parser, Debug)]
        struct Wrap {
            #[command(flatten)]
            share: ShareArgs,
        }
        let error = Wrap::try_parse_from([
            "share", "review", "-n", "ns", "--to", "bob", "--for", "1d", "--reason", "r",
        ])
        .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("user:<User> or group:<DirectoryGroup>"),
            "{error}"
        );
    }
}
