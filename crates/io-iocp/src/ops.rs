//! Issuing each kind of [`Op`] with a record's `OVERLAPPED`, and reading its result.

use std::cell::Cell;
use std::ffi::c_void;
use std::io;
use std::mem;
use std::ptr;
use std::sync::Arc;

use spindle_io::Op;
use windows_sys::Win32::Foundation::FALSE;
use windows_sys::Win32::Networking::WinSock::{
    LPFN_ACCEPTEX, LPFN_CONNECTEX, SIO_GET_EXTENSION_FUNCTION_POINTER, SO_UPDATE_ACCEPT_CONTEXT,
    SO_UPDATE_CONNECT_CONTEXT, SOCKADDR, SOCKADDR_STORAGE, SOCKET, SOCKET_ERROR, SOL_SOCKET,
    WSA_IO_PENDING, WSAEMSGSIZE, WSAGetLastError, WSAGetOverlappedResult, WSAID_ACCEPTEX,
    WSAID_CONNECTEX, WSAIoctl, WSARecv, WSARecvFrom, WSASend, WSASendTo, setsockopt,
};
use windows_sys::core::GUID;

use crate::record::{ACCEPT_ADDRESS_LEN, ACCEPT_ADDRESSES_LEN, Record};

/// The most a bounced operation moves at once (a short read or write; UDP payloads fit).
pub(crate) const BOUNCE_MAX: usize = 64 << 10;

/// The data buffer's length, if `op` has one.
pub(crate) fn data_len(op: &Op<'_>) -> usize {
    match op {
        Op::Recv { buf, .. } | Op::RecvFrom { buf, .. } => buf.len(),
        Op::Send { buf, .. } | Op::SendTo { buf, .. } => buf.len(),
        _ => 0,
    }
}

/// The buffer the kernel reads from: `buf`, or the record's bounce buffer holding a copy of
/// its start.
fn outgoing(record: &Record, buf: &[u8]) -> (*mut u8, u32) {
    // SAFETY: the bounce buffer is ours until the operation starts.
    let bounce = unsafe { &mut *record.bounce.get() };
    if bounce.is_empty() {
        return (buf.as_ptr().cast_mut(), wsa_len(buf.len()));
    }
    let n = bounce.len().min(buf.len());
    bounce[..n].copy_from_slice(&buf[..n]);
    (bounce.as_mut_ptr(), wsa_len(n))
}

/// The buffer the kernel writes into: `buf`, or the record's bounce buffer (copied out by
/// `finish`).
fn incoming(record: &Record, buf: &mut [u8]) -> (*mut u8, u32) {
    // SAFETY: the bounce buffer is ours until the operation starts.
    let bounce = unsafe { &mut *record.bounce.get() };
    if bounce.is_empty() {
        return (buf.as_mut_ptr(), wsa_len(buf.len()));
    }
    (bounce.as_mut_ptr(), wsa_len(bounce.len().min(buf.len())))
}

/// How a call went.
pub(crate) enum Started {
    /// It completed at once with this many bytes (a packet is queued all the same).
    Immediate(u32),
    /// It is in flight: wait for its packet.
    Pending,
}

/// The socket an operation runs on.
pub(crate) fn socket_of(op: &Op<'_>) -> SOCKET {
    let raw = match op {
        Op::Recv { socket, .. }
        | Op::Send { socket, .. }
        | Op::Accept { socket, .. }
        | Op::Connect { socket, .. }
        | Op::RecvFrom { socket, .. }
        | Op::SendTo { socket, .. } => *socket,
        // `Op` is non-exhaustive; a kind this driver does not know never reaches the kernel
        // (see `start`), and no socket 0 is used for it.
        _ => 0,
    };
    raw as SOCKET
}

/// `AcceptEx` and `ConnectEx`, which Winsock hands out per provider through `WSAIoctl`. Loaded
/// on first use (from the first socket that needs them) and kept for the driver's life.
#[derive(Default)]
pub(crate) struct Extensions {
    accept_ex: Cell<LPFN_ACCEPTEX>,
    connect_ex: Cell<LPFN_CONNECTEX>,
}

impl Extensions {
    fn accept_ex(&self, socket: SOCKET) -> io::Result<LPFN_ACCEPTEX> {
        if self.accept_ex.get().is_none() {
            let f: LPFN_ACCEPTEX = load(socket, &WSAID_ACCEPTEX, "AcceptEx")?;
            self.accept_ex.set(f);
        }
        Ok(self.accept_ex.get())
    }

