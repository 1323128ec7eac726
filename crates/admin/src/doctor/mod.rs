//! `homestead doctor`: a live cluster checked the way the platform team would before go-live
//! (docs/operations.md, "Before go-live"). Each check passes, warns or fails, and says what to
//! fix; the command exits 1 when one fails.
//!
//! - **CRDs**: Homestead's four, established.
//! - **Admission policies**: every policy of `rbac/admission-policy.yaml` loaded, bound with
//!   `Deny`, with no type-checking warning; and in force: a server-side dry run, as the
//!   operator's ServiceAccount (impersonated), of a write the policies must refuse (a reserved
//!   namespace) is refused.
//! - **The operator**: its leader-election Lease held and renewed lately.
//! - **The identity mapping** (with `--person-kubeconfig`): the API server says who that person
//!   is (SelfSubjectReview); some User must bind exactly that username. A User that binds it
//!   without the authenticator's prefix (or in another case) is `Ready=True` while the person
//!   gets Forbidden: the check names the prefix and the fix.
//! - **Network isolation**, when a Profile asks for it: real traffic between probe Pods of
//!   Homestead's image in two namespaces of the doctor's own, one under an isolated home's
//!   NetworkPolicy, must be blocked both ways across its edge and flow within it ([`isolation`]).

use std::process::ExitCode;

use anyhow::Context as _;
use homestead_api::{NetworkIsolation, Profile, User};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};

use std::io::Write as _;

use crate::args::{AccessFormat, DoctorArgs};

mod check;
pub mod isolation;

pub use check::{Check, Verdict};

/// The admission policies Homestead installs (the chart's, as `rbac/admission-policy.yaml`
/// renders them), by name, for an install whose objects are prefixed `fullname` (the chart's
/// default `homestead`, as in that file).
pub fn expected_policies(fullname: &str) -> Vec<String> {
    shipped_policies()
        .into_iter()
        .map(|name| match name.strip_prefix("homestead-") {
            Some(rest) => format!("{fullname}-{rest}"),
            None => name.to_owned(),
        })
        .collect()
}

/// The names of the policies in `rbac/admission-policy.yaml`.
fn shipped_policies() -> Vec<&'static str> {
    let manifest = include_str!("../../../../rbac/admission-policy.yaml");
    let mut names = Vec::new();
    let mut lines = manifest.lines();
    while let Some(line) = lines.next() {
        if line == "kind: ValidatingAdmissionPolicy" {
            let name = lines
                .by_ref()
                .find_map(|l| l.strip_prefix("  name: "))
                .expect("every policy has a name");
            names.push(name);
        }
    }
    names
}

/// The CRDs Homestead installs.
const CRDS: [&str; 4] = [
    "users.homestead.dev",
    "profiles.homestead.dev",
    "directorygroups.homestead.dev",
    "shares.homestead.dev",
];

