//! `homestead workspace` (`kubectl homestead workspace`): a person creates a workspace of their
//! own in one command (docs/workspaces.md). The admission policy `homestead-workspace-creator`
//! wants a person's Workspace labelled `homestead.dev/self-service=true` and annotated
//! `homestead.dev/created-by` with whoever creates it; this asks the API server who that is (a
//! SelfSubjectReview) and fills both in. The owner is the caller's User, as the homes API
//! (`kubectl get homes`) names it, unless `--owner` says so. Creates the Workspace with a
//! request that fails if it exists; writes nothing else. Only the operator turns it into a
//! namespace and access, within what the person's Profile allows.

use std::io::Write;

use anyhow::Context as _;
use homestead_api::{
    ANNOTATION_CREATED_BY, DeletionPolicy, LABEL_SELF_SERVICE, Workspace, WorkspaceOwner,
    WorkspaceSpec,
};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};

use crate::args::{AccessFormat, WorkspaceArgs};

/// Creates the personal Workspace `args` describe and prints it as `args.output` says.
///
/// # Errors
/// When the cluster cannot be reached, the API server does not say who the caller is, no owner
/// is given and the homes API names none, or the API server refuses the Workspace (RBAC, the
/// schema, or an admission policy; its message names the rule).
pub async fn run(args: WorkspaceArgs) -> anyhow::Result<std::process::ExitCode> {
    let mut config = args.cluster.config().await?;
    if let Some(identity) = &args.impersonate {
        config.auth_info.impersonate = Some(identity.clone());
    }
    let client =
        kube::Client::try_from(config).context("connecting to the Kubernetes API server")?;
    let me = crate::share::whoami(&client).await?;
    let owner = match &args.owner {
        Some(owner) => owner.clone(),
        None => own_user(&client).await?,
    };
    let workspace = desired(&args, &owner, &me);
    let params = PostParams {
        dry_run: args.dry_run,
        field_manager: Some("homestead-workspace".to_owned()),
    };
    let created = Api::<Workspace>::all(client)
        .create(&params, &workspace)
        .await
        .with_context(|| format!("creating Workspace {}", args.name))?;
    print(
        &created,
        args.output,
        args.dry_run,
        std::io::stdout().lock(),
    )?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The caller's User, as the homes API names it on each of their homes.
///
/// # Errors
/// When the homes API does not answer, or the caller has no home there to name them.
async fn own_user(client: &kube::Client) -> anyhow::Result<String> {
    let gvk = GroupVersionKind::gvk("homes.homestead.dev", "v1alpha1", "Home");
    let homes: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "homes"),
    );
    let list = homes
        .list(&ListParams::default())
        .await
        .context("asking the homes API which User you are (kubectl get homes); pass --owner")?;
    list.items
        .iter()
        .find_map(|home| home.data.get("user")?.as_str().map(str::to_owned))
        .filter(|user| !user.is_empty())
        .context("the homes API names no User of yours (you have no home yet); pass --owner")
}

/// The Workspace `args` describe, owned by the User `owner` and created by `creator`.
fn desired(args: &WorkspaceArgs, owner: &str, creator: &str) -> Workspace {
    let mut workspace = Workspace::new(
        &args.name,
        WorkspaceSpec {
            owner: WorkspaceOwner {
                user: Some(owner.to_owned()),
                group: None,
            },
            members: None,
            admins: Vec::new(),
            profile: args.profile.clone(),
            namespace: None,
            reason: args.reason.clone(),
            deletion_policy: if args.delete_with_it {
                DeletionPolicy::Delete
            } else {
                DeletionPolicy::Retain
            },
        },
    );
    workspace.metadata.labels = Some([(LABEL_SELF_SERVICE.to_owned(), "true".to_owned())].into());
    workspace.metadata.annotations =
        Some([(ANNOTATION_CREATED_BY.to_owned(), creator.to_owned())].into());
    workspace
}

/// Writes `workspace` to `out`: one line for `table` (`dry_run` says it was only checked), the
/// whole object for JSON and YAML.
///
/// # Errors
/// When writing fails.
fn print(
    workspace: &Workspace,
    format: AccessFormat,
    dry_run: bool,
    mut out: impl Write,
) -> anyhow::Result<()> {
    match format {
        AccessFormat::Json => serde_json::to_writer_pretty(&mut out, workspace)?,
        AccessFormat::Yaml => out.write_all(serde_saphyr::to_string(workspace)?.as_bytes())?,
        AccessFormat::Table | AccessFormat::Csv => writeln!(
            out,
            "workspace.homestead.dev/{} {} for {}: {}; Homestead provisions it within your Profile's \
             limits: kubectl get homes",
            workspace.metadata.name.as_deref().unwrap_or_default(),
            if dry_run {
                "checked (dry run)"
            } else {
                "created"
            },
            workspace.spec.owner.user.as_deref().unwrap_or_default(),
            workspace.spec.reason,
        )?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn a_personal_workspace_names_its_owner_and_creator_and_is_self_service() {
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            workspace: WorkspaceArgs,
        }
        let args = Wrap::parse_from(["workspace", "thesis", "--reason", "my thesis"]).workspace;
        let workspace = desired(&args, "alice", "alice@example.com");
        assert_eq!(workspace.spec.owner.user.as_deref(), Some("alice"));
        assert_eq!(workspace.spec.deletion_policy, DeletionPolicy::Retain);
        assert_eq!(
            workspace.metadata.labels.unwrap()[LABEL_SELF_SERVICE],
            "true"
        );
        assert_eq!(
            workspace.metadata.annotations.unwrap()[ANNOTATION_CREATED_BY],
            "alice@example.com"
        );
    }
}
