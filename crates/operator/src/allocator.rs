//! jemalloc's own account of the process's heap, as the Prometheus gauge
//! `homestead_allocator_bytes{state}` on `/metrics` (docs/operations.md, "Metrics";
//! docs/performance.md, "Where the operator's own pages go").
//!
//! `process_resident_memory_bytes` says how much memory the process holds; these gauges say why:
//! how much of it the program's live objects fill (`allocated`), how much is pages that hold
//! them with the gaps between (`active`), jemalloc's bookkeeping (`metadata`), and the pages
//! jemalloc holds and has not yet returned to the system (`resident` less `active` and
//! `metadata`). Read at each scrape, after advancing jemalloc's statistics epoch.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};
use tikv_jemalloc_ctl::{epoch, stats};

/// The gauge's name.
const NAME: &str = "homestead_allocator_bytes";

/// A Prometheus collector of jemalloc's statistics: `homestead_allocator_bytes{state}`, in
/// bytes, one sample per state:
///
/// - `allocated`: bytes the program's live allocations fill;
/// - `active`: bytes of the pages that hold them (`allocated` and the space between them);
/// - `metadata`: jemalloc's own bookkeeping;
/// - `resident`: bytes of jemalloc's pages physically resident: `active`, `metadata`, and
///   freed pages not yet returned to the system (jemalloc's decay; `.cargo/config.toml`);
/// - `mapped`: bytes of jemalloc's active extents (at least `active`);
/// - `retained`: address space jemalloc keeps mapped for reuse but not resident.
///
/// jemalloc's statistics are a snapshot per epoch; [`Collector::collect`] advances the epoch
/// first, so each scrape reads the current values. A read that fails (jemalloc built without
/// statistics) leaves that sample out and logs at debug level.
#[derive(Clone)]
pub struct Allocator {
    bytes: IntGaugeVec,
}

impl Allocator {
    /// The collector, to register in a [`prometheus::Registry`].
    ///
    /// # Errors
    /// A [`prometheus::Error`] only if the gauge's fixed name, help or label were invalid.
    pub fn new() -> prometheus::Result<Self> {
        let bytes = IntGaugeVec::new(
            Opts::new(
                NAME,
                "Bytes of the heap by jemalloc's account, read at each scrape: allocated (live \
                 objects), active (their pages), metadata, resident (active, metadata and freed \
                 pages not yet returned), mapped, retained (address space kept, not resident).",
            ),
            &["state"],
        )?;
        Ok(Self { bytes })
    }

    /// Advances jemalloc's statistics epoch and copies each statistic into its gauge.
    fn refresh(&self) {
        if let Err(error) = epoch::advance() {
            tracing::debug!(%error, "jemalloc's statistics epoch did not advance");
            return;
        }
        let reads = [
            ("allocated", stats::allocated::read()),
            ("active", stats::active::read()),
            ("metadata", stats::metadata::read()),
            ("resident", stats::resident::read()),
            ("mapped", stats::mapped::read()),
            ("retained", stats::retained::read()),
        ];
        for (state, read) in reads {
            match read {
                Ok(bytes) => self
                    .bytes
                    .with_label_values(&[state])
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX)),
                Err(error) => tracing::debug!(%error, state, "jemalloc's statistic unread"),
            }
        }
    }
}

impl Collector for Allocator {
    fn desc(&self) -> Vec<&Desc> {
        self.bytes.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.refresh();
        self.bytes.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `state` in `families`.
    fn sample(families: &[MetricFamily], state: &str) -> i64 {
        let family = families.iter().find(|f| f.name() == NAME).unwrap();
        let metric = family
            .get_metric()
            .iter()
            .find(|m| m.get_label().iter().any(|l| l.value() == state))
            .unwrap_or_else(|| panic!("no sample for {state}"));
        metric.get_gauge().get_value() as i64
    }

    /// Each scrape reads the statistics of its moment: 64 MiB allocated and kept shows in
    /// `allocated` and is gone from it once freed (other tests of this binary allocate far
    /// less meanwhile), and the states keep jemalloc's order (allocated <= active <= resident,
    /// active <= mapped).
    #[test]
    fn a_scrape_reads_the_heap_as_it_is_then() {
        let allocator = Allocator::new().unwrap();
        let held = std::hint::black_box(vec![1u8; 64 << 20]);
        let families = allocator.collect();
        let during = sample(&families, "allocated");
        assert!(during >= 64 << 20, "allocated: {during} bytes");
        let active = sample(&families, "active");
        let resident = sample(&families, "resident");
        assert!(during <= active && active <= resident, "{families:?}");
        assert!(active <= sample(&families, "mapped"));
        assert!(sample(&families, "metadata") > 0);
        drop(held);
        let after = sample(&allocator.collect(), "allocated");
        assert!(
            after <= during - (32 << 20),
            "{after} bytes after, {during} during"
        );
    }
}
