//! `fs::File` shared by coroutines (`Read`/`Write` for `&File`) on io_uring.

use crate::common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use spindle_rt::IoBackend;

const READERS: usize = 4;
const BLOCK: usize = 4096;

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("spindle-test-{name}-{}", std::process::id()))
}

/// Coroutines read one file through `&File` (`Read for &File`) at the file position, the file
/// not in the page cache. With std or the blocking pool each `read(2)` takes and moves the
/// position atomically, so the readers together read every byte exactly once. On io_uring a
/// read "at the file position" (offset -1) that cannot complete at once keeps the position it
/// read at issue and stores the new one at completion, without the kernel's `f_pos_lock`: two
/// reads issued together read the same bytes, and the total read exceeds the file (or bytes
/// are skipped). Correct: the sum of what the readers got equals the file's length.
fn concurrent_reads(backend: IoBackend, name: &str) -> (usize, usize) {
    const LEN: usize = 4 << 20;
    let path = temp(name);
    {
        let mut f = std::fs::File::create(&path).unwrap();
        let data: Vec<u8> = (0..LEN).map(|i| (i / BLOCK) as u8).collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
    }
    let rt = common::rt(backend);
    let p = path.clone();
    let got = common::within(rt, Duration::from_secs(60), move || {
        let std_file = std::fs::File::open(&p).unwrap();
        {
            use std::os::fd::AsRawFd;
            // SAFETY: plain call on an open fd.
            unsafe { libc::posix_fadvise(std_file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
        let file = Arc::new(spindle_io::fs::File::from_std(std_file));
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let file = file.clone();
                spindle_rt::spawn(move || {
                    let mut total = 0;
                    let mut buf = vec![0u8; BLOCK];
                    loop {
                        let n = (&*file).read(&mut buf).unwrap();
                        if n == 0 {
                            return total;
                        }
                        total += n;
                    }
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().unwrap())
            .sum::<usize>()
    })
    .expect("hung");
    let _ = std::fs::remove_file(&path);
    (got, LEN)
}

#[test]
fn concurrent_reads_through_shared_file_uring() {
    if common::io_uring_left_out("concurrent_reads_through_shared_file_uring") {
        return;
    }
    let (got, len) = concurrent_reads(IoBackend::IoUring, "r-uring");
    assert_eq!(
        got, len,
        "bytes read by all readers together vs the file's length"
    );
}

#[test]
fn concurrent_reads_through_shared_file_epoll_control() {
    let (got, len) = concurrent_reads(IoBackend::Epoll, "r-epoll");
    assert_eq!(got, len);
}
