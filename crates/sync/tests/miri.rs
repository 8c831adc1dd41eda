//! Small thread-only scenarios of every primitive, sized for Miri
//! (`cargo +nightly miri test -p spindle-sync --test miri`): no runtime (coroutines switch
//! stacks with inline assembly, which Miri cannot run), so waiting parks OS threads through
//! `spindle_park`. They also run in the normal test suite.
#![cfg(not(loom))]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use spindle_sync::mpmc::{self, RecvTimeoutError, TrySendError};
use spindle_sync::{
    Barrier, Condvar, Lazy, Mutex, Notify, OnceCell, RwLock, Semaphore, WaitGroup, select,
};

#[test]
fn mutex_and_condvar() {
    let pair = Arc::new((Mutex::new(0u32), Condvar::new()));
    let ts: Vec<_> = (0..2)
        .map(|_| {
            let p = pair.clone();
            thread::spawn(move || {
                for _ in 0..20 {
                    *p.0.lock() += 1;
                    p.1.notify_all();
                }
            })
        })
        .collect();
    let g = pair.1.wait_while(pair.0.lock(), |n| *n < 40);
    assert_eq!(*g, 40);
    drop(g);
    ts.into_iter().for_each(|t| t.join().unwrap());
    assert!(pair.0.try_lock_for(Duration::from_millis(1)).is_some());
}

#[test]
fn rwlock_readers_and_writer() {
    let l = Arc::new(RwLock::new(vec![0u8; 4]));
    let ts: Vec<_> = (0..3)
        .map(|i| {
            let l = l.clone();
            thread::spawn(move || {
                for _ in 0..10 {
                    if i == 0 {
                        l.write().iter_mut().for_each(|x| *x += 1);
                    } else {
                        let g = l.read();
                        assert!(g.iter().all(|x| *x == g[0]));
                    }
                }
            })
        })
        .collect();
    ts.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*l.read(), [10; 4]);
}

#[test]
fn semaphore_barrier_waitgroup_notify() {
    let sem = Arc::new(Semaphore::new(1));
    let barrier = Arc::new(Barrier::new(3));
    let wg = Arc::new(WaitGroup::new());
    let notify = Arc::new(Notify::new());
    wg.add(2);
    let ts: Vec<_> = (0..2)
        .map(|_| {
            let (sem, barrier, wg, notify) =
                (sem.clone(), barrier.clone(), wg.clone(), notify.clone());
            thread::spawn(move || {
                drop(sem.acquire().unwrap());
                barrier.wait();
                wg.done();
                notify.wait();
            })
        })
        .collect();
    barrier.wait();
    wg.wait();
    notify.notify_one();
    notify.notify_one();
    // One notification may be stored as a permit while a thread is not waiting yet; keep
    // notifying until both are gone.
    for t in ts {
        while !t.is_finished() {
            notify.notify_all();
            thread::yield_now();
        }
        t.join().unwrap();
    }
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn once_and_lazy() {
    static LAZY: Lazy<String> = Lazy::new(|| "x".repeat(3));
    let cell = Arc::new(OnceCell::new());
    let ts: Vec<_> = (0..2)
        .map(|i| {
            let cell = cell.clone();
            thread::spawn(move || *cell.get_or_init(|| i))
        })
        .collect();
    let vals: Vec<_> = ts.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(vals[0], vals[1]);
    assert_eq!(&*LAZY, "xxx");
}

#[test]
fn channels_all_flavours() {
    for cap in [Some(0), Some(1), None] {
        let (s, r) = match cap {
            Some(c) => mpmc::bounded::<Box<u32>>(c),
            None => mpmc::unbounded(),
        };
        let t = thread::spawn(move || {
            for i in 0..10 {
                s.send(Box::new(i)).unwrap();
            }
        });
        let got: Vec<u32> = r.iter().map(|b| *b).collect();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        t.join().unwrap();
    }
    let (s, r) = mpmc::bounded::<u8>(0);
    assert_eq!(s.try_send(1), Err(TrySendError::Full(1)));
    assert_eq!(
        r.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Timeout)
    );
    let (tx, rx) = spindle_sync::oneshot::channel();
    thread::spawn(move || tx.send(String::from("one")).unwrap());
    assert_eq!(rx.recv().unwrap(), "one");
}

#[test]
fn select_send_and_recv() {
    let (s1, r1) = mpmc::bounded::<u32>(0);
    let (s2, r2) = mpmc::bounded::<u32>(0);
    let t = thread::spawn(move || {
        let v = r1.recv().unwrap();
        s2.send(v + 1).unwrap();
    });
    select! {
        send(s1, 1) -> res => res.unwrap(),
        recv(r2) -> _ => panic!("nothing sent yet"),
    }
    select! {
        recv(r2) -> v => assert_eq!(v, Ok(2)),
        timeout(Duration::from_secs(10)) => panic!("stuck"),
    }
    t.join().unwrap();
}

#[test]
fn oneshot_every_ending() {
    // Every order in which a oneshot's two handles can leave, with a heap message: the
    // handles own the channel together (no reference count), so Miri checks here that the
    // last one frees it, exactly once, and the message is freed exactly once too.
    use spindle_sync::oneshot::{TryRecvError, channel};

    // Sent and received; the receiver leaves last.
    let (tx, rx) = channel();
    tx.send(String::from("a")).unwrap();
    assert_eq!(rx.recv().unwrap(), "a");
    assert!(rx.recv().is_err(), "received once");
    drop(rx);
    // Sent, never received: the receiver's drop drops it.
    let (tx, rx) = channel();
    tx.send(String::from("b")).unwrap();
    drop(rx);
    // The receiver left first: the send gives the message back.
    let (tx, rx) = channel::<String>();
    drop(rx);
    assert!(tx.is_closed());
    assert_eq!(tx.send(String::from("c")).unwrap_err().0, "c");
    // The sender dropped without sending, in either order.
    let (tx, rx) = channel::<String>();
    drop(tx);
    assert!(rx.recv().is_err());
    drop(rx);
    let (tx, rx) = channel::<String>();
    drop(rx);
    drop(tx);
    // try_recv before, at and after the message.
    let (tx, rx) = channel::<String>();
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    tx.send(String::from("d")).unwrap();
    assert_eq!(rx.try_recv().unwrap(), "d");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    // The send races the receiver's drop on another thread.
    for _ in 0..4 {
        let (tx, rx) = channel::<String>();
        let t = thread::spawn(move || drop(tx.send(String::from("e"))));
        drop(rx);
        t.join().unwrap();
    }
}
