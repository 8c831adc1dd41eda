//! `cargo xtask ci`: the one test command.
//!
//! The legs run in order, each announced with a header and its command lines; a failing leg does
//! not stop the others; a summary table follows and the exit status is non-zero if any leg
//! failed. To add a leg (loom, miri, wine...), push it in [`legs`]: either
//! [`Leg::cargo`] for a plain `cargo ...` command or [`Leg::custom`] with a function.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::json::{self, Json};
use crate::proc::{self, cargo};

/// The crates under the core suite (the `context` backend and valgrind legs run these).
const CORE: [&str; 3] = ["spindle-context", "spindle-stack", "spindle-coro"];

/// Test executables of spindle-rt that the `valgrind-rt` leg leaves out, by name prefix (none:
/// the runtime's tests hung under valgrind only because valgrind does not see the kernel's
/// writes into an io_uring's shared rings, so a worker parked in `io_uring_enter` was never
/// woken; the legs run the runtimes on epoll, `SPINDLE_IO=epoll`, and the tests written for
/// io_uring itself return at once under `SPINDLE_UNDER_VALGRIND`: `common::io_uring_left_out`).
const VALGRIND_RT_SKIPPED: [&str; 0] = [];

/// Linted with their tests, examples and benches too by the `cross-<target>` legs: the IO
/// backends for other systems (each is empty on the targets it is not for), the runtime's
/// crates, whose tests and examples must at least build everywhere, and spindle-hook (which
/// interposes nothing there).
const CROSS_ALL_TARGETS: [&str; 7] = [
    "spindle-hook",
    "spindle-io-kqueue",
    "spindle-io-iocp",
    "spindle-io",
    "spindle-sync",
    "spindle-sched",
    "spindle-rt",
];

/// The crates whose tests the `test-windows-wine` leg runs under Wine: the context switch (the
/// native x86_64 Windows backend) and the coroutines on it, the IOCP backend, spindle-io (its
/// Windows sockets), the IO conformance suite (modes `iocp`, `polling`, `no_driver`, `thread`)
/// and spindle-park. (spindle-io-polling's own tests are left out:
/// `a_reader_and_a_writer_waiting_together_both_wake` times out in about one run in ten under
/// Wine 8.)
const WINE_TESTED: [&str; 6] = [
    "spindle-context",
    "spindle-coro",
    "spindle-io-iocp",
    "spindle-io",
    "spindle-io-tests",
    "spindle-park",
];

/// Targets checked by the `cross-<target>` legs (library crates only).
const CROSS_TARGETS: [&str; 6] = [
    "x86_64-unknown-freebsd",
    "x86_64-apple-darwin",
    "aarch64-apple-darwin",
    "x86_64-pc-windows-gnu",
    "x86_64-pc-windows-msvc",
    ARM64_MSVC,
];

/// A target that nothing here can run: its `cross-` leg also *assembles* the native switch
/// (`src/aarch64_windows.rs` of spindle-context) by building the context crate's test suite in
/// release with `true` as the linker — LLVM checks every instruction and unwind directive of the
/// four switches and the trampolines; nothing is linked. The switch's instructions run in the
/// `aarch64` leg (see [`test_aarch64`]).
const ARM64_MSVC: &str = "aarch64-pc-windows-msvc";

/// The crates whose test suites the `aarch64` leg runs under qemu-user (with the IO
/// conformance suite's `epoll` mode, [`AARCH64_CONFORMANCE`]).
const AARCH64_TESTED: [&str; 8] = [
    "spindle-context",
    "spindle-stack",
    "spindle-coro",
    "spindle-park",
    "spindle-timer",
    "spindle-sched",
    "spindle-sync",
    "spindle-rt",
];

/// The IO conformance suite's cases that the `aarch64` leg runs: those of the `epoll` mode
/// (a test-name filter).
const AARCH64_CONFORMANCE: &str = "epoll::";

type LegFn = Box<dyn Fn() -> Result<(), String>>;

/// One step of `cargo xtask ci`.
pub struct Leg {
    pub name: String,
    pub about: &'static str,
    /// Runs only with `cargo xtask ci --full` (too slow for every run).
    pub full_only: bool,
    run: LegFn,
}

impl Leg {
    /// A leg that runs `cargo <args>`.
    fn cargo(name: &str, about: &'static str, args: &[&str]) -> Leg {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Leg::custom(name, about, move || proc::run(cargo().args(&args)))
    }

    /// A leg that runs a function; it prints its own commands (see [`proc::run`]).
    fn custom(
        name: &str,
        about: &'static str,
        run: impl Fn() -> Result<(), String> + 'static,
    ) -> Leg {
        Leg {
            name: name.to_string(),
            about,
            full_only: false,
            run: Box::new(run),
        }
    }

    /// Marks the leg as one that runs only with `--full`.
    fn full_only(mut self) -> Leg {
        self.full_only = true;
        self
    }
}

/// `-p a -p b ...`
fn packages(pkgs: &[&str]) -> Vec<String> {
    pkgs.iter()
        .flat_map(|p| ["-p".to_string(), p.to_string()])
        .collect()
}

