//! A wait in a registration whose driver shuts down.

use crate::common;

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use spindle_io::net::UnixStream;
use spindle_rt::IoBackend;

/// A socket registered with runtime A's epoll (a read there timed out) is read, with no
/// data yet, in a task of runtime B. The wait uses A's registration ("the latest one while its
/// driver lives"). Runtime A then shuts down: its driver shuts the registration down, whose
/// doc says "Every wait, now and later, ends with an error, so that the IO type registers the
/// source with the current driver instead". But `Evented::readiness_op` returns that error to
/// the caller: B's `read` fails with "the IO driver this source was registered with has shut
/// down", although B's runtime is alive and the data arrives right after.
/// Correct: the read registers with B's reactor and returns the data.
#[test]
fn wait_survives_the_shutdown_of_another_runtime_epoll() {
    let (a_end, peer) = UnixStream::pair().unwrap();
    let a_end = Arc::new(a_end);
    let rt_a = common::rt(IoBackend::Epoll);
    {
        let s = a_end.clone();
        rt_a.block_on(move || {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
            let mut buf = [0u8; 8];
            assert_eq!(
                (&*s).read(&mut buf).unwrap_err().kind(),
                std::io::ErrorKind::TimedOut
            );
            s.set_read_timeout(None).unwrap();
        });
    }
    let rt_b = common::rt(IoBackend::Epoll);
    let reader = {
        let s = a_end.clone();
        rt_b.spawn(move || {
            let mut buf = [0u8; 8];
            (&*s)
                .read(&mut buf)
                .map(|n| buf[..n].to_vec())
                .map_err(|e| e.to_string())
        })
    };
    std::thread::sleep(Duration::from_millis(100)); // B's task waits
    drop(rt_a);
    std::thread::sleep(Duration::from_millis(100));
    (&peer).write_all_std(b"data");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(reader.join());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => assert_eq!(r.unwrap(), Ok(b"data".to_vec())),
        Err(_) => {
            std::mem::forget(rt_b);
            panic!("the read did not return within 10 s");
        }
    }
}

trait WriteAllStd {
    fn write_all_std(self, data: &[u8]);
}

impl WriteAllStd for &UnixStream {
    fn write_all_std(mut self, data: &[u8]) {
        std::io::Write::write_all(&mut self, data).unwrap();
    }
}
