//! The `sync` suite: mutexes (uncontended, and 1000 coroutines contending on 2 workers) and
//! channels (ping-pong round trip, 4 producers / 1 consumer).
//!
//! Peer impls live in [`peers`] (std, parking_lot, tokio, may, crossbeam-channel, flume);
//! Spindle's in [`spindle`] (`spindle-sync` on a `spindle-rt` runtime). Bench and impl names are
//! the keys of the JSON report and of docs/benchmarks.md: do not rename them.
//!
//! # How the multi-op benches are timed
//!
//! As in the `sched` suite (see [`crate::sched::per_op`]): the runtime is built once per
//! measurement, outside the timed part; the workload runs once as a warm-up, then again and
//! again for about [`Ctx::target`](crate::harness::Ctx::target); each run is timed from inside
//! the runtime (a root task/coroutine already on a worker, from before its first spawn to after
//! it has seen the last operation), and the value is the timed total over `runs * ops`.
//!
//! Runtimes: 2 worker threads for every coroutine/task impl (`spindle_rt` work-stealing,
//! tokio multi-thread, may with `set_workers(2)`); `crossbeam` and `flume` rows use OS threads
//! (they have no runtime). `may` rows run in a child process per measurement (may's scheduler
//! is global and reads its configuration once).
//!
//! Channels: capacity 1 for the ping-pong ([`PING_PONG_CAP`]) and 1024 for the 4×1
//! ([`MPSC_CAP`]) wherever the impl has bounded channels (spindle, tokio, crossbeam, flume);
//! may has only unbounded ones.

pub(crate) mod peers;
pub(crate) mod spindle;

use crate::harness::{Bench, Impl, Suite, Unit};

/// `mutex_contended_1000`: coroutines/tasks.
pub const CONTENDERS: u64 = 1_000;
/// `mutex_contended_1000`: increments per coroutine/task and run.
pub const INCREMENTS: u64 = 1_000;
/// `chan_ping_pong`: round trips per run.
pub const ROUND_TRIPS: u64 = 10_000;
/// `chan_mpsc_4x1`: producers.
pub const PRODUCERS: u64 = 4;
/// `chan_mpsc_4x1`: messages per run, all producers together.
pub const MESSAGES: u64 = 1_000_000;
/// Channel capacity of the ping-pong (where bounded channels exist).
pub const PING_PONG_CAP: usize = 1;
/// Channel capacity of the 4×1 (where bounded channels exist).
pub const MPSC_CAP: usize = 1024;

/// The sum the 4×1 consumer must see: every producer `p` sends `p * per + i` for
/// `i in 0..per`, so the messages are `0..MESSAGES`.
pub const MPSC_SUM: u64 = MESSAGES * (MESSAGES - 1) / 2;

pub fn suite() -> Suite {
    Suite {
        name: "sync",
        about: "mutex uncontended and contended by 1000 coroutines; channel ping-pong and 4x1",
        benches: vec![
            mutex_uncontended(),
            mutex_contended_1000(),
            chan_ping_pong(),
            chan_mpsc_4x1(),
        ],
    }
}

/// `mutex_uncontended`: ns per `lock` + unlock (guard drop) of a `Mutex<u64>` on one thread,
/// incrementing the value, timed with [`Ctx::time_ns`](crate::harness::Ctx::time_ns). No
/// runtime: `spindle_sync::Mutex` on a plain thread takes the same path as in a coroutine (the
/// fast path never parks). Goal: `spindle` ≤ 1.1× `parking_lot`.
fn mutex_uncontended() -> Bench {
    Bench {
        name: "mutex_uncontended",
        unit: Unit::Ns,
        reference: Some("parking_lot"),
        published: &[],
        full_only: false,
        impls: vec![
            Impl::in_process("spindle", spindle::mutex_uncontended),
            Impl::in_process("std", peers::std_mutex_uncontended),
            Impl::in_process("parking_lot", peers::parking_lot_mutex_uncontended),
        ],
    }
}

/// `mutex_contended_1000`: ns per increment. A root coroutine/task spawns [`CONTENDERS`]
/// coroutines/tasks on 2 workers, each doing [`INCREMENTS`] times `*counter.lock() += 1` on one
/// shared mutex, and joins them all; the count is checked. `spindle`: `spindle_sync::Mutex` on
/// `spindle_rt`; `tokio`: `tokio::sync::Mutex` (`lock().await`), 1000 tasks; `may`:
/// `may::sync::Mutex`, 1000 coroutines.
fn mutex_contended_1000() -> Bench {
    Bench {
        name: "mutex_contended_1000",
        unit: Unit::Ns,
        reference: Some("tokio"),
        published: &[],
        full_only: false,
        impls: vec![
            Impl::in_process("spindle", spindle::mutex_contended),
            Impl::in_process("tokio", peers::tokio_mutex_contended),
            Impl::child("may", peers::may_mutex_contended),
        ],
    }
}

/// `chan_ping_pong`: ns per round trip. Two coroutines/tasks (or threads) and two channels:
/// the pinger sends `i`, the ponger receives it and sends it back, [`ROUND_TRIPS`] times per
/// run; each reply is checked. Timed in the pinger. `spindle`: `spindle_sync::mpsc::bounded`
/// between two coroutines on 2 workers; `tokio`: `tokio::sync::mpsc::channel` between two
/// tasks on 2 workers; `crossbeam` / `flume`: their bounded channels between two OS threads;
/// `may`: `may::sync::mpsc` between two coroutines on 2 workers. Goal: `spindle` ≤ 0.5×
/// `tokio`.
fn chan_ping_pong() -> Bench {
    Bench {
        name: "chan_ping_pong",
        unit: Unit::Ns,
        reference: Some("tokio"),
        published: &[],
        full_only: false,
        impls: vec![
            Impl::in_process("spindle", spindle::chan_ping_pong),
            Impl::in_process("tokio", peers::tokio_ping_pong),
            Impl::in_process("crossbeam", peers::crossbeam_ping_pong),
            Impl::in_process("flume", peers::flume_ping_pong),
            Impl::child("may", peers::may_ping_pong),
        ],
    }
}

/// `chan_mpsc_4x1`: ns per message. [`PRODUCERS`] producers each send [`MESSAGES`]` / 4`
/// `u64`s into one channel; one consumer receives all [`MESSAGES`] and checks their sum.
/// Coroutine/task impls: the consumer is the root coroutine/task (it spawns the producers and
/// times the run); thread impls: 4 producer threads and the consumer on the measuring thread.
fn chan_mpsc_4x1() -> Bench {
    Bench {
        name: "chan_mpsc_4x1",
        unit: Unit::Ns,
        reference: Some("tokio"),
        published: &[],
        full_only: false,
        impls: vec![
            Impl::in_process("spindle", spindle::chan_mpsc_4x1),
            Impl::in_process("tokio", peers::tokio_mpsc_4x1),
            Impl::in_process("crossbeam", peers::crossbeam_mpsc_4x1),
            Impl::in_process("flume", peers::flume_mpsc_4x1),
            Impl::child("may", peers::may_mpsc_4x1),
        ],
    }
}