/// Every leg, in the order they run.
pub fn legs() -> Vec<Leg> {
    let mut legs = vec![
        Leg::cargo("fmt", "formatting", &["fmt", "--all", "--check"]),
        Leg::cargo(
            "clippy",
            "lints, whole workspace, all targets",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
        Leg::cargo(
            "clippy-boost",
            "lints with the `context`-crate backend",
            &[
                "clippy",
                "-p",
                "spindle-context",
                "-p",
                "spindle-coro",
                "--all-targets",
                "--features",
                "spindle-context/boost",
                "--",
                "-D",
                "warnings",
            ],
        ),
        Leg::cargo(
            "test",
            "tests, whole workspace",
            &["test", "--workspace", "--no-fail-fast"],
        ),
        Leg::custom(
            "doc",
            "rustdoc, warnings denied (broken links, missing docs)",
            || {
                proc::run(cargo().env("RUSTDOCFLAGS", "-D warnings").args([
                    "doc",
                    "--workspace",
                    "--no-deps",
                ]))
            },
        ),
        Leg::custom(
            "test-boost",
            "core tests with the `context`-crate backend",
            || {
                proc::run(
                    cargo()
                        .arg("test")
                        .args(packages(&CORE))
                        .args(["--features", "spindle-context/boost"]),
                )
            },
        ),
        Leg::cargo(
            "test-fp-env",
            "context and coro tests with a per-context floating-point environment",
            &[
                "test",
                "-p",
                "spindle-context",
                "-p",
                "spindle-coro",
                "--features",
                "spindle-context/fp-env",
            ],
        ),
        Leg::custom(
            "test-hook",
            "spindle-hook with its `interpose` feature (the libc calls interposed): tests and \
             lints",
            || {
                proc::run(cargo().args(["test", "-p", "spindle-hook", "--features", "interpose"]))?;
                proc::run(cargo().args([
                    "clippy",
                    "-p",
                    "spindle-hook",
                    "--features",
                    "interpose",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ]))
            },
        ),
        Leg::custom(
            "loom",
            "loom models of spindle-sched (policies, idle protocol), spindle-sync (wait queues, \
             hand-offs, select) and spindle-rt (a task's state word and join cell), 2 preemptions",
            || {
                // In `<target>/loom`, so that the loom build does not replace the normal one.
                let target = target_dir()?;
                // `--tests`: rustdoc would build the doctests without `--cfg loom`.
                let loom_cargo = || {
                    let mut c = cargo();
                    // Overflow checks on in this release build: a count that wraps
                    // (a lock's reader count) fails the model instead of passing silently.
                    c.env("RUSTFLAGS", "--cfg loom -C overflow-checks=on")
                        .env("LOOM_MAX_PREEMPTIONS", "2")
                        .env("CARGO_TARGET_DIR", target.join("loom"));
                    c
                };
                proc::run(loom_cargo().args([
                    "test",
                    "-p",
                    "spindle-sched",
                    "-p",
                    "spindle-sync",
                    "--release",
                    "--tests",
                ]))?;
                // spindle-rt's model only: its other tests run runtimes, which the loom build
                // of spindle-sync (its channels on loom's atomics) cannot serve outside a model.
                proc::run(loom_cargo().args([
                    "test",
                    "-p",
                    "spindle-rt",
                    "--release",
                    "--test",
                    "loom_task",
                ]))
            },
        ),
    ];
    legs.push(Leg::custom(
        "package",
        "cargo package of every published crate, each built from its .crate file",
        crate::publish::package,
    ));
    legs.push(Leg::custom(
        "msrv",
        "the published crates' tests on the declared rust-version (rustup toolchain)",
        crate::publish::msrv,
    ));
    for target in CROSS_TARGETS {
        legs.push(Leg::custom(
            &format!("cross-{target}"),
            "clippy for another target (library crates; IO backends with their tests)",
            move || cross(target),
        ));
    }
    legs.push(Leg::custom(
        "test-windows-wine",
        "windows-gnu tests (context, coro, IOCP, io, IO conformance, park) under Wine",
        || test_windows_wine(&WINE_TESTED, None),
    ));
    legs.push(Leg::custom(
        "aarch64",
        "aarch64-linux tests (context, stack, coro, park, timer, sched, sync, rt, IO conformance \
         on epoll) under qemu-user; context and coro again on the aarch64 Windows switch",
        test_aarch64,
    ));
    legs.push(Leg::custom(
        "soak",
        "the echo and chat examples under mixed load, 1 minute on epoll, then on io_uring \
         (cargo xtask soak)",
        crate::soak::ci,
    ));
    legs.push(Leg::custom(
        "matrix-quick",
        "the facade's feature matrix, a quick slice: defaults, no default features, a FreeBSD \
         check (all of it: cargo xtask matrix)",
        crate::matrix::quick,
    ));
    legs.push(Leg::custom(
        "valgrind",
        "core test binaries under valgrind memcheck, and a runtime on the automatic IO backend",
        || {
            valgrind(&CORE, &[])?;
            valgrind_auto_io()
        },
    ));
    legs.push(Leg::custom(
        "instr",
        "instructions per operation (callgrind, release build) against crates/bench/instr-baseline.json: \
         fails on a Spindle row more than 3 % above it",
        crate::instr::ci,
    ));
    legs.push(
        Leg::custom(
            "valgrind-rt",
            "spindle-rt's test binaries under valgrind memcheck",
            || valgrind(&["spindle-rt"], &VALGRIND_RT_SKIPPED),
        )
        .full_only(),
    );
    legs.push(
        Leg::custom(
            "miri",
            "Miri (nightly): spindle-sched's policies, the timer wheel, spindle-sync thread-only",
            crate::checkers::miri,
        )
        .full_only(),
    );
    legs.push(
        Leg::custom(
            "asan",
            "AddressSanitizer (nightly, build-std, --cfg spindle_asan): rt/sync stress, IO conformance (epoll), coro",
            crate::checkers::asan,
        )
        .full_only(),
    );
    legs.push(
        Leg::custom(
            "tsan",
            "ThreadSanitizer (nightly, build-std, --cfg spindle_tsan): rt/sync stress, IO conformance (epoll), coro",
            crate::checkers::tsan,
        )
        .full_only(),
    );
    legs.push(
        Leg::custom(
            "fuzz",
            "cargo-fuzz: timer wheel and channel/select against models, 60 s each",
            crate::checkers::fuzz,
        )
        .full_only(),
    );
    legs.push(Leg::custom(
        "deny",
        "cargo-deny: bans, licenses, sources",
        deny,
    ));
    legs
}

/// Adds `target` with rustup if it is not installed; for windows-gnu, checks for MinGW's gcc.
pub fn ensure_target(target: &str) -> Result<(), String> {
    let mut list = Command::new("rustup");
    list.args(["target", "list", "--installed"]);
    let installed = proc::run_stdout(&mut list)
        .map_err(|e| format!("{e} (cross builds need rustup to add target {target})"))?;
    if !installed.lines().any(|l| l.trim() == target) {
        proc::run(Command::new("rustup").args(["target", "add", target]))?;
    }
    if target.ends_with("-windows-gnu") {
        let gcc = format!(
            "{}-w64-mingw32-gcc",
            target.split('-').next().unwrap_or("x86_64")
        );
        if !proc::succeeds(Command::new(&gcc).arg("--version")) {
            return Err(format!(
                "`{gcc}` not found: the `context` crate's asm for {target} needs it; install it: \
                 apt-get install gcc-mingw-w64-x86-64"
            ));
        }
    }
    Ok(())
}

fn cross(target: &str) -> Result<(), String> {
    ensure_target(target)?;
    if target == ARM64_MSVC {
        for features in ["", "fp-env"] {
            proc::run(
                cargo()
                    .args(["rustc", "--release", "--target", target])
                    .args(["-p", "spindle-context", "--test", "context"])
                    .args(["--features", features])
                    .args(["--", "-C", "linker=true"]),
            )?;
        }
    }
    let cargo_for_target = cargo;
    proc::run(
        cargo_for_target()
            .args(["clippy", "--target", target])
            .args(packages(&CORE))
            .args(["--", "-D", "warnings"]),
    )?;
    proc::run(
        cargo_for_target()
            .args(["clippy", "--all-targets", "--target", target])
            .args(packages(&CROSS_ALL_TARGETS))
            // Interposition compiles to nothing on these targets: checked with it on.
            .args(["--features", "spindle-hook/interpose"])
            .args(["--", "-D", "warnings"]),
    )
}

/// Cross-builds the test suites of [`AARCH64_TESTED`] and the IO conformance suite for
/// aarch64-unknown-linux-gnu with `aarch64-linux-gnu-gcc` as the linker, and runs them under
/// qemu-user: `ci/aarch64/setup.sh` checks the tools and (as root) registers qemu with
/// binfmt_misc, which the tests' child processes (re-executions of the test binary) need.
/// Doctests are left out: they check the API's examples, which the `test` leg runs natively.
/// Tests that need what qemu-user does not emulate (`RLIMIT_AS`, `mincore`, io_uring, `fork`
/// in a threaded process) skip themselves with a line on stderr. Then the context and coroutine
/// suites run once more on the aarch64 Windows switch, built for Linux to check it
/// (`--cfg spindle_check_aarch64_windows`), with and without `fp-env`.
fn test_aarch64() -> Result<(), String> {
    const TARGET: &str = "aarch64-unknown-linux-gnu";
    const SYSROOT: &str = "/usr/aarch64-linux-gnu";
    ensure_target(TARGET)?;
    let setup = proc::root().join("ci/aarch64/setup.sh");
    let qemu = proc::run_stdout(Command::new("bash").arg(&setup)).map_err(|e| {
        format!(
            "{e} (it needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user and \
             qemu-user-binfmt, which .ci/run installs)"
        )
    })?;
    let qemu = qemu.trim().to_string();
    let cross_cargo = || {
        let mut c = cargo();
        c.env(
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
            "aarch64-linux-gnu-gcc",
        )
        .env(
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
            format!("{qemu} -L {SYSROOT}"),
        )
        // For the child processes, which binfmt_misc starts under qemu.
        .env("QEMU_LD_PREFIX", SYSROOT);
        c
    };
    proc::run(
        cross_cargo()
            .args(["test", "--tests", "--target", TARGET])
            .args(packages(&AARCH64_TESTED)),
    )?;
    proc::run(cross_cargo().args([
        "test",
        "--target",
        TARGET,
        "-p",
        "spindle-io-tests",
        "--test",
        "conformance",
        "--",
        AARCH64_CONFORMANCE,
    ]))?;
    // The aarch64 Windows switch, built for Linux with a stand-in TEB in x18 (see
    // spindle-context's src/aarch64_windows.rs), in a target directory of its own so that the
    // cfg does not replace the build above.
    let windows_switch_dir = target_dir()?.join("check-aarch64-windows");
    for features in ["", "fp-env"] {
        let tested: &[&str] = if features.is_empty() {
            &["spindle-context", "spindle-coro"]
        } else {
            &["spindle-context"]
        };
        proc::run(
            cross_cargo()
                .env("RUSTFLAGS", "--cfg spindle_check_aarch64_windows")
                .env("CARGO_TARGET_DIR", &windows_switch_dir)
                .args(["test", "--tests", "--target", TARGET])
                .args(["--features", features])
                .args(packages(tested)),
        )?;
    }
    Ok(())
}

/// The workspace's target directory (`cargo metadata`).
pub fn target_dir() -> Result<PathBuf, String> {
    let meta = proc::run_stdout(cargo().args(["metadata", "--format-version", "1", "--no-deps"]))?;
    json::parse(meta.trim())?
        .get("target_directory")
        .and_then(Json::as_str)
        .map(PathBuf::from)
        .ok_or_else(|| "`cargo metadata` gave no target_directory".to_string())
}

/// Builds the windows-gnu tests of `packages` and runs them under Wine, in a prefix under the
/// target directory that `ci/wine/setup.sh` prepares (once: a stub `bcryptprimitives.dll`,
/// which Wine 8 lacks and Rust's std needs, and `wineboot`). `build_dir`: a
/// `CARGO_TARGET_DIR` for the build (the prefix stays under the workspace's target directory).
pub fn test_windows_wine(packages_: &[&str], build_dir: Option<PathBuf>) -> Result<(), String> {
    const TARGET: &str = "x86_64-pc-windows-gnu";
    let limit = wine_test_timeout()?;
    ensure_target(TARGET)?;
    let dir = target_dir()?.join("wine");
    let setup = proc::root().join("ci/wine/setup.sh");
    let wine = proc::run_stdout(Command::new("bash").arg(&setup).arg(&dir)).map_err(|e| {
        format!("{e} (it needs wine64 and gcc-mingw-w64-x86-64, which .ci/run installs)")
    })?;
    let wine = wine.trim();
    if wine.is_empty() {
        return Err(format!("{} printed no Wine executable", setup.display()));
    }
    let prefix = dir.join("prefix");
    let cargo_in_build_dir = || {
        let mut c = cargo();
        if let Some(build_dir) = &build_dir {
            c.env("CARGO_TARGET_DIR", build_dir);
        }
        c
    };
    let mut build = cargo_in_build_dir();
    let messages = proc::run_stdout(
        build
            .args([
                "test",
                "--no-run",
                "--message-format=json-render-diagnostics",
                "--target",
                TARGET,
            ])
            .args(packages(packages_)),
    )?;
    let bins = test_executables(&messages)?;
    if bins.is_empty() {
        return Err("`cargo test --no-run` built no test executable".into());
    }
    // One Wine server for the whole leg. Each test executable is a Wine process of its own,
    // and a server left to exit by itself (a few seconds after its last client) can be
    // exiting just as the next executable connects: "wine client error:0: recvmsg: Connection
    // reset by peer" (seen once in CI). `-p`: stay until `-k`.
    let server = Path::new(wine).with_file_name("wineserver");
    let wineserver = |arg: &str| {
        let _ = Command::new(&server)
            .arg(arg)
            .env("WINEPREFIX", &prefix)
            .status();
    };
    wineserver("-p");
    let leg_wine = Wine {
        wine,
        server: &server,
        prefix: &prefix,
    };
    let result = bins
        .iter()
        .try_for_each(|bin| run_under_wine(&leg_wine, bin, limit))
        .and_then(|()| {
            // The doctests, through cargo with Wine as the target's runner.
            proc::run(
                cargo_in_build_dir()
                    .env("CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER", wine)
                    .env("WINEPREFIX", &prefix)
                    .env("WINEDEBUG", "-all")
                    .args(["test", "--doc", "--target", TARGET])
                    .args(packages(packages_)),
            )
        });
    wineserver("-k");
    result
}

/// How long one test executable may run under Wine before the leg calls it hung, kills it and
/// fails: the longest, the IO conformance suite, takes 15 to 20 s on a 2-core machine, and the
/// whole leg 16 to 45 s. `SPINDLE_WINE_TEST_TIMEOUT` (seconds) overrides it.
const WINE_TEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The variable that overrides [`WINE_TEST_TIMEOUT`].
const WINE_TEST_TIMEOUT_VAR: &str = "SPINDLE_WINE_TEST_TIMEOUT";

/// How long `EXE --list` may take under Wine (it runs only after a hang, to name the tests that
/// had not finished).
const WINE_LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// The limit per test executable under Wine: [`WINE_TEST_TIMEOUT`] or `$SPINDLE_WINE_TEST_TIMEOUT`.
fn wine_test_timeout() -> Result<Duration, String> {
    match std::env::var(WINE_TEST_TIMEOUT_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(WINE_TEST_TIMEOUT),
        Ok(v) => parse_timeout(&v).ok_or_else(|| {
            format!("{WINE_TEST_TIMEOUT_VAR}={v:?}: expected a whole number of seconds above 0")
        }),
        Err(e) => Err(format!("{WINE_TEST_TIMEOUT_VAR}: {e}")),
    }
}

/// A positive whole number of seconds.
fn parse_timeout(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
}

/// The leg's Wine: its loader, server and prefix.
struct Wine<'a> {
    wine: &'a str,
    server: &'a Path,
    prefix: &'a Path,
}

