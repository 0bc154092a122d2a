//! Helpers shared by the crate's unit tests.

/// A fixed pseudo-random sequence (xorshift64), so generated cases are the same every run.
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
