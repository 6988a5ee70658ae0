//! Bailian's `type` of each row, kept so that a synthesized Bailian trace says it again.
//!
//! One byte a line of the file, by line number, so it stays right however the rows are sorted,
//! selected or dropped (1 MB for a million-line file). The names are the ones the loader counts
//! in [`LoadReport::categories`](super::LoadReport::categories); a row without `type` has none.

/// The `type` names a row can have, by code (0 is none).
const NAMES: [&str; 6] = ["text", "search", "image", "file", "thinking", "other"];

/// The `type` of each line that has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowKinds(Vec<u8>);

impl RowKinds {
    /// Records `kind` (one of the loader's names; any other is none) for `line`.
    pub(crate) fn set(&mut self, line: u32, kind: &str) {
        let Some(code) = NAMES.iter().position(|n| *n == kind) else {
            return;
        };
        let at = line as usize;
        if self.0.len() <= at {
            self.0.resize(at + 1, 0);
        }
        self.0[at] = code as u8 + 1;
    }

    /// The `type` of `line`, if it had one.
    pub fn get(&self, line: u32) -> Option<&'static str> {
        match self.0.get(line as usize) {
            Some(&code) if code > 0 => Some(NAMES[code as usize - 1]),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_name_comes_back_by_line_and_others_are_none() {
        let mut k = RowKinds::default();
        for (line, name) in NAMES.iter().enumerate() {
            k.set(line as u32 * 3 + 1, name);
        }
        k.set(2, "unknown");
        for (line, name) in NAMES.iter().enumerate() {
            assert_eq!(k.get(line as u32 * 3 + 1), Some(*name));
        }
        assert_eq!((k.get(2), k.get(0), k.get(1_000)), (None, None, None));
    }
}