impl Wine<'_> {
    /// `wine EXE ARGS`, in the prefix, with Wine's own messages off and stdout to `out`.
    fn command(&self, bin: &TestBin, args: &[&str], out: std::fs::File) -> Command {
        let mut cmd = Command::new(self.wine);
        cmd.arg(&bin.exe)
            .args(args)
            .current_dir(&bin.package_dir)
            .env("WINEPREFIX", self.prefix)
            .env("WINEDEBUG", "-all")
            .stdin(Stdio::null())
            .stdout(out);
        cmd
    }

    /// `wineserver -k`: kills every process of the prefix, then the server. Returns what it
    /// reported if it failed.
    fn kill_all(&self) -> Result<(), String> {
        let mut cmd = Command::new(self.server);
        cmd.arg("-k").env("WINEPREFIX", self.prefix);
        proc::announce(&cmd);
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("`{}` failed ({s})", proc::show(&cmd))),
            Err(e) => Err(format!("cannot run `{}`: {e}", proc::show(&cmd))),
        }
    }
}

/// How a process run with a time limit ended.
enum Ended {
    Exited(std::process::ExitStatus),
    /// Still running at the limit (and not killed yet).
    TimedOut,
}

/// Waits for `child` for up to `limit`.
fn wait_with_timeout(child: &mut std::process::Child, limit: Duration) -> Result<Ended, String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("cannot wait for process {}: {e}", child.id()))?
        {
            return Ok(Ended::Exited(status));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Ended::TimedOut);
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}

