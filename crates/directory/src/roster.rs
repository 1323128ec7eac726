//! The roster: a CSV export from an HR system, one person per row, read into the User objects
//! it declares. Parsing checks only what must hold before anything is written (the header, a
//! name per row, no name twice); every other rule is the API server's, applied to each row.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;

use homestead_api::{GROUP, VERSION};
use serde_json::{Value, json};

/// Label on every imported User naming the roster it came from (`--source`); prune considers
/// only Users with the same source.
pub const LABEL_SOURCE: &str = "homestead.dev/roster-source";

/// A roster column. `name` and `username` are required; the others may be left out of the
/// header or left empty in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Column {
    /// `metadata.name` of the User (a DNS-1123 label).
    Name,
    /// `spec.identity.username`: who the authenticator says the person is.
    Username,
    /// `spec.email`.
    Email,
    /// `spec.displayName`.
    DisplayName,
    /// `spec.givenName`.
    GivenName,
    /// `spec.familyName`.
    FamilyName,
    /// `spec.profile`.
    Profile,
    /// `spec.role`.
    Role,
    /// `spec.identity.groups`, separated by `;`.
    Groups,
    /// `spec.validUntil` (RFC 3339).
    ValidUntil,
    /// `spec.successor`, with `spec.deletionPolicy: Handover`: who gets the person's homes
    /// when they leave (docs/handover.md).
    Successor,
}

impl Column {
    /// Every column, in the order docs/directory.md documents them.
    pub const ALL: [Self; 11] = [
        Self::Name,
        Self::Username,
        Self::Email,
        Self::DisplayName,
        Self::GivenName,
        Self::FamilyName,
        Self::Profile,
        Self::Role,
        Self::Groups,
        Self::ValidUntil,
        Self::Successor,
    ];

    /// The header name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Username => "username",
            Self::Email => "email",
            Self::DisplayName => "displayName",
            Self::GivenName => "givenName",
            Self::FamilyName => "familyName",
            Self::Profile => "profile",
            Self::Role => "role",
            Self::Groups => "groups",
            Self::ValidUntil => "validUntil",
            Self::Successor => "successor",
        }
    }

    fn required(self) -> bool {
        matches!(self, Self::Name | Self::Username)
    }
}

/// Why a roster cannot be imported at all; nothing is written then.
#[derive(Debug, thiserror::Error)]
pub enum RosterError {
    /// The file is not CSV the reader understands (for example, a row with more cells than the
    /// header), at `line`.
    #[error("line {line}: {source}")]
    Csv {
        /// 1-based line number.
        line: u64,
        /// The reader's error.
        source: csv::Error,
    },
    /// The header names columns Homestead does not know.
    #[error(
        "unknown column(s) {0:?}; the columns are name, username, email, displayName, givenName, familyName, profile, role, groups, validUntil, successor"
    )]
    UnknownColumns(Vec<String>),
    /// The header lacks required columns.
    #[error("missing required column(s) {0:?}")]
    MissingColumns(Vec<&'static str>),
    /// A column appears twice in the header.
    #[error("column {0:?} appears twice in the header")]
    DuplicateColumn(String),
}

/// One person from the roster.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The 1-based line number in the file (the header is line 1).
    pub line: u64,
    /// The User's name.
    pub name: String,
    /// The non-empty cells, by column.
    pub cells: BTreeMap<Column, String>,
}

/// A row that cannot become a User, with the reason; the other rows are still imported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFailure {
    /// The 1-based line number in the file.
    pub line: u64,
    /// The User's name, if the row has one.
    pub name: String,
    /// What is wrong: ours, or the API server's message.
    pub message: String,
}

/// Reads a roster: a header naming columns (see [`Column`]), then one person per row. Cells
/// are trimmed; an empty cell is a field left out.
///
/// # Errors
/// [`RosterError`] for a bad header or unreadable CSV. Rows without a name or username, and a
/// name seen before, come back as [`RowFailure`]s beside the good rows.
pub fn parse(input: impl Read) -> Result<(Vec<Row>, Vec<RowFailure>), RosterError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(input);
    let header = reader
        .headers()
        .map_err(|source| RosterError::Csv { line: 1, source })?
        .clone();
    let known: HashMap<&str, Column> = Column::ALL.iter().map(|c| (c.as_str(), *c)).collect();
    let unknown: Vec<String> = header
        .iter()
        .filter(|h| !known.contains_key(h))
        .map(str::to_owned)
        .collect();
    if !unknown.is_empty() {
        return Err(RosterError::UnknownColumns(unknown));
    }
    let columns: Vec<Column> = header.iter().map(|h| known[h]).collect();
    for (i, column) in columns.iter().enumerate() {
        if columns[..i].contains(column) {
            return Err(RosterError::DuplicateColumn(column.as_str().to_owned()));
        }
    }
    let missing: Vec<&'static str> = Column::ALL
        .iter()
        .filter(|c| c.required() && !columns.contains(c))
        .map(|c| c.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(RosterError::MissingColumns(missing));
    }

    let (mut rows, mut failures) = (Vec::new(), Vec::new());
    let mut seen: HashMap<String, u64> = HashMap::new();
    for record in reader.records() {
        let record = record.map_err(|source| RosterError::Csv {
            line: source.position().map_or(0, csv::Position::line),
            source,
        })?;
        let line = record.position().map_or(0, csv::Position::line);
        let cells: BTreeMap<Column, String> = columns
            .iter()
            .zip(record.iter())
            .filter(|(_, cell)| !cell.is_empty())
            .map(|(column, cell)| (*column, cell.to_owned()))
            .collect();
        let name = cells.get(&Column::Name).cloned().unwrap_or_default();
        let fail = |message: String| RowFailure {
            line,
            name: name.clone(),
            message,
        };
        if name.is_empty() {
            failures.push(fail("no name".to_owned()));
        } else if !cells.contains_key(&Column::Username) {
            failures.push(fail("no username".to_owned()));
        } else if let Some(first) = seen.get(&name) {
            failures.push(fail(format!("name {name:?} is already on line {first}")));
        } else {
            seen.insert(name.clone(), line);
            rows.push(Row { line, name, cells });
        }
    }
    Ok((rows, failures))
}

