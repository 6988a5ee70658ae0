//! Pages checked in headless Chromium as a reader's browser would see them: no console
//! error, no network request, every chart drawn with data. The report and status-page tests
//! share it.
#![allow(dead_code)]

use canary_testkit::browser::Browser;
use serde_json::Value;
use std::path::Path;

/// What each chart of a page drew, counted in the browser's DOM: per `figure.chart`, its id,
/// the series it declares, and per `g.series` the marks drawn (points of polylines, circles,
/// rectangles, polygons, lines).
pub const CHARTS: &str = r#"JSON.stringify([...document.querySelectorAll('figure.chart')].map(f => ({
  id: f.id,
  declared: Number(f.dataset.series),
  width: f.querySelector('svg').getBoundingClientRect().width,
  series: [...f.querySelectorAll('svg g.series')].map(g => ({
    name: g.dataset.name,
    marks: g.querySelectorAll('circle,rect,polygon,line').length
      + [...g.querySelectorAll('polyline')].reduce((n, p) => n + p.points.numberOfItems, 0)
  }))
})))"#;

/// Loads `url` in Chromium and checks it as a reader's browser would (no console error, no
/// request but the page's own, every declared series drawn); returns the charts by id with
/// their series' mark counts, and saves a screenshot as `shot`.
pub fn check(b: &mut Browser, url: &str, shot: &Path) -> Vec<(String, Vec<(String, u64)>)> {
    let page = url;
    let load = b.open(url, 1240).unwrap();
    assert!(load.errors.is_empty(), "{}: {:?}", page, load.errors);
    assert_eq!(
        load.requests,
        vec![url.to_string()],
        "only the page itself is loaded"
    );
    let resources = b
        .eval(&load, "performance.getEntriesByType('resource').length")
        .unwrap();
    assert_eq!(resources, 0, "{}: resources fetched", page);
    let charts: Value =
        serde_json::from_str(b.eval(&load, CHARTS).unwrap().as_str().unwrap()).unwrap();
    let mut out = Vec::new();
    for c in charts.as_array().unwrap() {
        let id = c["id"].as_str().unwrap().to_string();
        let series = c["series"].as_array().unwrap();
        assert!(c["declared"].as_u64().unwrap() >= 1, "{id}: no series");
        assert_eq!(
            series.len() as u64,
            c["declared"].as_u64().unwrap(),
            "{id}: {c}"
        );
        assert!(
            c["width"].as_f64().unwrap() > 300.0,
            "{id} is not laid out: {c}"
        );
        let counted: Vec<(String, u64)> = series
            .iter()
            .map(|s| {
                (
                    s["name"].as_str().unwrap().to_string(),
                    s["marks"].as_u64().unwrap(),
                )
            })
            .collect();
        for (name, marks) in &counted {
            assert!(*marks > 0, "{id}: series {name} drew nothing");
        }
        out.push((id, counted));
    }
    b.screenshot(&load, shot, 12_000).unwrap();
    assert!(
        std::fs::metadata(shot).unwrap().len() > 10_000,
        "{}",
        shot.display()
    );
    out
}

pub fn chart<'a>(charts: &'a [(String, Vec<(String, u64)>)], id: &str) -> &'a [(String, u64)] {
    let ids: Vec<&String> = charts.iter().map(|c| &c.0).collect();
    &charts
        .iter()
        .find(|c| c.0 == id)
        .unwrap_or_else(|| panic!("no chart {id} among {ids:?}"))
        .1
}
