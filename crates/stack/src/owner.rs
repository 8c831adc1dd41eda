//! Who runs on a stack: what an overflow message names.

/// Identifies the coroutine running on a stack, for overflow messages.
///
/// Passed to [`Stack::set_owner`](crate::Stack::set_owner), which copies it.
///
/// ```
/// use spindle_stack::{FixedStack, Owner, Stack};
///
/// let stack = FixedStack::new(16 * 1024)?;
/// stack.set_owner(Owner { id: 42, name: Some("worker-3") });
/// stack.set_owner(Owner::new(43)); // unnamed: the message says "coroutine #43"
/// # Ok::<(), spindle_stack::StackError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner<'a> {
    /// The coroutine's numeric id (printed as `#id`).
    pub id: u64,
    /// The coroutine's name, if it has one. Only the first 48 bytes are kept (cut on a
    /// character boundary).
    pub name: Option<&'a str>,
}

impl<'a> Owner<'a> {
    /// An unnamed owner.
    pub const fn new(id: u64) -> Self {
        Owner { id, name: None }
    }

    /// A named owner.
    pub const fn named(id: u64, name: &'a str) -> Self {
        Owner {
            id,
            name: Some(name),
        }
    }
}

/// How many bytes of an owner's name are kept.
pub(crate) const NAME_CAPACITY: usize = 48;

/// An owner copied into fixed-size storage (no heap, no borrow), as the fault handler
/// needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OwnerRecord {
    pub(crate) id: u64,
    /// `None` when unnamed; else the number of valid bytes in `name`.
    pub(crate) name_len: Option<u8>,
    pub(crate) name: [u8; NAME_CAPACITY],
}

impl OwnerRecord {
    pub(crate) fn new(owner: Owner<'_>) -> Self {
        let mut record = OwnerRecord {
            id: owner.id,
            name_len: None,
            name: [0; NAME_CAPACITY],
        };
        if let Some(name) = owner.name {
            let kept = truncate_on_char_boundary(name, NAME_CAPACITY);
            record.name[..kept.len()].copy_from_slice(kept.as_bytes());
            // `kept.len() <= NAME_CAPACITY = 48`, so it fits in a u8.
            record.name_len = Some(kept.len() as u8);
        }
        record
    }

    /// The name bytes, if named.
    pub(crate) fn name_bytes(&self) -> Option<&[u8]> {
        self.name_len
            .map(|len| &self.name[..usize::from(len).min(NAME_CAPACITY)])
    }
}

/// The longest prefix of `text` that is at most `max` bytes and ends on a char boundary.
fn truncate_on_char_boundary(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_kept_whole() {
        let record = OwnerRecord::new(Owner::named(1, "worker-3"));
        assert_eq!(record.name_bytes(), Some(&b"worker-3"[..]));
        assert_eq!(record.id, 1);
    }

    #[test]
    fn unnamed_owner_has_no_name() {
        assert_eq!(OwnerRecord::new(Owner::new(9)).name_bytes(), None);
    }

    #[test]
    fn long_names_are_cut_at_48_bytes_on_a_char_boundary() {
        let ascii = "a".repeat(100);
        assert_eq!(
            OwnerRecord::new(Owner::named(1, &ascii))
                .name_bytes()
                .map(<[u8]>::len),
            Some(48)
        );
        // 47 ASCII bytes then a 3-byte char: keeping it would need 50 bytes, so it is dropped.
        let mixed = format!("{}€tail", "b".repeat(47));
        let record = OwnerRecord::new(Owner::named(1, &mixed));
        assert_eq!(record.name_bytes(), Some("b".repeat(47).as_bytes()));
        // 16 three-byte chars are exactly 48 bytes.
        let euros = "€".repeat(20);
        let record = OwnerRecord::new(Owner::named(1, &euros));
        assert_eq!(record.name_bytes(), Some("€".repeat(16).as_bytes()));
    }
}
