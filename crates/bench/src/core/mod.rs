//! The `core` suite: context switch, coroutine lifecycle, shared (copying) stacks and memory per
//! suspended coroutine.
//!
//! Peer impls live in [`peers`]; Spindle's in [`spindle`]. Bench and impl names are the keys
//! of the JSON report and of docs/benchmarks.md: do not rename them.

mod peers;
mod spindle;

use crate::harness::{self, Bench, Impl, Suite, Unit};

/// Stack size for `create_run_drop`, the same for every impl that takes one.
pub const STACK_SIZE: usize = 64 * 1024;

pub use spindle::backend_name;

pub fn suite() -> Suite {
    Suite {
        name: "core",
        about: "context switch, create/run/drop, shared-stack resume, memory per coroutine",
        benches: vec![
            Bench {
                name: "switch",
                unit: Unit::Ns,
                reference: Some("corosensei"),
                published: &[],
                full_only: false,
                impls: vec![
                    Impl::in_process("spindle", spindle::switch),
                    Impl::in_process("spindle-context", spindle::context_switch),
                    Impl::variant("spindle-boost", &harness::BOOST),
                    Impl::variant("spindle-fp-env", &harness::FP_ENV),
                    Impl::in_process("corosensei", peers::corosensei_switch),
                    Impl::in_process("generator", peers::generator_switch),
                ],
            },
            Bench {
                name: "create_run_drop",
                unit: Unit::Ns,
                reference: Some("corosensei"),
                published: &[],
                full_only: false,
                impls: vec![
                    Impl::in_process("spindle", spindle::create_run_drop),
                    Impl::in_process("corosensei", peers::corosensei_create_run_drop),
                    Impl::in_process("std-thread", peers::std_thread_spawn_join),
                ],
            },
            Bench {
                name: "shared_resume_8",
                unit: Unit::Ns,
                reference: None,
                published: &["libaco (published): 33 ns at 8 B"],
                full_only: false,
                impls: vec![Impl::in_process("spindle", |c| {
                    spindle::shared_resume(c, 8)
                })],
            },
            Bench {
                name: "shared_resume_1000",
                unit: Unit::Ns,
                reference: None,
                published: &["libaco (published): 211 ns at 1000 B"],
                full_only: false,
                impls: vec![Impl::in_process("spindle", |c| {
                    spindle::shared_resume(c, 1000)
                })],
            },
            Bench {
                name: "shared_resume_8192",
                unit: Unit::Ns,
                reference: None,
                published: &["libaco (published): 1090 ns at 7992 B"],
                full_only: false,
                impls: vec![Impl::in_process("spindle", |c| {
                    spindle::shared_resume(c, 8192)
                })],
            },
            Bench {
                name: "mem_shared_1m",
                unit: Unit::Bytes,
                reference: None,
                published: &[],
                full_only: false,
                impls: vec![Impl::child("spindle", |c| {
                    spindle::mem_shared(c, 1_000_000)
                })],
            },
            Bench {
                name: "mem_shared_10m",
                unit: Unit::Bytes,
                reference: None,
                published: &[],
                // 10 million coroutines take a few GiB and a minute or so: full suite only.
                full_only: true,
                impls: vec![Impl::child("spindle", |c| {
                    spindle::mem_shared(c, 10_000_000)
                })],
            },
            Bench {
                name: "mem_pooled_30k",
                unit: Unit::Bytes,
                reference: None,
                published: &[],
                full_only: false,
                impls: vec![Impl::child("spindle", |c| spindle::mem_pooled(c, 30_000))],
            },
        ],
    }
}
