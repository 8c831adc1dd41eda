//! The README's examples in one program: coroutines on worker threads, std's `BufRead` on a
//! coroutine's socket, a channel between coroutines, and a generator without a runtime.
//!
//! ```text
//! cargo run -p spindles --example quickstart
//! ```
use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use spindles::Generator;
use spindles::net::{TcpListener, TcpStream};
use spindles::sync::mpsc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = spindles::Runtime::builder().workers(2).build()?;
    println!(
        "a runtime of 2 workers, policy {}, IO backend {}",
        rt.metrics().policy,
        rt.metrics().io_backend
    );

    // 10,000 coroutines that each sleep 10 ms: each sleep suspends only its coroutine.
    let start = Instant::now();
    let sum = rt.block_on(|| {
        let handles: Vec<_> = (1..=10_000u64)
            .map(|i| {
                spindles::spawn(move || {
                    spindles::sleep(Duration::from_millis(10));
                    i
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    println!(
        "10,000 sleeping coroutines summed to {sum} in {:?}",
        start.elapsed()
    );

    // std's BufReader over a Spindle socket: plain blocking-style code.
    let line = rt.block_on(|| -> std::io::Result<String> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        spindles::spawn(move || listener.accept()?.0.write_all(b"hello from a coroutine\n"));
        let mut line = String::new();
        BufReader::new(TcpStream::connect(&addr)?).read_line(&mut line)?;
        Ok(line)
    })?;
    print!("read a line over TCP: {line}");

    // Four producers and a consumer on a bounded channel.
    let total = rt.block_on(|| {
        let (tx, rx) = mpsc::bounded(16);
        for _ in 0..4 {
            let tx = tx.clone();
            spindles::spawn(move || (1..=100u64).for_each(|i| tx.send(i).unwrap()));
        }
        drop(tx);
        rx.into_iter().sum::<u64>()
    });
    println!("four producers sent a total of {total}");

    // A generator: a coroutine driven by an iterator, no runtime needed.
    let squares: Vec<u64> = Generator::new(|y| (1..=5).for_each(|i| y.suspend(i * i)))?.collect();
    println!("squares from a generator: {squares:?}");
    Ok(())
}
