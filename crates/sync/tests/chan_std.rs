//! Behaviours of `std::sync::mpsc`'s test suite (`library/std/src/sync/mpsc/tests.rs` and
//! `sync_tests.rs`), ported — the scenarios and their expected outcomes, written anew for
//! `spindle_sync::mpsc` (unbounded for `channel`, bounded for `sync_channel`). A few run in
//! coroutines as well as on threads.
#![cfg(not(any(loom, miri)))]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{ms, rt};
use spindle_sync::mpsc::{
    RecvError, RecvTimeoutError, SendError, TryRecvError, TrySendError, channel, sync_channel,
};

#[test]
fn smoke() {
    let (tx, rx) = channel::<i32>();
    tx.send(1).unwrap();
    assert_eq!(rx.recv().unwrap(), 1);
}

#[test]
fn drop_full() {
    let (tx, _rx) = channel::<Box<i32>>();
    tx.send(Box::new(1)).unwrap();
}

#[test]
fn drop_full_shared() {
    let (tx, _rx) = channel::<Box<i32>>();
    drop(tx.clone());
    drop(tx.clone());
    tx.send(Box::new(1)).unwrap();
}

#[test]
fn smoke_shared() {
    let (tx, rx) = channel::<i32>();
    tx.send(1).unwrap();
    assert_eq!(rx.recv().unwrap(), 1);
    let tx = tx.clone();
    tx.send(1).unwrap();
    assert_eq!(rx.recv().unwrap(), 1);
}

#[test]
fn smoke_threads() {
    let (tx, rx) = channel::<i32>();
    let t = thread::spawn(move || tx.send(1).unwrap());
    assert_eq!(rx.recv().unwrap(), 1);
    t.join().unwrap();
}

#[test]
fn smoke_port_gone() {
    let (tx, rx) = channel::<i32>();
    drop(rx);
    assert!(tx.send(1).is_err());
}

#[test]
fn smoke_shared_port_gone2() {
    let (tx, rx) = channel::<i32>();
    drop(rx);
    let tx2 = tx.clone();
    drop(tx);
    assert_eq!(tx2.send(1), Err(SendError(1)));
}

#[test]
fn port_gone_concurrent() {
    let (tx, rx) = channel::<i32>();
    let t = thread::spawn(move || {
        rx.recv().unwrap();
    });
    while tx.send(1).is_ok() {}
    t.join().unwrap();
}

#[test]
fn smoke_chan_gone() {
    let (tx, rx) = channel::<i32>();
    drop(tx);
    assert_eq!(rx.recv(), Err(RecvError));
}

#[test]
fn smoke_chan_gone_shared() {
    let (tx, rx) = channel::<()>();
    let tx2 = tx.clone();
    tx.send(()).unwrap();
    tx2.send(()).unwrap();
    drop(tx);
    drop(tx2);
    assert!(rx.recv().is_ok());
    assert!(rx.recv().is_ok());
    assert!(rx.recv().is_err());
}

#[test]
fn chan_gone_concurrent() {
    let (tx, rx) = channel::<i32>();
    let t = thread::spawn(move || {
        tx.send(1).unwrap();
        tx.send(1).unwrap();
    });
    while rx.recv().is_ok() {}
    t.join().unwrap();
}

#[test]
fn stress() {
    let (tx, rx) = channel::<i32>();
    let t = thread::spawn(move || {
        for _ in 0..10_000 {
            tx.send(1).unwrap();
        }
    });
    for _ in 0..10_000 {
        assert_eq!(rx.recv().unwrap(), 1);
    }
    t.join().unwrap();
}

#[test]
fn stress_shared() {
    const AMT: u32 = 10_000;
    const NTHREADS: u32 = 8;
    let (tx, rx) = channel::<i32>();
    let t = thread::spawn(move || {
        for _ in 0..AMT * NTHREADS {
            assert_eq!(rx.recv().unwrap(), 1);
        }
        assert!(matches!(rx.try_recv(), Err(TryRecvError::Disconnected)));
    });
    for _ in 0..NTHREADS {
        let tx = tx.clone();
        thread::spawn(move || {
            for _ in 0..AMT {
                tx.send(1).unwrap();
            }
        });
    }
    drop(tx);
    t.join().unwrap();
}

