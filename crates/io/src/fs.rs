//! Files that suspend only the calling coroutine: native operations on io_uring, the runtime's
//! blocking pool on readiness backends (regular files are always "ready" to epoll and kqueue,
//! and then block the thread in the kernel), the calling thread outside a runtime.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

use crate::driver::{Op, OpKind};
use crate::source::Evented;

/// The largest buffer bounced through the heap for a coroutine on a copying stack.
const BOUNCE_MAX: usize = 1 << 20;

// Jobs on the blocking pool run while the calling coroutine is suspended. A coroutine on a
// copying (shared) stack has its stack bytes elsewhere then, and another coroutine's in their
// place: a job must not read anything on that stack — not the caller's buffers (bounced
// through the heap), not the `File` (a local, usually: `File::job` gives the job a duplicate
// of its descriptor), not a path or options the caller holds (jobs own a copy of the path —
// one allocation, next to a system call and a thread hop — and of the options).

/// An open file.
///
/// Like [`std::fs::File`] (`Read`, `Write`, `Seek`, also for `&File`), but reads, writes and
/// syncs suspend only the calling coroutine.
///
/// Reads, writes and seeks at the file position through one `File` (shared as `&File`) take
/// turns, first come first served, so each moves the position atomically as `read(2)` does:
/// io_uring's reads "at the file position" take the position at submission and store it at
/// completion without the kernel's position lock, so two of them in flight together read the
/// same bytes. Other descriptors of the same open file (`dup`, [`std::fs::File::try_clone`])
/// are not covered: use `read_at`/`write_at` there.
///
/// ```
/// use std::io::{Read, Write};
/// let path = std::env::temp_dir().join(format!("spindle-fs-doc-{}", std::process::id()));
/// let mut f = spindle_io::fs::File::create(&path)?;
/// f.write_all(b"file contents")?;
/// f.sync_all()?;
/// let mut s = String::new();
/// spindle_io::fs::File::open(&path)?.read_to_string(&mut s)?;
/// assert_eq!(s, "file contents");
/// spindle_io::fs::remove_file(&path)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct File {
    ev: Evented,
    inner: std::fs::File,
    /// Held around every operation at the file position (see the type's docs).
    position: PositionLock,
}

impl File {
    /// Opens a file for reading.
    ///
    /// # Errors
    ///
    /// As [`std::fs::File::open`].
    pub fn open<P: AsRef<Path>>(path: P) -> io::Result<File> {
        let path = path.as_ref().to_path_buf();
        Ok(File::from_std(crate::offload(move || {
            std::fs::File::open(path)
        })??))
    }

    /// Creates (or truncates) a file for writing.
    ///
    /// # Errors
    ///
    /// As [`std::fs::File::create`].
    pub fn create<P: AsRef<Path>>(path: P) -> io::Result<File> {
        let path = path.as_ref().to_path_buf();
        Ok(File::from_std(crate::offload(move || {
            std::fs::File::create(path)
        })??))
    }

    /// Opens a file with `options`.
    ///
    /// # Errors
    ///
    /// As [`std::fs::OpenOptions::open`].
    pub fn open_with<P: AsRef<Path>>(path: P, options: &std::fs::OpenOptions) -> io::Result<File> {
        let (path, options) = (path.as_ref().to_path_buf(), options.clone());
        Ok(File::from_std(crate::offload(move || options.open(path))??))
    }

    /// Wraps a std file.
    pub fn from_std(file: std::fs::File) -> File {
        File {
            ev: Evented::new(file.as_raw_fd()),
            inner: file,
            position: PositionLock::new(),
        }
    }

    /// The std file.
    pub fn into_std(self) -> std::fs::File {
        let File { ev, inner, .. } = self;
        drop(ev);
        inner
    }

    /// Flushes data and metadata to the device (`fsync`).
    ///
    /// # Errors
    ///
    /// As [`std::fs::File::sync_all`].
    pub fn sync_all(&self) -> io::Result<()> {
        self.sync(false)
    }

    /// Flushes data to the device (`fdatasync`).
    ///
    /// # Errors
    ///
    /// As [`std::fs::File::sync_data`].
    pub fn sync_data(&self) -> io::Result<()> {
        self.sync(true)
    }

