//! What can go wrong when making or switching stacks, and what to do about it.

use std::fmt;
use std::sync::Arc;

use crate::report::ByteSize;

/// Why a stack could not be created or used.
///
/// Every message says what happened and what to do about it. Convert to
/// [`std::io::Error`] with `?` or `.into()` where an IO error is expected.
///
/// ```
/// use spindle_stack::{FixedStack, StackError};
///
/// let err = FixedStack::new(0).unwrap_err();
/// assert!(matches!(err, StackError::InvalidSize { .. }));
/// assert!(err.to_string().contains("greater than zero"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StackError {
    /// A requested size is zero, too large, or inconsistent with another size.
    InvalidSize {
        /// Which size was wrong ("stack size", "guard size", "initial size", ...).
        what: &'static str,
        /// The size that was asked for, in bytes.
        requested: usize,
        /// Why it was refused.
        reason: &'static str,
    },
    /// A [`PoolConfig`](crate::PoolConfig) field is out of range.
    InvalidConfig {
        /// The field's name.
        field: &'static str,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The OS has no memory for the stack (or for its bookkeeping).
    OutOfMemory {
        /// The size of the stack that was being created or grown, in bytes.
        requested: usize,
    },
    /// The process has as many memory mappings as `vm.max_map_count` allows.
    ///
    /// Each guarded stack needs 2 mappings (the stack and its guard), so a default Linux
    /// (`vm.max_map_count` = 65530) runs out at about 32,750 guarded stacks.
    MapCountLimit {
        /// The process's mappings when the error was detected (lines of `/proc/self/maps`).
        mappings: usize,
        /// The limit (`/proc/sys/vm/max_map_count`).
        max: usize,
    },
    /// The process's address space limit (`RLIMIT_AS`, `ulimit -v`) has no room for the stack.
    AddressSpaceLimit {
        /// The limit, in bytes.
        limit: u64,
        /// Address space the process already used, in bytes (0 if unknown).
        in_use: usize,
        /// The size of the mapping that did not fit, in bytes.
        requested: usize,
    },
    /// A coroutine running on a shared stack region tried to resume another coroutine on
    /// the same region.
    SharedStackBusy,
    /// This kind of stack does not exist on this platform.
    Unsupported {
        /// What was asked for.
        what: &'static str,
    },
    /// The kind of stack asked for is left out of this build: the cargo feature that adds it
    /// is off.
    Disabled {
        /// What was asked for.
        what: &'static str,
        /// The feature of `spindle-stack` that adds it (`growable`; in the `spindles` facade,
        /// `stack-growable`).
        feature: &'static str,
    },
    /// Another OS call failed. The OS's own error is the [`source`](std::error::Error::source).
    Os {
        /// The call that failed (`mmap`, `mprotect`, `sigaction`, ...).
        operation: &'static str,
        /// The OS error code (`errno` on Unix, `GetLastError` on Windows; 0 if the OS gave
        /// none).
        code: i32,
        /// The size of the stack being worked on, in bytes (0 if not about one stack).
        requested: usize,
        /// The OS error of `code`, as a [`std::io::Error`].
        error: OsError,
    },
}

/// The OS error inside [`StackError::Os`]: a shared [`std::io::Error`], so that the
/// `StackError` stays `Clone` and comparable (two are equal when their OS codes are).
#[derive(Clone)]
pub struct OsError(Arc<std::io::Error>);

impl OsError {
    /// The error of OS code `code` (`errno`, `GetLastError`); 0 means the OS gave none.
    pub fn from_code(code: i32) -> OsError {
        OsError(Arc::new(if code == 0 {
            std::io::Error::other("the OS gave no error code")
        } else {
            std::io::Error::from_raw_os_error(code)
        }))
    }

    /// The error as a [`std::io::Error`].
    pub fn io_error(&self) -> &std::io::Error {
        &self.0
    }
}

impl PartialEq for OsError {
    fn eq(&self, other: &OsError) -> bool {
        self.0.raw_os_error() == other.0.raw_os_error()
    }
}

impl Eq for OsError {}

impl fmt::Debug for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for OsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for OsError {}

impl StackError {
    /// [`StackError::Os`] for `operation` failing with OS code `code` (0: none given).
    pub(crate) fn os(operation: &'static str, code: i32, requested: usize) -> StackError {
        StackError::Os {
            operation,
            code,
            requested,
            error: OsError::from_code(code),
        }
    }
}

