//! The one-shot commands: `replay`, `demo`, `doctor`, and what a person sees while and after
//! they run.

pub mod demo;
pub mod doctor;
pub mod merge;
pub mod one_shot;
pub mod otlp_flags;
pub mod profile;
pub mod ranged;
pub mod repeats;
pub mod replay;
pub mod report;
pub mod sweep;
pub mod synthesize;
pub mod timeslices;
