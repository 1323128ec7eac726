//! The run's tables: times, requests per User, CPU, and the operator's own figures.

use super::*;

/// The table of times: create to all Ready and offboarding, against the floors.
pub(crate) fn print_times(floor: &FirstFloor, ours: &Provisioning, later: &Later, floors: &Floors) {
    let ratio = |ours: Duration, floor: Duration| ours.as_secs_f64() / floor.as_secs_f64();
    let mean = (floor.up + floors.again) / 2;
    println!("| | floor client before | after | mean | Homestead | ratio to the mean |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| create to all Ready | {} | {} | {} | {} | {:.2}x |",
        secs(floor.up),
        secs(floors.again),
        secs(mean),
        secs(ours.up),
        ratio(ours.up, mean)
    );
    println!(
        "| create to all Ready, bare floor (admin, least objects; run last) | {} | not run | {} | {} | {:.2}x |",
        secs(floors.bare),
        secs(floors.bare),
        secs(ours.up),
        ratio(ours.up, floors.bare)
    );
    println!(
        "| bounded floor (mean) against the bare floor | | | | | {:.2}x |",
        ratio(mean, floors.bare)
    );
    println!(
        "| offboarding (Delete) | {} | not run | {} | {} | {:.2}x |",
        secs(floor.down),
        secs(floor.down),
        secs(later.down),
        ratio(later.down, floor.down)
    );
    println!();
}

/// Requests per User from the audit log `events`: provisioning and offboarding against the
/// floor's, and a Profile change.
pub(crate) fn print_all_requests(
    events: &[Request],
    floor: &FirstFloor,
    ours: &Provisioning,
    later: &Later,
    count: usize,
) {
    println!("requests per User while provisioning (audit log):");
    print_requests(
        &requests(events, "floor", floor.provisioning),
        &requests(events, "homestead", ours.window),
        count,
    );
    println!("requests per User while offboarding (audit log):");
    print_requests(
        &requests(events, "floor", floor.offboarding),
        &requests(events, "homestead", later.offboarding),
        count,
    );
    println!(
        "requests per User for a Profile change (a quota added), {} in all:",
        secs(later.rollout)
    );
    let change = requests(events, "homestead", later.change);
    for (k, n) in &change {
        println!("  {k:<36} {:>8.2}", *n as f64 / count as f64);
    }
    println!(
        "  {:<36} {:>8.2}",
        "total per User",
        change.values().sum::<usize>() as f64 / count as f64
    );
}

/// CPU per User of each side's provisioning (the floors' unless `quick`, when they did not
/// run), and the cores busy with nothing to do before each.
pub(crate) fn print_all_cpu(
    (floor, floors): (&FirstFloor, &Floors),
    ours: &Provisioning,
    (background, quick): (f64, bool),
    count: usize,
) {
    if !quick {
        let (start, end) = &floor.cpu;
        print_cpu("floor: CPU while provisioning", start, end, count, floor.up);
        let (start, end) = &floors.cpu_again;
        let title = "floor again: CPU while provisioning";
        print_cpu(title, start, end, count, floors.again);
        let (start, end) = &floors.cpu_bare;
        let title = "bare floor: CPU while provisioning";
        print_cpu(title, start, end, count, floors.bare);
    }
    let (start, end) = &ours.cpu;
    print_cpu(
        "homestead: CPU while provisioning",
        start,
        end,
        count,
        ours.up,
    );
    println!(
        "cores busy with nothing to do, before the floor: {background:.2}; before Homestead: {:.2}; before the floor again: {:.2}",
        ours.background, floors.background
    );
}

/// The operator's own figures: requests about no one User, time to sync, writes in steady
/// state, memory.
pub(crate) fn print_operator(events: &[Request], ours: &Provisioning, later: &Later, count: usize) {
    println!("operator requests about no one User while provisioning (watches, lists, Leases):");
    for (k, n) in operator_overhead(events, ours.window) {
        println!("  {k:<36} {n:>8}");
    }
    println!();
    println!(
        "operator start to all caches synced: {} (no Users), {} ({count} Users, after a restart)",
        secs(ours.first_sync),
        secs(later.restart_sync)
    );
    let steady_writes = operator_writes(events, later.steady);
    println!(
        "operator writes in {STEADY_SECONDS} s of steady state after that restart: {} (Lease renewals excluded){}",
        steady_writes.len(),
        if steady_writes.is_empty() {
            String::new()
        } else {
            format!(": {}", steady_writes.join(", "))
        }
    );
    let ((steady, steady_peak), (relist_peak, relist_after)) = (later.steady_rss, later.relist_rss);
    println!(
        "operator RSS with no User:              {:.1} MiB",
        ours.idle_rss
    );
    println!(
        "operator peak RSS while provisioning:   {:.1} MiB",
        later.peak_provisioning
    );
    println!(
        "operator RSS in steady state:           {steady:.1} MiB (peak since restart {steady_peak:.1} MiB)"
    );
    println!(
        "operator peak RSS during a re-list:     {relist_peak:.1} MiB ({:.2}x steady; {relist_after:.1} MiB 10 s after)",
        relist_peak / steady
    );
}
