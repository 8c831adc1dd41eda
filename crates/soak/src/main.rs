//! The soak test, run by `cargo xtask soak --minutes N [--backend epoll|uring|polling]`.
//!
//! Two processes: this binary starts itself again as the **server** (`spindle-soak server`),
//! which runs the echo and chat examples — their own code, included from
//! `crates/rt/examples` — on a 2-worker runtime, and stays as the **load generator**, which
//! drives both servers over loopback for N minutes with plain threads and `std::net` sockets:
//! steady ping-pong clients, random connects and disconnects, half-closes, peer resets
//! (`SO_LINGER` 0), slow chat readers that stop reading, 10,000 idle connections, clients that
//! time out or are timed out. Two processes because both ends of 10,000 connections would not
//! fit under one `RLIMIT_NOFILE` here (about 20,000), and so that the server's descriptors,
//! RSS and CPU time are its own. The server answers `stats` on its stdin with a line of figures
//! (`/proc/self/fd`, RSS, CPU time, live coroutines, chat members); its stderr (the examples'
//! error lines, the runtime's stuck-coroutine monitor) is read and counted by the generator.
//!
//! At the end the generator checks that every request was answered or cleanly refused, that
//! the server's descriptors and live coroutines are back to where they started, that its RSS
//! stayed flat after warm-up, that the monitor reported no stuck coroutine and that the
//! workers are idle (CPU over one quiet second); it prints a summary table and exits non-zero
//! on any violation. See `load.rs` for the mix and the bounds.
//!
//! ```text
//! spindle-soak [--minutes N] [--backend auto|epoll|uring|polling] [--idle N] [--stuck-ms N]
//!              [--inject leak-fd|leak-coroutine|stuck|spin] [--default-pool]
//! ```
//!
//! The server's stack pool keeps at most 256 stacks per worker and 1,024 shared (see
//! `server::POOL_THREAD_CACHE`); `--default-pool` soaks the runtime's default pool instead,
//! whose caches fill for minutes under this load (RSS then grows until they are full).
//!
//! `--inject` makes the server misbehave on purpose (leak a descriptor, leave a coroutine
//! parked for ever, hold a worker for 300 ms, keep a worker busy) to show that the checks
//! catch it.

#[cfg(target_os = "linux")]
#[allow(dead_code)]
#[path = "../../rt/examples/chat.rs"]
mod chat;
#[cfg(target_os = "linux")]
#[allow(dead_code)]
#[path = "../../rt/examples/echo.rs"]
mod echo;
#[cfg(target_os = "linux")]
mod load;
#[cfg(target_os = "linux")]
mod server;
#[cfg(target_os = "linux")]
mod sys;

use std::process::ExitCode;

/// What the command line asked for.
#[derive(Clone, Debug)]
pub struct Opts {
    /// How long the load runs.
    pub minutes: f64,
    /// `auto`, `epoll`, `uring` or `polling`.
    pub backend: String,
    /// Idle connections held through the run.
    pub idle: usize,
    /// The runtime's stuck-coroutine threshold.
    pub stuck_ms: u64,
    /// A fault to inject into the server (to see a check fail).
    pub inject: Option<String>,
    /// The runtime's default stack pool instead of the soak's bounded one.
    pub default_pool: bool,
}

const USAGE: &str = "usage: spindle-soak [--minutes N] [--backend auto|epoll|uring|polling] \
                     [--idle N] [--stuck-ms N] [--inject leak-fd|leak-coroutine|stuck|spin] \
                     [--default-pool]";

/// The backends the soak knows.
pub const BACKENDS: [&str; 4] = ["auto", "epoll", "uring", "polling"];
/// The faults `--inject` knows.
pub const INJECTIONS: [&str; 4] = ["leak-fd", "leak-coroutine", "stuck", "spin"];

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut opts = Opts {
        minutes: 1.0,
        backend: "auto".into(),
        idle: 10_000,
        stuck_ms: 100,
        inject: None,
        default_pool: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (a.as_str(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag {
            "--minutes" => {
                let v = value()?;
                opts.minutes = v
                    .parse()
                    .ok()
                    .filter(|m: &f64| m.is_finite() && *m > 0.0)
                    .ok_or_else(|| format!("--minutes {v}: not a positive number"))?;
            }
            "--backend" => {
                let v = value()?;
                if !BACKENDS.contains(&v.as_str()) {
                    return Err(format!("--backend {v}: one of {}", BACKENDS.join(", ")));
                }
                opts.backend = v;
            }
            "--idle" => {
                let v = value()?;
                opts.idle = v.parse().map_err(|_| format!("--idle {v}: not a count"))?;
            }
            "--stuck-ms" => {
                let v = value()?;
                opts.stuck_ms = v
                    .parse()
                    .ok()
                    .filter(|&ms| ms > 0)
                    .ok_or_else(|| format!("--stuck-ms {v}: not a positive count"))?;
            }
            "--inject" => {
                let v = value()?;
                if !INJECTIONS.contains(&v.as_str()) {
                    return Err(format!("--inject {v}: one of {}", INJECTIONS.join(", ")));
                }
                opts.inject = Some(v);
            }
            "--default-pool" => opts.default_pool = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(opts)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (server, rest) = match args.first().map(String::as_str) {
        Some("server") => (true, &args[1..]),
        _ => (false, &args[..]),
    };
    let opts = match parse(rest) {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("spindle-soak: {e}");
            return ExitCode::from(2);
        }
    };
    run(server, &opts)
}

#[cfg(target_os = "linux")]
fn run(server: bool, opts: &Opts) -> ExitCode {
    let result = if server {
        server::run(opts).map(|()| true)
    } else {
        load::run(opts)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("spindle-soak: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn run(_server: bool, _opts: &Opts) -> ExitCode {
    eprintln!("spindle-soak: the soak runs on Linux only (it reads /proc)");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_the_command_line() {
        let o = parse(&args(
            "--minutes 0.5 --backend=uring --idle 10 --inject stuck",
        ))
        .unwrap();
        assert_eq!(o.minutes, 0.5);
        assert_eq!(o.backend, "uring");
        assert_eq!(o.idle, 10);
        assert_eq!(o.inject.as_deref(), Some("stuck"));
        assert_eq!(parse(&[]).unwrap().idle, 10_000);
        assert!(parse(&args("--minutes 0")).is_err());
        assert!(parse(&args("--minutes")).is_err());
        assert!(parse(&args("--backend kqueue")).is_err());
        assert!(parse(&args("--frobnicate")).is_err());
    }
}