/// `homestead doctor`: runs every check, prints them, and exits 1 if one failed.
///
/// # Errors
/// When no client can be built from the flags.
pub async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.config().await?;
    let client = Client::try_from(config.clone()).context("connecting to the API server")?;
    let operator = args.operator.username();
    let fullname = args.operator.fullname.as_str();
    let mut impersonated = config;
    impersonated.auth_info.impersonate = Some(operator.clone());
    let as_operator = Client::try_from(impersonated).context("impersonating the operator")?;
    let mut checks = vec![
        crds(&client).await,
        policies(&client, fullname).await,
        in_force(&as_operator, &operator, fullname).await,
        lease(
            &client,
            &args.operator.operator_namespace,
            &args.operator.lease(),
        )
        .await,
    ];
    checks.push(match &args.person_kubeconfig {
        Some(path) => identity(&client, path).await,
        None => Check::with(
            "identity mapping",
            Verdict::Warn,
            "not checked",
            "run again with --person-kubeconfig, a kubeconfig with one person's own credentials",
        ),
    });
    let deployment = (args.operator.operator_namespace.as_str(), fullname);
    checks.push(isolation(&client, args.probe_image, deployment).await);
    let mut out = std::io::stdout().lock();
    match args.output {
        AccessFormat::Json => serde_json::to_writer_pretty(&mut out, &checks)?,
        AccessFormat::Yaml => out.write_all(serde_saphyr::to_string(&checks)?.as_bytes())?,
        AccessFormat::Table | AccessFormat::Csv => print(&checks, &mut out)?,
    }
    let failed = checks.iter().any(|c| c.verdict == Verdict::Fail);
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Prints `checks`, one line each (`ok`, `warn`, `FAIL`), with the fix indented below.
///
/// # Errors
/// When `out` cannot be written.
pub fn print(checks: &[Check], out: &mut impl std::io::Write) -> std::io::Result<()> {
    for check in checks {
        let mark = match check.verdict {
            Verdict::Pass => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        writeln!(out, "{mark}  {}: {}", check.name, check.found)?;
        if let Some(fix) = &check.fix {
            writeln!(out, "      fix: {fix}")?;
        }
    }
    Ok(())
}

async fn crds(client: &Client) -> Check {
    const NAME: &str = "CRDs";
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let mut missing = Vec::new();
    for name in CRDS {
        let established = match api.get_opt(name).await {
            Ok(crd) => crd.is_some_and(|crd| {
                crd.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }),
            Err(error) => {
                return Check::with(
                    NAME,
                    Verdict::Fail,
                    format!("cannot read CRDs: {error}"),
                    "run as a platform administrator",
                );
            }
        };
        if !established {
            missing.push(name);
        }
    }
    if missing.is_empty() {
        Check::pass(
            NAME,
            format!("{} installed and established", CRDS.join(", ")),
        )
    } else {
        Check::with(
            NAME,
            Verdict::Fail,
            format!("missing or not established: {}", missing.join(", ")),
            "kubectl apply --server-side -f manifests/crd.yaml (or install the chart)",
        )
    }
}

async fn policies(client: &Client, fullname: &str) -> Check {
    const NAME: &str = "admission policies";
    let all = ListParams::default();
    let loaded = Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .list(&all)
        .await;
    let bound = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .list(&all)
        .await;
    let (loaded, bound) = match (loaded, bound) {
        (Ok(loaded), Ok(bound)) => (loaded.items, bound.items),
        (Err(error), _) | (_, Err(error)) => {
            return Check::with(
                NAME,
                Verdict::Fail,
                format!("cannot list ValidatingAdmissionPolicies: {error}"),
                "Kubernetes 1.30 or later, read as a platform administrator",
            );
        }
    };
    judge_policies(&expected_policies(fullname), &loaded, &bound)
}

/// The policies check, from the policies `loaded` and their bindings `bound`.
pub fn judge_policies(
    expected: &[String],
    loaded: &[ValidatingAdmissionPolicy],
    bound: &[ValidatingAdmissionPolicyBinding],
) -> Check {
    const NAME: &str = "admission policies";
    let mut problems = Vec::new();
    for name in expected {
        let Some(policy) = loaded.iter().find(|p| p.name_any() == **name) else {
            problems.push(format!("{name} not loaded"));
            continue;
        };
        let denies = bound.iter().any(|b| {
            b.spec.as_ref().is_some_and(|s| {
                s.policy_name.as_deref() == Some(name.as_str())
                    && s.validation_actions
                        .as_ref()
                        .is_some_and(|a| a.iter().any(|a| a == "Deny"))
            })
        });
        if !denies {
            problems.push(format!("{name} has no binding with validationActions Deny"));
        }
        let warnings = policy
            .status
            .as_ref()
            .and_then(|s| s.type_checking.as_ref())
            .and_then(|t| t.expression_warnings.as_ref())
            .map_or(0, Vec::len);
        if warnings > 0 {
            problems.push(format!("{name} has {warnings} type-checking warning(s)"));
        }
    }
    if problems.is_empty() {
        Check::pass(
            NAME,
            format!("{} loaded and bound with Deny", expected.len()),
        )
    } else {
        Check::with(
            NAME,
            Verdict::Fail,
            problems.join("; "),
            "kubectl apply -f rbac/admission-policy.yaml (or install the chart); kubectl describe validatingadmissionpolicy NAME for warnings",
        )
    }
}

async fn in_force(as_operator: &Client, operator: &str, fullname: &str) -> Check {
    let bounds = format!("{fullname}-operator-bounds");
    const NAME: &str = "admission in force";
    let probe: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "kube-homestead-doctor",
            "labels": {
                "app.kubernetes.io/managed-by": "homestead",
                "homestead.dev/user": "doctor",
                "pod-security.kubernetes.io/enforce": "restricted",
            }
        }
    }))
    .expect("a valid Namespace");
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<Namespace>::all(as_operator.clone())
        .create(&dry, &probe)
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 403 && status.message.contains(&bounds) => {
            Check::pass(
                NAME,
                format!(
                    "as {operator}, a dry-run create of a reserved namespace was refused by {bounds}"
                ),
            )
        }
        Err(kube::Error::Api(status))
            if status.code == 403 && status.message.contains("impersonate") =>
        {
            Check::with(
                NAME,
                Verdict::Warn,
                format!("not checked: may not impersonate {operator}"),
                "run as a platform administrator (impersonation of the operator's ServiceAccount, for a dry run only)",
            )
        }
        Err(error) => Check::with(
            NAME,
            Verdict::Fail,
            format!("the dry run was refused, but not by {bounds}: {error}"),
            "check the operator's RBAC (rbac/cluster-role.yaml) and that the policies are bound",
        ),
        Ok(_) => Check::with(
            NAME,
            Verdict::Fail,
            format!(
                "as {operator}, a dry-run create of namespace kube-homestead-doctor was admitted"
            ),
            "the admission policies are not enforced: load and bind rbac/admission-policy.yaml (Kubernetes 1.30 or later)",
        ),
    }
}

