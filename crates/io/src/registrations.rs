//! The registration table of a readiness driver (epoll, kqueue, polling): which registration
//! an event names, and which registration an OS source has.
//!
//! # Tokens, not pointers
//!
//! A driver hands the OS a *token* with each registration (`epoll_data`, `polling`'s key,
//! kqueue's `udata`): a slot index and that slot's generation, never a pointer. The table owns
//! the registration's value (an `Arc<ScheduledIo>`, or a record holding one), and the driver
//! looks tokens up under its lock and clones what it needs before it leaves the lock, so a
//! `ScheduledIo` is never freed while the driver touches it.
//!
//! A slot's generation moves on whenever its registration is removed, so an event fetched for
//! a registration that another thread removed meanwhile (it may sit in the driver's event
//! buffer or in the kernel's ready list) no longer matches its slot and is dropped: a reused
//! slot never receives its predecessor's events. A stale event could only be misdelivered
//! after exactly 2^(token bits / 2) reuses of one slot while it was in flight.
//!
//! # Layout
//!
//! A table's tokens are `token_bits` wide (64 for epoll's `u64`, `usize::BITS` for `polling`
//! and kqueue): the slot index in the low half, the generation in the high half, which wraps
//! within its half. `max_slots` bounds the indices, so that a driver can keep a token value
//! for itself: with `2^(token_bits / 2) - 1` slots no token is all ones (epoll's wake token,
//! `polling`'s reserved `usize::MAX`).
//!
//! # Sources
//!
//! The table also maps each OS source (an fd number, a socket) to its live registration, for
//! `deregister` (which gets a source, not a token). A source number can be registered again
//! while the table still holds a registration for it — its file was closed without being
//! deregistered, and the number reused. [`insert`](Registrations::insert) therefore returns the
//! key the source was bound to before: the driver removes that registration once the kernel
//! has accepted the new one, or restores the binding with [`abort`](Registrations::abort) if it
//! refused.
//!
//! # Allocation
//!
//! Only [`insert`](Registrations::insert) (and [`drain`](Registrations::drain), which returns a
//! `Vec`) allocates, and it reports failure as an error instead of aborting. Removing never
//! allocates: the free list has room for every slot, reserved when the slot was made.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::hash::Hash;
use std::io;

use crate::scheduled::ScheduledIo;

/// A registration's name in its table: its slot index and that slot's generation, packed into
/// a token (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(u64);

impl Key {
    /// The token to hand the OS with the registration; it fits in the table's `token_bits`.
    pub fn token(self) -> u64 {
        self.0
    }
}

struct Slot<S, V> {
    generation: u32,
    /// The source of the slot's registration; only meaningful while `value` is `Some` (a free
    /// slot keeps its last one, so that `S` needs no placeholder).
    source: S,
    value: Option<V>,
}

/// The live registrations of a readiness driver: a slab of slots with generations, and a map
/// from each OS source to its live registration (see the [module docs](self)).
///
/// `S` is the OS source (`RawFd`, `RawSource`); `V` what the driver keeps per registration.
/// The driver keeps the table behind a lock.
pub struct Registrations<S, V> {
    slots: Vec<Slot<S, V>>,
    /// Indices of the free slots; its capacity covers every slot, so that `remove` never
    /// allocates.
    free: Vec<u32>,
    /// The live registration of each source.
    by_source: HashMap<S, Key>,
    /// How many slots hold a registration.
    len: usize,
    /// Width of a token's index half (and of its generation half).
    index_bits: u32,
    /// Indices stay below this.
    max_slots: u64,
    /// The driver's name, for error messages.
    driver: &'static str,
}

impl<S: Hash + Eq + Copy, V> Registrations<S, V> {
    /// An empty table for the driver named `driver` (used in error messages), whose tokens are
    /// `token_bits` wide (even, 2 to 64: the index in the low half, the generation in the high
    /// half), with at most `max_slots` slots (at most `2^(token_bits / 2)`; more is clamped).
    ///
    /// # Panics
    ///
    /// If `token_bits` is odd or not in 2..=64.
    pub fn new(driver: &'static str, token_bits: u32, max_slots: u64) -> Self {
        assert!(
            token_bits.is_multiple_of(2) && (2..=64).contains(&token_bits),
            "a registration table's tokens are 2 to 64 bits wide, an even number: not {token_bits}"
        );
        let index_bits = token_bits / 2;
        Registrations {
            slots: Vec::new(),
            free: Vec::new(),
            by_source: HashMap::new(),
            len: 0,
            index_bits,
            max_slots: max_slots.min(1 << index_bits),
            driver,
        }
    }

