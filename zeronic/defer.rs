// SPDX-License-Identifier: GPL-2.0

//! Values whose drop may sleep, held by objects whose last reference may go
//! in atomic context.
//!
//! A flow's last reference can be dropped in softirq: TCP destroys a socket
//! that a reset killed (the ULP's `release`) and frees sent skbs there. The
//! flow holds its NIC's [`Control`](crate::control::Control), whose last
//! reference (after an unbind) releases the device's register mappings, and
//! that waits. [`DropInProcess`] moves such a drop to the system workqueue,
//! which the module's exit flushes.

use core::{
    mem::ManuallyDrop,
    ops::Deref, //
};

use kernel::{
    impl_has_work, new_work,
    prelude::*,
    workqueue::{
        self,
        Work,
        WorkItem, //
    },
};

/// The value and the work item that drops it.
#[pin_data]
struct Deferred<T: Send + Sync + 'static> {
    value: T,
    #[pin]
    work: Work<Deferred<T>>,
}

impl_has_work! {
    impl{T: Send + Sync + 'static} HasWork<Deferred<T>> for Deferred<T> { self.work }
}

impl<T: Send + Sync + 'static> WorkItem for Deferred<T> {
    type Pointer = Pin<KBox<Self>>;

    fn run(this: Pin<KBox<Self>>) {
        // Process context: the drop may sleep.
        drop(this);
    }
}

/// Holds a `T` and drops it on the system workqueue, whatever the context the
/// holder is dropped in. Allocated up front, so that dropping never
/// allocates and never fails.
pub(crate) struct DropInProcess<T: Send + Sync + 'static>(ManuallyDrop<Pin<KBox<Deferred<T>>>>);

impl<T: Send + Sync + 'static> DropInProcess<T> {
    /// Wraps `value` (allocates; process context).
    ///
    /// # Errors
    ///
    /// - `ENOMEM` if the holder cannot be allocated.
    pub(crate) fn new(value: T) -> Result<Self> {
        let boxed = KBox::pin_init(
            pin_init!(Deferred {
                value,
                work <- new_work!("zeronic::defer"),
            }),
            GFP_KERNEL,
        )?;
        Ok(Self(ManuallyDrop::new(boxed)))
    }
}

impl<T: Send + Sync + 'static> DropInProcess<T> {
    /// Drops the value now, in the caller's context (which must be one the
    /// value's drop may run in).
    pub(crate) fn drop_now(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this.0` is taken once, and `this` is never dropped.
        drop(unsafe { ManuallyDrop::take(&mut this.0) });
    }
}

impl<T: Send + Sync + 'static> DropInProcess<T> {
    /// The value, to change it before it is dropped.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // `value` is not structurally pinned: only the work item is.
        (*self.0).as_mut().project().value
    }
}

impl<T: Send + Sync + 'static> Deref for DropInProcess<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0.value
    }
}

impl<T: Send + Sync + 'static> Drop for DropInProcess<T> {
    fn drop(&mut self) {
        // SAFETY: `self.0` is not used again: this is the holder's drop.
        let boxed = unsafe { ManuallyDrop::take(&mut self.0) };
        // A box is queued at most once: this cannot fail.
        workqueue::system().enqueue(boxed);
    }
}