/// Whether the operator's Lease `name` in `namespace` is held and was renewed within 60 s.
pub async fn lease(client: &Client, namespace: &str, name: &str) -> Check {
    const NAME: &str = "operator";
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await;
    let spec = match lease {
        Ok(Some(lease)) => lease.spec.unwrap_or_default(),
        Ok(None) => {
            return Check::with(
                NAME,
                Verdict::Warn,
                format!("no Lease {name} in {namespace}"),
                "install the operator (the chart runs it with --leader-election), or check --operator-namespace and --lease-name",
            );
        }
        Err(error) => {
            return Check::with(
                NAME,
                Verdict::Fail,
                format!("cannot read Leases: {error}"),
                "run as a platform administrator",
            );
        }
    };
    let holder = spec.holder_identity.unwrap_or_default();
    let renewed = spec.renew_time.map(|t| t.0);
    let age = renewed.map(|t| Timestamp::now().as_second() - t.as_second());
    match age {
        Some(age) if age <= 60 && !holder.is_empty() => {
            Check::pass(NAME, format!("leader {holder}, Lease renewed {age} s ago"))
        }
        _ => Check::with(
            NAME,
            Verdict::Fail,
            format!("Lease held by {holder:?}, last renewed {renewed:?}: no operator leads"),
            "kubectl -n homestead-system get pods; docs/troubleshooting.md, HomesteadNoLeader",
        ),
    }
}

async fn identity(client: &Client, person: &std::path::Path) -> Check {
    const NAME: &str = "identity mapping";
    let review = async {
        let file = kube::config::Kubeconfig::read_from(person)?;
        let config = kube::Config::from_custom_kubeconfig(file, &Default::default()).await?;
        let person = Client::try_from(config)?;
        let review = Api::<SelfSubjectReview>::all(person)
            .create(&PostParams::default(), &SelfSubjectReview::default())
            .await?;
        anyhow::Ok(review)
    };
    let review = match review.await {
        Ok(review) => review,
        Err(error) => {
            return Check::with(
                NAME,
                Verdict::Fail,
                format!("{} could not ask who it is: {error:#}", person.display()),
                "give a kubeconfig the person really signs in with (kubectl --kubeconfig FILE auth whoami works)",
            );
        }
    };
    let username = review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default();
    let users = match Api::<User>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(users) => users.items,
        Err(error) => {
            return Check::with(
                NAME,
                Verdict::Fail,
                format!("cannot list Users: {error}"),
                "run as a platform administrator",
            );
        }
    };
    judge_identity(&username, &users)
}

/// The identity check: the person the API server calls `username`, and the Users there are.
pub fn judge_identity(username: &str, users: &[User]) -> Check {
    const NAME: &str = "identity mapping";
    let bound = |u: &User| u.spec.identity.username.clone();
    if let Some(user) = users.iter().find(|u| bound(u) == username) {
        return Check::pass(
            NAME,
            format!(
                "the API server authenticates this person as {username:?}, which User {} binds",
                user.name_any()
            ),
        );
    }
    if let Some(user) = users
        .iter()
        .find(|u| !bound(u).is_empty() && username.ends_with(&bound(u)))
    {
        let prefix = &username[..username.len() - bound(user).len()];
        return Check::with(
            NAME,
            Verdict::Fail,
            format!(
                "the API server authenticates this person as {username:?}, but User {} binds {:?}: the authenticator adds the prefix {prefix:?}, so the person gets Forbidden while the User is Ready",
                user.name_any(),
                bound(user)
            ),
            format!(
                "write usernames as the cluster sees them ({prefix}<username>: the roster's username column, the SCIM userName), or make the authenticator add no prefix (structured authentication: claimMappings.username.prefix \"\"; flags: --oidc-username-prefix=-)"
            ),
        );
    }
    if let Some(user) = users
        .iter()
        .find(|u| bound(u).eq_ignore_ascii_case(username))
    {
        return Check::with(
            NAME,
            Verdict::Fail,
            format!(
                "the API server authenticates this person as {username:?}; User {} binds {:?}, which differs in case (RBAC compares exactly)",
                user.name_any(),
                bound(user)
            ),
            "write the username exactly as the authenticator gives it",
        );
    }
    Check::with(
        NAME,
        Verdict::Fail,
        format!(
            "the API server authenticates this person as {username:?}, and no User binds that username"
        ),
        "check which claim the authenticator maps to the username (email, sub, preferred_username) and write that value in spec.identity.username",
    )
}

