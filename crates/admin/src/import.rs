//! `homestead import ROSTER.csv`: reads the roster, imports it with `homestead-directory`, shows
//! a progress bar on a terminal and prints what was created, changed, left alone, pruned and
//! refused (by line).

use std::process::ExitCode;

use anyhow::Context as _;
use homestead_directory::import::{Options, Prune, PruneLimit, Report, import};
use homestead_directory::roster::parse;

use crate::args::{ImportArgs, PruneMode};

/// Runs the import `args` describe against the cluster of the current kubeconfig (or the
/// in-cluster configuration). Returns exit code 1 when a row or prune failed.
///
/// # Errors
/// An unreadable roster or a bad header, no reachable API server, or a `--source` that is not a
/// label value: nothing is written then.
pub async fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    let file = std::fs::File::open(&args.roster)
        .with_context(|| format!("opening {}", args.roster.display()))?;
    let (rows, failures) =
        parse(std::io::BufReader::new(file)).with_context(|| args.roster.display().to_string())?;
    let source = match args.source {
        Some(source) => source,
        None => args
            .roster
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let options = Options {
        source,
        dry_run: args.dry_run,
        prune: match args.prune {
            PruneMode::None => Prune::None,
            PruneMode::Suspend => Prune::Suspend,
            PruneMode::Delete => Prune::Delete,
        },
        prune_limit: PruneLimit {
            max_count: args.max_prune,
            max_percent: args.max_prune_percent,
            confirmed: args.allow_mass_prune,
        },
        concurrency: args.concurrency,
    };
    let client = args.cluster.client().await?;
    // Hidden unless stderr is a terminal.
    let bar = indicatif::ProgressBar::new(rows.len() as u64);
    let started = std::time::Instant::now();
    let report = import(&client, &rows, failures, &options, || bar.inc(1)).await?;
    bar.finish_and_clear();
    print(&report, &options, started.elapsed());
    Ok(if report.succeeded() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// How many names a summary line lists before it says "and N more".
const NAMES_SHOWN: usize = 50;

/// Prints the report: counts, the names of Users created, changed or pruned (at most
/// [`NAMES_SHOWN`] each, every pruned one in a dry run), which deletions keep their Namespace
/// (`deletionPolicy: Retain`) and which delete it, and each failure with its line.
fn print(report: &Report, options: &Options, took: std::time::Duration) {
    let (would, pruned) = match (options.dry_run, options.prune) {
        (true, Prune::Delete) => ("would be ", "deleted"),
        (true, _) => ("would be ", "suspended"),
        (false, Prune::Delete) => ("", "deleted"),
        (false, _) => ("", "suspended"),
    };
    let names = |list: &[String]| match list.len() {
        0 => String::new(),
        n if n <= NAMES_SHOWN || options.dry_run => format!(": {}", list.join(", ")),
        n => format!(
            ": {}, and {} more",
            list[..NAMES_SHOWN].join(", "),
            n - NAMES_SHOWN
        ),
    };
    println!(
        "{}created: {}{}",
        would,
        report.created.len(),
        names(&report.created)
    );
    println!(
        "{}changed: {}{}",
        would,
        report.changed.len(),
        names(&report.changed)
    );
    println!("unchanged: {}", report.unchanged.len());
    println!(
        "{would}{pruned} (no longer in the roster): {}{}",
        report.pruned.len(),
        names(&report.pruned)
    );
    if options.prune == Prune::Delete && !report.pruned.is_empty() {
        let deleted: Vec<String> = report
            .pruned
            .iter()
            .filter(|n| !report.retained.contains(n))
            .cloned()
            .collect();
        println!(
            "  {would}deleted with their namespace and its data (deletionPolicy Delete): {}{}",
            deleted.len(),
            names(&deleted)
        );
        println!(
            "  {would}retained, namespace kept with access revoked (deletionPolicy Retain): {}{}",
            report.retained.len(),
            names(&report.retained)
        );
    }
    println!(
        "left alone (no longer in the roster): {}{}",
        report.left.len(),
        names(&report.left)
    );
    println!("failed: {}", report.failed.len());
    for failure in &report.failed {
        if failure.line == 0 {
            println!("  {}: {}", failure.name, failure.message);
        } else {
            println!(
                "  line {}: {}: {}",
                failure.line, failure.name, failure.message
            );
        }
    }
    println!(
        "source {:?}, {:.1} s{}",
        options.source,
        took.as_secs_f64(),
        if options.dry_run {
            " (dry run: nothing written)"
        } else {
            ""
        }
    );
}
