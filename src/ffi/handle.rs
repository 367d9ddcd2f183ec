//! The one handle idiom of the C ABI.
//!
//! A C handle type is an opaque, zero-sized Rust struct (cbindgen emits
//! `typedef struct dc_x dc_x;`) tied by [`Castable`] to the Rust value it stands for. The
//! pointer handed to C points to a boxed [`Handle`]: that value plus a poison flag. Every
//! exported function reaches the value through one of the functions below, which do, once
//! for all handle types:
//!
//! 1. the panic barrier and error translation ([`guard`]);
//! 2. the NULL check (`DC_ERR_INVALID_ARGUMENT`, naming the argument);
//! 3. the cast from the C type to the Rust value;
//! 4. the poison check: after a caught panic (`DC_ERR_INTERNAL`) the handle answers
//!    `DC_ERR_STATE` to every call but its `*_free`.
//!
//! Adopting it for a new handle type takes one line beside the opaque struct:
//!
//! ```text
//! /// An iterator over batches (opaque). ...
//! pub struct dc_batches {
//!     _opaque: [u8; 0],
//! }
//! castable!(dc_batches => BatchIter);
//! ```
//!
//! and the exported functions use [`new_handle`] (create / open; [`into_handle`] when the
//! new handle is made inside a call on another one), [`with_ref`] (shared
//! access; reader handles that several threads may use at once), [`with_mut`] (exclusive
//! access; writers and iterators) and [`free_handle`] (`*_free`).
//!
//! Arguments other than the handle go through `args` (strings, slices, out-parameters) and
//! `arrow` (Arrow arrays in, streams out); see DEVELOPERS.md, "C ABI conventions".

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, ErrorKind, Result};

use super::args::null_arg;
use super::error::{dc_status, guard, guard_value, DC_ERR_INTERNAL};

/// Ties an opaque C handle type to the Rust value behind it.
pub(crate) trait Castable {
    /// The value a handle of this type owns.
    type RustType;
    /// The C type's name, for messages (e.g. `"dc_dataset"`).
    const NAME: &'static str;
}

/// Implements [`Castable`] for an opaque C handle type: `castable!(dc_x => RustType);`.
macro_rules! castable {
    ($c:ident => $rust:ty) => {
        impl $crate::ffi::handle::Castable for $c {
            type RustType = $rust;
            const NAME: &'static str = stringify!($c);
        }
    };
}
pub(crate) use castable;

/// What a handle pointer points to.
pub(crate) struct Handle<T> {
    value: T,
    /// Set when a call on this handle panicked: its state may be half-updated.
    poisoned: AtomicBool,
}

