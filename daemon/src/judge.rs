//! Judgement of a finished run: its verdict against the workload's SLOs and its comparison
//! with the rolling baseline.

pub mod baseline;
pub mod capacity;
pub mod knee;
pub mod load;
pub mod verdict;
