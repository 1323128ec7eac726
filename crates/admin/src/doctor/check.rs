//! What one check of `homestead doctor` found: its verdict, what it saw and the fix.

/// How a check came out (`pass`, `warn`, `fail` in JSON and YAML).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// As it should be.
    Pass,
    /// Not checked, or worth a look; go-live may proceed.
    Warn,
    /// Broken: fix it before go-live.
    Fail,
}

/// One check's outcome: what was checked, how it came out, what was found and what to do.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Check {
    /// What was checked.
    pub name: &'static str,
    /// How it came out.
    pub verdict: Verdict,
    /// What was found.
    pub found: String,
    /// What to do, when something is to be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    pub(super) fn pass(name: &'static str, found: impl Into<String>) -> Self {
        Self {
            name,
            verdict: Verdict::Pass,
            found: found.into(),
            fix: None,
        }
    }

    pub(super) fn with(
        name: &'static str,
        verdict: Verdict,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            name,
            verdict,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }
}
