//! A worker count no machine could run comes back as an error from `build` that says the
//! limit, never as an abort (from a review in session 12: the policies' per-worker arrays, 128
//! bytes a worker and more, were allocated for up to 4,294,967,295 workers, and the allocation
//! failure aborted the process).

#[test]
fn an_absurd_worker_count_is_an_error_that_names_the_limit() {
    let err = match spindle_rt::Runtime::builder().workers(1 << 31).build() {
        Ok(_) => panic!("a runtime of 2^31 workers was built"),
        Err(e) => e,
    };
    let message = err.to_string();
    assert!(
        message.contains(&spindle_sched::MAX_WORKERS.to_string()),
        "the error does not say the limit: {message}"
    );
}