async fn isolation(
    client: &Client,
    probe_image: Option<String>,
    deployment: (&str, &str),
) -> Check {
    const NAME: &str = "network isolation";
    let profiles = match Api::<Profile>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(profiles) => profiles.items,
        Err(error) => {
            return Check::with(
                NAME,
                Verdict::Fail,
                format!("cannot list Profiles: {error}"),
                "run as a platform administrator",
            );
        }
    };
    let isolated: Vec<String> = profiles
        .iter()
        .filter(|p| p.spec.network_isolation == NetworkIsolation::Isolated)
        .map(ResourceExt::name_any)
        .collect();
    if isolated.is_empty() {
        Check::pass(NAME, "no Profile asks for it")
    } else {
        isolation::check(client, probe_image, deployment, &isolated).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(name: &str, username: &str) -> User {
        User::test(name).with_spec(json!({ "identity": { "username": username } }))
    }

    #[test]
    fn the_expected_policies_are_read_from_the_shipped_manifest() {
        let names = expected_policies("homestead");
        assert!(
            names.iter().any(|n| n == "homestead-operator-bounds"),
            "{names:?}"
        );
        assert!(
            names.iter().any(|n| n == "homestead-share-owner"),
            "{names:?}"
        );
        assert!(names.len() >= 6, "{names:?}");
        // An install with fullnameOverride=hs names every policy hs-*.
        let renamed = expected_policies("hs");
        assert!(renamed.iter().all(|n| n.starts_with("hs-")), "{renamed:?}");
        assert_eq!(renamed.len(), names.len());
    }

    #[test]
    fn a_username_bound_as_authenticated_passes() {
        let users = [user("alice", "alice@example.com")];
        let check = judge_identity("alice@example.com", &users);
        assert_eq!(check.verdict, Verdict::Pass, "{check:?}");
    }

    #[test]
    fn a_prefix_the_authenticator_adds_is_named_with_the_fix() {
        let users = [user("alice", "alice@example.com")];
        let check = judge_identity("oidc:alice@example.com", &users);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(
            check.found.contains("the prefix \"oidc:\""),
            "{}",
            check.found
        );
        let fix = check.fix.unwrap();
        assert!(
            fix.contains("oidc:<username>") && fix.contains("--oidc-username-prefix=-"),
            "{fix}"
        );
        let case = judge_identity("Alice@Example.com", &users);
        assert_eq!(case.verdict, Verdict::Fail);
        assert!(case.found.contains("differs in case"), "{}", case.found);
        let nobody = judge_identity("1234567890", &users);
        assert!(nobody.found.contains("no User binds"), "{}", nobody.found);
    }

    #[test]
    fn a_policy_unbound_or_bound_to_warn_only_fails() {
        let policy = |name: &str| -> ValidatingAdmissionPolicy {
            serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap()
        };
        let binding = |policy: &str, actions: &[&str]| -> ValidatingAdmissionPolicyBinding {
            serde_json::from_value(json!({ "metadata": { "name": policy },
                "spec": { "policyName": policy, "validationActions": actions } }))
            .unwrap()
        };
        let expected = ["a".to_owned(), "b".to_owned()];
        let all = judge_policies(
            &expected,
            &[policy("a"), policy("b")],
            &[binding("a", &["Deny"]), binding("b", &["Deny", "Audit"])],
        );
        assert_eq!(all.verdict, Verdict::Pass, "{all:?}");
        let broken = judge_policies(&expected, &[policy("a")], &[binding("a", &["Warn"])]);
        assert_eq!(broken.verdict, Verdict::Fail);
        assert_eq!(
            broken.found,
            "a has no binding with validationActions Deny; b not loaded"
        );
    }

    #[test]
    fn the_report_marks_each_check_and_says_the_fix() {
        let checks = [
            Check::pass("CRDs", "installed"),
            Check::with("identity mapping", Verdict::Fail, "prefix", "drop it"),
        ];
        let mut out = Vec::new();
        print(&checks, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "ok    CRDs: installed\nFAIL  identity mapping: prefix\n      fix: drop it\n"
        );
    }
}
