//! `oneshot::Receiver::recv_async`'s future is `!Send` (it holds `&Inner<T>`, and
//! `Inner<T>` is not `Sync`: its `DataCell`s are `UnsafeCell`s with no `Sync` impl), although the
//! receiver it borrows is `Sync` for `T: Send` and every other future of the crate (the channels'
//! `RecvFuture`/`SendFuture`, the lock futures, `rx.await`'s `ReceiverFuture`) is `Send`. So
//! `rx.recv_async().await` cannot be used in a future spawned on a multi-threaded executor,
//! contrary to the crate's "runtime-agnostic" async variants. Checked at run time with the
//! inherent-method-before-trait-method trick (the `impls` crate's), so that the file compiles.
#![cfg(not(any(loom, miri)))]

use std::marker::PhantomData;

struct Probe<T: ?Sized>(PhantomData<T>);
// Only used when a probed type is not `Send`.
#[allow(dead_code)]
trait NotSend {
    fn is_send(&self) -> bool {
        false
    }
}
impl<T: ?Sized> NotSend for Probe<T> {}
impl<T: ?Sized + Send> Probe<T> {
    fn is_send(&self) -> bool {
        true
    }
}

#[test]
fn oneshot_recv_future_is_send_like_the_others() {
    // The others, for comparison (these pass).
    assert!(Probe::<spindle_sync::mpsc::RecvFuture<'static, u32>>(PhantomData).is_send());
    assert!(Probe::<spindle_sync::oneshot::ReceiverFuture<u32>>(PhantomData).is_send());
    assert!(Probe::<spindle_sync::oneshot::Receiver<u32>>(PhantomData).is_send());
    assert!(
        Probe::<spindle_sync::oneshot::RecvFuture<'static, u32>>(PhantomData).is_send(),
        "oneshot::RecvFuture<u32> is not Send"
    );
}
