//! Read-only memory maps of closed segments, so that a read is a copy out of
//! the page cache instead of a `pread` system call.
//!
//! std has no mmap and the crate takes no dependency for it: the two libc
//! functions are declared here (their signatures and the constants below are
//! the same on Linux and macOS, the 64-bit unix targets strom builds for).

use std::ffi::{c_int, c_void};
use std::fs::File;
use std::os::fd::AsRawFd;

// Also used by the windowing kernels' huge-page arrays (`window/huge.rs`).
unsafe extern "C" {
    pub(crate) fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: i64,
    ) -> *mut c_void;
    pub(crate) fn munmap(addr: *mut c_void, len: usize) -> c_int;
}

const PROT_READ: c_int = 1;
const MAP_SHARED: c_int = 1;
const MAP_FAILED: *mut c_void = usize::MAX as *mut c_void;

/// A read-only mapping of the first `len` bytes of a file.
///
/// Only files that no longer change are mapped: closed segments, which the
/// store never writes or truncates while it is open (and the directory lock
/// keeps other instances out). A file changed underneath by something else
/// is outside the store's contract, as for any mmap-based store; truncation
/// would fault.
pub(super) struct Map {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the mapping is read-only memory owned by this value; sharing or
// moving it between threads is like sharing a `&[u8]` / moving a `Box<[u8]>`.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    /// Maps `len` bytes of `file`, or None if the system refuses (the caller
    /// then reads with `pread`) or `len` is 0.
    pub fn new(file: &File, len: u64) -> Option<Map> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        // SAFETY: a fresh read-only shared mapping chosen by the kernel; the
        // fd is valid for the call (mappings outlive the descriptor anyway).
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                PROT_READ,
                MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        (ptr != MAP_FAILED && !ptr.is_null()).then_some(Map {
            ptr: ptr.cast_const().cast(),
            len,
        })
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until `drop`; the file is
        // immutable while mapped (see the type's doc).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`; no borrow of
        // `bytes()` outlives `self`.
        unsafe {
            munmap(self.ptr.cast_mut().cast(), self.len);
        }
    }
}