/// Runs one windows-gnu test executable under Wine, in its package's directory (as `cargo
/// test` does). If the process ends without its test harness having started (it prints
/// `running N tests` first), Wine failed to start it — seen once in CI (an
/// executable with no tests exited with status 1 before printing anything, and passed on the
/// next three runs of the leg) — and it is run once more; a failure after the harness started
/// is the tests' own and is never retried.
///
/// An executable still running after `limit` has hung: it and every other process of the prefix
/// are killed (`wineserver -k`; that ends the leg's server too, and the leg stops there), its
/// output so far is printed with the tests that had not finished, and the leg fails. A hang is
/// never retried.
fn run_under_wine(wine: &Wine<'_>, bin: &TestBin, limit: Duration) -> Result<(), String> {
    // Its output goes to a file, not a pipe: the Wine processes the first executable starts
    // (services and devices of the prefix) inherit its descriptors and live as long as the
    // server, so a pipe would never reach its end.
    let out_path = wine.prefix.with_file_name("test-output.txt");
    for attempt in 1..=2 {
        let out_file = std::fs::File::create(&out_path)
            .map_err(|e| format!("cannot create {}: {e}", out_path.display()))?;
        let mut cmd = wine.command(bin, &[], out_file);
        proc::announce(&cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run `{}`: {e}", wine.wine))?;
        let status = match wait_with_timeout(&mut child, limit)? {
            Ended::Exited(status) => status,
            Ended::TimedOut => return Err(hung(wine, bin, child, &out_path, limit)),
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        print!("{stdout}");
        if status.success() {
            return Ok(());
        }
        let harness_started = harness_started(&stdout);
        if harness_started || attempt == 2 {
            return Err(format!(
                "`{}` failed under Wine ({}){}",
                bin.exe.display(),
                status,
                if harness_started {
                    ""
                } else {
                    ": twice before its test harness started"
                }
            ));
        }
        println!(
            "note: `{}` exited ({}) before its test harness started: Wine did not start it; \
             running it once more",
            bin.exe.display(),
            status
        );
    }
    Err(format!("`{}` did not run under Wine", bin.exe.display()))
}

/// A test executable ran past `limit`: kills it and the prefix's other processes, prints its
/// output so far and the tests it had not finished, and returns the leg's error.
fn hung(
    wine: &Wine<'_>,
    bin: &TestBin,
    mut child: std::process::Child,
    out_path: &Path,
    limit: Duration,
) -> String {
    let exe = bin.exe.display();
    let pid = child.id();
    println!(
        "error: `{exe}` (process {pid}) is still running after {} s under Wine: it hung. \
         Killing it and every process of the Wine prefix {} (`wineserver -k`).",
        limit.as_secs(),
        wine.prefix.display()
    );
    // What is about to be killed, and where the test process's threads wait (a futex: a lock,
    // a condition variable or a thread park, Wine's `NtWaitForAlertByThreadId`; a pipe or
    // socket read: a call to the Wine server, such as an IOCP wait).
    for line in prefix_processes(wine.prefix) {
        println!("  {line}");
    }
    for line in thread_waits(pid) {
        println!("  {line}");
    }
    let mut problems = Vec::new();
    if let Err(e) = wine.kill_all() {
        problems.push(e);
    }
    // `wineserver -k` kills the prefix's processes with SIGKILL; the loader's own process is
    // killed here too, in case the server could not reach it.
    let _ = child.kill();
    match wait_with_timeout(&mut child, Duration::from_secs(10)) {
        Ok(Ended::Exited(status)) => println!("process {pid} is gone ({status})"),
        Ok(Ended::TimedOut) => problems.push(format!(
            "process {pid} is still there 10 s after SIGKILL (stuck in the kernel?)"
        )),
        Err(e) => problems.push(e),
    }
    let stdout = std::fs::read_to_string(out_path).unwrap_or_default();
    println!("---- output of `{exe}` until it was killed ----");
    print!("{stdout}");
    println!("---- end of its output ----");
    // The names of its tests, to tell those that finished from those that did not.
    let unfinished = match list_tests(wine, bin) {
        Ok(list) => {
            let unfinished = unfinished_tests(&list, &stdout);
            println!("{}", describe_unfinished(&unfinished, test_threads()));
            unfinished
        }
        Err(e) => {
            problems.push(format!("could not list its tests: {e}"));
            Vec::new()
        }
    };
    // libtest prints why a test failed only at its end, which a hung process never reaches:
    // the first few that failed run alone once more, to show it. Their results do not change
    // the leg's (it fails), and in a fresh process they may pass: then their failure came from
    // the state of the one that hung.
    let failed = failed_tests(&stdout);
    if !failed.is_empty() {
        println!(
            "{} test(s) FAILED before the hang, and libtest would have said why only at its \
             end; running {} of them alone again, to show their messages:",
            failed.len(),
            failed.len().min(MAX_RERUNS_AFTER_HANG)
        );
    }
    for name in failed.iter().take(MAX_RERUNS_AFTER_HANG) {
        let args = ["--exact", name.as_str()];
        match run_after_hang(wine, bin, &args, "test-rerun.txt", WINE_RERUN_TIMEOUT) {
            Ok((status, out)) => {
                print!("{out}");
                println!("(`{name}` run alone after the hang: {status})");
            }
            Err(e) => println!("(`{name}` run alone after the hang: {e})"),
        }
    }
    let running = unfinished
        .iter()
        .take(test_threads())
        .cloned()
        .collect::<Vec<_>>();
    let mut error = format!(
        "`{exe}` hung under Wine: killed after {} s ({WINE_TEST_TIMEOUT_VAR} sets the limit in \
         seconds)",
        limit.as_secs()
    );
    if !running.is_empty() {
        error.push_str(&format!("; unfinished: {}", running.join(", ")));
        if unfinished.len() > running.len() {
            error.push_str(&format!(
                " (and {} not started)",
                unfinished.len() - running.len()
            ));
        }
    }
    if !failed.is_empty() {
        error.push_str(&format!("; failed before it: {}", failed.join(", ")));
    }
    if !problems.is_empty() {
        error.push_str(&format!("; also: {}", problems.join("; ")));
    }
    error
}

/// The processes of a Wine prefix (those whose environment sets `WINEPREFIX` to it), as
/// `process PID: COMMAND LINE` lines; none where `/proc` cannot be read.
fn prefix_processes(prefix: &Path) -> Vec<String> {
    let mut want = b"WINEPREFIX=".to_vec();
    want.extend_from_slice(prefix.as_os_str().as_encoded_bytes());
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found: Vec<(u32, String)> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|var| var == want))
        })
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline)
                .split('\0')
                .filter(|a| !a.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
                .trim()
                .to_string();
            (pid, cmdline)
        })
        .collect();
    found.sort_unstable();
    found
        .into_iter()
        .map(|(pid, cmdline)| format!("process {pid}: {cmdline}"))
        .collect()
}

