//! Every error of a file in one pass. serde stops at the first key or value that does not
//! parse, so when the whole file does not, each workload and each target is parsed on its own
//! (from the file's spanned tree, so lines and key paths stay the file's), the ones that parse
//! are kept, the rest of the file is parsed without the ones that do not, and what remains is
//! validated as usual: `check-config` names every bad workload and key at once.

use super::validate::{self, Source};
use super::{raw, toml_error, ConfigError};
use serde::Deserialize;
use std::collections::BTreeSet;
use toml::de::{DeTable, DeValue, ValueDeserializer};

/// What was left out of validation because it did not parse (its error is already said).
#[derive(Debug, Default)]
pub(super) struct Dropped {
    /// Targets by name: a workload naming one is not validated (its target is not known).
    pub targets: BTreeSet<String>,
    /// Some workload: "none defined" is not said when all of them were dropped.
    pub workloads: bool,
}

/// Every error of a file whose first parse error is `first`.
pub(super) fn every_error(first: toml::de::Error, src: &Source) -> ConfigError {
    let single = || toml_error(&first, src.text, src.file);
    // A syntax error: nothing after it can be trusted.
    let Ok(doc) = DeTable::parse(src.text) else {
        return single();
    };
    let span = doc.span();
    let mut doc = doc.into_inner();
    let mut errors = Vec::new();
    let mut dropped = Dropped::default();
    let workloads = keep_parsing::<raw::Workload>(&mut doc, "workloads", src, &mut errors);
    dropped.workloads = !workloads.is_empty();
    dropped.targets = keep_parsing::<raw::Target>(&mut doc, "targets", src, &mut errors);
    let rest = raw::File::deserialize(toml::de::Deserializer::from(toml::Spanned::new(span, doc)));
    match rest {
        Ok(raw) => {
            if let Err(e) = validate::validate(raw, src, &dropped) {
                errors.push(e);
            }
        }
        Err(e) => errors.push(toml_error(&e, src.text, src.file)),
    }
    ConfigError::all(errors).unwrap_or_else(single)
}

/// Parses each entry of the table `section` as a `T` on its own: the error of each one that
/// does not parse joins `errors`, and it leaves the table. Returns the names it left.
fn keep_parsing<'i, T: Deserialize<'i>>(
    doc: &mut DeTable<'i>,
    section: &str,
    src: &Source,
    errors: &mut Vec<ConfigError>,
) -> BTreeSet<String> {
    let mut bad = BTreeSet::new();
    let Some(table) = doc.get_mut(section) else {
        return bad;
    };
    let DeValue::Table(entries) = table.get_mut() else {
        return bad;
    };
    for (name, value) in std::mem::take(entries) {
        match T::deserialize(ValueDeserializer::from(value.clone())) {
            Ok(_) => drop(entries.insert(name, value)),
            Err(e) => {
                errors.push(toml_error(&e, src.text, src.file));
                bad.insert(name.get_ref().to_string());
            }
        }
    }
    bad
}
