//! An idle runtime uses no CPU (Boost.Fiber #203). Its own test binary: it measures the CPU
//! time of the whole process, so nothing else may run meanwhile.

use std::time::Duration;

use spindle_rt::Runtime;

#[test]
fn an_idle_runtime_uses_no_cpu() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| ()); // warm up
    std::thread::sleep(Duration::from_millis(100));
    let before = process_cpu_ticks();
    std::thread::sleep(Duration::from_secs(1));
    let used = process_cpu_ticks() - before;
    // Clock ticks are 10 ms: allow a couple for the monitor's wake-ups and the test itself.
    assert!(used <= 3, "an idle runtime used {used} ticks of CPU in 1 s");
    drop(rt);
}

/// utime + stime of this process, in clock ticks.
fn process_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}
