//! Gauges of each workload's latest figures that a later run may not have:
//! `canary.capacity.rate` (a search that found no failing rate has no `failed` bound) and
//! `canary.sweep.knee` (a series that never saturated has no knee).
//!
//! A synchronous gauge keeps every series at its last value for the life of the process, and
//! the SDK ignores a NaN recorded to clear it (`opentelemetry_sdk` 0.33 drops non-finite
//! measurements). So a figure the latest run lacks would go on showing an earlier run's: a
//! `failed` bound below the latest run's `passed` one, say. These are observable gauges over
//! canaryd's own table of each workload's latest figures instead: the SDK exports only what
//! the callback observes (observable gauges are delta, always), so a figure the latest run
//! lacks is not exported from then on and the backend ends its series.

use crate::labels::attr;
use opentelemetry::metrics::{Meter, ObservableGauge};
use opentelemetry::KeyValue;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Each workload's points: (attributes, value).
type Table = BTreeMap<String, Vec<(Vec<KeyValue>, f64)>>;

/// One gauge of latest figures, each a point under `figure_key`.
pub(crate) struct LatestFigures {
    table: Arc<Mutex<Table>>,
    figure_key: &'static str,
    /// Kept so the callback stays registered for the exporter's life.
    _gauge: ObservableGauge<f64>,
}

impl LatestFigures {
    /// The gauge `name`, its points told apart by `figure_key`.
    pub(crate) fn new(
        meter: &Meter,
        name: &'static str,
        unit: &'static str,
        desc: &'static str,
        figure_key: &'static str,
    ) -> LatestFigures {
        let table = Arc::new(Mutex::new(Table::new()));
        let seen = table.clone();
        let gauge = meter
            .f64_observable_gauge(name)
            .with_unit(unit)
            .with_description(desc)
            .with_callback(move |observer| {
                let table = seen.lock().unwrap_or_else(|e| e.into_inner());
                for (attrs, value) in table.values().flatten() {
                    observer.observe(*value, attrs);
                }
            })
            .build();
        LatestFigures {
            table,
            figure_key,
            _gauge: gauge,
        }
    }

    /// Replaces the figures of `base`'s workload (its labels may have changed: a new target)
    /// with `figures`, each `(figure, value)`; a figure that is `None` or not finite is not
    /// exported from now on.
    pub(crate) fn record(&self, base: &[KeyValue], figures: &[(&'static str, Option<f64>)]) {
        let workload = base
            .iter()
            .find(|kv| kv.key.as_str() == attr::WORKLOAD)
            .map_or_else(|| format!("{base:?}"), |kv| kv.value.to_string());
        let points = figures
            .iter()
            .filter_map(|&(figure, value)| {
                let value = value.filter(|v| v.is_finite())?;
                let mut a = base.to_vec();
                a.push(KeyValue::new(self.figure_key, figure));
                Some((a, value))
            })
            .collect();
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(workload, points);
    }
}
