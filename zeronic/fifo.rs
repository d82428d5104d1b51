// SPDX-License-Identifier: GPL-2.0

//! A first-in first-out queue of fixed capacity, allocated up front.
//!
//! For queues filled and drained under a spinlock with interrupts off (the
//! command backlog): pushing never allocates, and taking the oldest entry
//! moves nothing (a `KVec`'s `remove(0)` moves every entry behind it).

use kernel::prelude::*;

/// Up to `capacity` values of `T`, oldest first.
pub(crate) struct Fifo<T> {
    /// Ring of entries; `None` where no value is stored.
    entries: KVVec<Option<T>>,
    /// Index of the oldest entry.
    head: usize,
    /// Number of values stored.
    len: usize,
}

impl<T> Fifo<T> {
    /// An empty queue with room for `capacity` values (process context).
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the entries cannot be allocated.
    pub(crate) fn new(capacity: usize) -> Result<Self> {
        let mut entries = KVVec::with_capacity(capacity, GFP_KERNEL)?;
        for _ in 0..capacity {
            // Cannot fail: within the capacity just allocated.
            entries.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            entries,
            head: 0,
            len: 0,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of the `i`-th oldest entry (`i < capacity`).
    fn index(&self, i: usize) -> usize {
        // `checked_rem`: no division-by-zero panic path (a zero capacity
        // stores nothing, so no index is ever used).
        (self.head + i).checked_rem(self.entries.len()).unwrap_or(0)
    }

    /// Appends `v`.
    ///
    /// # Errors
    ///
    /// - `v` itself, given back, if the queue is full.
    pub(crate) fn push(&mut self, v: T) -> core::result::Result<(), T> {
        if self.len >= self.entries.len() {
            return Err(v);
        }
        let i = self.index(self.len);
        match self.entries.get_mut(i) {
            Some(e) => *e = Some(v),
            None => return Err(v),
        }
        self.len += 1;
        Ok(())
    }

    /// The oldest value.
    pub(crate) fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.entries.get(self.head).and_then(Option::as_ref)
    }

    /// Takes the oldest value.
    pub(crate) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.entries.get_mut(self.head).and_then(Option::take);
        self.head = self.index(1);
        self.len -= 1;
        v
    }

    /// The values, oldest first.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        let (head, len, cap) = (self.head, self.len, self.entries.len());
        // The stored entries are `head..` and, wrapped, `..head + len - cap`.
        let (back, front) = self.entries.split_at_mut(head);
        let first = front.len().min(len);
        let wrapped = back.iter_mut().take((head + len).saturating_sub(cap));
        Iterator::chain(front.iter_mut().take(first), wrapped).filter_map(Option::as_mut)
    }
}