    /// Puts a registration of `source` with `value` in a slot and binds `source` to it.
    /// Returns its key and the key `source` was bound to before: to
    /// [`remove`](Registrations::remove) once the kernel accepted the new registration, or to
    /// restore with [`abort`](Registrations::abort) if it refused.
    ///
    /// # Errors
    ///
    /// `OutOfMemory` if the table cannot grow; `Other` if it has `max_slots` registrations.
    /// Either way the table is unchanged and `value` is dropped.
    pub fn insert(&mut self, source: S, value: V) -> io::Result<(Key, Option<Key>)> {
        let driver = self.driver;
        self.by_source
            .try_reserve(1)
            .map_err(|_| out_of_memory(driver))?;
        let key = match self.free.pop() {
            Some(index) => {
                let slot = &mut self.slots[index as usize];
                slot.source = source;
                slot.value = Some(value);
                let generation = slot.generation;
                self.pack(index, generation)
            }
            None => {
                let index = u32::try_from(self.slots.len())
                    .ok()
                    .filter(|&i| u64::from(i) < self.max_slots)
                    .ok_or_else(|| full(driver, self.max_slots))?;
                self.slots
                    .try_reserve(1)
                    .map_err(|_| out_of_memory(driver))?;
                // Room in `free` for every slot, so that `remove` never allocates.
                let wanted = self.slots.len() + 1 - self.free.len();
                self.free
                    .try_reserve(wanted)
                    .map_err(|_| out_of_memory(driver))?;
                self.slots.push(Slot {
                    generation: 0,
                    source,
                    value: Some(value),
                });
                self.pack(index, 0)
            }
        };
        self.len += 1;
        let previous = self.by_source.insert(source, key);
        Ok((key, previous))
    }

    /// Undoes an [`insert`](Registrations::insert) of `source` (which returned `key` and
    /// `previous`) whose kernel registration failed: removes `key`'s registration (dropping its
    /// value) and binds `source` to `previous` again, or to nothing.
    pub fn abort(&mut self, source: S, key: Key, previous: Option<Key>) {
        drop(self.take(key));
        if let Entry::Occupied(mut bound) = self.by_source.entry(source)
            && *bound.get() == key
        {
            match previous {
                Some(previous) => {
                    bound.insert(previous);
                }
                None => {
                    bound.remove();
                }
            }
        }
    }

    /// The source and value of the live registration a token names; `None` if the token is
    /// stale (its registration was removed) or was never handed out.
    pub fn get(&self, token: u64) -> Option<(S, &V)> {
        let (index, generation) = self.unpack(token)?;
        let slot = self.slots.get(index)?;
        if slot.generation != generation {
            return None;
        }
        slot.value.as_ref().map(|value| (slot.source, value))
    }

    /// As [`get`](Registrations::get), with the value mutable.
    pub fn get_mut(&mut self, token: u64) -> Option<(S, &mut V)> {
        let (index, generation) = self.unpack(token)?;
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let source = slot.source;
        slot.value.as_mut().map(|value| (source, value))
    }

    /// Frees `key`'s slot (moving its generation on, so that its token dies) and returns its
    /// value; `None` if `key` is stale. Unbinds its source if the source is still bound to it.
    /// Never allocates.
    pub fn remove(&mut self, key: Key) -> Option<V> {
        let (source, value) = self.take(key)?;
        if self.by_source.get(&source) == Some(&key) {
            self.by_source.remove(&source);
        }
        Some(value)
    }

    /// Removes every registration and returns their sources and values. The table's storage
    /// is freed (a driver drains its table when it shuts down, and its reactor handle may live
    /// on in sources that outlive it); it grows again if used.
    pub fn drain(&mut self) -> Vec<(S, V)> {
        self.by_source = HashMap::new();
        self.free = Vec::new();
        self.len = 0;
        std::mem::take(&mut self.slots)
            .into_iter()
            .filter_map(|slot| slot.value.map(|value| (slot.source, value)))
            .collect()
    }

    /// How many registrations the table holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no registration.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Frees `key`'s slot, leaving the source map alone; returns its source and value.
    fn take(&mut self, key: Key) -> Option<(S, V)> {
        let (index, generation) = self.unpack(key.token())?;
        let mask = self.generation_mask();
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        let value = slot.value.take()?;
        slot.generation = slot.generation.wrapping_add(1) & mask;
        self.len -= 1;
        // Cannot allocate: `free` has room for every slot (reserved when the slot was made).
        self.free.push(index as u32);
        Some((slot.source, value))
    }

    fn generation_mask(&self) -> u32 {
        u32::MAX >> (32 - self.index_bits)
    }

