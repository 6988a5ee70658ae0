//! Gauges of each workload's last run: its figures (`canary.run.*`), its verdict and
//! diagnosis state sets, its SLOs, its timeslices, its capacity bracket and its knee.
//!
//! A synchronous gauge keeps every series it ever saw at its last value for the life of the
//! process, and the SDK ignores a NaN recorded to clear one (`opentelemetry_sdk` 0.33 drops
//! non-finite measurements). So in the daemon a figure the last run did not have (a search
//! that found no failing rate, a run without GPU energy, a shorter run with fewer slices, an
//! SLO taken out of the config) went on showing an earlier run's, and so did every series of
//! a workload whose labels changed (a new target). These are observable gauges over
//! canaryd's own table of each workload's last points instead: the SDK exports only what the
//! callback observes (observable gauges are always delta), so when a run replaces its
//! workload's points, whatever it did not have is no longer exported and the backend ends
//! those series.

use crate::labels::attr;
use opentelemetry::metrics::{Meter, ObservableGauge};
use opentelemetry::KeyValue;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Each workload's points: (attributes, value).
type Table = BTreeMap<String, Vec<(Vec<KeyValue>, f64)>>;

/// One gauge of each workload's last points.
pub(crate) struct LatestGauge {
    table: Arc<Mutex<Table>>,
    /// Workloads whose points end after the next collection has seen them once more.
    ending: Arc<Mutex<std::collections::BTreeSet<String>>>,
    /// Kept so the callback stays registered for the exporter's life.
    _gauge: ObservableGauge<f64>,
}

impl LatestGauge {
    /// The gauge `name`.
    pub(crate) fn new(
        meter: &Meter,
        name: &'static str,
        unit: &'static str,
        desc: &'static str,
    ) -> LatestGauge {
        let table = Arc::new(Mutex::new(Table::new()));
        let ending = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
        let (seen, end) = (table.clone(), ending.clone());
        let gauge = meter
            .f64_observable_gauge(name)
            .with_unit(unit)
            .with_description(desc)
            .with_callback(move |observer| {
                let mut table = seen.lock().unwrap_or_else(|e| e.into_inner());
                for (attrs, value) in table.values().flatten() {
                    observer.observe(*value, attrs);
                }
                for workload in std::mem::take(&mut *end.lock().unwrap_or_else(|e| e.into_inner()))
                {
                    table.remove(&workload);
                }
            })
            .build();
        LatestGauge {
            table,
            ending,
            _gauge: gauge,
        }
    }

    /// Replaces the points of `base`'s workload (whatever its other labels were) with
    /// `points`, each `(attributes beyond base, value)`; a value that is `None` or not finite
    /// is left out, so its series ends.
    pub(crate) fn record(
        &self,
        base: &[KeyValue],
        points: impl IntoIterator<Item = (Vec<KeyValue>, Option<f64>)>,
    ) {
        let workload = workload_of(base);
        let points = points
            .into_iter()
            .filter_map(|(extra, value)| {
                let value = value.filter(|v| v.is_finite())?;
                let mut a = base.to_vec();
                a.extend(extra);
                Some((a, value))
            })
            .collect();
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // A new run's points are not the ones an earlier run's end was waiting to drop.
        self.ending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&workload);
        table.insert(workload, points);
    }

    /// Ends the series of `base`'s workload after the next collection has exported them once
    /// more: a run's last points are exported (a one-shot run's in the final flush, which
    /// comes right after), and then no longer.
    pub(crate) fn end_after_next_export(&self, base: &[KeyValue]) {
        let workload = workload_of(base);
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if table.contains_key(&workload) {
            self.ending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(workload);
        }
    }

    /// Ends the series of every workload `keep` says no to (one removed from the config).
    pub(crate) fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|workload, _| keep(workload));
    }

    /// [`LatestGauge::record`] of one point with `base`'s attributes alone.
    pub(crate) fn record_one(&self, base: &[KeyValue], value: Option<f64>) {
        self.record(base, [(Vec::new(), value)]);
    }

    /// [`LatestGauge::record`] of one point per `(figure, value)`, told apart by `key`.
    pub(crate) fn record_figures(
        &self,
        base: &[KeyValue],
        key: &'static str,
        figures: &[(&'static str, Option<f64>)],
    ) {
        self.record(
            base,
            figures
                .iter()
                .map(|&(figure, v)| (vec![KeyValue::new(key, figure)], v)),
        );
    }
}

/// The workload a point's attributes name (the key of its table entry).
fn workload_of(base: &[KeyValue]) -> String {
    base.iter()
        .find(|kv| kv.key.as_str() == attr::WORKLOAD)
        .map_or_else(|| format!("{base:?}"), |kv| kv.value.to_string())
}