impl fmt::Display for StackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            StackError::InvalidSize {
                what,
                requested,
                reason,
            } => write!(
                f,
                "invalid {what} of {requested} bytes: {reason}; pass a size between one page \
                 ({}) and a few hundred MiB",
                ByteSize(crate::os::page_size()),
            ),
            StackError::InvalidConfig { field, reason } => {
                write!(f, "invalid PoolConfig::{field}: {reason}")
            }
            StackError::OutOfMemory { requested } => write!(
                f,
                "out of memory while mapping a {} stack ({requested} bytes); free memory, use \
                 smaller stacks, or use shared stacks (SharedStack)",
                ByteSize(requested),
            ),
            StackError::MapCountLimit { mappings, max } => write!(
                f,
                "the process has {mappings} memory mappings and the kernel allows \
                 vm.max_map_count = {max}; each guarded stack needs 2 mappings; raise it with \
                 `sysctl -w vm.max_map_count=262144` or use shared stacks (SharedStack)",
            ),
            StackError::AddressSpaceLimit {
                limit,
                in_use,
                requested,
            } => write!(
                f,
                "the address space limit RLIMIT_AS ({}) has no room for a {} stack ({requested} \
                 bytes; the process already uses {}); raise it with `ulimit -v` or setrlimit, \
                 or use smaller or shared stacks",
                ByteSize(usize::try_from(limit).unwrap_or(usize::MAX)),
                ByteSize(requested),
                ByteSize(in_use),
            ),
            StackError::SharedStackBusy => f.write_str(
                "the shared stack region is busy: a coroutine running on it tried to resume \
                 another coroutine on the same region; resume it from outside the region (for \
                 example from the scheduler), or give the two coroutines different SharedStacks",
            ),
            StackError::Unsupported { what } => write!(
                f,
                "{what} is not supported on this platform; use FixedStack or a StackPool with \
                 PoolKind::Fixed",
            ),
            StackError::Disabled { what, feature } => write!(
                f,
                "{what} is not compiled in: enable the `{feature}` feature of spindle-stack \
                 (`stack-{feature}` of spindles, spindle-coro or spindle-rt)",
            ),
            // The OS's message is the source's, not repeated here.
            StackError::Os {
                operation,
                requested,
                ..
            } => {
                write!(f, "{operation} failed")?;
                if requested > 0 {
                    write!(
                        f,
                        " for a {} stack ({requested} bytes)",
                        ByteSize(requested)
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for StackError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StackError::Os { error, .. } => Some(error.io_error()),
            _ => None,
        }
    }
}

impl From<StackError> for std::io::Error {
    fn from(err: StackError) -> Self {
        use std::io::ErrorKind;
        let kind = match err {
            StackError::InvalidSize { .. } | StackError::InvalidConfig { .. } => {
                ErrorKind::InvalidInput
            }
            StackError::OutOfMemory { .. }
            | StackError::MapCountLimit { .. }
            | StackError::AddressSpaceLimit { .. } => ErrorKind::OutOfMemory,
            StackError::SharedStackBusy => ErrorKind::ResourceBusy,
            StackError::Unsupported { .. } | StackError::Disabled { .. } => ErrorKind::Unsupported,
            StackError::Os { ref error, .. } => error.io_error().kind(),
        };
        std::io::Error::new(kind, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_count_message_says_what_to_do() {
        let msg = StackError::MapCountLimit {
            mappings: 65_530,
            max: 65_530,
        }
        .to_string();
        assert!(msg.contains("65530 memory mappings"), "{msg}");
        assert!(msg.contains("vm.max_map_count = 65530"), "{msg}");
        assert!(msg.contains("each guarded stack needs 2 mappings"), "{msg}");
        assert!(msg.contains("sysctl -w vm.max_map_count=262144"), "{msg}");
        assert!(msg.contains("SharedStack"), "{msg}");
    }

    #[test]
    fn out_of_memory_names_the_size() {
        let msg = StackError::OutOfMemory {
            requested: 256 * 1024,
        }
        .to_string();
        assert!(msg.contains("256 KiB stack (262144 bytes)"), "{msg}");
    }

    /// `Os` names the call in its message and gives the OS's error as its source, whose
    /// text the message does not repeat (a printer of the chain would show it twice).
    #[test]
    fn os_error_is_the_source_and_not_repeated_in_the_message() {
        use std::error::Error;
        let err = StackError::os("mprotect", 13, 8192);
        let source = err.source().expect("Os has a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.raw_os_error(), Some(13));
        let (msg, cause) = (err.to_string(), source.to_string());
        assert_eq!(msg, "mprotect failed for a 8 KiB stack (8192 bytes)");
        assert!(!msg.contains(&cause), "{msg:?} repeats {cause:?}");
        assert_eq!(err.clone(), err);
        assert_ne!(err, StackError::os("mprotect", 12, 8192));
        // No code from the OS: still a source saying so.
        let err = StackError::os("mmap", 0, 0);
        assert!(err.source().unwrap().to_string().contains("no error code"));
        // Other variants carry their whole story in the message.
        assert!(StackError::SharedStackBusy.source().is_none());
    }

    #[test]
    fn converts_to_io_error_with_kind_and_message() {
        let io: std::io::Error = StackError::SharedStackBusy.into();
        assert_eq!(io.kind(), std::io::ErrorKind::ResourceBusy);
        assert!(io.to_string().contains("shared stack region is busy"));
        let io: std::io::Error = StackError::OutOfMemory { requested: 4096 }.into();
        assert_eq!(io.kind(), std::io::ErrorKind::OutOfMemory);
        let io: std::io::Error = StackError::InvalidSize {
            what: "stack size",
            requested: 0,
            reason: "x",
        }
        .into();
        assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
    }
}
