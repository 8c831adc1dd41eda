//! The checker legs of `cargo xtask ci` on the nightly toolchain: Miri, AddressSanitizer,
//! ThreadSanitizer and the cargo-fuzz runs. Each builds into its own directory under the
//! target directory (`miri`, `asan`, `tsan`; the fuzz crate builds in `fuzz/target`), so none
//! of them replaces the normal build. What each covers, and what it leaves out and why, is in
//! ARCHITECTURE.md (Tooling).

use std::process::Command;

use crate::ci::target_dir;
use crate::proc;

/// The host target, named explicitly: sanitizer builds need `-Zbuild-std`, which needs it.
const HOST: &str = "x86_64-unknown-linux-gnu";

/// `cargo` of the nightly toolchain, in the workspace root. `rustup run` rather than
/// `$CARGO +nightly`: `$CARGO` is the stable toolchain's own binary, which ignores `+nightly`.
fn nightly_cargo() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo"])
        .current_dir(proc::root())
        // Set by the outer (stable) cargo for xtask; the nightly one must pick its own.
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env_remove("CARGO")
        .env_remove("RUSTC_WRAPPER");
    cmd
}

/// Checks that the nightly toolchain has `components` (`.ci/run` installs them).
fn ensure_nightly(components: &[&str]) -> Result<(), String> {
    let mut list = Command::new("rustup");
    list.args(["component", "list", "--installed", "--toolchain", "nightly"]);
    let installed = proc::run_stdout(&mut list).map_err(|e| {
        format!("{e} (install nightly: rustup toolchain install nightly --profile minimal)")
    })?;
    for c in components {
        if !installed.lines().any(|l| l.starts_with(c)) {
            return Err(format!(
                "nightly lacks `{c}`: rustup component add --toolchain nightly {c}"
            ));
        }
    }
    Ok(())
}

/// Miri over the parts without inline assembly: spindle-sched's policies (queue, deque, FIFO,
/// round-robin, work-stealing: unit and integration tests, loom models excluded by `cfg`), the
/// timer wheel, spindle-sync's thread-only scenarios (`tests/miri.rs`, OS threads parked
/// through spindle-park) and its thread-only unit tests, and spindle-stack's pool bookkeeping
/// (unit tests and `tests/pool.rs`, its OS layer swapped for heap allocations under
/// `cfg(miri)`: `crates/stack/src/os/miri.rs`).
pub fn miri() -> Result<(), String> {
    ensure_nightly(&["miri", "rust-src"])?;
    let run = |args: &[&str]| {
        proc::run(
            nightly_cargo()
                // Many seeds would multiply the time; one schedule per run, but a different
                // one per test thanks to the preemption rate. Property tests get a handful of
                // cases (their full runs are in the `test` leg). crossbeam-epoch (behind the
                // work-stealing deque) needs three allowances, all about its own code: it
                // casts integers to pointers (permissive provenance), its `Local` list
                // violates Stacked Borrows but not Tree Borrows (`element_of`), and its global
                // collector keeps garbage bags at exit (leak check off — which also means this
                // leg does not look for our own leaks; valgrind does). Isolation is off:
                // proptest reads its regression files (and the tests read the clock).
                .env(
                    "MIRIFLAGS",
                    "-Zmiri-permissive-provenance -Zmiri-tree-borrows -Zmiri-ignore-leaks \
                     -Zmiri-disable-isolation -Zmiri-preemption-rate=0.05",
                )
                .env("PROPTEST_CASES", "4")
                .env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1")
                .args(["miri", "test"])
                .args(args),
        )
    };
    run(&["-p", "spindle-sched", "-p", "spindle-timer"])?;
    run(&["-p", "spindle-sync", "--test", "miri"])?;
    // spindle-stack does not reach crossbeam-epoch, so it runs without the three allowances
    // above: Stacked Borrows, strict provenance, and the leak check on (the pool's caches and
    // registry must free or keep reachable every stack). Isolation stays off for proptest.
    proc::run(
        nightly_cargo()
            .env(
                "MIRIFLAGS",
                "-Zmiri-strict-provenance -Zmiri-disable-isolation -Zmiri-preemption-rate=0.05",
            )
            .env("PROPTEST_DISABLE_FAILURE_PERSISTENCE", "1")
            .args(["miri", "test"])
            .args(["-p", "spindle-stack", "--lib", "--test", "pool"]),
    )
}

