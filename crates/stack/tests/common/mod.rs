//! Helpers shared by the integration tests: child processes for the abort paths, running
//! code on a stack, and page residency.
#![allow(dead_code)] // each test binary uses a different subset

#[cfg(unix)]
use std::process::{Command, ExitStatus};

/// Names the test a re-executed child process should run its crashing branch for.
const CHILD_ENV: &str = "SPINDLE_STACK_CRASH_TEST";

/// What a child process did.
#[cfg(unix)]
#[derive(Debug)]
pub struct ChildOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

#[cfg(unix)]
impl ChildOutput {
    /// The signal that killed the child, if one did.
    pub fn signal(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.status.signal()
    }

    /// Asserts the child died of `signal`.
    pub fn assert_killed_by(&self, signal: i32) {
        assert_eq!(
            self.signal(),
            Some(signal),
            "expected death by signal {signal}, got {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }

    /// Lines of stderr that came from our handler.
    pub fn spindle_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("spindle:"))
            .collect()
    }

    /// Asserts the child aborted (SIGABRT) after printing exactly one overflow line,
    /// which contains every one of `needles`.
    pub fn assert_overflow_abort(&self, needles: &[&str]) {
        self.assert_killed_by(libc::SIGABRT);
        let lines = self.spindle_lines();
        assert_eq!(
            lines.len(),
            1,
            "expected one spindle line, stderr:\n{}",
            self.stderr
        );
        assert!(lines[0].contains("overflowed"), "{}", lines[0]);
        for needle in needles {
            assert!(
                lines[0].contains(needle),
                "{:?} not in {:?}",
                needle,
                lines[0]
            );
        }
    }
}

/// Runs `child` in a re-executed copy of this test binary (only the test `name`, with
/// [`CHILD_ENV`] set) and returns what the child did. In the child itself, runs `child`
/// and exits with status 0 if it returns, so a child that was meant to crash but did not
/// shows up as a clean exit.
#[cfg(unix)]
pub fn crash_test(name: &str, child: impl FnOnce()) -> ChildOutput {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        no_core_dumps();
        child();
        std::process::exit(0);
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    ChildOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The crashes are expected: don't litter the disk with cores.
#[cfg(unix)]
fn no_core_dumps() {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `zero` is a valid rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
}

/// Calls `f(arg)` (System V ABI) with the stack pointer set to `top`, on the current thread, and returns
/// its result: a minimal "run this on that stack" without a coroutine library.
///
/// # Safety
///
/// `top` is the 16-byte aligned top of a stack that is large enough for `f` (or guarded:
/// then overflowing it aborts), and `f` does not unwind.
#[cfg(all(target_arch = "x86_64", unix))]
pub unsafe fn call_on_stack(top: *mut u8, f: extern "C" fn(usize) -> usize, arg: usize) -> usize {
    let result: usize;
    // SAFETY: r12 (callee-saved, declared clobbered) keeps our stack pointer across the
    // call; `top` is aligned so the callee sees a correctly aligned frame; clobber_abi("C")
    // covers everything the callee may change.
    unsafe {
        std::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            inout("rdi") arg => _,
            out("rax") result,
            out("r12") _,
            clobber_abi("C"),
        );
    }
    result
}

/// Recurses `depth` times with a 512-byte frame (about 560 bytes per level); returns a
/// checksum so nothing is optimized away.
pub extern "C" fn recurse(depth: usize) -> usize {
    let mut frame = [0u8; 512];
    frame[depth % 512] = depth as u8;
    std::hint::black_box(&mut frame);
    if depth == 0 {
        return 0;
    }
    recurse(depth - 1).wrapping_add(usize::from(std::hint::black_box(&frame)[depth % 512]))
}

/// Recurses until the stack runs out (never returns normally).
pub extern "C" fn recurse_forever(depth: usize) -> usize {
    let mut frame = [0u8; 1024];
    std::hint::black_box(&mut frame);
    if std::hint::black_box(depth) == usize::MAX {
        return 0;
    }
    recurse_forever(depth + 1).wrapping_add(usize::from(std::hint::black_box(&frame)[0]))
}

/// Which of the pages of `[start, start + len)` are resident (`start` page-aligned).
#[cfg(all(unix, not(miri)))]
pub fn resident_pages(start: *const u8, len: usize) -> Vec<bool> {
    let page = spindle_stack::page_size();
    let pages = len.div_ceil(page);
    let mut flags = vec![0u8; pages];
    // SAFETY: `flags` has one byte per page of the range; mincore only reads page tables.
    let rc = unsafe { libc::mincore(start.cast_mut().cast(), len, flags.as_mut_ptr().cast()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    flags.iter().map(|f| f & 1 == 1).collect()
}

/// Under Miri (no `mincore`; stacks are zeroed heap memory, and a discarded page is zeroed,
/// see `os/miri.rs`): a page counts as resident if its lowest byte, the one [`touch_below`]
/// writes, is not zero. That keeps the trimming tests' meaning: touched pages "stay", pages
/// given back read as zeros.
#[cfg(miri)]
pub fn resident_pages(start: *const u8, len: usize) -> Vec<bool> {
    let page = spindle_stack::page_size();
    (0..len.div_ceil(page))
        // SAFETY: the callers pass (part of) a live stack's usable range, which is readable.
        .map(|i| unsafe { start.add(i * page).read_volatile() } != 0)
        .collect()
}

/// Lines of /proc/self/maps: the process's mapping count.
#[cfg(target_os = "linux")]
pub fn mapping_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// Touches every page of `[top - len, top)` (writes one byte per page).
///
/// # Safety
///
/// The range is writable memory (or grows on touch) that nothing else uses.
pub unsafe fn touch_below(top: *mut u8, len: usize) {
    let page = spindle_stack::page_size();
    let mut offset = page;
    while offset <= len {
        // SAFETY: the caller guarantees the range is ours and writable.
        unsafe { top.sub(offset).write_volatile(0x5A) };
        offset += page;
    }
}

/// The emulator this test process runs under, if any: qemu-user, recognised by the executable
/// of `/proc/thread-self/exe`, which it leaves alone (it makes `/proc/self/exe` name the guest
/// program). Some kernel interfaces differ there: qemu-user keeps `RLIMIT_AS` to itself (it
/// reserves the guest's address space and fails mappings with its own `ENOMEM`), maps guest
/// memory with mappings of its own, answers `mincore` with `ENOMEM` for guest stacks, and
/// refuses `io_uring_setup` (`ENOSYS`).
pub fn emulator() -> Option<String> {
    let exe = std::fs::read_link("/proc/thread-self/exe").ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    name.starts_with("qemu-").then_some(name)
}

/// Whether the calling test must be skipped because it runs under an emulator that does not
/// give it `needs`; says so on stderr, outside the test harness's capture, so that the line
/// shows even though the test passes.
pub fn skipped_under_emulation(test: &str, needs: &str) -> bool {
    use std::io::Write;
    let Some(emulator) = emulator() else {
        return false;
    };
    let _ = writeln!(
        std::io::stderr(),
        "{test}: skipped under {emulator}, which does not provide {needs}"
    );
    true
}
