//! A fixed, portable 64-bit mixer. Prompt text, trace shards and simulated faults are derived
//! from it, so its output must never change between builds, hosts or releases (unlike std's
//! hasher).

/// The SplitMix64 finalizer: a fast, well-mixed 64-bit hash of a 64-bit value.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of the reference SplitMix64 generator seeded with 0 (its state steps
        // by the golden gamma, which `splitmix64` adds itself).
        assert_eq!(super::splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(
            super::splitmix64(0x9e37_79b9_7f4a_7c15),
            0x6e78_9e6a_a1b9_65f4
        );
    }
}
