//! Faults that are not ours go to whoever handled SIGSEGV/SIGBUS before us, and die the way
//! they would have without us.
#![cfg(unix)]

mod common;

use spindle_stack::FixedStack;

/// Makes sure our handler is installed (it is installed with the first stack).
fn install_our_handler() {
    drop(FixedStack::new(4096).unwrap());
}

/// A write through a pointer that points nowhere we know of.
fn bad_write() {
    let nowhere = std::ptr::without_provenance_mut::<u8>(0x18);
    // SAFETY: deliberately not: the null page is never mapped.
    unsafe { nowhere.write_volatile(1) };
}

#[test]
fn a_bad_pointer_still_dies_by_sigsegv() {
    // Rust's runtime handler is the previous one here: it is called, sees a fault outside
    // any thread's guard page, restores the default action, and the fault kills us.
    let output = common::crash_test("a_bad_pointer_still_dies_by_sigsegv", || {
        install_our_handler();
        bad_write();
    });
    output.assert_killed_by(libc::SIGSEGV);
    assert!(output.spindle_lines().is_empty(), "{}", output.stderr);
}

#[test]
fn a_thread_stack_overflow_is_still_reported_by_rust() {
    fn overflow_this_thread(depth: usize) -> usize {
        let mut frame = [0u8; 4096];
        std::hint::black_box(&mut frame);
        if std::hint::black_box(depth) == usize::MAX {
            return 0;
        }
        overflow_this_thread(depth + 1) + usize::from(std::hint::black_box(&frame)[0])
    }
    let output = common::crash_test("a_thread_stack_overflow_is_still_reported_by_rust", || {
        install_our_handler();
        // A fresh thread with a known, small stack.
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| overflow_this_thread(0))
            .unwrap()
            .join()
            .unwrap();
    });
    output.assert_killed_by(libc::SIGABRT);
    assert!(
        output.stderr.contains("has overflowed its stack"),
        "{}",
        output.stderr
    );
    assert!(output.spindle_lines().is_empty(), "{}", output.stderr);
}

#[test]
fn with_the_default_action_before_us_faults_still_kill() {
    let output = common::crash_test(
        "with_the_default_action_before_us_faults_still_kill",
        || {
            // SAFETY: resetting to the default disposition before any stack exists.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
            install_our_handler();
            bad_write();
        },
    );
    output.assert_killed_by(libc::SIGSEGV);
    assert!(output.spindle_lines().is_empty(), "{}", output.stderr);
}

#[test]
fn with_the_default_action_before_us_a_sent_sigsegv_still_kills() {
    let output = common::crash_test(
        "with_the_default_action_before_us_a_sent_sigsegv_still_kills",
        || {
            // SAFETY: resetting to the default disposition before any stack exists.
            unsafe { libc::signal(libc::SIGSEGV, libc::SIG_DFL) };
            install_our_handler();
            // SAFETY: sending ourselves a signal.
            unsafe { libc::raise(libc::SIGSEGV) };
            std::thread::sleep(std::time::Duration::from_millis(100));
        },
    );
    output.assert_killed_by(libc::SIGSEGV);
}

#[test]
fn a_plain_previous_handler_is_called() {
    extern "C" fn plain_handler(_signal: libc::c_int) {
        let message = b"plain handler ran\n";
        // SAFETY: write and _exit are async-signal-safe; the buffer is valid.
        unsafe {
            libc::write(libc::STDERR_FILENO, message.as_ptr().cast(), message.len());
            libc::_exit(42);
        }
    }
    let output = common::crash_test("a_plain_previous_handler_is_called", || {
        let handler = plain_handler as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: installing an async-signal-safe handler before any stack exists.
        unsafe { libc::signal(libc::SIGSEGV, handler) };
        install_our_handler();
        bad_write();
    });
    assert_eq!(output.status.code(), Some(42), "{output:?}");
    assert!(
        output.stderr.contains("plain handler ran"),
        "{}",
        output.stderr
    );
}

#[test]
fn a_siginfo_previous_handler_gets_the_fault_address() {
    extern "C" fn siginfo_handler(
        _signal: libc::c_int,
        info: *mut libc::siginfo_t,
        _context: *mut libc::c_void,
    ) {
        // SAFETY: the kernel's siginfo, passed on by our handler.
        let addr = unsafe { (*info).si_addr() } as usize;
        let code = if addr == 0x18 { 43 } else { 44 };
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(code) };
    }
    let output = common::crash_test("a_siginfo_previous_handler_gets_the_fault_address", || {
        // SAFETY: sigaction is plain data.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = siginfo_handler
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        // SAFETY: installing an async-signal-safe handler before any stack exists.
        unsafe { libc::sigaction(libc::SIGSEGV, &action, std::ptr::null_mut()) };
        install_our_handler();
        bad_write();
    });
    assert_eq!(output.status.code(), Some(43), "{output:?}");
}
