//! jemalloc's own account of the process's heap, as the Prometheus gauge
//! `homestead_allocator_bytes{state}` on `/metrics` (docs/operations.md, "Observe it";
//! docs/performance.md, "Where the operator's own pages go").
//!
//! `process_resident_memory_bytes` says how much memory the process holds, the binary's pages
//! and thread stacks included; these gauges say what of it is jemalloc's and why: how much the
//! program's live objects fill (`allocated`), how much the pages that hold them take with the
//! gaps between (`active`), jemalloc's bookkeeping (`metadata`), and what jemalloc keeps
//! resident in all (`resident`: at most those and the freed pages it has not yet returned).
//! Read at each scrape, after advancing jemalloc's statistics epoch.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGaugeVec, Opts};
use tikv_jemalloc_ctl::{epoch, stats};

/// The gauge's name.
const NAME: &str = "homestead_allocator_bytes";

/// A Prometheus collector of jemalloc's statistics (jemalloc's manual, `stats.*`):
/// `homestead_allocator_bytes{state}`, in bytes, one sample per state:
///
/// - `allocated`: bytes of the live allocations: the program's, jemalloc's internal ones, and
///   small regions its thread caches hold for reuse;
/// - `active`: bytes of the pages that hold them (`allocated` and the space between them);
/// - `metadata`: jemalloc's bookkeeping (its internal allocations, counted in `active` too, and
///   its own base pages);
/// - `resident`: at most the bytes of jemalloc's pages physically resident: active pages, the
///   base pages, and freed pages not yet returned to the system (jemalloc's decay, about a
///   second here: `.cargo/config.toml`); at least `active`;
/// - `mapped`: bytes of jemalloc's active extents (at least `active`);
/// - `retained`: address space jemalloc keeps mapped for reuse but not resident.
///
/// jemalloc's statistics are a snapshot per epoch; [`Collector::collect`] advances the epoch
/// first, so each scrape reads the current values. When the epoch does not advance or a
/// statistic cannot be read (jemalloc built without statistics), the scrape leaves those
/// samples out and logs at debug level; it never serves a stale value.
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
                 allocations), active (their pages), metadata, resident (at most: active, base \
                 and freed pages not yet returned), mapped, retained (address space kept, not \
                 resident).",
            ),
            &["state"],
        )?;
        Ok(Self { bytes })
    }

    /// Advances jemalloc's statistics epoch and copies each statistic into its gauge; leaves
    /// out (removes) the samples it could not read.
    fn refresh(&self) {
        let advanced = epoch::advance();
        if let Err(error) = &advanced {
            tracing::debug!(%error, "jemalloc's statistics epoch did not advance");
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
                Ok(bytes) if advanced.is_ok() => self
                    .bytes
                    .with_label_values(&[state])
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX)),
                Ok(_) => {
                    let _ = self.bytes.remove_label_values(&[state]);
                }
                Err(error) => {
                    tracing::debug!(%error, state, "jemalloc's statistic unread");
                    let _ = self.bytes.remove_label_values(&[state]);
                }
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
        // Every state has its sample (`sample` panics on a missing one).
        sample(&families, "retained");
        drop(held);
        let after = sample(&allocator.collect(), "allocated");
        assert!(
            after <= during - (32 << 20),
            "{after} bytes after, {during} during"
        );
    }
}