/// Where each thread of process `pid` waits in the kernel (`/proc/PID/task/TID/wchan`), as
/// one line per kind of wait with its thread count; none where `/proc` cannot be read.
fn thread_waits(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut waits = std::collections::BTreeMap::<String, usize>::new();
    for task in tasks.filter_map(Result::ok) {
        let wchan = std::fs::read_to_string(task.path().join("wchan")).unwrap_or_default();
        let wchan = match wchan.trim() {
            "" | "0" => "running (or unknown)".to_string(),
            w => w.to_string(),
        };
        *waits.entry(wchan).or_default() += 1;
    }
    waits
        .into_iter()
        .map(|(wchan, n)| format!("process {pid}: {n} thread(s) waiting in {wchan}"))
        .collect()
}

/// How long a test that failed before a hang may take when run alone again.
const WINE_RERUN_TIMEOUT: Duration = Duration::from_secs(60);

/// How many of the tests that failed before a hang run alone again (to show why they failed).
const MAX_RERUNS_AFTER_HANG: usize = 3;

/// `EXE ARGS` under Wine, after a hang (a server starts again for it; the leg's `wineserver -k`
/// at its end stops it), with its output in `out_name` beside the prefix, for up to `limit`:
/// its exit status and output. Killed with the prefix's processes past `limit`.
fn run_after_hang(
    wine: &Wine<'_>,
    bin: &TestBin,
    args: &[&str],
    out_name: &str,
    limit: Duration,
) -> Result<(std::process::ExitStatus, String), String> {
    let path = wine.prefix.with_file_name(out_name);
    let file = std::fs::File::create(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut cmd = wine.command(bin, args, file);
    proc::announce(&cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run `{}`: {e}", wine.wine))?;
    match wait_with_timeout(&mut child, limit)? {
        Ended::Exited(status) => std::fs::read_to_string(&path)
            .map(|out| (status, out))
            .map_err(|e| format!("cannot read {}: {e}", path.display())),
        Ended::TimedOut => {
            let _ = wine.kill_all();
            let _ = child.kill();
            let _ = child.wait();
            Err(format!(
                "`{}` did not finish in {} s (killed)",
                proc::show(&cmd),
                limit.as_secs()
            ))
        }
    }
}

/// `EXE --list` under Wine, after a hang.
fn list_tests(wine: &Wine<'_>, bin: &TestBin) -> Result<String, String> {
    match run_after_hang(wine, bin, &["--list"], "test-list.txt", WINE_LIST_TIMEOUT)? {
        (status, list) if status.success() => Ok(list),
        (status, _) => Err(format!("`{} --list` failed ({status})", bin.exe.display())),
    }
}

/// The tests that a libtest output reports `FAILED` (`test NAME ... FAILED`), in its order.
fn failed_tests(output: &str) -> Vec<String> {
    output
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(str::to_string)
        .collect()
}

/// How many tests libtest runs at once: `$RUST_TEST_THREADS`, else the CPUs (Wine reports the
/// host's).
fn test_threads() -> usize {
    std::env::var("RUST_TEST_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(Into::into))
        .unwrap_or(1)
}

/// The tests of a libtest `--list` output (`NAME: test` lines) that `output`, the same
/// executable's output when run, reports no result for (`test NAME ... ok`, `FAILED`,
/// `ignored`...), in the list's order. libtest starts tests in that order, as many at once as
/// it has threads, and reports each as it finishes: so the first ones (up to the thread count)
/// were running, the rest had not started.
fn unfinished_tests(list: &str, output: &str) -> Vec<String> {
    let reported: std::collections::HashSet<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test "))
        .filter_map(|l| l.split_once(" ... ").map(|(name, _)| name))
        .collect();
    list.lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|name| !reported.contains(name))
        .map(str::to_string)
        .collect()
}

/// What [`unfinished_tests`] found, for people: those running, and how many had not started.
fn describe_unfinished(unfinished: &[String], threads: usize) -> String {
    if unfinished.is_empty() {
        return "every test had reported its result: the process hung after them \
                (in its exit?)"
            .to_string();
    }
    let running = unfinished.len().min(threads);
    let mut text = format!(
        "tests without a result: {}; running when it was killed (libtest starts tests in \
         name order, {threads} at once here):",
        unfinished.len()
    );
    for name in &unfinished[..running] {
        text.push_str(&format!("\n    {name}"));
    }
    if unfinished.len() > running {
        text.push_str(&format!(
            "\nnot started: {}",
            unfinished[running..].join(", ")
        ));
    }
    text
}

/// Whether a libtest executable's output shows its harness started (`running N tests` is
/// its first line).
fn harness_started(stdout: &str) -> bool {
    stdout.lines().any(|l| {
        l.strip_prefix("running ")
            .and_then(|rest| rest.split(' ').next())
            .is_some_and(|n| n.parse::<usize>().is_ok())
    })
}

/// A test executable found in cargo's JSON messages.
struct TestBin {
    exe: PathBuf,
    package_dir: PathBuf,
}

/// Test executables (artifacts with `profile.test`) in `cargo test --no-run
/// --message-format=json` output.
fn test_executables(messages: &str) -> Result<Vec<TestBin>, String> {
    let mut bins = Vec::new();
    for line in messages.lines().filter(|l| l.starts_with('{')) {
        let msg = json::parse(line)?;
        if msg.get("reason").and_then(Json::as_str) != Some("compiler-artifact")
            || msg.pointer("/profile/test").and_then(Json::as_bool) != Some(true)
        {
            continue;
        }
        let Some(exe) = msg.get("executable").and_then(Json::as_str) else {
            continue;
        };
        let manifest = msg
            .get("manifest_path")
            .and_then(Json::as_str)
            .unwrap_or_default();
        let package_dir = PathBuf::from(manifest)
            .parent()
            .map_or_else(|| proc::root().to_path_buf(), Into::into);
        bins.push(TestBin {
            exe: exe.into(),
            package_dir,
        });
    }
    Ok(bins)
}

/// Valgrind's messages that mean a stack switch confused it (stacks not registered).
const VALGRIND_BAD_SIGNS: [&str; 2] = [
    "client switching stacks?",
    "Warning: set address range perms",
];

/// Runs the test executables of `pkgs` (but those whose file name starts with one of `skip`)
/// under valgrind memcheck, one test thread each, with the runtimes on epoll.
fn valgrind(pkgs: &[&str], skip: &[&str]) -> Result<(), String> {
    let mut bins = valgrind_test_executables(&packages(pkgs))?;
    bins.retain(|b| {
        let name = b.exe.file_name().unwrap_or_default().to_string_lossy();
        !skip.iter().any(|s| name.starts_with(s))
    });
    if bins.is_empty() {
        return Err(format!(
            "cargo built no test executables for {}",
            pkgs.join(", ")
        ));
    }
    // On epoll: valgrind does not track the kernel's writes into io_uring's shared rings.
    let failures: Vec<String> = bins
        .iter()
        .filter_map(|bin| valgrind_one(bin, Some("epoll"), None).err())
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("under valgrind: {}", failures.join("; ")))
    }
}

