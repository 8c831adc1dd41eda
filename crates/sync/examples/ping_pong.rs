//! Two coroutines bounce a number over two channels; prints the round-trip time and where
//! each coroutine ran, for a few runs (placement decides the cost: on one worker a round trip
//! is two switches; across workers it is two cross-thread wake-ups).
//!
//! `cargo run --release -p spindle-sync --example ping_pong` (`CROSS=1`: on different workers)

use std::time::Instant;

use spindle_sync::mpsc;

fn main() {
    let rt = spindle_rt::Runtime::builder()
        .workers(2)
        .build()
        .expect("a runtime");
    const ROUNDS: u64 = 20_000;
    for _ in 0..8 {
        rt.block_on(|| {
            let (ping_tx, ping_rx) = mpsc::bounded::<u64>(1);
            let (pong_tx, pong_rx) = mpsc::bounded::<u64>(1);
            let partner = spindle_rt::spawn(move || {
                let thread = std::thread::current().name().map(str::to_owned);
                while let Ok(x) = ping_rx.recv() {
                    if pong_tx.send(x).is_err() {
                        break;
                    }
                }
                thread
            });
            if std::env::var_os("CROSS").is_some() {
                // Block this worker for a moment: the other one steals the partner before it
                // first runs, so the two run on different workers.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let start = Instant::now();
            for i in 0..ROUNDS {
                ping_tx.send(i).expect("partner alive");
                assert_eq!(pong_rx.recv(), Ok(i));
            }
            let elapsed = start.elapsed();
            let me = std::thread::current().name().map(str::to_owned);
            drop(ping_tx);
            let partner = partner.join().expect("partner");
            println!(
                "{:>8.0} ns per round trip; pinger on {}, ponger on {}",
                elapsed.as_nanos() as f64 / ROUNDS as f64,
                me.as_deref().unwrap_or("?"),
                partner.as_deref().unwrap_or("?"),
            );
        });
    }
}
