//! Arguments from C, checked once: NUL-terminated strings, arrays, and out-parameters.
//!
//! The rules (c-api.md §1): NULL where a value is required is `DC_ERR_INVALID_ARGUMENT`
//! naming the argument; strings are UTF-8; an array may be NULL only when empty; an
//! out-parameter is checked when the call starts and written only when it succeeds (take
//! it with [`Out::new`] first, [`Out::set`] it last).

use std::ffi::{c_char, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// The error for a NULL argument that may not be NULL.
pub(crate) fn null_arg(name: &str) -> Error {
    Error::invalid_argument(format!("{name} is NULL"))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is NULL (rejected) or a NUL-terminated string that stays valid for `'a`.
pub(crate) unsafe fn str_in<'a>(p: *const c_char, name: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(null_arg(name));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Error::invalid_argument(format!("{name} is not valid UTF-8")))
}

/// An optional string argument: NULL is `None`.
///
/// # Safety
/// As [`str_in`].
pub(crate) unsafe fn opt_str_in<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded caller guarantee.
    unsafe { str_in(p, name) }.map(Some)
}

/// An optional string argument where NULL and "" both mean none.
///
/// The emptiness test runs only on a string that exists: `Option::filter` on the result of
/// [`opt_str_in`] lets the optimiser test the length of a `None` (undefined bytes) first,
/// a branch valgrind reports as depending on an uninitialised value.
///
/// # Safety
/// As [`str_in`].
pub(crate) unsafe fn nonempty_str_in<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded caller guarantee.
    let s = unsafe { str_in(p, name)? };
    Ok((!s.is_empty()).then_some(s))
}

/// `n` string arguments at `p` (`name[i]` in messages); none may be NULL.
///
/// # Safety
/// `p` is NULL (accepted only for n = 0) or points to `n` pointers, each NULL (rejected)
/// or a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn strs_in<'a>(
    p: *const *const c_char,
    n: usize,
    name: &str,
) -> Result<Vec<&'a str>> {
    // SAFETY: forwarded caller guarantee.
    let ptrs = unsafe { slice_in(p, n as u64, name)? };
    ptrs.iter()
        .enumerate()
        // SAFETY: each pointer is NULL (rejected) or a NUL-terminated string.
        .map(|(i, &s)| unsafe { str_in(s, &format!("{name}[{i}]")) })
        .collect()
}

/// Borrows `n` elements at `p`; NULL is accepted only for `n == 0`.
///
/// # Safety
/// When `n > 0`, `p` must point to `n` readable, initialized elements that stay valid and
/// unmodified for `'a`.
pub(crate) unsafe fn slice_in<'a, T>(p: *const T, n: u64, name: &str) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_arg(name));
    }
    let n = checked_len::<T>(n, name)?;
    // SAFETY: non-null, and the caller guarantees n readable elements for 'a.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Mutably borrows `n` elements at `p`; NULL is accepted only for `n == 0`.
///
/// # Safety
/// When `n > 0`, `p` must point to `n` writable elements, not aliased by any other slice
/// in use, valid for `'a`.
pub(crate) unsafe fn slice_out<'a, T>(p: *mut T, n: u64, name: &str) -> Result<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null_arg(name));
    }
    let n = checked_len::<T>(n, name)?;
    // SAFETY: non-null, and the caller guarantees n writable, unaliased elements for 'a.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

fn checked_len<T>(n: u64, name: &str) -> Result<usize> {
    let bytes = (n as u128) * (std::mem::size_of::<T>().max(1) as u128);
    if bytes > isize::MAX as u128 {
        return Err(Error::invalid_argument(format!(
            "{name}: {n} elements exceed the address space"
        )));
    }
    Ok(n as usize)
}

/// An out-parameter, checked non-NULL when the call starts and written once, when it
/// succeeds. (The one other write the contract allows is the needed size that goes with
/// `DC_ERR_BUFFER_TOO_SMALL`.)
pub(crate) struct Out<'a, T> {
    ptr: NonNull<T>,
    _lifetime: PhantomData<&'a mut T>,
}

impl<'a, T> Out<'a, T> {
    /// A required out-parameter: NULL is `DC_ERR_INVALID_ARGUMENT` naming it.
    ///
    /// # Safety
    /// `p` is NULL or valid for a write of `T` during `'a` (no alignment beyond `T`'s is
    /// assumed; the previous content is overwritten without being dropped).
    pub(crate) unsafe fn new(p: *mut T, name: &str) -> Result<Out<'a, T>> {
        NonNull::new(p)
            .map(|ptr| Out {
                ptr,
                _lifetime: PhantomData,
            })
            .ok_or_else(|| null_arg(name))
    }

    /// An optional out-parameter: NULL means the caller does not want it.
    ///
    /// # Safety
    /// As [`Out::new`].
    pub(crate) unsafe fn optional(p: *mut T) -> Option<Out<'a, T>> {
        NonNull::new(p).map(|ptr| Out {
            ptr,
            _lifetime: PhantomData,
        })
    }

    /// Writes the value (consumes the out-parameter: written once).
    pub(crate) fn set(self, value: T) {
        // SAFETY: non-NULL and writable for 'a, guaranteed when `self` was made.
        unsafe { self.ptr.as_ptr().write(value) }
    }
}