    fn connect_ex(&self, socket: SOCKET) -> io::Result<LPFN_CONNECTEX> {
        if self.connect_ex.get().is_none() {
            let f: LPFN_CONNECTEX = load(socket, &WSAID_CONNECTEX, "ConnectEx")?;
            self.connect_ex.set(f);
        }
        Ok(self.connect_ex.get())
    }
}

/// Loads an extension function (`F` is its `Option<fn>` pointer type).
fn load<F: Copy>(socket: SOCKET, guid: &GUID, name: &str) -> io::Result<Option<F>> {
    let mut f: Option<F> = None;
    let mut returned = 0u32;
    // SAFETY: in: a GUID of the right size; out: room for one function pointer (`Option<fn>`
    // has a pointer's size and a null niche: Winsock writes the pointer or leaves it null).
    // Synchronous: no OVERLAPPED.
    let r = unsafe {
        WSAIoctl(
            socket,
            SIO_GET_EXTENSION_FUNCTION_POINTER,
            ptr::from_ref(guid).cast::<c_void>(),
            mem::size_of::<GUID>() as u32,
            ptr::from_mut(&mut f).cast::<c_void>(),
            mem::size_of::<Option<F>>() as u32,
            &mut returned,
            ptr::null_mut(),
            None,
        )
    };
    if r == SOCKET_ERROR {
        return Err(context(
            last_wsa_error(),
            &format!("WSAIoctl(SIO_GET_EXTENSION_FUNCTION_POINTER) for {name}"),
        ));
    }
    if f.is_none() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the socket's Winsock provider has no {name}"),
        ));
    }
    Ok(f)
}

fn last_wsa_error() -> io::Error {
    // SAFETY: reads the calling thread's last Winsock error.
    io::Error::from_raw_os_error(unsafe { WSAGetLastError() })
}

pub(crate) fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A buffer length as Winsock takes it: longer buffers are used up to `u32::MAX` bytes (a
/// short read or write, as the byte count says).
fn wsa_len(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Copies a caller's address into the record.
fn put_addr(record: &Record, addr: &[u8]) -> io::Result<i32> {
    if addr.len() > mem::size_of::<SOCKADDR_STORAGE>() || addr.len() < 2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a socket address must be 2 to 128 bytes (a SOCKADDR_STORAGE's bytes)",
        ));
    }
    // SAFETY: the record's address area is ours until the operation starts; `addr` fits in it
    // (checked above); the two do not overlap (one is on the heap in the record).
    unsafe {
        ptr::copy_nonoverlapping(addr.as_ptr(), record.addr.get().cast::<u8>(), addr.len());
        *record.addr_len.get() = addr.len() as i32;
    }
    Ok(addr.len() as i32)
}

/// What a Winsock call returned, for an operation with `overlapped` lent to it.
///
/// # Safety
///
/// `overlapped` was lent (`Record::lend`) to the call whose failure this reads, right before.
unsafe fn outcome(
    succeeded: bool,
    bytes: u32,
    overlapped: *mut windows_sys::Win32::System::IO::OVERLAPPED,
) -> io::Result<Started> {
    if succeeded {
        return Ok(Started::Immediate(bytes));
    }
    // SAFETY: reads the calling thread's last Winsock error, set by the call just made.
    let code = unsafe { WSAGetLastError() };
    if code == WSA_IO_PENDING {
        return Ok(Started::Pending);
    }
    // SAFETY: the call failed at once with another error: no packet will be queued.
    unsafe { Record::reclaim(overlapped) };
    Err(io::Error::from_raw_os_error(code))
}

