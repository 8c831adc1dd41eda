//! Coroutine stack sizes work down to `MIN_STACK_SIZE`; a smaller size is refused at `spawn`
//! (or at the runtime's build) with an error that names the minimum. (Sizes below 16 KiB used
//! to fail at the first run with a `keep_resident` error about a field the caller never set.)

use spindle_rt::{BuildError, Builder, MIN_STACK_SIZE, Runtime, StackKind};

/// Work that fits the smallest stack: a frame with a 1 KiB buffer (per extra `depth`, one more).
#[inline(never)]
fn small_work(depth: u32) -> u64 {
    let buf = std::hint::black_box([depth as u8; 1024]);
    if depth == 0 {
        buf.iter().map(|&b| u64::from(b)).sum()
    } else {
        small_work(depth - 1) + u64::from(buf[7])
    }
}

#[test]
fn stacks_from_the_minimum_up_run_their_coroutines() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    for size in [
        MIN_STACK_SIZE,
        12 * 1024,
        16 * 1024 - 1,
        20 * 1024,
        64 * 1024,
    ] {
        let handle = Builder::new()
            .stack_size(size)
            .spawn_on(&rt.handle(), || {
                spindle_rt::yield_now();
                small_work(0)
            })
            .unwrap_or_else(|e| panic!("spawn with a {size}-byte stack: {e}"));
        assert_eq!(handle.join().unwrap(), 0, "{size}-byte stack");
    }
}

#[test]
fn a_stack_below_the_minimum_is_refused_at_spawn() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    for size in [0, 4096, MIN_STACK_SIZE - 1] {
        let err = Builder::new()
            .stack_size(size)
            .spawn_on(&rt.handle(), || ())
            .expect_err("below the minimum");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("MIN_STACK_SIZE"), "{err}");
    }
}

#[test]
fn a_runtime_default_stack_at_the_minimum_works_and_below_it_is_refused() {
    let rt = Runtime::builder()
        .workers(1)
        .stack(StackKind::Pooled {
            size: MIN_STACK_SIZE,
        })
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(|| spindle_rt::spawn(|| small_work(0)).join().unwrap()),
        0
    );
    drop(rt);
    let refused = Runtime::builder()
        .workers(1)
        .stack(StackKind::Pooled { size: 4096 })
        .build();
    assert!(
        matches!(&refused, Err(BuildError::Invalid(why)) if why.contains("MIN_STACK_SIZE")),
        "{refused:?}"
    );
}
