//! Multi-producer, multi-consumer channels: bounded, unbounded and zero-capacity.
//!
//! [`Sender`] and [`Receiver`] are both `Clone`; each message goes to exactly one receiver.
//! Everything in the [crate docs' channel section](crate#channels) applies.
//!
//! ```
//! use spindle_sync::mpmc;
//!
//! let (tx, rx) = mpmc::bounded(4);
//! let workers: Vec<_> = (0..2)
//!     .map(|_| {
//!         let rx = rx.clone();
//!         std::thread::spawn(move || rx.iter().sum::<u64>())
//!     })
//!     .collect();
//! drop(rx);
//! for i in 1..=100 {
//!     tx.send(i).unwrap();
//! }
//! drop(tx); // disconnects: the workers' iterators end
//! let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
//! assert_eq!(total, 5050);
//! ```

crate::chan::handles::channel_handles!("mpmc", yes);