/// How long `auto_backend` may run under valgrind (it takes a few seconds; a worker that is
/// never woken hangs it for ever, and valgrind then holds its lock in the system call, so the
/// test's own watchdog cannot run).
const AUTO_IO_LIMIT_SECS: u32 = 300;

/// spindle-rt's `auto_backend` test under valgrind without `SPINDLE_IO`: the automatic IO
/// backend must be one that valgrind lets a worker be woken from (io_uring is not).
fn valgrind_auto_io() -> Result<(), String> {
    let bins = valgrind_test_executables(&["-p", "spindle-rt", "--test", "auto_backend"])?;
    let [bin] = bins.as_slice() else {
        return Err(format!(
            "expected one test executable for spindle-rt's auto_backend, cargo built {}",
            bins.len()
        ));
    };
    valgrind_one(bin, None, Some(AUTO_IO_LIMIT_SECS))
        .map_err(|e| format!("under valgrind with the automatic IO backend: {e}"))
}

/// Builds test executables (`cargo test --no-run` with `selection`) for running by hand.
fn valgrind_test_executables<S: AsRef<std::ffi::OsStr>>(
    selection: &[S],
) -> Result<Vec<TestBin>, String> {
    if !proc::succeeds(Command::new("valgrind").arg("--version")) {
        return Err("valgrind is not installed (or does not run): apt-get install valgrind".into());
    }
    let messages = proc::run_stdout(
        cargo()
            .args([
                "test",
                "--no-run",
                "--message-format=json-render-diagnostics",
            ])
            .args(selection),
    )?;
    test_executables(&messages)
}

