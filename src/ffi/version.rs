//! Library and ABI versions.

use std::ffi::c_char;

use super::error::guard_value;

/// Major version of the library (semantic versioning of the crate).
pub const DC_VERSION_MAJOR: u32 = 0;
/// Minor version of the library.
pub const DC_VERSION_MINOR: u32 = 1;
/// Patch version of the library.
pub const DC_VERSION_PATCH: u32 = 0;
/// Version of the C ABI described by this header. Functions keep their meaning within one
/// ABI version; the shared library's SONAME is `libdeltacells.so.<DC_ABI_VERSION>`.
pub const DC_ABI_VERSION: u32 = 1;

/// The library version as "MAJOR.MINOR.PATCH" (static string).
#[no_mangle]
pub extern "C" fn dc_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    guard_value(VERSION.as_ptr().cast(), || VERSION.as_ptr().cast())
}

/// The ABI version the library was built with; compare with `DC_ABI_VERSION` to detect a
/// header/library mismatch at run time.
#[no_mangle]
pub extern "C" fn dc_abi_version() -> u32 {
    guard_value(DC_ABI_VERSION, || DC_ABI_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_macros_match_the_crate_version() {
        let expected = format!("{DC_VERSION_MAJOR}.{DC_VERSION_MINOR}.{DC_VERSION_PATCH}");
        assert_eq!(expected, env!("CARGO_PKG_VERSION"));
        // SAFETY: dc_version returns a static NUL-terminated string.
        let s = unsafe { std::ffi::CStr::from_ptr(dc_version()) };
        assert_eq!(s.to_str().unwrap(), expected);
    }
}
