//! Property tests against sequential models: random sequences of non-blocking (or zero-timeout)
//! operations on one thread, compared step by step with a plain model of the primitive.
#![cfg(not(any(loom, miri)))]

use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use spindle_sync::mpmc::{self, RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
use spindle_sync::{
    AcquireError, Mutex, Notify, OnceCell, RwLock, Semaphore, SemaphorePermit, WaitGroup,
};

// ---------------------------------------------------------------------------------------------
// Channels

#[derive(Debug, Clone)]
enum ChanOp {
    TrySend(u8),
    SendTimeoutZero(u8),
    TryRecv,
    RecvTimeoutZero,
    CloneSender,
    DropSender,
    CloneReceiver,
    DropReceiver,
    Len,
}

fn chan_op() -> impl Strategy<Value = ChanOp> {
    prop_oneof![
        4 => any::<u8>().prop_map(ChanOp::TrySend),
        1 => any::<u8>().prop_map(ChanOp::SendTimeoutZero),
        4 => Just(ChanOp::TryRecv),
        1 => Just(ChanOp::RecvTimeoutZero),
        1 => Just(ChanOp::CloneSender),
        1 => Just(ChanOp::DropSender),
        1 => Just(ChanOp::CloneReceiver),
        1 => Just(ChanOp::DropReceiver),
        1 => Just(ChanOp::Len),
    ]
}

proptest! {
    #[test]
    fn channel_matches_a_queue(cap in prop::option::of(0usize..4), ops in prop::collection::vec(chan_op(), 0..200)) {
        let (s, r) = match cap {
            Some(c) => mpmc::bounded::<u8>(c),
            None => mpmc::unbounded(),
        };
        let mut senders = vec![s];
        let mut receivers = vec![r];
        let mut model: VecDeque<u8> = VecDeque::new();
        let full = |m: &VecDeque<u8>| cap.is_some_and(|c| m.len() >= c);
        for op in ops {
            let tx_gone = senders.is_empty();
            let rx_gone = receivers.is_empty();
            match op {
                ChanOp::TrySend(v) | ChanOp::SendTimeoutZero(v) => {
                    let Some(s) = senders.first() else { continue };
                    let got = match op {
                        ChanOp::TrySend(_) => s.try_send(v),
                        _ => s.send_timeout(v, Duration::ZERO).map_err(|e| match e {
                            SendTimeoutError::Timeout(v) => TrySendError::Full(v),
                            SendTimeoutError::Disconnected(v) => TrySendError::Disconnected(v),
                        }),
                    };
                    let want = if rx_gone {
                        Err(TrySendError::Disconnected(v))
                    } else if full(&model) {
                        Err(TrySendError::Full(v))
                    } else {
                        model.push_back(v);
                        Ok(())
                    };
                    prop_assert_eq!(got, want);
                }
                ChanOp::TryRecv | ChanOp::RecvTimeoutZero => {
                    let Some(r) = receivers.first() else { continue };
                    let got = match op {
                        ChanOp::TryRecv => r.try_recv(),
                        _ => r.recv_timeout(Duration::ZERO).map_err(|e| match e {
                            RecvTimeoutError::Timeout => TryRecvError::Empty,
                            RecvTimeoutError::Disconnected => TryRecvError::Disconnected,
                        }),
                    };
                    let want = match model.pop_front() {
                        Some(v) => Ok(v),
                        None if tx_gone => Err(TryRecvError::Disconnected),
                        None => Err(TryRecvError::Empty),
                    };
                    prop_assert_eq!(got, want);
                }
                ChanOp::CloneSender => {
                    if let Some(s) = senders.first() { senders.push(s.clone()); }
                }
                ChanOp::DropSender => { senders.pop(); }
                ChanOp::CloneReceiver => {
                    if let Some(r) = receivers.first() { receivers.push(r.clone()); }
                }
                ChanOp::DropReceiver => {
                    receivers.pop();
                    if receivers.is_empty() {
                        model.clear(); // buffered messages are dropped with the last receiver
                    }
                }
                ChanOp::Len => {
                    if let Some(r) = receivers.first() {
                        prop_assert_eq!(r.len(), model.len());
                        prop_assert_eq!(r.is_empty(), model.is_empty());
                        prop_assert_eq!(r.is_disconnected(), tx_gone);
                    }
                    if let Some(s) = senders.first() {
                        prop_assert_eq!(s.is_full(), full(&model));
                        prop_assert_eq!(s.is_disconnected(), rx_gone);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Semaphore

#[derive(Debug, Clone)]
enum SemOp {
    TryAcquire(usize),
    AcquireTimeoutZero(usize),
    Release(usize),
    Forget(usize),
    Add(usize),
    Close,
}

fn sem_op() -> impl Strategy<Value = SemOp> {
    prop_oneof![
        4 => (0usize..4).prop_map(SemOp::TryAcquire),
        2 => (0usize..4).prop_map(SemOp::AcquireTimeoutZero),
        3 => (0usize..8).prop_map(SemOp::Release),
        1 => (0usize..8).prop_map(SemOp::Forget),
        2 => (0usize..3).prop_map(SemOp::Add),
        1 => Just(SemOp::Close),
    ]
}

proptest! {
    #[test]
    fn semaphore_matches_a_counter(init in 0usize..5, ops in prop::collection::vec(sem_op(), 0..200)) {
        let sem = Semaphore::new(init);
        let mut held: Vec<SemaphorePermit<'_>> = Vec::new();
        let mut permits = init;
        let mut closed = false;
        for op in ops {
            match op {
                SemOp::TryAcquire(n) | SemOp::AcquireTimeoutZero(n) => {
                    let got = match op {
                        SemOp::TryAcquire(_) => sem.try_acquire_many(n),
                        _ => sem.acquire_many_timeout(n, Duration::ZERO),
                    };
                    let want = if closed {
                        Err(AcquireError::Closed)
                    } else if permits >= n {
                        permits -= n;
                        Ok(n)
                    } else if matches!(op, SemOp::TryAcquire(_)) {
                        Err(AcquireError::NoPermits)
                    } else {
                        Err(AcquireError::TimedOut)
                    };
                    prop_assert_eq!(got.as_ref().map(|p| p.num_permits()).map_err(|e| *e), want);
                    if let Ok(p) = got { held.push(p); }
                }
                SemOp::Release(i) => {
                    if !held.is_empty() {
                        let p = held.swap_remove(i % held.len());
                        permits += p.num_permits();
                    }
                }
                SemOp::Forget(i) => {
                    if !held.is_empty() {
                        held.swap_remove(i % held.len()).forget();
                    }
                }
                SemOp::Add(n) => {
                    sem.add_permits(n);
                    permits += n;
                }
                SemOp::Close => {
                    sem.close();
                    closed = true;
                }
            }
            prop_assert_eq!(sem.available_permits(), permits);
            prop_assert_eq!(sem.is_closed(), closed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Locks

#[derive(Debug, Clone)]
enum LockOp {
    TryRead,
    TryWrite,
    ReadForZero,
    WriteForZero,
    DropRead(usize),
    DropWrite,
}

fn lock_op() -> impl Strategy<Value = LockOp> {
    prop_oneof![
        Just(LockOp::TryRead),
        Just(LockOp::TryWrite),
        Just(LockOp::ReadForZero),
        Just(LockOp::WriteForZero),
        (0usize..4).prop_map(LockOp::DropRead),
        Just(LockOp::DropWrite),
    ]
}

proptest! {
    #[test]
    fn rwlock_matches_a_reader_writer_count(ops in prop::collection::vec(lock_op(), 0..200)) {
        let lock = RwLock::new(0u32);
        let mut reads = Vec::new();
        let mut write = None;
        for op in ops {
            match op {
                LockOp::TryRead | LockOp::ReadForZero => {
                    let g = match op {
                        LockOp::TryRead => lock.try_read(),
                        _ => lock.try_read_for(Duration::ZERO),
                    };
                    prop_assert_eq!(g.is_some(), write.is_none());
                    if let Some(g) = g { reads.push(g); }
                }
                LockOp::TryWrite | LockOp::WriteForZero => {
                    let g = match op {
                        LockOp::TryWrite => lock.try_write(),
                        _ => lock.try_write_for(Duration::ZERO),
                    };
                    prop_assert_eq!(g.is_some(), write.is_none() && reads.is_empty());
                    if let Some(mut g) = g {
                        *g += 1;
                        write = Some(g);
                    }
                }
                LockOp::DropRead(i) => {
                    if !reads.is_empty() { drop(reads.swap_remove(i % reads.len())); }
                }
                LockOp::DropWrite => { write = None; }
            }
        }
    }

    #[test]
    fn mutex_matches_a_flag(ops in prop::collection::vec(0u8..3, 0..200)) {
        let m = Mutex::new(0u32);
        let mut guard = None;
        let mut count = 0;
        for op in ops {
            match op {
                0 => {
                    let g = m.try_lock();
                    prop_assert_eq!(g.is_some(), guard.is_none());
                    if let Some(mut g) = g { *g += 1; count += 1; guard = Some(g); }
                }
                1 => {
                    let g = m.try_lock_for(Duration::ZERO);
                    prop_assert_eq!(g.is_some(), guard.is_none());
                    if let Some(mut g) = g { *g += 1; count += 1; guard = Some(g); }
                }
                _ => { guard = None; }
            }
            prop_assert_eq!(m.is_locked(), guard.is_some());
        }
        drop(guard);
        prop_assert_eq!(*m.lock(), count);
    }

    #[test]
    fn notify_matches_a_permit(ops in prop::collection::vec(0u8..3, 0..100)) {
        let n = Notify::new();
        let mut permit = false;
        for op in ops {
            match op {
                0 => { n.notify_one(); permit = true; }
                1 => { n.notify_all(); }
                _ => {
                    prop_assert_eq!(n.wait_timeout(Duration::ZERO), permit);
                    permit = false;
                }
            }
        }
    }

    #[test]
    fn waitgroup_matches_a_counter(ops in prop::collection::vec(0u8..3, 0..100)) {
        let wg = WaitGroup::new();
        let mut count = 0usize;
        for op in ops {
            match op {
                0 => { wg.add(2); count += 2; }
                1 => {
                    prop_assert_eq!(wg.done(), count > 0);
                    count = count.saturating_sub(1);
                }
                _ => prop_assert_eq!(wg.wait_timeout(Duration::ZERO), count == 0),
            }
            prop_assert_eq!(wg.count(), count);
        }
    }

    #[test]
    fn oncecell_matches_an_option(ops in prop::collection::vec(0u8..4, 0..50), vals in prop::collection::vec(any::<u16>(), 50)) {
        let mut cell = OnceCell::new();
        let mut model: Option<u16> = None;
        for (op, v) in ops.into_iter().zip(vals) {
            match op {
                0 => {
                    let want = if model.is_some() { Err(v) } else { model = Some(v); Ok(()) };
                    prop_assert_eq!(cell.set(v), want);
                }
                1 => prop_assert_eq!(cell.get().copied(), model),
                2 => {
                    let got = *cell.get_or_init(|| v);
                    prop_assert_eq!(got, *model.get_or_insert(v));
                }
                _ => prop_assert_eq!(cell.take(), model.take()),
            }
        }
    }
}
