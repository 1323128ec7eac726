//! What a ClusterRole grants, compared: the built-in roles `view` < `edit` < `admin`, and any
//! other role equal only to itself (Kubernetes' user-facing roles,
//! <https://kubernetes.io/docs/reference/access-authn-authz/rbac/#user-facing-roles>).

/// The built-in ClusterRoles in the order of what they grant; a role outside this list is
/// within a limit only when it is the limit itself.
const ROLE_ORDER: [&str; 3] = ["view", "edit", "admin"];

/// Whether `role` grants at most what `max` does.
pub fn role_within(role: &str, max: &str) -> bool {
    let rank = |r: &str| ROLE_ORDER.iter().position(|o| *o == r);
    role == max || matches!((rank(role), rank(max)), (Some(r), Some(m)) if r <= m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_is_within_the_roles_that_grant_at_least_as_much() {
        assert!(role_within("view", "edit"));
        assert!(role_within("edit", "edit"));
        assert!(!role_within("admin", "edit"));
        assert!(role_within("custom", "custom"));
        assert!(!role_within("custom", "admin"));
        assert!(!role_within("admin", "custom"));
    }
}
