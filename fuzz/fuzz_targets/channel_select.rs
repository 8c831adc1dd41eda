//! Channels and `select!` against a model, on one thread (no runtime: `spindle-sync` parks
//! threads, and nothing here ever blocks).
//!
//! Two `mpmc` channels, each bounded (capacity 0 to 3) or unbounded, each modelled as a
//! `VecDeque` plus counts of live senders and receivers. Operations: `try_send`, `try_recv`,
//! `len`/`is_full`/`is_disconnected`, cloning and dropping handles, and `select!` with a
//! `default` arm over recv and send arms of both channels. A `select!` must run an arm that
//! the model says is ready (a message buffered or all senders gone, for a receive; room in the
//! buffer or all receivers gone, for a send) with that arm's result, or `default` exactly when
//! none is ready. On one thread a zero-capacity channel is never ready to send (no receiver
//! waits), nor to receive while a sender lives.
#![no_main]

use std::collections::VecDeque;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use spindle_sync::mpmc::{self, Receiver, Sender, TryRecvError, TrySendError};
use spindle_sync::{RecvError, SendError, select};

#[derive(Arbitrary, Debug)]
struct Input {
    /// Capacities of the two channels: `None` = unbounded, `Some(c)` = bounded to `c % 4`.
    caps: [Option<u8>; 2],
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    TrySend(bool, u8),
    TryRecv(bool),
    Inspect(bool),
    CloneSender(bool),
    DropSender(bool),
    CloneReceiver(bool),
    DropReceiver(bool),
    /// `select! { recv(a), recv(b), default }`
    SelectRecvRecv,
    /// `select! { recv(x), send(y, v), default }` (x, y: the channels in the bool's order)
    SelectRecvSend(bool, u8),
    /// `select! { send(a, v), send(b, w), default }`
    SelectSendSend(u8, u8),
    /// `select! { recv(x), default }`
    SelectRecv(bool),
}

struct Chan {
    cap: Option<usize>,
    senders: Vec<Sender<u8>>,
    receivers: Vec<Receiver<u8>>,
    model: VecDeque<u8>,
}

impl Chan {
    fn new(cap: Option<u8>) -> Self {
        let cap = cap.map(|c| usize::from(c % 4));
        let (s, r) = match cap {
            Some(c) => mpmc::bounded(c),
            None => mpmc::unbounded(),
        };
        Chan {
            cap,
            senders: vec![s],
            receivers: vec![r],
            model: VecDeque::new(),
        }
    }

    fn full(&self) -> bool {
        self.cap.is_some_and(|c| self.model.len() >= c)
    }

    /// What a receive would give now, per the model (`None`: not ready).
    fn recv_ready(&self) -> Option<Result<u8, RecvError>> {
        match self.model.front() {
            Some(&v) => Some(Ok(v)),
            None if self.senders.is_empty() => Some(Err(RecvError)),
            None => None,
        }
    }

    /// What a send of `v` would give now, per the model (`None`: not ready).
    fn send_ready(&self, v: u8) -> Option<Result<(), SendError<u8>>> {
        if self.receivers.is_empty() {
            Some(Err(SendError(v)))
        } else if self.full() {
            None
        } else {
            Some(Ok(()))
        }
    }

    /// Applies a receive that completed with `got` to the model.
    fn received(&mut self, got: Result<u8, RecvError>) {
        assert_eq!(Some(got), self.recv_ready(), "receive outcome");
        if got.is_ok() {
            self.model.pop_front();
        }
    }