#[test]
fn send_from_outside_runtime() {
    // Threads and coroutines on one channel: the receiver is a coroutine.
    let rt = rt();
    let (tx1, rx1) = channel::<()>();
    let (tx2, rx2) = channel::<i32>();
    let h = rt.spawn(move || {
        tx1.send(()).unwrap();
        for _ in 0..40 {
            assert_eq!(rx2.recv().unwrap(), 1);
        }
    });
    rx1.recv().unwrap();
    let t = thread::spawn(move || {
        for _ in 0..40 {
            tx2.send(1).unwrap();
        }
    });
    t.join().unwrap();
    h.join().unwrap();
}

#[test]
fn recv_from_outside_runtime() {
    let rt = rt();
    let (tx, rx) = channel::<i32>();
    let t = thread::spawn(move || {
        for _ in 0..40 {
            assert_eq!(rx.recv().unwrap(), 1);
        }
    });
    rt.block_on(move || {
        for _ in 0..40 {
            tx.send(1).unwrap();
            spindle_rt::yield_now();
        }
    });
    t.join().unwrap();
}

#[test]
fn oneshot_single_thread_close_port_first() {
    let (_tx, rx) = channel::<i32>();
    drop(rx);
}

#[test]
fn oneshot_single_thread_send_port_close() {
    let (tx, rx) = channel::<Box<i32>>();
    drop(rx);
    assert!(tx.send(Box::new(0)).is_err());
}

#[test]
fn oneshot_single_thread_recv_chan_close() {
    let (tx, rx) = channel::<i32>();
    drop(tx);
    assert_eq!(rx.recv(), Err(RecvError));
}

#[test]
fn oneshot_single_thread_try_recv_states() {
    let (tx, rx) = channel::<i32>();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    tx.send(10).unwrap();
    assert_eq!(rx.try_recv(), Ok(10));
    drop(tx);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
}

#[test]
fn oneshot_multi_task_recv_then_send() {
    let rt = rt();
    let (tx, rx) = channel::<Box<i32>>();
    let h = rt.spawn(move || {
        assert!(*rx.recv().unwrap() == 10);
    });
    tx.send(Box::new(10)).unwrap();
    h.join().unwrap();
}

#[test]
fn oneshot_multi_thread_close_stress() {
    for _ in 0..200 {
        let (tx, rx) = channel::<i32>();
        let t = thread::spawn(move || drop(rx));
        drop(tx);
        t.join().unwrap();
    }
}

#[test]
fn oneshot_multi_thread_send_close_stress() {
    for _ in 0..200 {
        let (tx, rx) = channel::<i32>();
        let t = thread::spawn(move || drop(rx));
        let _ = tx.send(1);
        t.join().unwrap();
    }
}

#[test]
fn oneshot_multi_thread_recv_close_stress() {
    for _ in 0..200 {
        let (tx, rx) = channel::<i32>();
        let t = thread::spawn(move || drop(tx));
        assert_eq!(rx.recv(), Err(RecvError));
        t.join().unwrap();
    }
}

#[test]
fn stream_send_recv_stress() {
    for _ in 0..20 {
        let (tx, rx) = channel();
        let sender = thread::spawn(move || {
            for i in 0..10 {
                tx.send(Box::new(i)).unwrap();
            }
        });
        for i in 0..10 {
            assert_eq!(*rx.recv().unwrap(), i);
        }
        sender.join().unwrap();
    }
}

#[test]
fn recv_timeout() {
    let (tx, rx) = channel();
    assert_eq!(rx.recv_timeout(ms(1)), Err(RecvTimeoutError::Timeout));
    tx.send(1).unwrap();
    assert_eq!(rx.recv_timeout(ms(1)), Ok(1));
}