    fn pack(&self, index: u32, generation: u32) -> Key {
        Key((u64::from(generation) << self.index_bits) | u64::from(index))
    }

    /// A token's slot index and generation; `None` if it is wider than the table's tokens.
    fn unpack(&self, token: u64) -> Option<(usize, u32)> {
        let index = token & (u64::MAX >> (64 - self.index_bits));
        let generation = u32::try_from(token >> self.index_bits)
            .ok()
            .filter(|&g| g <= self.generation_mask())?;
        Some((usize::try_from(index).ok()?, generation))
    }
}

impl<S: Hash + Eq + Copy, V: AsRef<ScheduledIo>> Registrations<S, V> {
    /// `source`'s live registration, with its key, if it is `io`'s.
    pub fn find_mut(&mut self, source: S, io: &ScheduledIo) -> Option<(Key, &mut V)> {
        let key = *self.by_source.get(&source)?;
        let (_, value) = self.get_mut(key.token())?;
        std::ptr::eq(value.as_ref(), io).then_some((key, value))
    }

    /// Removes `source`'s registration if it is `io`'s, and returns its value. `None` if the
    /// source is not registered, or its registration is another `ScheduledIo`'s (the number
    /// was registered again since, and the newer registration is not `io`'s to remove).
    pub fn unbind(&mut self, source: S, io: &ScheduledIo) -> Option<V> {
        let (key, _) = self.find_mut(source, io)?;
        self.by_source.remove(&source);
        self.take(key).map(|(_, value)| value)
    }
}

impl<S, V> fmt::Debug for Registrations<S, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registrations")
            .field("driver", &self.driver)
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

fn out_of_memory(driver: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!("out of memory for the {driver} driver's registration table: close some sources"),
    )
}

