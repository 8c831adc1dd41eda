//! The one-line overflow message, composed without allocation so that a signal handler can
//! build it.

use std::fmt;

use crate::owner::OwnerRecord;
use crate::registry::StackKind;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// A byte count printed the way people write stack sizes: `256 KiB`, `8 MiB`, `1000 bytes`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ByteSize(pub(crate) usize);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = LineBuf::new();
        line.push_size(self.0);
        // The buffer only ever holds ASCII digits and unit names.
        f.write_str(std::str::from_utf8(line.as_bytes()).unwrap_or("?"))
    }
}

/// A fixed-capacity line buffer. Pushing past the end drops the excess (the line still ends
/// in a newline); nothing here allocates, locks or panics, so a signal handler may use it.
pub(crate) struct LineBuf {
    bytes: [u8; 256],
    len: usize,
}

impl LineBuf {
    pub(crate) const fn new() -> Self {
        LineBuf {
            bytes: [0; 256],
            len: 0,
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub(crate) fn push_bytes(&mut self, text: &[u8]) {
        for &byte in text {
            // Keep the reserved last byte for the newline that `finish_line` adds.
            if self.len + 1 >= self.bytes.len() {
                return;
            }
            self.bytes[self.len] = byte;
            self.len += 1;
        }
    }

    /// Pushes text that came from a user (a coroutine name), replacing control characters so
    /// that the message stays one line.
    pub(crate) fn push_untrusted(&mut self, text: &[u8]) {
        for &byte in text {
            let shown = if byte.is_ascii_control() { b'?' } else { byte };
            self.push_bytes(&[shown]);
        }
    }

    pub(crate) fn push_u64(&mut self, mut value: u64) {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            digits[start] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.push_bytes(&digits[start..]);
    }

    pub(crate) fn push_usize(&mut self, value: usize) {
        self.push_u64(value as u64);
    }

    /// `8 MiB`, `256 KiB` or `1000 bytes`: the largest unit that divides the size exactly.
    pub(crate) fn push_size(&mut self, bytes: usize) {
        if bytes >= MIB && bytes.is_multiple_of(MIB) {
            self.push_usize(bytes / MIB);
            self.push_bytes(b" MiB");
        } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
            self.push_usize(bytes / KIB);
            self.push_bytes(b" KiB");
        } else {
            self.push_usize(bytes);
            self.push_bytes(b" bytes");
        }
    }

    /// Names who ran on the stack: `coroutine 'name' (#id)`, `coroutine #id`, or
    /// `an unowned stack`.
    pub(crate) fn push_owner(&mut self, owner: Option<&OwnerRecord>) {
        match owner {
            Some(owner) => {
                self.push_bytes(b"coroutine ");
                if let Some(name) = owner.name_bytes() {
                    self.push_bytes(b"'");
                    self.push_untrusted(name);
                    self.push_bytes(b"' (#");
                    self.push_u64(owner.id);
                    self.push_bytes(b")");
                } else {
                    self.push_bytes(b"#");
                    self.push_u64(owner.id);
                }
            }
            None => self.push_bytes(b"an unowned stack"),
        }
    }

    pub(crate) fn finish_line(&mut self) {
        self.bytes[self.len] = b'\n';
        self.len += 1;
    }
}

/// `spindle: coroutine 'worker-3' (#42) overflowed its 256 KiB fixed stack (guard 4 KiB); aborting`
pub(crate) fn overflow_line(
    owner: Option<&OwnerRecord>,
    kind: StackKind,
    usable: usize,
    guard: usize,
) -> LineBuf {
    let mut line = LineBuf::new();
    line.push_bytes(b"spindle: ");
    line.push_owner(owner);
    line.push_bytes(b" overflowed its ");
    line.push_size(usable);
    line.push_bytes(b" ");
    line.push_bytes(kind.describe().as_bytes());
    line.push_bytes(b" stack (guard ");
    line.push_size(guard);
    line.push_bytes(b"); aborting");
    line.finish_line();
    line
}

/// The growable stack's reservation had room, but the OS refused to commit more of it.
#[cfg_attr(not(unix), allow(dead_code))] // growable stacks are Unix-only
pub(crate) fn growth_failure_line(
    owner: Option<&OwnerRecord>,
    committed: usize,
    wanted: usize,
    max: usize,
    errno: i32,
) -> LineBuf {
    let mut line = LineBuf::new();
    line.push_bytes(b"spindle: ");
    line.push_owner(owner);
    line.push_bytes(b" could not grow its growable stack from ");
    line.push_size(committed);
    line.push_bytes(b" to ");
    line.push_size(wanted);
    line.push_bytes(b" (of ");
    line.push_size(max);
    line.push_bytes(b" reserved): mprotect failed with errno ");
    line.push_u64(u64::from(errno.unsigned_abs()));
    line.push_bytes(b" (out of memory?); aborting");
    line.finish_line();
    line
}

/// Names the coroutine that runs on the registered stack containing `addr`, as an overflow
/// message does — `coroutine 'name' (#id)` or `coroutine #id` — or `None` if no stack of this
/// crate contains `addr` or its owner was never set ([`Stack::set_owner`](crate::Stack::set_owner)).
///
/// For messages about a coroutine made by code that knows only its stack (an abort in the
/// coroutine crate, say), so that they name it as the overflow message would.
///
/// ```
/// use std::ptr::NonNull;
/// use spindle_stack::{FixedStack, Owner, Stack};
///
/// let stack = FixedStack::new(16 * 1024)?;
/// stack.set_owner(Owner::named(42, "parser"));
/// let inside = NonNull::new(stack.top().as_ptr().wrapping_sub(64)).unwrap();
/// assert_eq!(spindle_stack::describe_owner(inside).as_deref(), Some("coroutine 'parser' (#42)"));
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
pub fn describe_owner(addr: std::ptr::NonNull<u8>) -> Option<String> {
    let (slot, _) = crate::registry::find(addr.as_ptr().addr())?;
    let owner = slot.load_owner()?;
    let mut line = LineBuf::new();
    line.push_owner(Some(&owner));
    Some(String::from_utf8_lossy(line.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Owner;

    fn text(line: &LineBuf) -> &str {
        std::str::from_utf8(line.as_bytes()).unwrap()
    }

    #[test]
    fn overflow_line_names_a_named_owner() {
        let owner = OwnerRecord::new(Owner::named(42, "worker-3"));
        let line = overflow_line(Some(&owner), StackKind::Fixed, 256 * 1024, 4096);
        assert_eq!(
            text(&line),
            "spindle: coroutine 'worker-3' (#42) overflowed its 256 KiB fixed stack (guard 4 KiB); aborting\n"
        );
    }

    #[test]
    fn overflow_line_for_unnamed_and_unowned_stacks() {
        let owner = OwnerRecord::new(Owner::new(7));
        let line = overflow_line(Some(&owner), StackKind::Growable, 8 * MIB, 4096);
        assert_eq!(
            text(&line),
            "spindle: coroutine #7 overflowed its 8 MiB growable stack (guard 4 KiB); aborting\n"
        );
        let line = overflow_line(None, StackKind::Shared, 1000, 0);
        assert_eq!(
            text(&line),
            "spindle: an unowned stack overflowed its 1000 bytes shared stack (guard 0 bytes); aborting\n"
        );
    }

    #[test]
    fn control_characters_in_names_cannot_break_the_line() {
        let owner = OwnerRecord::new(Owner::named(1, "evil\nname"));
        let line = overflow_line(Some(&owner), StackKind::PooledFixed, 4096, 4096);
        assert!(text(&line).contains("'evil?name'"));
        assert_eq!(text(&line).matches('\n').count(), 1);
    }

    #[test]
    fn numbers_are_formatted_by_hand() {
        let mut line = LineBuf::new();
        line.push_u64(0);
        line.push_bytes(b" ");
        line.push_u64(u64::MAX);
        assert_eq!(text(&line), "0 18446744073709551615");
        assert_eq!(ByteSize(3 * MIB).to_string(), "3 MiB");
        assert_eq!(ByteSize(MIB + KIB).to_string(), "1025 KiB");
        assert_eq!(ByteSize(5).to_string(), "5 bytes");
    }

    #[test]
    fn overlong_lines_are_cut_but_still_end_in_a_newline() {
        let mut line = LineBuf::new();
        line.push_bytes(&[b'x'; 1000]);
        line.finish_line();
        assert_eq!(line.as_bytes().len(), 256);
        assert_eq!(line.as_bytes().last(), Some(&b'\n'));
    }
}
