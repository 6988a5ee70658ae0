//! Loopback tests of canary-sim over real TCP with a raw HTTP/1.1 client.

mod client;

mod arrival;
mod behaviour;
mod capacity;
mod disconnect;
mod faults;
mod hostile;
mod identity;
mod kv_pressure;
mod net_delay;
mod phases;
mod refused;
mod wire;

use canary_sim::{Config, Profile, SimHandle};

/// A fast sim with a small prefix-cache block so tests can build shared prefixes cheaply.
async fn sim() -> SimHandle {
    sim_with(|_| {}).await
}

async fn sim_with(f: impl FnOnce(&mut Config)) -> SimHandle {
    let mut config = Config {
        profile: Profile::fast(),
        block_size: 4,
        ..Config::default()
    };
    f(&mut config);
    canary_sim::spawn(config).await.expect("sim starts")
}

/// The sim's first truth record, once there is one; `None` if none comes within a bound far
/// beyond any the sim should take (so that a sim that never ends the request fails the test
/// rather than hangs it).
async fn first_record(sim: &SimHandle) -> Option<canary_sim::TruthRecord> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if let Some(t) = sim.truth().into_iter().next() {
            return Some(t);
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

/// The sim's truth records once `done` holds for them, polled for at most 30 s (far beyond any
/// time the sim should take); panics naming `what` if it never holds, so that a sim that never
/// writes the record fails the test rather than hangs it.
async fn truth_once(
    sim: &SimHandle,
    what: &str,
    done: impl Fn(&[canary_sim::TruthRecord]) -> bool,
) -> Vec<canary_sim::TruthRecord> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let truth = sim.truth();
        if done(&truth) {
            return truth;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for: {what}; truth: {truth:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The path of a capture in `shared/fixtures/`.
fn fixture(name: &str) -> String {
    let path = format!(
        "{}/../../shared/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}