fn full(driver: &str, max_slots: u64) -> io::Error {
    io::Error::other(format!(
        "the {driver} driver has the most sources it can register ({max_slots}): deregister some"
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    type Table = Registrations<i32, Arc<ScheduledIo>>;

    fn table() -> Table {
        Registrations::new("test", 64, u64::from(u32::MAX))
    }

    fn io() -> Arc<ScheduledIo> {
        Arc::new(ScheduledIo::new())
    }

    /// A key's slot index and generation.
    fn split(table: &Table, key: Key) -> (usize, u32) {
        table.unpack(key.token()).unwrap()
    }

    #[test]
    fn insert_get_remove_and_a_reused_slot_gets_a_new_generation() {
        let mut table = table();
        let a = io();
        let (first, previous) = table.insert(5, a.clone()).unwrap();
        assert_eq!(previous, None);
        assert_eq!(table.len(), 1);
        let (source, value) = table.get(first.token()).unwrap();
        assert_eq!(source, 5);
        assert!(Arc::ptr_eq(value, &a));

        assert!(Arc::ptr_eq(&table.remove(first).unwrap(), &a));
        assert!(table.is_empty());
        let (second, previous) = table.insert(6, io()).unwrap();
        assert_eq!(previous, None);
        assert_eq!(split(&table, second).0, split(&table, first).0);
        assert_ne!(split(&table, second).1, split(&table, first).1);
        assert_eq!(table.get(second.token()).map(|(s, _)| s), Some(6));
        // A second slot for a second live registration.
        let (third, _) = table.insert(7, io()).unwrap();
        assert_ne!(split(&table, third).0, split(&table, second).0);
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn a_removed_registrations_token_is_stale() {
        let mut table = table();
        let a = io();
        let (key, _) = table.insert(5, a.clone()).unwrap();
        assert!(table.remove(key).is_some());
        assert!(table.get(key.token()).is_none());
        assert!(table.get_mut(key.token()).is_none());
        assert!(table.remove(key).is_none());
        // `remove` unbound the source.
        assert!(table.unbind(5, &a).is_none());
        // Still stale once the slot is reused.
        table.insert(5, io()).unwrap();
        assert!(table.get(key.token()).is_none());
        // Tokens never handed out find nothing.
        assert!(table.get(12345).is_none());
        assert!(table.get(u64::MAX).is_none());
    }

    #[test]
    fn abort_restores_the_previous_binding() {
        let mut table = table();
        let (old, new) = (io(), io());
        let (first, _) = table.insert(5, old.clone()).unwrap();
        let (second, previous) = table.insert(5, new.clone()).unwrap();
        assert_eq!(previous, Some(first));
        table.abort(5, second, previous);
        assert!(table.get(second.token()).is_none());
        assert!(table.get(first.token()).is_some());
        assert_eq!(table.len(), 1);
        assert!(table.unbind(5, &new).is_none());
        assert!(Arc::ptr_eq(&table.unbind(5, &old).unwrap(), &old));

        // With no previous registration the source ends up unbound.
        let (key, previous) = table.insert(7, new.clone()).unwrap();
        table.abort(7, key, previous);
        assert!(table.get(key.token()).is_none());
        assert!(table.unbind(7, &new).is_none());
        assert!(table.is_empty());
    }

    #[test]
    fn unbind_removes_only_the_given_ios_registration() {
        let mut table = table();
        let (a, b) = (io(), io());
        let (first, _) = table.insert(5, a.clone()).unwrap();
        assert!(table.unbind(5, &b).is_none());
        assert!(table.unbind(6, &a).is_none());
        assert!(table.get(first.token()).is_some());

        // The number registered again (the first file closed without a deregister): the
        // stale registration is removed, and its `io` can no longer unbind the number.
        let (second, previous) = table.insert(5, b.clone()).unwrap();
        assert!(table.remove(previous.unwrap()).is_some());
        assert!(table.unbind(5, &a).is_none());
        assert!(table.get(second.token()).is_some());
        assert!(table.find_mut(5, &b).is_some_and(|(key, _)| key == second));
        assert!(Arc::ptr_eq(&table.unbind(5, &b).unwrap(), &b));
        assert!(table.get(second.token()).is_none());
        assert!(table.is_empty());
    }

    #[test]
    fn drain_returns_every_live_registration() {
        let mut table = table();
        let (k1, _) = table.insert(1, io()).unwrap();
        table.insert(2, io()).unwrap();
        table.insert(3, io()).unwrap();
        table.remove(k1);
        let mut drained: Vec<i32> = table.drain().into_iter().map(|(s, _)| s).collect();
        drained.sort_unstable();
        assert_eq!(drained, [2, 3]);
        assert!(table.is_empty());
        assert!(table.drain().is_empty());
        // Usable again.
        let a = io();
        table.insert(2, a.clone()).unwrap();
        assert!(table.unbind(2, &a).is_some());
    }

    #[test]
    fn the_index_limit_is_an_error_that_names_the_driver() {
        let mut table: Table = Registrations::new("kqueue", 64, 2);
        let (first, _) = table.insert(1, io()).unwrap();
        table.insert(2, io()).unwrap();
        let err = table.insert(3, io()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::Other);
        assert_eq!(
            err.to_string(),
            "the kqueue driver has the most sources it can register (2): deregister some"
        );
        assert_eq!(table.len(), 2);
        // A freed slot is reused.
        table.remove(first);
        table.insert(3, io()).unwrap();
        // The limit is clamped to what the token's index half holds.
        let mut small: Table = Registrations::new("test", 4, u64::MAX);
        for source in 0..4 {
            small.insert(source, io()).unwrap();
        }
        assert!(small.insert(4, io()).is_err());
    }

    #[test]
    fn out_of_memory_names_the_driver() {
        let err = out_of_memory("epoll");
        assert_eq!(err.kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(
            err.to_string(),
            "out of memory for the epoll driver's registration table: close some sources"
        );
    }

    #[test]
    fn generations_wrap_within_the_tokens_bits() {
        // 4-bit tokens: 2 bits of index, 2 of generation.
        let mut table: Table = Registrations::new("test", 4, 4);
        let (first, _) = table.insert(1, io()).unwrap();
        let mut key = first;
        for _ in 0..4 {
            table.remove(key);
            key = table.insert(1, io()).unwrap().0;
            assert!(key.token() < 16);
        }
        // The fifth occupant of the slot has the first one's token again.
        assert_eq!(key, first);
    }

    #[test]
    fn no_token_is_all_ones_when_the_last_index_is_kept_out() {
        for bits in [32, 64] {
            let half = bits / 2;
            let table: Table = Registrations::new("test", bits, (1 << half) - 1);
            let last = u32::try_from(table.max_slots - 1).unwrap();
            let token = table.pack(last, table.generation_mask()).token();
            assert_ne!(token, u64::MAX >> (64 - bits));
            assert_eq!(
                table.unpack(token),
                Some((last as usize, table.generation_mask()))
            );
        }
    }

    #[test]
    fn removing_never_allocates() {
        let mut table = table();
        let keys: Vec<Key> = (0..100).map(|s| table.insert(s, io()).unwrap().0).collect();
        assert!(table.free.capacity() >= table.slots.len());
        let capacity = table.free.capacity();
        for key in keys {
            table.remove(key);
        }
        assert_eq!(table.free.capacity(), capacity);
        assert_eq!(table.free.len(), 100);
    }
}