    fn sync(&self, data_only: bool) -> io::Result<()> {
        if let Some(r) = self.ev.completion(OpKind::Fsync, |p, fd| {
            p.submit(Op::Fsync { fd, data_only }, None)
        }) {
            return r.map(drop);
        }
        self.job(move |file| {
            if data_only {
                file.sync_data()
            } else {
                file.sync_all()
            }
        })
    }

    /// Runs `f` with the file on the blocking pool. On a copying stack `f` gets a duplicate
    /// of the descriptor (`dup`), moved into the job: `self` may be on that stack.
    fn job<T: Send>(
        &self,
        f: impl FnOnce(&std::fs::File) -> io::Result<T> + Send,
    ) -> io::Result<T> {
        if spindle_park::on_copying_stack() {
            let file = self.inner.try_clone()?;
            crate::offload(move || f(&file))?
        } else {
            let file = &self.inner;
            crate::offload(move || f(file))?
        }
    }

    /// Truncates or extends the file.
    ///
    /// # Errors
    ///
    /// As [`std::fs::File::set_len`].
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        self.job(move |file| file.set_len(size))
    }

    /// The file's metadata.
    ///
    /// # Errors
    ///
    /// As [`std::fs::File::metadata`].
    pub fn metadata(&self) -> io::Result<std::fs::Metadata> {
        self.job(std::fs::File::metadata)
    }

    /// Reads at `offset` without moving the file position (`pread`).
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::fs::FileExt::read_at`].
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_impl(buf, Some(check_offset(offset)?))
    }

    /// Writes at `offset` without moving the file position (`pwrite`).
    ///
    /// # Errors
    ///
    /// As [`std::os::unix::fs::FileExt::write_at`].
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.write_impl(buf, Some(check_offset(offset)?))
    }

    fn read_impl(&self, buf: &mut [u8], offset: Option<u64>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let _turn = offset.is_none().then(|| self.position.lock());
        if let Some(r) = self.ev.completion(OpKind::Read, |p, fd| {
            if spindle_park::on_copying_stack() {
                let mut bounce = vec![0u8; buf.len().min(BOUNCE_MAX)];
                let n = p.submit(
                    Op::Read {
                        fd,
                        buf: &mut bounce,
                        offset,
                    },
                    None,
                )?;
                let n = n.min(bounce.len());
                buf[..n].copy_from_slice(&bounce[..n]);
                Ok(n)
            } else {
                p.submit(Op::Read { fd, buf, offset }, None)
            }
        }) {
            return r;
        }
        let read = move |file: &std::fs::File, buf: &mut [u8]| match offset {
            None => (&*file).read(buf),
            Some(at) => file.read_at(buf, at),
        };
        if spindle_park::on_copying_stack() {
            // The pool thread must not write into a stack whose bytes move meanwhile.
            let mut bounce = vec![0u8; buf.len().min(BOUNCE_MAX)];
            let (n, bounce) = self.job(move |file| Ok((read(file, &mut bounce), bounce)))?;
            let n = n?.min(buf.len());
            buf[..n].copy_from_slice(&bounce[..n]);
            Ok(n)
        } else {
            self.job(|file| read(file, buf))
        }
    }

    fn write_impl(&self, buf: &[u8], offset: Option<u64>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let _turn = offset.is_none().then(|| self.position.lock());
        if let Some(r) = self.ev.completion(OpKind::Write, |p, fd| {
            if spindle_park::on_copying_stack() {
                let bounce = buf[..buf.len().min(BOUNCE_MAX)].to_vec();
                p.submit(
                    Op::Write {
                        fd,
                        buf: &bounce,
                        offset,
                    },
                    None,
                )
            } else {
                p.submit(Op::Write { fd, buf, offset }, None)
            }
        }) {
            return r;
        }
        let write = move |file: &std::fs::File, buf: &[u8]| match offset {
            None => (&*file).write(buf),
            Some(at) => file.write_at(buf, at),
        };
        if spindle_park::on_copying_stack() {
            let bounce = buf[..buf.len().min(BOUNCE_MAX)].to_vec();
            self.job(move |file| write(file, &bounce))
        } else {
            self.job(|file| write(file, buf))
        }
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf, None)
    }
}

impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_impl(buf, None)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf, None)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_impl(buf, None)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        // lseek(2) never blocks. (`&mut self`: no other operation of this `File` is in flight.)
        self.inner.seek(pos)
    }
}

impl Seek for &File {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        // In turn with the reads and writes at the position: an io_uring read in flight would
        // otherwise store its end position over the seek's.
        let _turn = self.position.lock();
        (&self.inner).seek(pos)
    }
}

/// Makes a `File`'s operations at the file position take turns (see [`File`]): a lock whose
/// waiters park (only the task waits, inside a runtime) and are woken first come first served.
/// Uncontended, taking and releasing it is one atomic read-modify-write each.
struct PositionLock {
    /// [`HELD`], plus [`WAITER`] for each task in `queue` or just taken out of it and not yet
    /// back from its park.
    state: AtomicUsize,
    queue: Mutex<Waiters>,
}

/// The tasks waiting for a [`PositionLock`], in order; each knows its entry by its id.
struct Waiters {
    tasks: VecDeque<(u64, Waker)>,
    next_id: u64,
}

const HELD: usize = 1;
const WAITER: usize = 2;

impl PositionLock {
    fn new() -> PositionLock {
        PositionLock {
            state: AtomicUsize::new(0),
            queue: Mutex::new(Waiters {
                tasks: VecDeque::new(),
                next_id: 0,
            }),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Waiters> {
        // Nothing is left half-done under this lock by a panic (a push, a pop, a removal).
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the lock, parking the current task while another operation holds it.
    fn lock(&self) -> PositionGuard<'_> {
        let mut turn = None;
        while !self.try_take() {
            let mut waiting = self.enqueue(turn);
            // Announced (and queued) before the lock is tried again: a release either comes
            // after this try and sees the count, or before it and the try succeeds.
            if !self.try_take() {
                spindle_park::park();
            }
            waiting.leave();
            // Taken, or tried again; if another operation came first (or the wake-up was a
            // stale one), the task queues again under the same number, keeping its place.
            turn = Some(waiting.id);
        }
        PositionGuard { lock: self }
    }

    fn try_take(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & HELD == 0 {
            match self.state.compare_exchange_weak(
                state,
                state | HELD,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => state = actual,
            }
        }
        false
    }

    /// Queues the current task, in the order of the numbers the tasks drew (`turn`: the one
    /// it drew before; `None`: draw one), and counts it in `state`.
    fn enqueue(&self, turn: Option<u64>) -> Waiting<'_> {
        let id = {
            let mut queue = self.queue();
            let id = turn.unwrap_or_else(|| {
                let id = queue.next_id;
                queue.next_id += 1; // 2^64 waits: never wraps
                id
            });
            let at = queue.tasks.partition_point(|(queued, _)| *queued < id);
            queue.tasks.insert(at, (id, spindle_park::waker()));
            id
        };
        // AcqRel, as the release's `fetch_sub`: whichever comes second in the state's order
        // sees what the first did (the queued entry, or the lock released).
        self.state.fetch_add(WAITER, Ordering::AcqRel);
        Waiting {
            lock: self,
            id,
            left: false,
        }
    }

    /// Wakes the task at the head of the queue (it takes the lock itself, or waits again).
    fn wake_next(&self) {
        let next = self.queue().tasks.pop_front();
        if let Some((_, waker)) = next {
            waker.wake();
        }
    }
}

/// A task's place in a [`PositionLock`]'s queue, from its `enqueue` to its `leave`.
struct Waiting<'a> {
    lock: &'a PositionLock,
    id: u64,
    left: bool,
}

impl Waiting<'_> {
    /// Takes the task out of the queue and the count; true if a release had already taken it
    /// out (and so meant its wake-up for this task).
    fn leave(&mut self) -> bool {
        self.left = true;
        let popped = {
            let mut queue = self.lock.queue();
            match queue.tasks.iter().position(|(id, _)| *id == self.id) {
                Some(at) => {
                    queue.tasks.remove(at);
                    false
                }
                None => true,
            }
        };
        self.lock.state.fetch_sub(WAITER, Ordering::AcqRel);
        popped
    }
}

impl Drop for Waiting<'_> {
    /// Only when the park unwound (the task was cancelled): a wake-up a release meant for this
    /// task goes to the next one, if the lock is still free.
    fn drop(&mut self) {
        if !self.left && self.leave() && self.lock.state.load(Ordering::Acquire) & HELD == 0 {
            self.lock.wake_next();
        }
    }
}

/// A turn at a [`PositionLock`]: released when dropped (also when the operation unwinds).
struct PositionGuard<'a> {
    lock: &'a PositionLock,
}

impl Drop for PositionGuard<'_> {
    fn drop(&mut self) {
        // `HELD` is set (this guard holds it): subtracting it clears it and reports the count.
        if self.lock.state.fetch_sub(HELD, Ordering::AcqRel) >= WAITER {
            self.lock.wake_next();
        }
    }
}

impl AsFd for File {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.as_raw_fd()
    }
}

impl From<std::fs::File> for File {
    fn from(file: std::fs::File) -> File {
        File::from_std(file)
    }
}

impl From<File> for std::fs::File {
    fn from(file: File) -> std::fs::File {
        file.into_std()
    }
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File")
            .field("fd", &self.inner.as_raw_fd())
            .finish()
    }
}

/// Reads a whole file (on the blocking pool in a runtime).
///
/// # Errors
///
/// As [`std::fs::read`].
pub fn read<P: AsRef<Path>>(path: P) -> io::Result<Vec<u8>> {
    let path = path.as_ref().to_path_buf();
    crate::offload(move || std::fs::read(path))?
}

/// Reads a whole file as UTF-8.
///
/// # Errors
///
/// As [`std::fs::read_to_string`].
pub fn read_to_string<P: AsRef<Path>>(path: P) -> io::Result<String> {
    let path = path.as_ref().to_path_buf();
    crate::offload(move || std::fs::read_to_string(path))?
}

/// Writes a whole file (created or truncated).
///
/// # Errors
///
/// As [`std::fs::write`].
pub fn write<P: AsRef<Path>, C: AsRef<[u8]>>(path: P, contents: C) -> io::Result<()> {
    let path = path.as_ref().to_path_buf();
    let contents = contents.as_ref();
    let contents: Cow<'_, [u8]> = if spindle_park::on_copying_stack() {
        Cow::Owned(contents.to_vec())
    } else {
        Cow::Borrowed(contents)
    };
    crate::offload(move || std::fs::write(path, contents))?
}

/// Removes a file.
///
/// # Errors
///
/// As [`std::fs::remove_file`].
pub fn remove_file<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref().to_path_buf();
    crate::offload(move || std::fs::remove_file(path))?
}

/// Creates a directory and its missing parents.
///
/// # Errors
///
/// As [`std::fs::create_dir_all`].
pub fn create_dir_all<P: AsRef<Path>>(path: P) -> io::Result<()> {
    let path = path.as_ref().to_path_buf();
    crate::offload(move || std::fs::create_dir_all(path))?
}

/// A path's metadata (following symlinks).
///
/// # Errors
///
/// As [`std::fs::metadata`].
pub fn metadata<P: AsRef<Path>>(path: P) -> io::Result<std::fs::Metadata> {
    let path = path.as_ref().to_path_buf();
    crate::offload(move || std::fs::metadata(path))?
}

/// `offset` if a positioned read or write may use it: the kernel's offsets are signed, and
/// `pread`/`pwrite` refuse one beyond `i64::MAX` (`EINVAL`). Checked here for every path, as
/// io_uring reads `u64::MAX` (`-1`) as "the current position" instead: a read there returned
/// data from wherever the file position stood.
fn check_offset(offset: u64) -> io::Result<u64> {
    if offset > i64::MAX as u64 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("file offset {offset} is beyond the largest the kernel takes (i64::MAX)"),
        ));
    }
    Ok(offset)
}