#[test]
fn stress_recv_timeout_two_threads() {
    let (tx, rx) = channel();
    let stress = 1000;
    let t = thread::spawn(move || {
        for i in 0..stress {
            if i % 2 == 0 {
                thread::sleep(Duration::from_micros(300));
            }
            tx.send(1usize).unwrap();
        }
    });
    let mut recv_count = 0;
    loop {
        match rx.recv_timeout(Duration::from_micros(200)) {
            Ok(n) => {
                assert_eq!(n, 1);
                recv_count += 1;
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    assert_eq!(recv_count, stress);
    t.join().unwrap();
}

#[test]
fn recv_timeout_upgrade_shared() {
    let (tx, rx) = channel::<()>();
    let _tx2 = tx.clone();
    let start = Instant::now();
    assert_eq!(rx.recv_timeout(ms(5)), Err(RecvTimeoutError::Timeout));
    assert!(start.elapsed() >= ms(5));
}

#[test]
fn shared_recv_timeout() {
    let (tx, rx) = channel();
    let total = 5;
    for _ in 0..total {
        let tx = tx.clone();
        thread::spawn(move || tx.send(()).unwrap());
    }
    for _ in 0..total {
        rx.recv().unwrap();
    }
    assert_eq!(rx.recv_timeout(ms(1)), Err(RecvTimeoutError::Timeout));
    tx.send(()).unwrap();
    assert_eq!(rx.recv_timeout(ms(1)), Ok(()));
}

#[test]
fn test_nested_recv_iter() {
    let (tx, rx) = channel::<i32>();
    let (total_tx, total_rx) = channel::<i32>();
    let t = thread::spawn(move || {
        let mut acc = 0;
        for x in rx.iter() {
            acc += x;
        }
        total_tx.send(acc).unwrap();
    });
    tx.send(3).unwrap();
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    drop(tx);
    assert_eq!(total_rx.recv().unwrap(), 6);
    t.join().unwrap();
}

#[test]
fn test_recv_iter_break() {
    let (tx, rx) = channel::<i32>();
    let (count_tx, count_rx) = channel();
    let t = thread::spawn(move || {
        let mut count = 0;
        for x in rx.iter() {
            if count >= 3 {
                break;
            }
            count += x;
        }
        count_tx.send(count).unwrap();
    });
    tx.send(2).unwrap();
    tx.send(2).unwrap();
    tx.send(2).unwrap();
    let _ = tx.send(2);
    drop(tx);
    assert_eq!(count_rx.recv().unwrap(), 4);
    t.join().unwrap();
}

#[test]
fn test_recv_try_iter() {
    let (request_tx, request_rx) = channel();
    let (response_tx, response_rx) = channel();
    let t = thread::spawn(move || {
        let mut count = 0;
        loop {
            for x in response_rx.try_iter() {
                count += x;
                if count == 6 {
                    return count;
                }
            }
            request_tx.send(()).unwrap();
        }
    });
    for _ in request_rx.iter() {
        if response_tx.send(2).is_err() {
            break;
        }
    }
    assert_eq!(t.join().unwrap(), 6);
}

#[test]
fn test_recv_into_iter_owned_and_borrowed() {
    let mut iter = {
        let (tx, rx) = channel::<i32>();
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        rx.into_iter()
    };
    assert_eq!(iter.next(), Some(1));
    assert_eq!(iter.next(), Some(2));
    assert_eq!(iter.next(), None);
    let (tx, rx) = channel::<i32>();
    tx.send(1).unwrap();
    tx.send(2).unwrap();
    drop(tx);
    let mut iter = (&rx).into_iter();
    assert_eq!(iter.next(), Some(1));
    assert_eq!(iter.next(), Some(2));
    assert_eq!(iter.next(), None);
}

#[test]
fn try_recv_states() {
    let (tx1, rx1) = channel::<i32>();
    let (tx2, rx2) = channel::<()>();
    let (tx3, rx3) = channel::<()>();
    let t = thread::spawn(move || {
        rx2.recv().unwrap();
        tx1.send(1).unwrap();
        tx3.send(()).unwrap();
        rx2.recv().unwrap();
        drop(tx1);
        tx3.send(()).unwrap();
    });
    assert_eq!(rx1.try_recv(), Err(TryRecvError::Empty));
    tx2.send(()).unwrap();
    rx3.recv().unwrap();
    assert_eq!(rx1.try_recv(), Ok(1));
    assert_eq!(rx1.try_recv(), Err(TryRecvError::Empty));
    tx2.send(()).unwrap();
    rx3.recv().unwrap();
    assert_eq!(rx1.try_recv(), Err(TryRecvError::Disconnected));
    t.join().unwrap();
}

#[test]
fn destroy_upgraded_shared_port_when_sender_still_active() {
    let (tx, rx) = channel();
    let (tx2, rx2) = channel();
    let t = thread::spawn(move || {
        rx.recv().unwrap();
        tx2.send(()).unwrap();
    });
    let tx3 = tx.clone();
    tx3.send(()).unwrap();
    drop(tx);
    rx2.recv().unwrap();
    t.join().unwrap();
}

#[test]
fn issue_32114_drops_messages_when_receiver_drops() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct D;
    impl Drop for D {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }
    let (tx, rx) = channel();
    tx.send(D).unwrap();
    tx.send(D).unwrap();
    drop(rx);
    assert_eq!(
        DROPS.load(Ordering::SeqCst),
        2,
        "buffered messages dropped with the receiver"
    );
    assert!(tx.send(D).is_err());
    assert_eq!(DROPS.load(Ordering::SeqCst), 3);
}

// sync_channel (bounded)

#[test]
fn sync_smoke_and_rendezvous() {
    let (tx, rx) = sync_channel::<i32>(1);
    tx.send(1).unwrap();
    assert_eq!(rx.recv().unwrap(), 1);

    let (tx, rx) = sync_channel::<i32>(0);
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    let t = thread::spawn(move || tx.send(1));
    assert_eq!(rx.recv(), Ok(1));
    assert!(t.join().unwrap().is_ok());
}

#[test]
fn sync_send_blocks_until_recv() {
    let (tx, rx) = sync_channel::<i32>(0);
    let start = Instant::now();
    let t = thread::spawn(move || {
        thread::sleep(ms(20));
        rx.recv().unwrap()
    });
    tx.send(5).unwrap();
    assert!(
        start.elapsed() >= ms(20),
        "a rendezvous send waits for the receiver"
    );
    assert_eq!(t.join().unwrap(), 5);
}

#[test]
fn sync_try_send_states() {
    let (tx, rx) = sync_channel::<i32>(1);
    assert_eq!(tx.try_send(1), Ok(()));
    assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
    drop(rx);
    assert_eq!(tx.try_send(1), Err(TrySendError::Disconnected(1)));
}

#[test]
fn sync_send_waiting_sender_gets_disconnected() {
    let (tx, rx) = sync_channel::<i32>(0);
    let t = thread::spawn(move || tx.send(1));
    thread::sleep(ms(20));
    drop(rx);
    assert_eq!(t.join().unwrap(), Err(SendError(1)));
}

#[test]
fn sync_send_timeout() {
    let (tx, rx) = sync_channel::<i32>(1);
    tx.send(1).unwrap();
    let start = Instant::now();
    assert!(tx.send_timeout(2, ms(10)).unwrap_err().is_timeout());
    assert!(start.elapsed() >= ms(10));
    assert_eq!(rx.recv(), Ok(1));
    assert_eq!(tx.send_timeout(2, ms(10)), Ok(()));
}

#[test]
fn sync_stress_shared() {
    let (tx, rx) = sync_channel::<i32>(0);
    let (dtx, drx) = sync_channel::<()>(0);
    let t = thread::spawn(move || {
        for _ in 0..1000 * 8 {
            assert_eq!(rx.recv().unwrap(), 1);
        }
        // The last senders may not have dropped their handles yet: only "no message".
        assert!(rx.try_recv().is_err());
        dtx.send(()).unwrap();
    });
    for _ in 0..8 {
        let tx = tx.clone();
        thread::spawn(move || {
            for _ in 0..1000 {
                tx.send(1).unwrap();
            }
        });
    }
    drop(tx);
    drx.recv().unwrap();
    t.join().unwrap();
}

#[test]
fn sync_channel_in_coroutines_counts() {
    let rt = rt();
    let sum = rt.block_on(|| {
        let (tx, rx) = sync_channel::<u64>(2);
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let tx = tx.clone();
                spindle_rt::spawn(move || {
                    for i in 0..250 {
                        tx.send(p * 1000 + i).unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let sum: u64 = rx.iter().sum();
        producers.into_iter().for_each(|h| h.join().unwrap());
        sum
    });
    assert_eq!(
        sum,
        (0..4u64)
            .map(|p| (0..250).map(|i| p * 1000 + i).sum::<u64>())
            .sum()
    );
}
