//! Giving the allocator's free memory back to the kernel. glibc's malloc keeps what bulk work
//! freed (opening thousands of partitions, a burst of large requests) inside its arena, where it
//! counts as resident memory for good unless it lies at the very top of the heap;
//! `malloc_trim` returns every free page of the arena to the kernel.

/// Returns the allocator's free pages to the kernel. Walks the arena under its lock (about a
/// millisecond per 100 MB of heap), so it runs on a blocking thread, now and then.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free arena pages to the kernel; it touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}
