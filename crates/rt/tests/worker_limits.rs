//! Bad configuration comes back as an error that says what is wrong, never as an abort or a
//! dead worker: a worker count no machine could run (the policies' per-worker arrays, 128
//! bytes a worker and more, must not be allocated for up to 4,294,967,295 workers, where the
//! allocation failure would abort the process), a thread name with a
//! NUL byte, a shared-stack size the worker cannot map.

#[test]
fn an_absurd_worker_count_is_an_error_that_names_the_limit() {
    let err = match spindle_rt::Runtime::builder().workers(1 << 31).build() {
        Ok(_) => panic!("a runtime of 2^31 workers was built"),
        Err(e) => e,
    };
    // The message says what failed; its source says why (the limit).
    let mut message = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    assert!(
        message.contains(&spindle_sched::MAX_WORKERS.to_string()),
        "the error does not say the limit: {message}"
    );
}

/// A worker thread name with a NUL byte is refused by `build` (`std::thread::Builder::name`
/// panics on it: `build` panicked).
#[test]
fn a_thread_name_with_a_nul_byte_is_an_error() {
    let err = match spindle_rt::Runtime::builder()
        .workers(1)
        .thread_name("work\0er")
        .build()
    {
        Ok(_) => panic!("built with a NUL in the thread name"),
        Err(e) => e,
    };
    assert!(err.to_string().contains("NUL"), "{err}");
}

/// A shared-stack region the worker cannot map (here: a size of 0) fails the coroutine that
/// needs it — its join says why — and not the worker (it panicked on its thread, and every
/// coroutine of that worker hung). The worker runs on: a plain coroutine after it completes.
#[cfg(feature = "stack-shared")]
#[test]
fn an_unmappable_shared_stack_fails_the_coroutine_not_the_worker() {
    let rt = spindle_rt::Runtime::builder()
        .workers(1)
        .shared_stack_size(0)
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: the closure lends nothing on its stack to anyone.
        let builder = unsafe { spindle_rt::Builder::new().shared_stack() };
        let shared = builder.spawn_on(&rt.handle(), || 1).unwrap().join();
        let plain = rt.spawn(|| 2).join();
        let _ = tx.send((shared.map_err(|e| e.to_string()), plain.ok()));
    });
    let (shared, plain) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the worker died: the joins never returned");
    let err = shared.expect_err("a coroutine ran on a shared stack of 0 bytes");
    assert!(err.contains("could not start"), "{err}");
    assert_eq!(plain, Some(2));
}
