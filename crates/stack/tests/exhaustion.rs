//! Running out of address space or mappings is an error that says why, never an abort.
//! Each test runs in a child process, so the limits it hits affect nobody else.
#![cfg(unix)]
#![cfg(all(feature = "growable", feature = "shared"))]

mod common;

use spindle_stack::{FixedStack, GrowableStack, StackError};

const MIB: usize = 1024 * 1024;

/// Prints `RESULT ok` if it gets that far; the parent checks for it.
fn report_ok() {
    println!("RESULT ok");
}

#[test]
fn an_address_space_limit_is_reported_as_such() {
    if common::skipped_under_emulation(
        "an_address_space_limit_is_reported_as_such",
        "an RLIMIT_AS enforced by the kernel (it keeps the limit to itself and fails its own mappings with ENOMEM)",
    ) {
        return;
    }
    let output = common::crash_test("an_address_space_limit_is_reported_as_such", || {
        // Leave 256 MiB of headroom above what the process uses now.
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
        let pages: usize = statm.split_whitespace().next().unwrap().parse().unwrap();
        let in_use = pages * spindle_stack::page_size();
        let limit = (in_use + 256 * MIB) as libc::rlim_t;
        let rlimit = libc::rlimit {
            rlim_cur: limit,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: a valid rlimit; lowering our own soft limit is always allowed.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rlimit) }, 0);

        let mut stacks = Vec::with_capacity(64);
        let err = loop {
            match FixedStack::new(16 * MIB) {
                Ok(stack) => stacks.push(stack),
                Err(err) => break err,
            }
            assert!(stacks.len() < 64, "the limit was never hit");
        };
        let message = err.to_string();
        drop(stacks);
        match err {
            StackError::AddressSpaceLimit {
                limit: reported,
                requested,
                in_use,
            } => {
                assert_eq!(reported, limit as u64);
                assert_eq!(requested, 16 * MIB);
                assert!(in_use > 200 * MIB, "in use: {in_use}");
            }
            other => panic!("expected AddressSpaceLimit, got {other:?}: {other}"),
        }
        assert!(message.contains("RLIMIT_AS"), "{message}");
        assert!(message.contains("16 MiB stack"), "{message}");
        assert!(message.contains("ulimit -v"), "{message}");

        // Growable stacks reserve their maximum up front, so they hit the same limit.
        let err = GrowableStack::new(16 * 1024, 1024 * MIB).unwrap_err();
        assert!(
            matches!(err, StackError::AddressSpaceLimit { .. }),
            "{err:?}"
        );
        report_ok();
    });
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.contains("RESULT ok"), "{output:?}");
}

#[test]
fn the_map_count_limit_is_reported_as_such() {
    if common::skipped_under_emulation(
        "the_map_count_limit_is_reported_as_such",
        "one kernel mapping per guest mapping (it reserves the guest's address space itself)",
    ) {
        return;
    }
    let output = common::crash_test("the_map_count_limit_is_reported_as_such", || {
        let max: usize = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Reserved up front: growing the vector near the limit could need a new mapping.
        let mut stacks = Vec::with_capacity(max / 2 + 100);
        let err = loop {
            // One page, never touched: the mappings cost address space, not memory.
            match FixedStack::new(1) {
                Ok(stack) => stacks.push(stack),
                Err(err) => break err,
            }
            assert!(stacks.len() <= max / 2, "more stacks than the limit allows");
        };
        let created = stacks.len();
        drop(stacks);
        let message = err.to_string();
        match err {
            StackError::MapCountLimit {
                mappings,
                max: reported,
            } => {
                assert_eq!(reported, max);
                // The kernel allows max + 1 mappings; /proc also lists [vsyscall].
                assert!(
                    mappings + 3 >= max && mappings <= max + 2,
                    "{mappings} vs {max}"
                );
            }
            other => panic!("expected MapCountLimit, got {other:?}: {other}"),
        }
        // Two mappings per guarded stack: about max / 2 of them fit.
        assert!(
            created > max / 2 - 1000,
            "only {created} stacks before the limit {max}"
        );
        assert!(
            message.contains(&format!("vm.max_map_count = {max}")),
            "{message}"
        );
        assert!(
            message.contains("each guarded stack needs 2 mappings"),
            "{message}"
        );
        assert!(
            message.contains("sysctl -w vm.max_map_count=262144"),
            "{message}"
        );
        assert!(message.contains("SharedStack"), "{message}");
        report_ok();
    });
    assert!(output.status.success(), "{output:?}");
    assert!(output.stdout.contains("RESULT ok"), "{output:?}");
}
