//! Multi-producer, single-consumer channels: bounded, unbounded and zero-capacity, with
//! `std::sync::mpsc`'s names as aliases ([`channel`], [`sync_channel`]).
//!
//! [`Sender`] is `Clone`, [`Receiver`] is not. Everything in the
//! [crate docs' channel section](crate#channels) applies.
//!
//! ```
//! use spindle_sync::mpsc;
//!
//! let (tx, rx) = mpsc::channel();
//! for id in 0..3 {
//!     let tx = tx.clone();
//!     std::thread::spawn(move || tx.send(id).unwrap());
//! }
//! drop(tx);
//! let mut got: Vec<i32> = rx.iter().collect();
//! got.sort();
//! assert_eq!(got, [0, 1, 2]);
//! ```

crate::chan::handles::channel_handles!("mpsc", no);

/// `std::sync::mpsc::channel`'s name for [`unbounded`].
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    unbounded()
}

/// `std::sync::mpsc::sync_channel`'s name for [`bounded`] (`0`: rendezvous).
pub fn sync_channel<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    bounded(cap)
}
