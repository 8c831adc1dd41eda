//! `spindle-bench wakecost`: what one wake-up of a sleeping thread costs that thread, in CPU time,
//! on the machine it runs on.
//!
//! The `io` suite's primary figure is a server's CPU time per request at a fixed load, and a server
//! at a fixed load sleeps and is woken many times a second. On a VM the CPU time that a wake-up
//! from an idle vCPU charges to the woken thread can be several microseconds and grow with how long
//! the thread slept (docs/benchmarks.md, io section, has the figures of a VM whose guest idles
//! through `haltpoll`), a large part of a request. This probe measures it, so that the io tables
//! can be read against the machine they ran on.
//!
//! Two threads: the sleeper, pinned to the server's CPU, blocks in `read` on an eventfd; the
//! waker, pinned to the client's CPU, busy-waits `gap` µs and writes the eventfd, `wakes`
//! times. The figure is the sleeper's CPU time (`CLOCK_THREAD_CPUTIME_ID`, user + system)
//! over those wake-ups, divided by their count: the read system calls and whatever the kernel
//! charges the sleeper for going to sleep and waking up.

use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::sys;

/// One probe's result.
#[derive(Debug, Clone, Copy)]
pub struct WakeCost {
    /// Wake-ups counted (writes the sleeper read).
    pub wakes: u64,
    /// The sleeper's CPU time per wake-up.
    pub cpu_per_wake: Duration,
    /// How many of the reads found more than one write (the sleeper was late: those wake-ups
    /// were merged, and the figure is per write, not per sleep).
    pub merged: u64,
}

/// This thread's CPU time so far.
fn thread_cpu_time() -> io::Result<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by `eventfd` and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Measures `wakes` wake-ups `gap` apart, the sleeper on `sleeper_cpu` and the waker on
/// `waker_cpu`.
pub fn measure(
    gap: Duration,
    wakes: u64,
    sleeper_cpu: usize,
    waker_cpu: usize,
) -> Result<WakeCost, String> {
    if wakes == 0 {
        return Err("wakecost: at least one wake-up".into());
    }
    // Reads and writes of an eventfd move exactly 8 bytes (a count), never fewer.
    let fd = Arc::new(File::from(eventfd().map_err(|e| format!("eventfd: {e}"))?));
    let waker_fd = fd.clone();
    let waker = std::thread::Builder::new()
        .name("wakecost-waker".into())
        .spawn(move || -> Result<(), String> {
            sys::pin_thread(waker_cpu)?;
            for _ in 0..wakes {
                let start = Instant::now();
                while start.elapsed() < gap {
                    std::hint::spin_loop();
                }
                (&*waker_fd)
                    .write_all(&1u64.to_ne_bytes())
                    .map_err(|e| format!("eventfd write: {e}"))?;
            }
            Ok(())
        })
        .map_err(|e| format!("cannot start the waker thread: {e}"))?;
    let sleeper = (|| -> Result<WakeCost, String> {
        // The calling thread sleeps; its affinity is restored afterwards.
        let _pin = sys::PinGuard::pin(sleeper_cpu)?;
        let before = thread_cpu_time().map_err(|e| e.to_string())?;
        let mut got = 0;
        let mut merged = 0;
        while got < wakes {
            let mut count = [0u8; 8];
            (&*fd)
                .read_exact(&mut count)
                .map_err(|e| format!("eventfd read: {e}"))?;
            let count = u64::from_ne_bytes(count);
            if count > 1 {
                merged += 1;
            }
            got += count;
        }
        let after = thread_cpu_time().map_err(|e| e.to_string())?;
        Ok(WakeCost {
            wakes: got,
            cpu_per_wake: (after - before) / u32::try_from(got).unwrap_or(u32::MAX),
            merged,
        })
    })();
    let waker = waker
        .join()
        .map_err(|_| "the waker thread panicked".to_string())?;
    // (A sleeper error leaves the waker to finish its writes: they never block.)
    let cost = sleeper?;
    waker?;
    Ok(cost)
}

/// `spindle-bench wakecost [--gaps US,US,...] [--wakes N]`.
pub fn main(args: &[String]) -> Result<std::process::ExitCode, String> {
    let mut gaps: Vec<u64> = vec![5, 20, 50, 200, 2000];
    let mut wakes: u64 = 5000;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("wakecost: {flag} needs a value"))
        };
        match a.as_str() {
            "--gaps" => {
                gaps = value("--gaps")?
                    .split(',')
                    .map(|g| {
                        g.trim()
                            .parse::<u64>()
                            .map_err(|_| format!("wakecost: --gaps {g}: not a number of µs"))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--wakes" => {
                wakes = value("--wakes")?
                    .parse()
                    .map_err(|_| "wakecost: --wakes takes a number".to_string())?;
            }
            other => {
                return Err(format!(
                    "wakecost: unknown argument `{other}` (usage: spindle-bench wakecost \
                     [--gaps US,US,...] [--wakes N])"
                ));
            }
        }
    }
    let (sleeper_cpu, waker_cpu) = sys::server_and_client_cpus()?;
    println!("sleeper on CPU {sleeper_cpu} (the io suite's server CPU), waker on CPU {waker_cpu}");
    println!(
        "{:>10}  {:>8}  {:>17}  {:>8}",
        "gap (µs)", "wakes", "CPU per wake (µs)", "merged"
    );
    for gap in gaps {
        let c = measure(Duration::from_micros(gap), wakes, sleeper_cpu, waker_cpu)?;
        println!(
            "{:>10}  {:>8}  {:>17.2}  {:>8}",
            gap,
            c.wakes,
            c.cpu_per_wake.as_secs_f64() * 1e6,
            c.merged
        );
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_counts_every_wake_and_some_cpu() {
        // (On a one-CPU machine both run on it: the waker spins while the sleeper sleeps.)
        let (a, b) = sys::server_and_client_cpus().unwrap();
        let c = measure(Duration::from_micros(50), 200, a, b).unwrap();
        assert_eq!(c.wakes, 200);
        // Each wake-up is at least one `read` system call: well above a nanosecond of CPU.
        assert!(c.cpu_per_wake > Duration::from_nanos(50), "{c:?}");
        assert!(c.cpu_per_wake < Duration::from_millis(5), "{c:?}");
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(measure(Duration::from_micros(1), 0, 0, 0).is_err());
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(main(&args(&["--gaps", "5,x"])).is_err());
        assert!(main(&args(&["--wakes"])).is_err());
        assert!(main(&args(&["--bogus"])).is_err());
    }
}
