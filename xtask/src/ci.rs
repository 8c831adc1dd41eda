//! `cargo xtask ci`: the one test command.
//!
//! The legs run in order, each announced with a header and its command lines; a failing leg does
//! not stop the others; a summary table follows and the exit status is non-zero if any leg
//! failed. To add a leg (loom, miri, wine...), push it in [`legs`]: either
//! [`Leg::cargo`] for a plain `cargo ...` command or [`Leg::custom`] with a function.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

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
    let result = bins
        .iter()
        .try_for_each(|bin| run_under_wine(wine, &prefix, bin))
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

/// Runs one windows-gnu test executable under Wine, in its package's directory (as `cargo
/// test` does). If the process ends without its test harness having started (it prints
/// `running N tests` first), Wine failed to start it — seen once in CI (an
/// executable with no tests exited with status 1 before printing anything, and passed on the
/// next three runs of the leg) — and it is run once more; a failure after the harness started
/// is the tests' own and is never retried.
fn run_under_wine(wine: &str, prefix: &Path, bin: &TestBin) -> Result<(), String> {
    // Its output goes to a file, not a pipe: the Wine processes the first executable starts
    // (services and devices of the prefix) inherit its descriptors and live as long as the
    // server, so a pipe would never reach its end.
    let out_path = prefix.with_file_name("test-output.txt");
    for attempt in 1..=2 {
        let out_file = std::fs::File::create(&out_path)
            .map_err(|e| format!("cannot create {}: {e}", out_path.display()))?;
        let mut cmd = Command::new(wine);
        cmd.arg(&bin.exe)
            .current_dir(&bin.package_dir)
            .env("WINEPREFIX", prefix)
            .env("WINEDEBUG", "-all")
            .stdin(Stdio::null())
            .stdout(out_file);
        proc::announce(&cmd);
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run `{wine}`: {e}"))?;
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