impl Row {
    /// The User this row declares, as a server-side apply body: `metadata.name`, the
    /// [`LABEL_SOURCE`] label set to `source`, and the spec fields of its non-empty cells. Only
    /// these fields are the import's (field manager `homestead-import`); a field left empty is
    /// removed if an earlier import set it, and fields others set stay theirs.
    pub fn user(&self, source: &str) -> Value {
        let cell = |c: Column| self.cells.get(&c);
        let mut identity = json!({ "username": cell(Column::Username) });
        if let Some(groups) = cell(Column::Groups) {
            let groups: Vec<&str> = groups
                .split(';')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .collect();
            identity["groups"] = json!(groups);
        }
        let mut spec = json!({ "identity": identity });
        for (column, field) in [
            (Column::Email, "email"),
            (Column::DisplayName, "displayName"),
            (Column::GivenName, "givenName"),
            (Column::FamilyName, "familyName"),
            (Column::Profile, "profile"),
            (Column::Role, "role"),
            (Column::ValidUntil, "validUntil"),
            (Column::Successor, "successor"),
        ] {
            if let Some(value) = cell(column) {
                spec[field] = json!(value);
            }
        }
        if cell(Column::Successor).is_some() {
            spec["deletionPolicy"] = json!("Handover");
        }
        json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "User",
            "metadata": { "name": self.name, "labels": { LABEL_SOURCE: source } },
            "spec": spec,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_successor_column_hands_the_persons_homes_over() {
        let roster = "name,username,successor\nlee,lee@example.com,sam\nann,ann@example.com,\n";
        let (rows, failures) = parse(roster.as_bytes()).unwrap();
        assert!(failures.is_empty());
        let lee = rows[0].user("hr");
        assert_eq!(lee["spec"]["successor"], "sam");
        assert_eq!(lee["spec"]["deletionPolicy"], "Handover");
        let ann = rows[1].user("hr");
        assert!(ann["spec"].get("successor").is_none());
        assert!(ann["spec"].get("deletionPolicy").is_none());
    }

    #[test]
    fn given_and_family_names_are_columns() {
        let csv = "name,username,givenName,familyName\nada,ada@example.com,Ada,Lovelace\n";
        let (rows, _) = parse(csv.as_bytes()).unwrap();
        let user = rows[0].user("hr");
        assert_eq!(
            (&user["spec"]["givenName"], &user["spec"]["familyName"]),
            (&json!("Ada"), &json!("Lovelace"))
        );
    }

    #[test]
    fn rows_become_users_and_bad_rows_are_reported_by_line() {
        let csv = "name,username,email,groups,role\n\
                   alice,alice@example.com,alice@example.com,dev; ops,edit\n\
                   ,nobody@example.com,,,\n\
                   bob,,,,\n\
                   alice,alice2@example.com,,,\n\
                   carol,carol@example.com,,,\n";
        let (rows, failures) = parse(csv.as_bytes()).unwrap();
        assert_eq!(
            rows.iter()
                .map(|r| (r.line, r.name.as_str()))
                .collect::<Vec<_>>(),
            [(2, "alice"), (6, "carol")]
        );
        assert_eq!(
            failures
                .iter()
                .map(|f| (f.line, f.message.as_str()))
                .collect::<Vec<_>>(),
            [
                (3, "no name"),
                (4, "no username"),
                (5, "name \"alice\" is already on line 2")
            ]
        );
        let alice = rows[0].user("hr.csv");
        assert_eq!(alice["metadata"]["labels"][LABEL_SOURCE], "hr.csv");
        assert_eq!(alice["spec"]["identity"]["groups"], json!(["dev", "ops"]));
        assert_eq!(alice["spec"]["role"], "edit");
        let carol = rows[1].user("hr.csv");
        assert!(
            carol["spec"].get("role").is_none(),
            "an empty cell is a field left out"
        );
    }

    #[test]
    fn a_bad_header_is_an_error_before_anything_else() {
        assert!(matches!(
            parse("name,username,salary\n".as_bytes()),
            Err(RosterError::UnknownColumns(c)) if c == ["salary"]
        ));
        assert!(matches!(
            parse("name,email\n".as_bytes()),
            Err(RosterError::MissingColumns(c)) if c == ["username"]
        ));
        assert!(matches!(
            parse("name,username,name\n".as_bytes()),
            Err(RosterError::DuplicateColumn(_))
        ));
    }
}
