//! Arrays of window slots large enough to span many pages, backed by huge
//! pages where the system allows it.
//!
//! A window table of 100,000 keys is about 4 MiB of 32-byte slots read in
//! random order: with 4 KiB pages nearly every probe also misses the TLB
//! (a hopping window keeps several such tables live). Linux hands out
//! 2 MiB pages to a mapping advised with `MADV_HUGEPAGE` (the default
//! `transparent_hugepage` mode, `madvise`, gives them to no one else), so
//! large arrays get a mapping of their own, advised before it is first
//! touched. Elsewhere, and for small arrays, a plain `Vec`.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Arrays of at least this many bytes get their own mapping.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

pub(crate) struct HugeArray<T> {
    /// The elements of `_owner`, kept apart so that indexing does not
    /// branch on where they live (it did, on every slot access).
    ptr: NonNull<T>,
    len: usize,
    /// Owns the elements; never resized.
    _owner: Inner<T>,
}

#[allow(dead_code, reason = "only owns the elements that `ptr` points to")]
enum Inner<T> {
    Heap(Vec<T>),
    #[cfg(target_os = "linux")]
    Mapped(mapped::Mapped<T>),
}

// SAFETY: `ptr` points into `_owner`, which owns the elements like a
// `Box<[T]>`; shared access only reads.
unsafe impl<T: Send> Send for HugeArray<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for HugeArray<T> {}

impl<T: Copy> HugeArray<T> {
    /// `len` copies of `value`.
    pub fn filled(len: usize, value: T) -> Self {
        #[cfg(target_os = "linux")]
        if let Some(bytes) = len.checked_mul(size_of::<T>())
            && bytes >= HUGE_PAGE
            && let Some(m) = mapped::Mapped::new(len, value)
        {
            return HugeArray {
                ptr: m.ptr(),
                len,
                _owner: Inner::Mapped(m),
            };
        }
        let mut v = vec![value; len];
        HugeArray {
            ptr: NonNull::new(v.as_mut_ptr()).expect("a Vec's pointer is not null"),
            len,
            _owner: Inner::Heap(v),
        }
    }
}

impl<T: Copy> Deref for HugeArray<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: `len` initialized elements, owned by `_owner`, which is
        // never resized and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugeArray<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(target_os = "linux")]
mod mapped {
    use std::ffi::{c_int, c_void};
    use std::ptr::NonNull;

    use super::HUGE_PAGE;

    use crate::store::persistent::mmap::{mmap, munmap};

    unsafe extern "C" {
        fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }

    // Linux's values (the same on every architecture strom builds for).
    const PROT_READ: c_int = 1;
    const PROT_WRITE: c_int = 2;
    const MAP_PRIVATE: c_int = 2;
    const MAP_ANONYMOUS: c_int = 0x20;
    const MADV_HUGEPAGE: c_int = 14;
    const MAP_FAILED: *mut c_void = usize::MAX as *mut c_void;

    /// `len` elements in a private anonymous mapping of `bytes` (a whole
    /// number of huge pages, which Linux also aligns to one).
    pub(super) struct Mapped<T> {
        ptr: NonNull<T>,
        bytes: usize,
    }

    // SAFETY: the mapping is memory owned by this value alone, like a
    // `Box<[T]>`.
    unsafe impl<T: Send> Send for Mapped<T> {}
    // SAFETY: as above; shared access only reads.
    unsafe impl<T: Sync> Sync for Mapped<T> {}

    impl<T: Copy> Mapped<T> {
        /// None when the system refuses the mapping (the caller then uses
        /// the heap).
        pub fn new(len: usize, value: T) -> Option<Self> {
            let bytes = (len * size_of::<T>()).div_ceil(HUGE_PAGE) * HUGE_PAGE;
            // SAFETY: a fresh private anonymous mapping chosen by the kernel.
            let p = unsafe {
                mmap(
                    std::ptr::null_mut(),
                    bytes,
                    PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == MAP_FAILED {
                return None;
            }
            // A hint: refused, the mapping keeps small pages. It must come
            // before the first touch below, which is what allocates pages.
            // SAFETY: the range is the mapping just made.
            unsafe { madvise(p, bytes, MADV_HUGEPAGE) };
            let ptr = NonNull::new(p.cast::<T>())?;
            for i in 0..len {
                // SAFETY: `i < len` elements of T fit in `bytes`, and the
                // mapping is page-aligned, so aligned for T.
                unsafe { ptr.as_ptr().add(i).write(value) };
            }
            Some(Mapped { ptr, bytes })
        }

        /// The first element.
        pub fn ptr(&self) -> NonNull<T> {
            self.ptr
        }
    }

    impl<T> Drop for Mapped<T> {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping made in `new`; T is Copy,
            // so there is nothing to drop in it.
            unsafe {
                munmap(self.ptr.as_ptr().cast(), self.bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_arrays_hold_their_elements() {
        for len in [0, 10, (5 << 20) / 8 + 3] {
            let mut a = HugeArray::filled(len, 7u64);
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&x| x == 7));
            if len > 0 {
                a[len - 1] = 9;
                assert_eq!(a[len - 1], 9);
            }
        }
    }
}
