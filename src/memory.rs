//! Large buffers ask the kernel for transparent huge pages: ChromData results, and the
//! reusable buffers of dataset reads (tiles read whole, decompressed chunks, decode scratch).
//!
//! A read faults in every page of its result once. With 4 KiB pages those faults were a
//! third of a full read's time on the project's 2-core VM (memcg accounting makes each one
//! costly); 2 MiB pages are 512 times fewer. zstd's decoding of a multi-megabyte frame also
//! copies matches from anywhere in its window, and with 4 KiB pages those copies miss the TLB.
//! Only whole 2 MiB pages inside an allocation are advised, so resident memory does not grow.

/// Huge page size of x86-64 / aarch64 Linux transparent huge pages.
pub(crate) const HUGE: usize = 2 << 20;

/// Largest region advised for huge pages (larger ones keep 4 KiB pages), for every
/// caller. With THP in `madvise` mode the kernel compacts memory for advised regions on
/// fault, and when page cache fragments memory a large region waits for it: first reads
/// of 10 M spots x 60 tracks (2.6 GB arena) in fresh processes took 2.17-3.79 s (median
/// 3.40) advised against 1.87-2.15 s (median 2.02) not (bin/quiet, 5 alternations).
/// Smaller arenas still gain: 1 M x 30 (150 MB) median 120 ms advised against 158 ms;
/// 10 M coords (280 MB) was mixed (252-690 ms against 316-560 ms in one window; 214 ms
/// advised against 330 ms not in two bench runs). Repeated reads reuse kept arenas
/// (`chromdata::read::arenas`) either way.
pub(crate) const HUGE_MAX: usize = 1 << 30;

/// Asks for transparent huge pages over the whole 2 MiB pages of `[ptr, ptr + len)`, which
/// must be memory the caller owns and has not touched yet (touched pages are already
/// backed). A no-op below 2 MiB, above [`HUGE_MAX`] and off Linux.
pub(crate) fn advise_huge(ptr: *const u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        let start = (ptr as usize).next_multiple_of(HUGE);
        let end = (ptr as usize).saturating_add(len) / HUGE * HUGE;
        if end > start && len <= HUGE_MAX {
            // SAFETY: madvise only changes how the kernel backs the pages of
            // [start, end), which lies inside the caller's allocation; the contents and
            // validity of the memory do not change, and a failure (THP disabled) is
            // harmless and ignored.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// An empty vector with room for `n` values, its large allocation advised for huge pages.
pub(crate) fn result_vec<T>(n: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(n);
    advise_huge(v.as_ptr().cast(), v.capacity() * std::mem::size_of::<T>());
    v
}

/// Makes room for `additional` more bytes in `buf` like `Vec::try_reserve_exact`, and when
/// that allocated new memory, advises it for huge pages before anything touches it (the
/// old contents are moved by the reallocation as usual). Reused buffers cost nothing here.
pub(crate) fn try_reserve_huge(
    buf: &mut Vec<u8>,
    additional: usize,
) -> Result<(), std::collections::TryReserveError> {
    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
    buf.try_reserve_exact(additional)?;
    if buf.as_ptr() != ptr || buf.capacity() != cap {
        // Only the part past the contents is untouched; the moved contents are already
        // backed (with huge pages too when the move landed on advised memory).
        let len = buf.len();
        // SAFETY: `len <= capacity`: the pointer stays inside (or one past) the allocation.
        let tail = unsafe { buf.as_ptr().add(len) };
        advise_huge(tail, buf.capacity() - len);
    }
    Ok(())
}

/// Returns the free memory the C allocator keeps to the system, where that allocator is
/// glibc's (elsewhere a no-op). The ChromData writer calls it after freeing its buffer
/// (before the merge), the ChromData reader after a bulk read's
/// decoding (the decoding threads' freed buffers, before the output columns are made on the
/// calling thread): it changes no allocator setting, it only releases pages no allocation
/// uses. Not after every spilled run: the next buffer is allocated on the same thread and
/// reuses those pages, and returning them made each run fault them back in.
///
/// Why: glibc gives every thread that allocates its own arena and keeps freed memory in
/// that arena. The writer's unsorted buffer (up to 40 % of its budget) is allocated and
/// freed by the calling thread, but the merge's Parquet encoding allocates on the block
/// encoder's thread and the pool's workers, in other arenas, so the buffer's freed pages
/// stayed resident beside them: at 10 M spots x 60 tracks under a 512 MiB budget, the
/// merge ran with 80-190 MB in use and 250-320 MB free but kept (glibc's `mallinfo2`), for
/// a peak RSS of 404-569 MB between identical runs. With the merge on one arena
/// (`MALLOC_ARENA_MAX=1`, a diagnosis: a library must not set that for its host) the peak
/// was 281 MB; with this call before the merge, see docs/performance.md.
pub(crate) fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of the allocator's arenas to the kernel
    // (madvise / heap shrink); no live allocation moves or changes.
    unsafe {
        libc::malloc_trim(0);
    }
}