/// Boxes `value` as a new handle and writes it to `*out` (checked non-NULL first). For
/// `*_open` / `*_create`: `make` runs inside the panic barrier, and `*out` is written only
/// when it succeeds.
pub(crate) fn new_handle<C: Castable>(
    out: *mut *mut C,
    make: impl FnOnce() -> Result<C::RustType>,
) -> dc_status {
    guard(|| {
        if out.is_null() {
            return Err(null_arg("out"));
        }
        let handle = into_handle::<C>(make()?);
        // SAFETY: checked non-NULL; the caller of the exported function guarantees that
        // `out` is writable.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// Boxes `value` as a new handle of type `C` and returns the pointer to hand to C. For a
/// handle made inside a call on another handle (an iterator made from a dataset, within
/// `with_ref`), whose out-parameter the caller writes with `Out::set` as its last step.
pub(crate) fn into_handle<C: Castable>(value: C::RustType) -> *mut C {
    Box::into_raw(Box::new(Handle {
        value,
        poisoned: AtomicBool::new(false),
    }))
    .cast::<C>()
}

/// The handle behind `ptr`, or the error for a NULL or poisoned one.
///
/// # Safety
/// `ptr` is NULL or a pointer returned by `new_handle::<C>` and not yet freed.
unsafe fn live<'a, C: Castable>(ptr: *const C) -> Result<&'a Handle<C::RustType>> {
    // SAFETY: per the caller, a non-NULL `ptr` points to a live `Handle<C::RustType>`.
    let h =
        unsafe { ptr.cast::<Handle<C::RustType>>().as_ref() }.ok_or_else(|| null_arg(C::NAME))?;
    if h.poisoned.load(Ordering::Acquire) {
        return Err(Error::new(
            ErrorKind::State,
            format!(
                "the {} handle is unusable after an internal error; free it",
                C::NAME
            ),
        ));
    }
    Ok(h)
}

/// Marks the handle behind `ptr` unusable if the call panicked.
fn poison_on_panic<C: Castable>(ptr: *const C, status: dc_status) -> dc_status {
    if status == DC_ERR_INTERNAL {
        // SAFETY: the call just made reached this handle, so `ptr` is NULL or live, and the
        // body's borrow of it has ended.
        if let Some(h) = unsafe { ptr.cast::<Handle<C::RustType>>().as_ref() } {
            h.poisoned.store(true, Ordering::Release);
        }
    }
    status
}

/// Runs `body` with shared access to the value behind a handle, inside the panic barrier.
/// For handles that several threads may use at once.
///
/// `ptr` comes straight from the C caller, whose contract (on every exported function) is
/// that it is NULL or a live handle of type `C`.
pub(crate) fn with_ref<C: Castable>(
    ptr: *const C,
    body: impl FnOnce(&C::RustType) -> Result<()>,
) -> dc_status {
    let status = guard(|| {
        // SAFETY: NULL or live, per the contract of the exported function.
        let h = unsafe { live(ptr)? };
        body(&h.value)
    });
    poison_on_panic(ptr, status)
}

/// Runs `body` with exclusive access to the value behind a handle, inside the panic
/// barrier. For handles one thread uses at a time (writers, iterators).
///
/// `ptr` comes straight from the C caller, whose contract (on every exported function) is
/// that it is NULL or a live handle of type `C`, not used by another thread meanwhile.
pub(crate) fn with_mut<C: Castable>(
    ptr: *mut C,
    body: impl FnOnce(&mut C::RustType) -> Result<()>,
) -> dc_status {
    let status = guard(|| {
        // SAFETY: NULL or live, per the contract of the exported function.
        unsafe { live(ptr)? };
        // SAFETY: live (checked above) and, per the contract, not in use elsewhere.
        let h = unsafe { &mut *ptr.cast::<Handle<C::RustType>>() };
        body(&mut h.value)
    });
    poison_on_panic(ptr, status)
}

/// Releases a handle (`*_free`): NULL is a no-op, a poisoned handle is freed too, and a
/// panic in the value's destructor is caught.
///
/// `ptr` is NULL or a live handle of type `C` that no other thread uses, per the contract
/// of the exported function; it must not be used afterwards.
pub(crate) fn free_handle<C: Castable>(ptr: *mut C) {
    guard_value((), || {
        if !ptr.is_null() {
            // SAFETY: a pointer from Box::into_raw in `new_handle`, released once.
            drop(unsafe { Box::from_raw(ptr.cast::<Handle<C::RustType>>()) });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::error::{DC_ERR_INVALID_ARGUMENT, DC_ERR_STATE, DC_OK};

    /// A handle type made for the test, adopted with one line.
    struct dc_counter {
        _opaque: [u8; 0],
    }
    castable!(dc_counter => Vec<u32>);

    #[test]
    fn null_poison_and_free_are_handled_once_for_every_type() {
        let mut h: *mut dc_counter = std::ptr::null_mut();
        assert_eq!(new_handle(&mut h, || Ok(vec![1])), DC_OK);
        assert_eq!(
            with_mut(h, |v| {
                v.push(2);
                Ok(())
            }),
            DC_OK
        );
        let mut seen = Vec::new();
        assert_eq!(
            with_ref(h, |v| {
                seen = v.clone();
                Ok(())
            }),
            DC_OK
        );
        assert_eq!(seen, [1, 2]);
        // NULL names the type; nothing runs.
        let null: *mut dc_counter = std::ptr::null_mut();
        assert_eq!(with_ref(null, |_| unreachable!()), DC_ERR_INVALID_ARGUMENT);
        assert_eq!(with_mut(null, |_| unreachable!()), DC_ERR_INVALID_ARGUMENT);
        // A failing constructor writes nothing.
        let mut untouched: *mut dc_counter = std::ptr::dangling_mut();
        let failed = new_handle(&mut untouched, || Err(Error::invalid_argument("no")));
        assert_eq!(failed, DC_ERR_INVALID_ARGUMENT);
        assert_eq!(untouched, std::ptr::dangling_mut());
        // A panic poisons: every later call is DC_ERR_STATE, free still frees.
        assert_eq!(with_mut(h, |_| panic!("boom")), DC_ERR_INTERNAL);
        assert_eq!(with_ref(h, |_| Ok(())), DC_ERR_STATE);
        assert_eq!(with_mut(h, |_| Ok(())), DC_ERR_STATE);
        free_handle(h);
        free_handle(null);
    }
}