/// Runs one test executable under memcheck, one test thread: with `SPINDLE_IO` set to `io`
/// (`None`: unset, the runtime's automatic choice), killed after `limit_secs` if given.
fn valgrind_one(bin: &TestBin, io: Option<&str>, limit_secs: Option<u32>) -> Result<(), String> {
    let mut cmd = match limit_secs {
        Some(secs) => {
            let mut c = Command::new("timeout");
            c.args(["-s", "KILL", &secs.to_string(), "valgrind"]);
            c
        }
        None => Command::new("valgrind"),
    };
    // Fair scheduling: valgrind runs one thread at a time, and its default lock let a thread
    // that never blocks (a test's busy waker threads, a worker spinning for work) keep it,
    // starving the rest: `stress.rs`'s hammering test ran for 15 minutes without finishing,
    // and takes 3 s with `--fair-sched=yes`.
    cmd.args(["--fair-sched=yes", "--error-exitcode=99", "--quiet"])
        .arg(&bin.exe)
        .arg("--test-threads=1")
        .env("SPINDLE_UNDER_VALGRIND", "1")
        .env("CARGO_MANIFEST_DIR", &bin.package_dir)
        .current_dir(&bin.package_dir);
    match io {
        Some(io) => cmd.env("SPINDLE_IO", io),
        None => cmd.env_remove("SPINDLE_IO"),
    };
    let name = bin
        .exe
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let (status, stderr) = proc::run_tee_stderr(&mut cmd).map_err(|e| format!("{name}: {e}"))?;
    let mut why = Vec::new();
    if !status.success() {
        why.push(match status.code() {
            Some(99) => "valgrind reported errors (exit 99)".to_string(),
            // Killed by `timeout -s KILL` (which then exits 137, or is killed with it).
            Some(137) | None if limit_secs.is_some() => format!(
                "did not finish in {} s (killed; {status}): hung",
                limit_secs.unwrap_or_default()
            ),
            _ => format!("{status}"),
        });
    }
    for sign in VALGRIND_BAD_SIGNS {
        if stderr.contains(sign) {
            why.push(format!("stderr says {sign:?}"));
        }
    }
    if why.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", why.join(", ")))
    }
}

fn deny() -> Result<(), String> {
    if !proc::succeeds(cargo().args(["deny", "--version"])) {
        return Err(
            "cargo-deny is not installed; install it: cargo install --locked cargo-deny".into(),
        );
    }
    proc::run(cargo().args(["deny", "check", "bans", "licenses", "sources"]))
}

/// Whether a selector (`name` or `prefix*`) matches a leg name.
fn matches(selector: &str, leg: &str) -> bool {
    match selector.strip_suffix('*') {
        Some(prefix) => leg.starts_with(prefix),
        None => selector == leg,
    }
}

const USAGE: &str = "\
usage: cargo xtask ci [--full] [--only LEG[,LEG...]] [--skip LEG[,LEG...]] [--list]

  --full   also run the slow legs (marked `full` in --list: sanitizers, fuzzing)
  --only   run only these legs (in the usual order); a trailing * matches a prefix (cross-*)
  --skip   skip these legs
  --list   list the legs and exit";

fn print_legs(legs: &[Leg]) {
    for leg in legs {
        let full = if leg.full_only { "full " } else { "" };
        println!("  {:<30} {full}{}", leg.name, leg.about);
    }
}

