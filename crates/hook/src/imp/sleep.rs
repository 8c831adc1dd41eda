//! The sleep family: in a coroutine, a park until the deadline.

use std::time::{Duration, Instant};

use libc::{c_int, c_long, c_uint, clockid_t, timespec};

use super::{coroutine_sleep_until, enabled, in_coroutine, sys};

/// Whether a sleep should suspend the caller instead of the thread.
#[inline]
fn suspends() -> bool {
    enabled() && in_coroutine()
}

/// The duration a valid `timespec` describes, or `EINVAL`.
fn duration(ts: &timespec) -> Result<Duration, c_int> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn sleep_for(d: Duration) {
    coroutine_sleep_until(Instant::now().checked_add(d));
}

/// # Safety
///
/// As `nanosleep(2)`: `req` valid to read, `rem` null or valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    if !suspends() || req.is_null() {
        // SAFETY: the caller's contract (a null `req` fails with EFAULT in the kernel).
        return unsafe { sys::call3(libc::SYS_nanosleep, req as c_long, rem as c_long, 0) }
            as c_int;
    }
    // SAFETY: the caller's contract: `req` is valid to read.
    match duration(unsafe { &*req }) {
        Ok(d) => {
            sleep_for(d);
            0
        }
        Err(e) => {
            sys::set_errno(e);
            -1
        }
    }
}

/// # Safety
///
/// As `clock_nanosleep(2)`: `req` valid to read, `rem` null or valid to write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let ours = matches!(
        clock,
        libc::CLOCK_MONOTONIC | libc::CLOCK_REALTIME | libc::CLOCK_BOOTTIME
    );
    if !suspends() || !ours || req.is_null() {
        // Returns the error number; errno is left as it was, as glibc does.
        let saved = sys::errno();
        // SAFETY: the caller's contract.
        let r = unsafe {
            sys::call6(
                libc::SYS_clock_nanosleep,
                [
                    clock as c_long,
                    flags as c_long,
                    req as c_long,
                    rem as c_long,
                    0,
                    0,
                ],
            )
        };
        let e = sys::errno();
        sys::set_errno(saved);
        return if r < 0 { e } else { 0 };
    }
    // SAFETY: the caller's contract: `req` is valid to read.
    let d = match duration(unsafe { &*req }) {
        Ok(d) => d,
        Err(e) => return e,
    };
    if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is valid to write; the clock is one of three valid ones.
        if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
            return libc::EINVAL;
        }
        let now = Duration::new(
            now.tv_sec.max(0) as u64,
            now.tv_nsec.clamp(0, 999_999_999) as u32,
        );
        sleep_for(d.saturating_sub(now));
    } else {
        sleep_for(d);
    }
    0
}

/// # Safety
///
/// None beyond the C function's (it takes no pointers).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sleep(seconds: c_uint) -> c_uint {
    if suspends() {
        sleep_for(Duration::from_secs(seconds.into()));
        return 0;
    }
    let saved = sys::errno();
    let mut ts = timespec {
        tv_sec: seconds.into(),
        tv_nsec: 0,
    };
    let p = &raw mut ts;
    // SAFETY: `ts` is valid to read and to write the time left into.
    if unsafe { sys::call3(libc::SYS_nanosleep, p as c_long, p as c_long, 0) } < 0 {
        // Interrupted: the whole seconds not slept.
        return ts.tv_sec.clamp(0, c_uint::MAX.into()) as c_uint;
    }
    sys::set_errno(saved);
    0
}

/// # Safety
///
/// None beyond the C function's (it takes no pointers).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn usleep(usec: libc::useconds_t) -> c_int {
    if suspends() {
        sleep_for(Duration::from_micros(usec.into()));
        return 0;
    }
    let ts = timespec {
        tv_sec: (usec / 1_000_000).into(),
        tv_nsec: ((usec % 1_000_000) * 1000).into(),
    };
    // SAFETY: `ts` is valid to read; no remainder is asked for.
    unsafe { sys::call3(libc::SYS_nanosleep, (&raw const ts) as c_long, 0, 0) as c_int }
}