/// One sanitizer leg: builds std and the tests with `-Zsanitizer=<kind> --cfg spindle_<dir>`
/// (the cfg turns on spindle-coro's fiber annotations, see ARCHITECTURE.md) into
/// `<target>/<dir>` and runs each `(package, test target, filter args)`.
fn sanitizer(
    kind: &str,
    dir: &str,
    options: (&str, String),
    tests: &[(&str, &str, &[&str])],
) -> Result<(), String> {
    ensure_nightly(&["rust-src"])?;
    let target = target_dir()?.join(dir);
    let flags = format!("-Zsanitizer={kind} --cfg spindle_{dir}");
    let mut failures = Vec::new();
    for (pkg, test, filter) in tests {
        let r = proc::run(
            nightly_cargo()
                .env("RUSTFLAGS", &flags)
                .env("RUSTDOCFLAGS", &flags)
                .env("CARGO_TARGET_DIR", &target)
                .env(options.0, &options.1)
                .args(["test", "-Zbuild-std", "--target", HOST, "-p", pkg])
                .args(["--test", test, "--"])
                .args(*filter),
        );
        if let Err(e) = r {
            failures.push(format!("{pkg} --test {test}: {e}"));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// What both sanitizer legs run: the runtime's stress tests (every policy), spindle-sync's
/// stress tests (a 2-worker runtime + 4 threads, coroutines on shared stacks too), the IO
/// conformance suite in its epoll mode (copying-stack tests included), and spindle-coro's
/// stack tests (every stack kind, shared-stack eviction, overflow reports). Skipped:
/// `the_exhaustion_path_returns_an_error_not_a_crash`, which lowers `RLIMIT_AS` to 256 MiB —
/// a sanitizer's shadow memory alone reserves terabytes of address space.
const SANITIZED: [(&str, &str, &[&str]); 4] = [
    ("spindle-rt", "stress", &[]),
    ("spindle-sync", "stress", &[]),
    ("spindle-io-tests", "conformance", &["epoll::"]),
    ("spindle-coro", "stacks", &["--skip", "the_exhaustion_path"]),
];

/// ASan runs [`SANITIZED`] and spindle-coro's coroutine tests (panics, forced unwinds, nested
/// coroutines: the switch annotations most directly) but
/// `mem_forget_on_a_suspended_coroutine_only_leaks`, whose leak is the point (LeakSanitizer
/// rightly reports it).
const ASAN_ALSO: [(&str, &str, &[&str]); 1] = [(
    "spindle-coro",
    "coroutine",
    &["--skip", "mem_forget_on_a_suspended_coroutine_only_leaks"],
)];

/// AddressSanitizer (see ARCHITECTURE.md for the options and why).
pub fn asan() -> Result<(), String> {
    sanitizer(
        "address",
        "asan",
        (
            "ASAN_OPTIONS",
            "detect_stack_use_after_return=0:detect_leaks=1".to_string(),
        ),
        &[&ASAN_ALSO[..], &SANITIZED[..]].concat(),
    )
}

/// TSan runs spindle-sync's thread-only scenarios (`tests/miri.rs`), all of spindle-coro's
/// coroutine tests, then [`SANITIZED`].
const TSAN_ALSO: [(&str, &str, &[&str]); 2] = [
    ("spindle-sync", "miri", &[]),
    ("spindle-coro", "coroutine", &[]),
];

/// ThreadSanitizer (see ARCHITECTURE.md for what it covers and why).
pub fn tsan() -> Result<(), String> {
    let supp = proc::root().join("ci/sanitizers/tsan.supp");
    sanitizer(
        "thread",
        "tsan",
        (
            "TSAN_OPTIONS",
            format!(
                "halt_on_error=1:second_deadlock_stack=1:suppressions={}",
                supp.display()
            ),
        ),
        &[&TSAN_ALSO[..], &SANITIZED[..]].concat(),
    )
}

/// The fuzz targets in `fuzz/fuzz_targets`, each with its corpus in `fuzz/corpus/<target>`.
pub const FUZZ_TARGETS: [&str; 2] = ["timer_wheel", "channel_select"];

/// Seconds each fuzz target runs in the `fuzz` leg.
const FUZZ_SECONDS: u32 = 60;

/// cargo-fuzz: each target for [`FUZZ_SECONDS`], starting from the corpus kept in the repo.
/// New inputs go to `<target>/fuzz-corpus/<target>`, so the repo's corpus stays as it is
/// (`cargo xtask`-less: `cd fuzz && cargo +nightly fuzz run <target> corpus/<target>`).
pub fn fuzz() -> Result<(), String> {
    if !proc::succeeds(nightly_cargo().args(["fuzz", "--version"])) {
        return Err("cargo-fuzz is not installed: cargo install --locked cargo-fuzz".into());
    }
    let fuzz_dir = proc::root().join("fuzz");
    let out = target_dir()?.join("fuzz-corpus");
    for t in FUZZ_TARGETS {
        let new = out.join(t);
        std::fs::create_dir_all(&new).map_err(|e| format!("{}: {e}", new.display()))?;
        proc::run(
            nightly_cargo()
                .current_dir(&fuzz_dir)
                .args(["fuzz", "run", t])
                .arg(&new)
                .arg(fuzz_dir.join("corpus").join(t))
                .args(["--", &format!("-max_total_time={FUZZ_SECONDS}")]),
        )?;
    }
    Ok(())
}
