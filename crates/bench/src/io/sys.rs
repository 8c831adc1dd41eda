//! The OS plumbing of the `io` suite: CPU pinning, a server child process and its CPU time
//! from `/proc/PID/stat`, and `wrk`.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _};
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The CPUs this thread may run on, in increasing order.
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    let set = thread_affinity()?;
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu < CPU_SETSIZE`, the number of CPUs a `cpu_set_t` holds.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// The CPUs of a run: the server's and the client's. The first two CPUs this process may use
/// (core 0 and core 1 on this project's machine); the same one twice, with a warning, if it
/// may use only one.
pub fn server_and_client_cpus() -> Result<(usize, usize), String> {
    let cpus = allowed_cpus()?;
    match cpus.as_slice() {
        [] => Err("sched_getaffinity returned no CPU".into()),
        [only] => Ok((*only, *only)),
        [server, client, ..] => Ok((*server, *client)),
    }
}

/// This thread's CPU affinity mask.
pub fn thread_affinity() -> Result<libc::cpu_set_t, String> {
    // SAFETY: `cpu_set_t` is a plain bit mask; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: pid 0 = the calling thread; the pointer and size describe `set`.
    if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Err(format!(
            "sched_getaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(set)
}

/// Sets this thread's CPU affinity mask (threads it starts later inherit it).
pub fn set_thread_affinity(set: &libc::cpu_set_t) -> Result<(), String> {
    // SAFETY: pid 0 = the calling thread; the pointer and size describe `set`.
    if unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), set) } != 0 {
        return Err(format!(
            "sched_setaffinity: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Pins this thread to one CPU.
pub fn pin_thread(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("CPU {cpu} is beyond CPU_SETSIZE"));
    }
    // SAFETY: as in `thread_affinity`.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: `cpu < CPU_SETSIZE` (checked above).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    set_thread_affinity(&set).map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

/// Pins the calling thread to a CPU and restores its previous mask when dropped.
#[derive(Debug)]
pub struct PinGuard {
    previous: libc::cpu_set_t,
}

impl PinGuard {
    pub fn pin(cpu: usize) -> Result<PinGuard, String> {
        let previous = thread_affinity()?;
        pin_thread(cpu)?;
        Ok(PinGuard { previous })
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Err(e) = set_thread_affinity(&self.previous) {
            eprintln!("spindle-bench: cannot restore the CPU affinity: {e}");
        }
    }
}

/// Sets the calling thread's timer slack to 1 ns (the default, 50 µs, would let the kernel
/// delay the client's sub-millisecond pacing waits and bunch its sends) and restores it when
/// dropped.
#[derive(Debug)]
pub struct TimerSlackGuard {
    previous: libc::c_int,
}

impl TimerSlackGuard {
    pub fn fine() -> TimerSlackGuard {
        // SAFETY: PR_GET_TIMERSLACK takes no pointer and returns the slack in ns.
        let previous = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        // SAFETY: PR_SET_TIMERSLACK takes the slack in ns as an integer; no pointers.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        TimerSlackGuard { previous }
    }
}

impl Drop for TimerSlackGuard {
    fn drop(&mut self) {
        if self.previous > 0 {
            // SAFETY: as above.
            unsafe {
                libc::prctl(
                    libc::PR_SET_TIMERSLACK,
                    self.previous as libc::c_ulong,
                    0,
                    0,
                    0,
                )
            };
        }
    }
}

/// Raises the calling thread's scheduling priority (nice value) and restores it when dropped;
/// threads and processes it starts meanwhile inherit the raised priority. Needs root (or
/// `CAP_SYS_NICE`); without it, [`NiceGuard::raise`] returns `None` and nothing changes.
#[derive(Debug)]
pub struct NiceGuard {
    previous: libc::c_int,
}

impl NiceGuard {
    pub fn raise(nice: libc::c_int) -> Option<NiceGuard> {
        // SAFETY: getpriority/setpriority take plain integers; `who` 0 = the calling thread
        // (Linux applies PRIO_PROCESS to the thread).
        let previous = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        // SAFETY: as above.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } == 0 {
            Some(NiceGuard { previous })
        } else {
            None
        }
    }
}

impl Drop for NiceGuard {
    fn drop(&mut self) {
        // SAFETY: as in `raise`.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, self.previous) };
    }
}

/// `(busy, total)` clock ticks of one CPU so far, from its `cpuN` line in `/proc/stat`
/// (busy = everything but idle and iowait).
pub fn cpu_ticks(cpu: usize) -> Result<(u64, u64), String> {
    let stat = std::fs::read_to_string("/proc/stat")
        .map_err(|e| format!("cannot read /proc/stat: {e}"))?;
    parse_cpu_ticks(&stat, cpu)
}

pub fn parse_cpu_ticks(stat: &str, cpu: usize) -> Result<(u64, u64), String> {
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .ok_or_else(|| format!("no {name} line in /proc/stat"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| {
            f.parse::<u64>()
                .map_err(|e| format!("/proc/stat {name}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Ok((total - idle, total))
}

/// Clock ticks per second of `/proc/PID/stat`'s `utime` and `stime`.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// `(utime, stime)` (in clock ticks) from the text of `/proc/PID/stat` (fields 14 and 15): the
/// process's CPU time in user space and in the kernel, of every thread, the exited ones
/// included.
pub fn parse_stat_times(stat: &str) -> Result<(u64, u64), String> {
    // The command name (field 2) is in parentheses and may contain spaces and parentheses:
    // the fields after it start after the last ')'.
    let rest = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .ok_or("no ')' in /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime (14) is at index 11, stime (15) at 12.
    let field = |i: usize, name: &str| -> Result<u64, String> {
        fields
            .get(i)
            .ok_or_else(|| format!("/proc/PID/stat has no {name} field"))?
            .parse::<u64>()
            .map_err(|e| format!("/proc/PID/stat {name}: {e}"))
    };
    Ok((field(11, "utime")?, field(12, "stime")?))
}

/// `voluntary_ctxt_switches + nonvoluntary_ctxt_switches` from the text of
/// `/proc/PID/task/TID/status`: how often that thread left its CPU (blocked, or preempted).
pub fn parse_status_switches(status: &str) -> Result<u64, String> {
    let mut total = 0;
    let mut found = 0;
    for line in status.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key == "voluntary_ctxt_switches" || key == "nonvoluntary_ctxt_switches" {
            total += value
                .trim()
                .parse::<u64>()
                .map_err(|e| format!("status {key}: {e}"))?;
            found += 1;
        }
    }
    if found == 2 {
        Ok(total)
    } else {
        Err("status has no voluntary_ctxt_switches / nonvoluntary_ctxt_switches lines".into())
    }
}

/// Context switches so far of every live thread of process `pid` (a thread that has exited
/// takes its count with it: the echo servers keep theirs for the whole run).
pub fn process_context_switches(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let tasks = std::fs::read_dir(&dir).map_err(|e| format!("cannot list {dir}: {e}"))?;
    let mut total = 0;
    for task in tasks {
        let path = task
            .map_err(|e| format!("cannot list {dir}: {e}"))?
            .path()
            .join("status");
        match std::fs::read_to_string(&path) {
            Ok(status) => total += parse_status_switches(&status)?,
            // The thread exited between the listing and the read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
    }
    Ok(total)
}

/// CPU seconds (user + system, all threads) used so far by process `pid`.
pub fn process_cpu_seconds(pid: u32) -> Result<f64, String> {
    let (user, system) = process_cpu_times(pid)?;
    Ok(user + system)
}

/// CPU seconds `(user, system)` (all threads) used so far by process `pid`.
///
/// The kernel splits a thread's exact run time into user and system time in proportion to the
/// timer ticks that found it in each, so the user share is a sample: at 100 ticks/s a window
/// of 1.5 s resolves it to a few percent of the total.
pub fn process_cpu_times(pid: u32) -> Result<(f64, f64), String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let (user, system) = parse_stat_times(&stat)?;
    let hz = clock_ticks();
    Ok((user as f64 / hz, system as f64 / hz))
}

/// A server in a child process: `<this binary> serve <impl> --cpu <cpu>`, which pins itself to
/// `cpu`, listens on a free loopback port and prints `port=<n>`. Killed when dropped. Its
/// stderr goes to a file, so that a chatty server can never block on a full pipe; see
/// [`Server::stop`].
#[derive(Debug)]
pub struct Server {
    child: Child,
    _stdout: ChildStdout,
    pub addr: SocketAddr,
    log: PathBuf,
    kind: String,
}

fn log_path() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "spindle-bench-serve-{}-{}.log",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

fn read_log(path: &PathBuf) -> String {
    let mut s = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut s);
    }
    s
}

impl Server {
    pub fn start(kind: &str, cpu: usize) -> Result<Server, String> {
        let exe =
            std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
        Server::start_exe(&exe, kind, cpu)
    }

    /// [`Server::start`] with another build of this binary (a variant such as the hook build).
    pub fn start_exe(exe: &std::path::Path, kind: &str, cpu: usize) -> Result<Server, String> {
        let log = log_path();
        let log_file =
            File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut child = Command::new(exe)
            .args(["serve", kind, "--cpu", &cpu.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot run {} serve: {e}", exe.display()))?;
        let Some(stdout) = child.stdout.take() else {
            return Err("the server child has no stdout pipe".into());
        };
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        let read = reader.read_line(&mut line);
        let port = line
            .trim()
            .strip_prefix("port=")
            .and_then(|p| p.parse::<u16>().ok());
        let Some(port) = port else {
            let _ = child.kill();
            let status = child.wait();
            let text = read_log(&log);
            let _ = std::fs::remove_file(&log);
            let why = text
                .lines()
                .map(str::trim)
                .rfind(|l| !l.is_empty())
                .unwrap_or("no output on stderr")
                .to_string();
            return Err(match read {
                Err(e) => format!("server `{kind}`: cannot read its port: {e}"),
                Ok(_) => format!(
                    "server `{kind}` exited before it listened ({}): {why}",
                    status.map_or_else(|e| e.to_string(), |s| s.to_string())
                ),
            });
        };
        Ok(Server {
            child,
            _stdout: reader.into_inner(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            log,
            kind: kind.to_string(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn cpu_seconds(&self) -> Result<f64, String> {
        process_cpu_seconds(self.pid())
    }

    /// CPU seconds `(user, system)`; see [`process_cpu_times`].
    pub fn cpu_times(&self) -> Result<(f64, f64), String> {
        process_cpu_times(self.pid())
    }

    pub fn context_switches(&self) -> Result<u64, String> {
        process_context_switches(self.pid())
    }

    /// Kills the server; returns what it wrote to stderr (normally nothing), so that the caller
    /// can show it. Errors if it had already exited (it never exits on its own).
    pub fn stop(mut self) -> Result<String, String> {
        let early = self.child.try_wait().ok().flatten();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let text = read_log(&self.log);
        let _ = std::fs::remove_file(&self.log);
        match early {
            Some(status) => Err(format!(
                "server `{}` exited during the run ({status}): {}",
                self.kind,
                text.trim()
            )),
            None => Ok(text),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Makes a `serve` child die with its parent (set in the child, first thing).
pub fn die_with_parent() {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; no pointers.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
}

/// The path of `wrk` on `PATH`, if any.
pub fn find_wrk() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("wrk"))
        .find(|p| p.is_file())
}

/// What one `wrk` run reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WrkResult {
    pub requests: u64,
    pub seconds: f64,
    pub qps: f64,
    /// The 99th percentile latency in µs (`--latency`), if printed.
    pub p99_us: Option<f64>,
    pub socket_errors: u64,
    pub non_2xx: u64,
}

/// Parses a wrk duration such as `1.23ms`, `850.00us`, `2.01s`, `1.5m` into µs.
fn parse_wrk_time_us(s: &str) -> Option<f64> {
    let (num, mul) = if let Some(n) = s.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * mul)
}

/// Parses wrk 4's report.
pub fn parse_wrk(out: &str) -> Result<WrkResult, String> {
    let mut requests = None;
    let mut seconds = None;
    let mut qps = None;
    let mut p99_us = None;
    let mut socket_errors = 0;
    let mut non_2xx = 0;
    for line in out.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            qps = rest.trim().parse::<f64>().ok();
        } else if let Some((n, rest)) = line.split_once(" requests in ") {
            requests = n.trim().parse::<u64>().ok();
            seconds = rest
                .split(',')
                .next()
                .and_then(|t| parse_wrk_time_us(t.trim()))
                .map(|us| us / 1e6);
        } else if let Some(rest) = line.strip_prefix("99%") {
            p99_us = parse_wrk_time_us(rest.trim());
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            socket_errors = rest
                .split(',')
                .filter_map(|kv| kv.split_whitespace().last()?.parse::<u64>().ok())
                .sum();
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_2xx = rest.trim().parse().unwrap_or(u64::MAX);
        }
    }
    match (requests, seconds, qps) {
        (Some(requests), Some(seconds), Some(qps)) => Ok(WrkResult {
            requests,
            seconds,
            qps,
            p99_us,
            socket_errors,
            non_2xx,
        }),
        _ => Err(format!("cannot parse wrk's report: {:?}", out.trim())),
    }
}

/// wrk's script for pipelining: every write sends `depth` requests (the script's first
/// argument), the shape of TechEmpower's plaintext test. wrk counts each response.
const PIPELINE_LUA: &str = "\
-- Sends `depth` (the first script argument) requests in every write.
local batch
init = function(args)
  local depth = tonumber(args[1]) or 1
  local requests = {}
  for i = 1, depth do
    requests[i] = wrk.format()
  end
  batch = table.concat(requests)
end
request = function()
  return batch
end
";

/// Runs `wrk -t1 -c<conns> -d<secs>s --latency http://<addr>/` on the calling thread's CPUs
/// (the child inherits this thread's affinity); with `depth` > 1, through a script that
/// pipelines `depth` requests per write.
pub fn run_wrk(
    wrk: &PathBuf,
    addr: SocketAddr,
    conns: usize,
    depth: usize,
    secs: u64,
) -> Result<WrkResult, String> {
    let mut args = vec![
        "-t1".to_string(),
        format!("-c{conns}"),
        format!("-d{secs}s"),
        "--latency".to_string(),
    ];
    let script = (depth > 1)
        .then(|| {
            let path = std::env::temp_dir()
                .join(format!("spindle-bench-pipeline-{}.lua", std::process::id()));
            std::fs::write(&path, PIPELINE_LUA)
                .map(|()| path)
                .map_err(|e| format!("cannot write wrk's pipelining script: {e}"))
        })
        .transpose()?;
    if let Some(path) = &script {
        args.extend(["-s".to_string(), path.display().to_string()]);
    }
    args.push(format!("http://{addr}/"));
    if script.is_some() {
        args.extend(["--".to_string(), depth.to_string()]);
    }
    let out = Command::new(wrk).args(&args).stdin(Stdio::null()).output();
    if let Some(path) = &script {
        let _ = std::fs::remove_file(path);
    }
    let out = out.map_err(|e| format!("cannot run {}: {e}", wrk.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "wrk failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_wrk(&stdout)
}

/// Waits until `addr` accepts a connection (at most `limit`).
#[allow(dead_code, reason = "used by tests")]
pub fn wait_listening(addr: SocketAddr, limit: Duration) -> Result<(), String> {
    let start = std::time::Instant::now();
    loop {
        match std::net::TcpStream::connect(addr) {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() > limit => return Err(format!("{addr}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_after_the_last_paren() {
        // A command name with spaces and a ')' in it.
        let stat = "1234 (a) b) c) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 3 0 \
                    5000 1000000 300 18446744073709551615";
        assert_eq!(parse_stat_times(stat).unwrap(), (250, 17));
        assert!(parse_stat_times("1234 (x) S 1").is_err());
    }

    #[test]
    fn status_switches_add_both_kinds() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t120\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_status_switches(status).unwrap(), 127);
        assert!(parse_status_switches("Name:\tx\nvoluntary_ctxt_switches:\t1\n").is_err());
        assert!(
            parse_status_switches("voluntary_ctxt_switches: x\nnonvoluntary_ctxt_switches: 1")
                .is_err()
        );
    }

    #[test]
    fn a_sleeping_thread_counts_switches() {
        // This thread's own count (other test threads of this process may exit meanwhile and
        // take theirs out of the process's sum).
        // SAFETY: `gettid` has no preconditions.
        let tid = unsafe { libc::gettid() };
        let own = || {
            let path = format!("/proc/self/task/{tid}/status");
            parse_status_switches(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let before = own();
        // Each sleep blocks this thread: one voluntary switch at least.
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let after = own();
        assert!(after >= before + 5, "{before} -> {after}");
        // The process's sum includes this thread's count, which only grows.
        let all = process_context_switches(std::process::id()).unwrap();
        assert!(all >= after, "{all} < {after}");
    }

    #[test]
    fn proc_stat_cpu_lines() {
        let stat =
            "cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 5 1 4 50 3 1 1 2 0 0\ncpu1 5 0 6 50 0 0 0 0 0 0\n";
        assert_eq!(parse_cpu_ticks(stat, 0).unwrap(), (14, 67));
        assert_eq!(parse_cpu_ticks(stat, 1).unwrap(), (11, 61));
        assert!(parse_cpu_ticks(stat, 2).is_err());
        let (busy, total) = cpu_ticks(allowed_cpus().unwrap()[0]).unwrap();
        assert!(busy <= total && total > 0);
    }

    #[test]
    fn own_cpu_time_grows() {
        // Busy work until the counters (10 ms ticks) show at least two ticks more, and some of
        // them in user time; on a loaded machine that takes longer in wall time, hence a
        // generous bound rather than a fixed spin. The kernel splits the process's run time
        // into user and system time by tick samples, and the harness's other threads make
        // system calls meanwhile, so the first ticks may all land in system time: the loop
        // waits for user time rather than expecting it after the first ticks.
        let pid = std::process::id();
        let before = process_cpu_seconds(pid).unwrap();
        let (user_before, _) = process_cpu_times(pid).unwrap();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let (mut after, mut user_after) = (before, user_before);
        while (after - before < 0.015 || user_after <= user_before)
            && start.elapsed() < Duration::from_secs(10)
        {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            after = process_cpu_seconds(pid).unwrap();
            user_after = process_cpu_times(pid).unwrap().0;
        }
        assert!(
            after - before >= 0.015,
            "{before} -> {after} in 10 s of busy work"
        );
        // The work was in user space, so that is where ticks went.
        assert!(
            user_after > user_before,
            "user time {user_before} -> {user_after} over 10 s of busy work in user space"
        );
    }

    #[test]
    fn wrk_report() {
        let out = "Running 2s test @ http://127.0.0.1:4000/
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   510.12us  100.00us   2.00ms   90.00%
    Req/Sec    98.00k     1.00k  100.00k    80.00%
  Latency Distribution
     50%  500.00us
     75%  520.00us
     90%  600.00us
     99%    1.20ms
  196000 requests in 2.00s, 20.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec:  97999.50
Transfer/sec:     10.00MB
";
        let r = parse_wrk(out).unwrap();
        assert_eq!(r.requests, 196_000);
        assert_eq!(r.seconds, 2.0);
        assert_eq!(r.qps, 97999.5);
        assert_eq!(r.p99_us, Some(1200.0));
        assert_eq!(r.socket_errors, 3);
        assert_eq!(r.non_2xx, 0);
        assert!(parse_wrk("garbage").is_err());
    }

    #[test]
    fn pin_and_restore() {
        let before = allowed_cpus().unwrap();
        {
            let _g = PinGuard::pin(before[0]).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![before[0]]);
        }
        assert_eq!(allowed_cpus().unwrap(), before);
    }
}
