use std::hint::black_box;
fn main() {
    let n: u64 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let t = std::time::Instant::now();
    for _ in 0..n {
        let mut co =
            spindle_coro::Coroutine::new(|_: &spindle_coro::Yielder<(), ()>, ()| black_box(7usize))
                .unwrap();
        black_box(co.resume(()));
    }
    println!("{:.1} ns", t.elapsed().as_nanos() as f64 / n as f64);
}
