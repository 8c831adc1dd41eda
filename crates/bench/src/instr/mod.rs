//! The `instr` suite: instructions per operation, counted by callgrind, for the hot paths of
//! the `core`, `sched` and `sync` suites, each beside its reference implementation.
//!
//! # Why callgrind over this harness, and not a library such as gungraun
//!
//! Each impl is a plain function that runs its workload `n` times ([`crate::harness::InstrFn`]);
//! the harness runs `spindle-bench instr-run <bench> <impl> <n>` under `valgrind
//! --tool=callgrind` for `n` and `2n` and divides the difference of the totals by `n`. Setup,
//! teardown and process start-up cancel out, and no client requests or markers are needed in
//! the measured code. gungraun (formerly iai-callgrind) would do the same job, but needs its
//! runner binary installed at the exact version of the library (one more `cargo install` in
//! CI), runs its benches as separate bench targets with their own report format, and would put
//! the peers' rows outside this harness's table, JSON report and Markdown output. The only tool
//! needed here is valgrind, which the valgrind CI legs install already.
//!
//! # What one operation is
//!
//! - `switch_instr`: one resume + suspend **round trip** (not halved, unlike `switch`).
//! - `create_run_drop_instr`: create a coroutine, run it to completion, drop it.
//! - `yield_many_instr`: one `yield_now` of one of [`YIELD_TASKS`] coroutines/tasks, on a
//!   runtime with one worker (spindle-rt) / the current-thread runtime (tokio).
//! - `ping_pong_instr`: one task spawning a partner, a ping and a pong over two oneshot
//!   channels, and the join (one worker / current thread).
//! - `mutex_uncontended_instr`: one lock + unlock on one thread.
//! - `chan_ping_pong_instr`: one round trip over two bounded channels of capacity 1 between two
//!   coroutines/tasks (one worker / current thread: the `sync` suite's `chan_ping_pong` uses
//!   two workers, whose counts would depend on how the threads interleave).
//! - `chan_mpsc_4x1_instr`: one message of the `sync` suite's `chan_mpsc_4x1` workload (four
//!   producers sending into one bounded channel of capacity 1,024 that one consumer drains),
//!   on one worker / the current thread for the same reason (that suite runs it on two).
//!
//! Everything runs on one thread at a time (one worker), so the counts hardly depend on timing:
//! the coroutine, stack, mutex and corosensei rows are the same on every run; the runtime rows
//! (both runtimes) move by a few hundredths of a percent between runs, where a runtime's
//! worker and the thread waiting in `block_on` meet or the worker polls its drivers. A rebuild
//! after an unrelated change can move a runtime row by about 1 % (the heap's layout differs,
//! and with it the allocator's paths). Both stay inside the CI leg's 3 % tolerance.
//!
//! # Where the counts can differ between machines
//!
//! Between CPUs, only code that picks an implementation by CPU feature can count differently:
//! glibc's `memcpy`/`memset`/`memmove` (chosen by ifunc from the CPU that valgrind reports, which
//! is the host's minus what valgrind cannot emulate, such as AVX-512). In the Spindle rows those
//! run only in the setup (building a runtime, the first stacks), which is the same for `n` and
//! `2n` and cancels out; the operations themselves copy their small values inline. Spindle's own
//! code has no run-time feature detection (the context switch is fixed assembly; the `fp-env`
//! variant is a build-time feature). The peers' rows are not checked against the baseline, so
//! their libraries' choices do not matter. A different glibc, Rust toolchain or valgrind can
//! change the counts: the baseline records the counts of one setup,
//! and is updated with `cargo xtask bench instr --update-baseline` when that setup changes.

mod peers;
mod spindle;

use crate::harness::{Bench, Impl, Suite, Unit};

/// Coroutines/tasks taking turns in `yield_many_instr`.
pub const YIELD_TASKS: u64 = 8;

/// Stack size for `create_run_drop_instr`'s corosensei impl (as `core`'s `create_run_drop`).
pub use crate::core::STACK_SIZE;

fn bench(name: &'static str, reference: &'static str, impls: Vec<Impl>) -> Bench {
    Bench {
        name,
        unit: Unit::Instr,
        reference: Some(reference),
        published: &[],
        full_only: false,
        impls,
    }
}

pub fn suite() -> Suite {
    Suite {
        name: "instr",
        about: "instructions per operation (callgrind): switch, create/run/drop, yield, \
                ping-pong, mutex, channels",
        benches: vec![
            bench(
                "switch_instr",
                "corosensei",
                vec![
                    Impl::instr("spindle", spindle::switch),
                    Impl::instr("corosensei", peers::corosensei_switch),
                ],
            ),
            bench(
                "create_run_drop_instr",
                "corosensei",
                vec![
                    Impl::instr("spindle", spindle::create_run_drop),
                    Impl::instr("corosensei", peers::corosensei_create_run_drop),
                ],
            ),
            bench(
                "yield_many_instr",
                "tokio-ct",
                vec![
                    Impl::instr("spindle-rt", spindle::yield_many),
                    Impl::instr("tokio-ct", peers::tokio_yield_many),
                ],
            ),
            bench(
                "ping_pong_instr",
                "tokio-ct",
                vec![
                    Impl::instr("spindle-rt", spindle::ping_pong),
                    Impl::instr("tokio-ct", peers::tokio_ping_pong),
                ],
            ),
            bench(
                "mutex_uncontended_instr",
                "parking_lot",
                vec![
                    Impl::instr("spindle-sync", spindle::mutex_uncontended),
                    Impl::instr("parking_lot", peers::parking_lot_mutex_uncontended),
                ],
            ),
            bench(
                "chan_ping_pong_instr",
                "tokio-ct",
                vec![
                    Impl::instr("spindle", spindle::chan_ping_pong),
                    Impl::instr("tokio-ct", peers::tokio_chan_ping_pong),
                ],
            ),
            bench(
                "chan_mpsc_4x1_instr",
                "tokio-ct",
                vec![
                    Impl::instr("spindle", spindle::chan_mpsc_4x1),
                    Impl::instr("tokio-ct", peers::tokio_chan_mpsc_4x1),
                ],
            ),
        ],
    }
}