    /// Applies a send of `v` that completed with `got` to the model.
    fn sent(&mut self, v: u8, got: Result<(), SendError<u8>>) {
        assert_eq!(Some(got), self.send_ready(v), "send outcome");
        if got.is_ok() {
            self.model.push_back(v);
        }
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::TrySend(_, v) => {
                let Some(s) = self.senders.first() else { return };
                let want = match self.send_ready(v) {
                    Some(Err(SendError(v))) => Err(TrySendError::Disconnected(v)),
                    Some(Ok(())) => Ok(()),
                    None => Err(TrySendError::Full(v)),
                };
                assert_eq!(s.try_send(v), want);
                if want.is_ok() {
                    self.model.push_back(v);
                }
            }
            Op::TryRecv(_) => {
                let Some(r) = self.receivers.first() else { return };
                let want = match self.recv_ready() {
                    Some(Ok(v)) => Ok(v),
                    Some(Err(RecvError)) => Err(TryRecvError::Disconnected),
                    None => Err(TryRecvError::Empty),
                };
                assert_eq!(r.try_recv(), want);
                if want.is_ok() {
                    self.model.pop_front();
                }
            }
            Op::Inspect(_) => {
                if let Some(r) = self.receivers.first() {
                    assert_eq!(r.len(), self.model.len());
                    assert_eq!(r.is_empty(), self.model.is_empty());
                    assert_eq!(r.is_disconnected(), self.senders.is_empty());
                }
                if let Some(s) = self.senders.first() {
                    assert_eq!(s.is_full(), self.full());
                    assert_eq!(s.is_disconnected(), self.receivers.is_empty());
                }
            }
            Op::CloneSender(_) => {
                if let Some(s) = self.senders.first() {
                    self.senders.push(s.clone());
                }
            }
            Op::DropSender(_) => {
                self.senders.pop();
            }
            Op::CloneReceiver(_) => {
                if let Some(r) = self.receivers.first() {
                    self.receivers.push(r.clone());
                }
            }
            Op::DropReceiver(_) => {
                self.receivers.pop();
                if self.receivers.is_empty() {
                    // Buffered messages are dropped with the last receiver.
                    self.model.clear();
                }
            }
            _ => unreachable!("select ops act on both channels"),
        }
    }
}

/// Which arm of a `select!` ran, and with what.
enum Ran {
    Recv(usize, Result<u8, RecvError>),
    Send(usize, u8, Result<(), SendError<u8>>),
    Default,
}

fn select_op(chans: &mut [Chan; 2], op: Op) {
    let ran = match op {
        Op::SelectRecvRecv => {
            let (Some(a), Some(b)) = (chans[0].receivers.first(), chans[1].receivers.first())
            else {
                return;
            };
            select! {
                recv(a) -> m => Ran::Recv(0, m),
                recv(b) -> m => Ran::Recv(1, m),
                default => Ran::Default,
            }
        }
        Op::SelectRecvSend(flip, v) => {
            let (x, y) = if flip { (1, 0) } else { (0, 1) };
            let (Some(r), Some(s)) = (chans[x].receivers.first(), chans[y].senders.first()) else {
                return;
            };
            select! {
                recv(r) -> m => Ran::Recv(x, m),
                send(s, v) -> res => Ran::Send(y, v, res),
                default => Ran::Default,
            }
        }
        Op::SelectSendSend(v, w) => {
            let (Some(a), Some(b)) = (chans[0].senders.first(), chans[1].senders.first()) else {
                return;
            };
            select! {
                send(a, v) -> res => Ran::Send(0, v, res),
                send(b, w) -> res => Ran::Send(1, w, res),
                default => Ran::Default,
            }
        }
        Op::SelectRecv(which) => {
            let x = usize::from(which);
            let Some(r) = chans[x].receivers.first() else {
                return;
            };
            select! {
                recv(r) -> m => Ran::Recv(x, m),
                default => Ran::Default,
            }
        }
        _ => unreachable!(),
    };
    match ran {
        Ran::Recv(i, got) => chans[i].received(got),
        Ran::Send(i, v, got) => chans[i].sent(v, got),
        Ran::Default => {
            // No arm of this select was ready.
            let none_ready = match op {
                Op::SelectRecvRecv => {
                    chans[0].recv_ready().is_none() && chans[1].recv_ready().is_none()
                }
                Op::SelectRecvSend(flip, v) => {
                    let (x, y) = if flip { (1, 0) } else { (0, 1) };
                    chans[x].recv_ready().is_none() && chans[y].send_ready(v).is_none()
                }
                Op::SelectSendSend(v, w) => {
                    chans[0].send_ready(v).is_none() && chans[1].send_ready(w).is_none()
                }
                Op::SelectRecv(which) => chans[usize::from(which)].recv_ready().is_none(),
                _ => unreachable!(),
            };
            assert!(none_ready, "select! ran `default` with an arm ready ({op:?})");
        }
    }
}

fuzz_target!(|input: Input| {
    let mut chans = [Chan::new(input.caps[0]), Chan::new(input.caps[1])];
    for &op in input.ops.iter().take(512) {
        match op {
            Op::TrySend(c, _)
            | Op::TryRecv(c)
            | Op::Inspect(c)
            | Op::CloneSender(c)
            | Op::DropSender(c)
            | Op::CloneReceiver(c)
            | Op::DropReceiver(c) => chans[usize::from(c)].step(op),
            _ => select_op(&mut chans, op),
        }
    }
});
