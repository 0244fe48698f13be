//! Early writeback of the active segment's appended bytes.
//!
//! A flush's fsync writes out every page dirtied since the last one, so its
//! time grows with the bytes appended since (about 0.35 ms per MiB on the
//! machines we measure on: a bounded run that appended 25 MB waited ~15 ms
//! for its last flush). Once enough bytes are appended, a background thread
//! asks the kernel to start writing them out (`sync_file_range` with
//! `SYNC_FILE_RANGE_WRITE`), so the device works while the app goes on and
//! the flush finds little left to write. Nothing waits on it and it promises
//! nothing: durability is still the flush's fsync alone. It only starts
//! writeback and does not wait for it, so it does not collect write errors
//! either; those stay recorded for the flush's fsync to report. (Called on
//! the appending thread after each MiB, as tried before, it shortened the
//! flush but not the run: the call itself can wait for the device.)

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Appended bytes that start a writeback: a few MiB, so that a run's last
/// flush waits on at most about this much.
pub(crate) const WRITEBACK_BYTES: u64 = 4 << 20;

/// The page size writeback works in (4 KiB on the systems we run on; a
/// larger page only makes a request's last page partial).
const PAGE: u64 = 4096;

/// One partition's writeback state, for its active segment.
#[derive(Debug, Default)]
pub(crate) struct Writeback {
    /// Bytes of the active segment before this are on their way to disk.
    requested: u64,
    /// A request of this partition is still running; the next append's
    /// request covers what this one skipped.
    busy: Arc<AtomicBool>,
}

impl Writeback {
    /// For an active segment whose first `size` bytes need no writeback
    /// (on disk already, or just opened).
    pub fn starting_at(size: u64) -> Self {
        Writeback {
            requested: size,
            busy: Arc::default(),
        }
    }

    /// Starts writing out the segment's bytes from the last request to
    /// `size` in the background, once they are at least [`WRITEBACK_BYTES`]
    /// and this partition's previous request is done. Returns whether it
    /// did.
    pub fn after_append(&mut self, file: &Arc<File>, size: u64) -> bool {
        // Whole pages only: a page under writeback cannot be written to
        // until its write ends (on devices that need stable pages), and the
        // next append goes on filling the last, partial one.
        self.request(file, size, size & !(PAGE - 1), WRITEBACK_BYTES)
    }

    /// A segment that takes no more appends (closed): starts writing out
    /// whatever of it no request covered yet, unless a request still runs.
    pub fn closing(&mut self, file: &Arc<File>, size: u64) -> bool {
        self.request(file, size, size, 1)
    }

    /// Requests `[requested, end)` if that is at least `min` bytes and no
    /// request of this partition runs; `size` is the segment's size.
    fn request(&mut self, file: &Arc<File>, size: u64, end: u64, min: u64) -> bool {
        if size < self.requested {
            // The segment was cut back (a failed write); start over there.
            self.requested = size;
        }
        if end.saturating_sub(self.requested) < min || self.busy.swap(true, Ordering::AcqRel) {
            return false;
        }
        let (start, len) = (self.requested, end - self.requested);
        let (file, busy) = (Arc::clone(file), Arc::clone(&self.busy));
        let spawned = std::thread::Builder::new()
            .name("strom-writeback".into())
            .spawn(move || {
                start_writeback(&file, start, len);
                busy.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            // No thread to spare: the flush writes these bytes itself.
            self.busy.store(false, Ordering::Release);
            return false;
        }
        self.requested = end;
        true
    }

    /// A flush made the segment's first `size` bytes durable: none of them
    /// needs a writeback any more.
    pub fn flushed_to(&mut self, size: u64) {
        self.requested = self.requested.max(size);
    }

    /// Whether a request is still running (for tests).
    #[cfg(test)]
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }
}

#[cfg(target_os = "linux")]
fn start_writeback(file: &File, start: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(start), Ok(len)) = (i64::try_from(start), i64::try_from(len)) else {
        return;
    };
    // SAFETY: the descriptor is open for as long as `file` is borrowed; the
    // call reads no memory of ours.
    let rc =
        unsafe { libc::sync_file_range(file.as_raw_fd(), start, len, libc::SYNC_FILE_RANGE_WRITE) };
    if rc != 0 {
        ::log::debug!(
            "early writeback not started: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _start: u64, _len: u64) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    fn wait_idle(w: &Writeback) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while w.busy() {
            assert!(Instant::now() < deadline, "writeback never finished");
            std::thread::yield_now();
        }
    }

    #[test]
    fn requests_once_enough_is_appended_and_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = File::create(dir.path().join("seg")).unwrap();
        f.write_all(&vec![7u8; 3 * WRITEBACK_BYTES as usize])
            .unwrap();
        let file = Arc::new(f);
        let mut w = Writeback::starting_at(0);
        assert!(!w.after_append(&file, WRITEBACK_BYTES - 1), "too little");
        assert!(w.after_append(&file, WRITEBACK_BYTES), "enough");
        // While a request runs, none starts; once it is done, the bytes
        // since the last request go.
        w.busy.store(true, Ordering::Release);
        assert!(!w.after_append(&file, 3 * WRITEBACK_BYTES));
        w.busy.store(false, Ordering::Release);
        assert!(!w.after_append(&file, 2 * WRITEBACK_BYTES - 1));
        assert!(w.after_append(&file, 3 * WRITEBACK_BYTES));
        wait_idle(&w);
        assert_eq!(w.requested, 3 * WRITEBACK_BYTES);
    }

    #[test]
    fn a_closing_segment_requests_all_its_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::create(dir.path().join("seg")).unwrap());
        let mut w = Writeback::starting_at(0);
        assert!(
            !w.after_append(&file, 100),
            "too little for an open segment"
        );
        assert!(w.closing(&file, 100), "a closed segment's every byte");
        wait_idle(&w);
        assert_eq!(w.requested, 100);
        assert!(!w.closing(&file, 100), "nothing left");
    }

    #[test]
    fn a_segment_cut_back_starts_over_where_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::create(dir.path().join("seg")).unwrap());
        let mut w = Writeback::starting_at(10 * WRITEBACK_BYTES);
        assert!(!w.after_append(&file, 100));
        assert_eq!(w.requested, 100);
        // Whole pages: the partial page at the end waits for the next request.
        assert!(!w.after_append(&file, 100 + WRITEBACK_BYTES));
        assert!(w.after_append(&file, 100 + WRITEBACK_BYTES + PAGE));
        assert_eq!(w.requested, WRITEBACK_BYTES + PAGE);
        wait_idle(&w);
    }
}
