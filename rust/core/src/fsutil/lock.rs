//! One instance per directory: an exclusive `flock` on `<dir>/.lock`, with
//! the holder's pid written in it for the message of whoever is refused.
//!
//! A flock belongs to the open file description, not to the process, so it
//! also refuses a second open of the same directory in this process — and a
//! child being spawned on another thread holds a copy of the descriptor from
//! its fork to its exec, so a directory closed and reopened in that moment
//! finds its lock taken under our own pid. [`DirLock::acquire`] tells the
//! two apart by the set of directories this process holds.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

use super::io;

pub(crate) const LOCK_FILE: &str = ".lock";

/// A spawning child releases its copy at its exec, within milliseconds.
const STORE_STRAY_WAIT: Duration = Duration::from_secs(2);

/// The directories a `DirLock` of this process holds.
static HELD: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn held() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a directory's lock was not taken.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Another process holds it; its pid as found in the lock file.
    Elsewhere {
        holder: Option<String>,
    },
    /// This process holds it: a `DirLock` still open, or a copy of one that
    /// is being released (a spawning child's, a handle being dropped) that
    /// outlasted the wait.
    ThisProcess,
    Io(Error),
}

impl Refused {
    /// Who holds the lock, as a suffix for a message: " (pid 42)", "".
    pub(crate) fn holder(&self) -> String {
        match self {
            Refused::Elsewhere { holder: Some(pid) } => format!(" (pid {pid})"),
            Refused::Elsewhere { holder: None } | Refused::Io(_) => String::new(),
            Refused::ThisProcess => format!(" (this process, pid {})", std::process::id()),
        }
    }
}

/// The exclusive lock of a directory, released when dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl DirLock {
    /// Takes the lock of `dir` and writes our pid into it. A lock held
    /// under our pid by no `DirLock` of this process is waited for, up to
    /// `stray_wait`; one held by an open `DirLock` or another process is
    /// refused at once.
    pub(crate) fn acquire(dir: &Path, stray_wait: Duration) -> std::result::Result<Self, Refused> {
        let dir = io(dir, fs::canonicalize(dir)).map_err(Refused::Io)?;
        if held().contains(&dir) {
            return Err(Refused::ThisProcess);
        }
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Refused::Io(Error::io(&path, e)))?;
        let deadline = Instant::now() + stray_wait;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(fs::TryLockError::WouldBlock) => {
                    let holder = fs::read_to_string(&path).unwrap_or_default();
                    let holder = holder.trim();
                    if holder != std::process::id().to_string() {
                        return Err(Refused::Elsewhere {
                            holder: (!holder.is_empty()).then(|| holder.to_owned()),
                        });
                    }
                    if held().contains(&dir) || Instant::now() >= deadline {
                        return Err(Refused::ThisProcess);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(fs::TryLockError::Error(e)) => return Err(Refused::Io(Error::io(&path, e))),
            }
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.write_all_at(pid.as_bytes(), 0))
            .map_err(|e| Refused::Io(Error::io(&path, e)))?;
        // The flock is exclusive: no other `DirLock` holds `dir`.
        held().insert(dir.clone());
        Ok(DirLock { _file: file, dir })
    }

    /// A store's lock: `acquire` waiting `STORE_STRAY_WAIT`, refusals as
    /// `Error::Store` naming `what` ("state directory", …).
    pub(crate) fn acquire_store(dir: &Path, what: &str) -> Result<Self> {
        Self::acquire(dir, STORE_STRAY_WAIT).map_err(|refused| match refused {
            Refused::Io(e) => e,
            refused => Error::Store(format!(
                "{what} {} is locked by another instance{}; \
                 two instances must never share a task's store",
                dir.display(),
                refused.holder()
            )),
        })
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        held().remove(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another open file description of `dir`'s lock file, locked, with
    /// `pid` written in it: a spawning child's copy (our pid) or another
    /// process (any other).
    fn hold_copy(dir: &Path, pid: &str) -> File {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE))
            .unwrap();
        file.lock().unwrap();
        file.set_len(0).unwrap();
        file.write_all_at(pid.as_bytes(), 0).unwrap();
        file
    }

    #[test]
    fn a_directory_is_held_once_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let lock = DirLock::acquire(dir.path(), Duration::ZERO).unwrap();
        let pid = fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
        // Held by an open `DirLock`: refused without the (long) wait.
        let refused = DirLock::acquire(dir.path(), Duration::from_secs(600)).unwrap_err();
        assert!(matches!(refused, Refused::ThisProcess), "{refused:?}");
        assert!(refused.holder().contains("this process"));
        drop(lock);
        DirLock::acquire(dir.path(), Duration::ZERO).unwrap();
    }

    #[test]
    fn a_stray_copy_under_our_pid_is_waited_for_and_then_refused() {
        let dir = tempfile::tempdir().unwrap();
        let copy = hold_copy(dir.path(), &std::process::id().to_string());
        let refused = DirLock::acquire(dir.path(), Duration::ZERO).unwrap_err();
        assert!(matches!(refused, Refused::ThisProcess), "{refused:?}");
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(copy);
        });
        DirLock::acquire(dir.path(), Duration::from_secs(30)).unwrap();
        release.join().unwrap();
    }

    #[test]
    fn another_process_holding_it_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let _other = hold_copy(dir.path(), "4242\n");
        let refused = DirLock::acquire(dir.path(), Duration::from_secs(600)).unwrap_err();
        assert!(
            matches!(&refused, Refused::Elsewhere { holder: Some(pid) } if pid == "4242"),
            "{refused:?}"
        );
        assert_eq!(refused.holder(), " (pid 4242)");
        let err = DirLock::acquire_store(dir.path(), "state directory").unwrap_err();
        assert!(matches!(err, Error::Store(_)), "{err}");
        assert!(
            err.to_string()
                .contains("locked by another instance (pid 4242)")
        );
    }
}