/// Issues `op` with `record`'s OVERLAPPED.
///
/// # Safety
///
/// The buffers `op` borrows must stay valid, and not be used otherwise, until the operation's
/// completion was dispatched ([`Record::is_done`]) or the kernel finished it
/// ([`Record::kernel_done`]) — unless this returns `Immediate` or an error. The socket must be
/// associated with a completion port that some live driver dequeues.
pub(crate) unsafe fn start(
    op: &mut Op<'_>,
    record: &Arc<Record>,
    ext: &Extensions,
) -> io::Result<Started> {
    let mut bytes = 0u32;
    match op {
        Op::Recv { socket, buf, flags } => {
            let (data, len) = incoming(record, buf);
            // SAFETY: the record's scratch is ours until the operation starts.
            unsafe {
                let wsabuf = &mut *record.wsabuf.get();
                wsabuf.len = len;
                wsabuf.buf = data;
                *record.flags.get() = *flags;
            }
            let overlapped = record.lend();
            // SAFETY: the WSABUF, the flags and the OVERLAPPED live in the record, which the
            // packet keeps alive; the data buffer stays valid per this function's contract.
            let r = unsafe {
                WSARecv(
                    *socket as SOCKET,
                    record.wsabuf.get(),
                    1,
                    &mut bytes,
                    record.flags.get(),
                    overlapped,
                    None,
                )
            };
            // SAFETY: `overlapped` was lent to this call.
            unsafe { outcome(r == 0, bytes, overlapped) }
        }
        Op::Send { socket, buf } => {
            let (data, len) = outgoing(record, buf);
            // SAFETY: as for Recv; WSASend only reads the buffer.
            unsafe {
                let wsabuf = &mut *record.wsabuf.get();
                wsabuf.len = len;
                wsabuf.buf = data;
            }
            let overlapped = record.lend();
            // SAFETY: as for Recv.
            let r = unsafe {
                WSASend(
                    *socket as SOCKET,
                    record.wsabuf.get(),
                    1,
                    &mut bytes,
                    0,
                    overlapped,
                    None,
                )
            };
            // SAFETY: `overlapped` was lent to this call.
            unsafe { outcome(r == 0, bytes, overlapped) }
        }
        Op::RecvFrom {
            socket,
            buf,
            addr,
            flags,
            ..
        } => {
            let room = addr.len().min(mem::size_of::<SOCKADDR_STORAGE>());
            let (data, len) = incoming(record, buf);
            // SAFETY: as for Recv.
            unsafe {
                let wsabuf = &mut *record.wsabuf.get();
                wsabuf.len = len;
                wsabuf.buf = data;
                *record.flags.get() = *flags;
                *record.addr_len.get() = room as i32;
            }
            let overlapped = record.lend();
            // SAFETY: as for Recv; the address and its length are in the record too.
            let r = unsafe {
                WSARecvFrom(
                    *socket as SOCKET,
                    record.wsabuf.get(),
                    1,
                    &mut bytes,
                    record.flags.get(),
                    record.addr.get().cast::<SOCKADDR>(),
                    record.addr_len.get(),
                    overlapped,
                    None,
                )
            };
            // SAFETY: `overlapped` was lent to this call.
            unsafe { outcome(r == 0, bytes, overlapped) }
        }
        Op::SendTo { socket, buf, addr } => {
            let len = put_addr(record, addr)?;
            let (data, data_len) = outgoing(record, buf);
            // SAFETY: as for Send.
            unsafe {
                let wsabuf = &mut *record.wsabuf.get();
                wsabuf.len = data_len;
                wsabuf.buf = data;
            }
            let overlapped = record.lend();
            // SAFETY: as for Send; the destination is in the record.
            let r = unsafe {
                WSASendTo(
                    *socket as SOCKET,
                    record.wsabuf.get(),
                    1,
                    &mut bytes,
                    0,
                    record.addr.get().cast::<SOCKADDR>(),
                    len,
                    overlapped,
                    None,
                )
            };
            // SAFETY: `overlapped` was lent to this call.
            unsafe { outcome(r == 0, bytes, overlapped) }
        }
        Op::Accept {
            socket,
            accepted,
            addresses,
        } => {
            if addresses.len() < ACCEPT_ADDRESSES_LEN {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "Op::Accept needs an addresses buffer of at least {ACCEPT_ADDRESSES_LEN} \
                         bytes (spindle_io_iocp::ACCEPT_ADDRESSES_LEN)"
                    ),
                ));
            }
            let Some(accept_ex) = ext.accept_ex(*socket as SOCKET)? else {
                return Err(io::Error::from(io::ErrorKind::Unsupported));
            };
            let overlapped = record.lend();
            // SAFETY: the output areas are the record's (no data is received with the
            // connection: length 0), kept alive by the packet; both sockets are the caller's.
            let r = unsafe {
                accept_ex(
                    *socket as SOCKET,
                    *accepted as SOCKET,
                    record.accept.get().cast::<c_void>(),
                    0,
                    ACCEPT_ADDRESS_LEN as u32,
                    ACCEPT_ADDRESS_LEN as u32,
                    &mut bytes,
                    overlapped,
                )
            };
            // SAFETY: `overlapped` was lent to this call.
            unsafe { outcome(r != FALSE, bytes, overlapped) }
        }
        Op::Connect { socket, addr } => {
            let len = put_addr(record, addr)?;
            let Some(connect_ex) = ext.connect_ex(*socket as SOCKET)? else {
                return Err(io::Error::from(io::ErrorKind::Unsupported));
            };
            let overlapped = record.lend();
            // SAFETY: the address is in the record; no data is sent with the connection.
            let r = unsafe {
                connect_ex(
                    *socket as SOCKET,
                    record.addr.get().cast::<SOCKADDR>(),
                    len,
                    ptr::null(),
                    0,
                    &mut bytes,
                    overlapped,
                )
            };
            // SAFETY: `overlapped` was lent to this call.
            unsafe { outcome(r != FALSE, bytes, overlapped) }
        }
        _ => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the IOCP driver does not know this kind of operation",
        )),
    }
}