pub fn main(args: &[String]) -> Result<ExitCode, String> {
    let all = legs();
    let mut only: Vec<String> = Vec::new();
    let mut skip: Vec<String> = Vec::new();
    let mut full = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        match flag {
            "--only" | "--skip" => {
                let v = inline
                    .or_else(|| it.next().cloned())
                    .ok_or_else(|| format!("{flag} needs a leg name\n{USAGE}"))?;
                let list = if flag == "--only" {
                    &mut only
                } else {
                    &mut skip
                };
                list.extend(
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from),
                );
            }
            "--full" => full = true,
            "--list" => {
                print_legs(&all);
                return Ok(ExitCode::SUCCESS);
            }
            "-h" | "--help" => {
                println!("{USAGE}\n\nlegs:");
                print_legs(&all);
                return Ok(ExitCode::SUCCESS);
            }
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    for sel in only.iter().chain(&skip) {
        if !all.iter().any(|l| matches(sel, &l.name)) {
            let names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
            return Err(format!("no leg named `{sel}`; legs: {}", names.join(", ")));
        }
    }
    if !full {
        for sel in &only {
            if all
                .iter()
                .filter(|l| matches(sel, &l.name))
                .all(|l| l.full_only)
            {
                return Err(format!("leg `{sel}` runs only with --full"));
            }
        }
    }
    let selected: Vec<&Leg> = all
        .iter()
        .filter(|l| full || !l.full_only)
        .filter(|l| only.is_empty() || only.iter().any(|s| matches(s, &l.name)))
        .filter(|l| !skip.iter().any(|s| matches(s, &l.name)))
        .collect();
    if selected.is_empty() {
        return Err("--only/--skip leave no leg to run".into());
    }

    let total = Instant::now();
    let mut results: Vec<(&str, Result<(), String>, f64)> = Vec::new();
    for (i, leg) in selected.iter().enumerate() {
        println!();
        println!(
            "==> ci [{}/{}] {}: {}",
            i + 1,
            selected.len(),
            leg.name,
            leg.about
        );
        let start = Instant::now();
        let r = (leg.run)();
        let secs = start.elapsed().as_secs_f64();
        match &r {
            Ok(()) => println!("<== {}: PASS ({secs:.1} s)", leg.name),
            Err(e) => println!("<== {}: FAIL ({secs:.1} s): {e}", leg.name),
        }
        results.push((&leg.name, r, secs));
    }

    println!();
    println!("ci summary");
    println!("{:<30} {:<6} {:>9}", "leg", "result", "seconds");
    for (name, r, secs) in &results {
        let verdict = if r.is_ok() { "PASS" } else { "FAIL" };
        println!("{name:<30} {verdict:<6} {secs:>9.1}");
    }
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, r, _)| r.is_err())
        .map(|(n, _, _)| *n)
        .collect();
    let secs = total.elapsed().as_secs_f64();
    if failed.is_empty() {
        let n = results.len();
        println!(
            "ci: {} passed ({secs:.0} s)",
            if n == 1 {
                "the leg".to_string()
            } else {
                format!("all {n} legs")
            }
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "ci: {} of {} legs FAILED ({secs:.0} s): {}",
            failed.len(),
            results.len(),
            failed.join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leg_names_are_unique_and_selectable() {
        let legs = legs();
        let mut names: Vec<&str> = legs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names[0], "fmt");
        assert!(names.contains(&"cross-x86_64-pc-windows-gnu"));
        assert!(names.contains(&"test-windows-wine"));
        assert!(names.contains(&"aarch64"));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), legs.len());
        assert!(matches("cross-*", "cross-x86_64-apple-darwin"));
        assert!(!matches("test", "test-boost"));
    }

    #[test]
    fn a_harness_counts_as_started_once_it_printed_its_test_count() {
        assert!(harness_started("\nrunning 3 tests\ntest a ... ok\n"));
        assert!(harness_started("\nrunning 0 tests\n\ntest result: ok.\n"));
        assert!(harness_started("\nrunning 1 test\n"));
        assert!(!harness_started(""));
        assert!(!harness_started("running late\n"));
    }

    #[test]
    fn unfinished_tests_are_those_listed_without_a_result() {
        let list = "\
child_case: test
iocp::echo: test
iocp::ten_thousand_connections: test
polling::echo: test
polling::half_close: test
polling::peer_reset: test
thread::echo: test

7 tests, 0 benchmarks
";
        let output = "\
running 7 tests
test child_case ... ignored, run by a parent test
test iocp::echo ... ok
test polling::half_close ... FAILED
test iocp::ten_thousand_connections ... ok
test polling::echo has been running for over 60 seconds
";
        let unfinished = unfinished_tests(list, output);
        assert_eq!(
            unfinished,
            ["polling::echo", "polling::peer_reset", "thread::echo"]
        );
        let text = describe_unfinished(&unfinished, 2);
        assert!(text.contains("tests without a result: 3;"), "{text}");
        assert!(
            text.contains("\n    polling::echo\n    polling::peer_reset\n"),
            "{text}"
        );
        assert!(text.ends_with("not started: thread::echo"), "{text}");
        // Fewer unfinished tests than threads: all were running.
        let text = describe_unfinished(&unfinished, 4);
        assert!(!text.contains("not started"), "{text}");
        assert!(text.contains("thread::echo"), "{text}");
        // All reported: the process hung after its tests.
        let all = format!(
            "{output}test polling::echo ... ok\ntest polling::peer_reset ... ok\n\
             test thread::echo ... ok\n"
        );
        assert!(unfinished_tests(list, &all).is_empty());
        assert!(describe_unfinished(&[], 2).contains("hung after them"));
    }

    #[test]
    fn failed_tests_are_read_from_their_result_lines() {
        let output = "\
running 4 tests
test a ... ok
test b::c ... FAILED
test d ... ignored, slow
test e has been running for over 60 seconds
test f ... FAILED
";
        assert_eq!(failed_tests(output), ["b::c", "f"]);
        assert!(failed_tests("running 0 tests\n").is_empty());
    }

    #[test]
    fn the_wine_timeout_is_a_positive_number_of_seconds() {
        assert_eq!(parse_timeout("300"), Some(Duration::from_secs(300)));
        assert_eq!(parse_timeout(" 45\n"), Some(Duration::from_secs(45)));
        assert_eq!(parse_timeout("0"), None);
        assert_eq!(parse_timeout("5m"), None);
        assert_eq!(parse_timeout(""), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_process_past_its_limit_is_reported_and_one_that_exits_is_not() {
        let mut slow = Command::new("sleep").arg("30").spawn().unwrap();
        let start = Instant::now();
        assert!(matches!(
            wait_with_timeout(&mut slow, Duration::from_millis(200)),
            Ok(Ended::TimedOut)
        ));
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(start.elapsed() < Duration::from_secs(20));
        slow.kill().unwrap();
        slow.wait().unwrap();
        let mut quick = Command::new("true").spawn().unwrap();
        match wait_with_timeout(&mut quick, Duration::from_secs(30)) {
            Ok(Ended::Exited(status)) => assert!(status.success()),
            _ => panic!("`true` did not exit within 30 s"),
        }
    }

    #[test]
    fn finds_test_executables() {
        let out = concat!(
            r#"{"reason":"compiler-artifact","manifest_path":"/w/crates/stack/Cargo.toml","profile":{"test":true},"executable":"/w/target/debug/deps/spindle_stack-1"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","manifest_path":"/w/x/Cargo.toml","profile":{"test":false},"executable":null}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        let bins = test_executables(out).unwrap();
        assert_eq!(bins.len(), 1);
        assert_eq!(
            bins[0].exe,
            PathBuf::from("/w/target/debug/deps/spindle_stack-1")
        );
        assert_eq!(bins[0].package_dir, PathBuf::from("/w/crates/stack"));
    }
}
