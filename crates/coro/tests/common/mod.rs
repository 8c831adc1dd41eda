//! Shared by the coroutine tests that declare `mod common;`.

/// Where the frame of function `name` is in a `std::backtrace::Backtrace`'s text (0: the
/// innermost frame), if it is there.
pub fn frame_position(trace: &str, name: &str) -> Option<usize> {
    trace
        .lines()
        .filter_map(|l| l.trim_start().split_once(": ").map(|(_, f)| f.trim()))
        .position(|f| f == name || f.ends_with(&format!("::{name}")))
}

/// Whether a backtrace taken in a coroutine goes on into its resumer with this build's context
/// backend. Not on the Boost backend (documented: backtraces end at the coroutine's entry), nor
/// with the aarch64 Windows backend built on Linux to check its switch (no Windows unwinder).
pub fn backtraces_cross_into_the_resumer() -> bool {
    let checked_off_windows = spindle_context::BACKEND == "aarch64-windows" && !cfg!(windows);
    spindle_context::BACKEND != "boost" && !checked_off_windows
}