/// The result of an operation whose packet was dispatched (or which the kernel finished).
pub(crate) fn overlapped_result(record: &Record) -> io::Result<u32> {
    let mut bytes = 0u32;
    let mut flags = 0u32;
    // SAFETY: the operation is over (the caller checked), so this does not wait and the
    // OVERLAPPED, a field of the live record, is only read.
    let ok = unsafe {
        WSAGetOverlappedResult(
            record.socket,
            record.overlapped(),
            &mut bytes,
            FALSE,
            &mut flags,
        )
    };
    if ok == FALSE {
        Err(last_wsa_error())
    } else {
        Ok(bytes)
    }
}

/// The operation is over with `result`: copies out what the record received for the caller
/// and completes `AcceptEx`/`ConnectEx` (`SO_UPDATE_*_CONTEXT`, so that the socket works with
/// `getpeername`, `shutdown`...). Returns the operation's result.
pub(crate) fn finish(
    op: &mut Op<'_>,
    record: &Record,
    result: io::Result<u32>,
) -> io::Result<usize> {
    // SAFETY: the operation is over: the kernel no longer uses the record.
    let bounce = unsafe { &*record.bounce.get() };
    if !bounce.is_empty()
        && let (Op::Recv { buf, .. } | Op::RecvFrom { buf, .. }, Ok(n)) = (&mut *op, &result)
    {
        let n = (*n as usize).min(bounce.len()).min(buf.len());
        buf[..n].copy_from_slice(&bounce[..n]);
    }
    match op {
        Op::RecvFrom { addr, len, .. } => {
            let truncated = matches!(&result, Err(e) if e.raw_os_error() == Some(WSAEMSGSIZE));
            if result.is_ok() || truncated {
                // SAFETY: the operation is over: the kernel no longer writes the record.
                let (stored, got) = unsafe { (&*record.addr.get(), *record.addr_len.get()) };
                let got = usize::try_from(got).unwrap_or(0);
                let n = got.min(addr.len()).min(mem::size_of::<SOCKADDR_STORAGE>());
                // SAFETY: `stored` is a SOCKADDR_STORAGE; `n` is within both it and `addr`.
                let bytes =
                    unsafe { std::slice::from_raw_parts(ptr::from_ref(stored).cast::<u8>(), n) };
                addr[..n].copy_from_slice(bytes);
                **len = got as i32;
            }
        }
        Op::Accept {
            socket,
            accepted,
            addresses,
        } if result.is_ok() => {
            // SAFETY: the operation is over: the kernel no longer writes the record.
            let areas = unsafe { &*record.accept.get() };
            addresses[..ACCEPT_ADDRESSES_LEN].copy_from_slice(areas);
            let listener: SOCKET = *socket as SOCKET;
            // SAFETY: the option value is the listening socket, of the size given.
            let r = unsafe {
                setsockopt(
                    *accepted as SOCKET,
                    SOL_SOCKET,
                    SO_UPDATE_ACCEPT_CONTEXT,
                    ptr::from_ref(&listener).cast::<u8>(),
                    mem::size_of::<SOCKET>() as i32,
                )
            };
            if r == SOCKET_ERROR {
                return Err(context(
                    last_wsa_error(),
                    "setsockopt(SO_UPDATE_ACCEPT_CONTEXT) on the accepted socket",
                ));
            }
        }
        Op::Connect { socket, .. } if result.is_ok() => {
            // SAFETY: this option takes no value.
            let r = unsafe {
                setsockopt(
                    *socket as SOCKET,
                    SOL_SOCKET,
                    SO_UPDATE_CONNECT_CONTEXT,
                    ptr::null(),
                    0,
                )
            };
            if r == SOCKET_ERROR {
                return Err(context(
                    last_wsa_error(),
                    "setsockopt(SO_UPDATE_CONNECT_CONTEXT) on the connected socket",
                ));
            }
        }
        _ => {}
    }
    result.map(|n| n as usize)
}
