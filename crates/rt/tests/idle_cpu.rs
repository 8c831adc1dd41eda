//! An idle runtime uses no CPU (Boost.Fiber #203): none of its threads wakes up. Its own test
//! binary: it watches every thread of the process, so nothing else may run meanwhile.

use std::collections::HashMap;
use std::time::Duration;

use spindle_rt::Runtime;

#[test]
fn an_idle_runtime_wakes_no_thread_and_uses_no_cpu() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    // Work first, so that the workers, the monitor and the IO drivers have all been busy.
    rt.block_on(|| {
        let handles: Vec<_> = (0..8)
            .map(|_| spindle_rt::spawn(|| spindle_rt::sleep(Duration::from_millis(5))))
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    // Let the workers spin out and fall asleep, and the monitor notice.
    std::thread::sleep(Duration::from_millis(200));
    let me = current_thread_id();
    let switches_before = context_switches_except(&me);
    let cpu_before = process_cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let switches = switches_since(&switches_before, &context_switches_except(&me));
    let cpu = process_cpu_ticks() - cpu_before;
    // Under valgrind (the `valgrind-rt` leg, which is there for memory errors) the workers
    // settle ~50× slower and valgrind's own scheduler runs on the process's CPU: the figures
    // mean nothing there.
    let under_valgrind = std::env::var_os("SPINDLE_UNDER_VALGRIND").is_some();
    // A thread that sleeps without waking up is not switched in at all. The monitor used to
    // tick every 2.5 ms (400 switches a second); allow a few for anything the kernel does.
    assert!(
        under_valgrind || switches <= 4,
        "an idle runtime's threads were switched in {switches} times in 1 s"
    );
    // Clock ticks are 10 ms: this thread's own wake-up may be charged one.
    assert!(
        under_valgrind || cpu <= 2,
        "an idle runtime used {cpu} ticks of CPU in 1 s"
    );
    // And it still works afterwards.
    assert_eq!(rt.block_on(|| spindle_rt::spawn(|| 7).join().unwrap()), 7);
    drop(rt);
}

/// utime + stime of this process, in clock ticks.
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn current_thread_id() -> String {
    // /proc/thread-self links to /proc/<pid>/task/<tid>.
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_string_lossy().into_owned()
}

/// Voluntary plus involuntary context switches of each thread of this process but `except`,
/// by thread id.
fn context_switches_except(except: &str) -> HashMap<String, u64> {
    let mut by_thread = HashMap::new();
    for entry in std::fs::read_dir("/proc/self/task").unwrap() {
        let entry = entry.unwrap();
        let tid = entry.file_name().to_string_lossy().into_owned();
        if tid == except {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue; // the thread exited meanwhile
        };
        let switches = status
            .lines()
            .filter_map(|line| {
                line.strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            })
            .map(|v| v.trim().parse::<u64>().unwrap())
            .sum();
        by_thread.insert(tid, switches);
    }
    by_thread
}

/// Switches between two snapshots: a thread that is new counts all of its switches, one that
/// exited counts none (its last ones are lost with it).
fn switches_since(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> u64 {
    after
        .iter()
        .map(|(tid, &n)| n.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum()
}
