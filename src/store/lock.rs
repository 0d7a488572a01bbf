//! The index's writer lock: an OS file lock on `write.lock` beside the
//! database, held by the one process that writes the index at a time, and
//! who holds it. A crashed writer never leaves it held.

use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use super::faults::explain;
use super::{Store, LOCK_FILE};

/// How long a writer waits for another to finish before giving up, unless
/// told otherwise (`ken index --lock-timeout`, the watcher's options).
pub const WRITE_LOCK_TIMEOUT: Duration = Duration::from_secs(120);

impl Store {
    /// Takes the index's writer lock, waiting up to `timeout` for another
    /// writer. The lock is an OS file lock, so a crashed writer never leaves it held.
    pub fn lock_for_write(&self, timeout: Duration) -> Result<WriteLock> {
        lock_dir(&self.dir, timeout)
    }

    /// Who is writing the index right now (another process holding the
    /// writer lock), if anyone: for messages such as "embedding in progress".
    pub fn active_writer(&self) -> Option<String> {
        writer_of(&self.dir)
    }
}

/// Who holds the writer lock of the index in `dir` ("process 123"), if anyone.
pub fn writer_of(dir: &Path) -> Option<String> {
    let path = dir.join(LOCK_FILE);
    let file = File::open(&path).ok()?;
    // A shared lock is refused only while a writer holds the exclusive one;
    // it is released at once (writers retry, so this never blocks them).
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        return None;
    }
    let holder = fs::read_to_string(&path).unwrap_or_default();
    Some(match holder.split_whitespace().next() {
        Some(pid) => format!("process {pid}"),
        None => "another ken process".to_string(),
    })
}

/// Takes the writer lock of the index in `dir` (see [`Store::lock_for_write`]).
pub(super) fn lock_dir(dir: &Path, timeout: Duration) -> Result<WriteLock> {
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            explain(
                dir,
                anyhow::Error::new(e).context(format!("cannot open the lock file {}", path.display())),
            )
        })?;
    let started = Instant::now();
    let mut told = false;
    loop {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // Who holds it, for the message of a process that has to wait.
            let holder = std::env::args().skip(1).take(2).collect::<Vec<_>>().join(" ");
            let _ = file.set_len(0);
            let _ = (&file).write_all(format!("{} ken {holder}\n", std::process::id()).as_bytes());
            return Ok(WriteLock { _file: file });
        }
        // The lock is released when its holder dies, so a held lock has a live holder.
        let holder = fs::read_to_string(&path).unwrap_or_default();
        let holder = match holder.trim() {
            "" => "another ken process".to_string(),
            h => format!("process {h}"),
        };
        if started.elapsed() >= timeout {
            bail!(
                "{holder} is writing the index at {} (waited {:?}); try again when it is done",
                dir.display(),
                timeout
            );
        }
        if !told && timeout >= Duration::from_secs(1) {
            eprintln!("ken: waiting (up to {timeout:?}) for {holder}, which is writing this index...");
            told = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Held while a process writes the index; released on drop or process exit.
pub struct WriteLock {
    _file: File,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_who_is_writing() {
        let dir = tempfile::tempdir().unwrap();
        let writer = Store::open_for_write(dir.path()).unwrap();
        let reader = Store::open_for_read(dir.path()).unwrap();
        assert_eq!(reader.active_writer(), None);
        let lock = writer.lock_for_write(Duration::from_secs(1)).unwrap();
        let holder = reader.active_writer().expect("the lock is held");
        assert!(holder.contains(&std::process::id().to_string()), "{holder}");
        drop(lock);
        assert_eq!(reader.active_writer(), None);
        // Asking never blocks a writer.
        drop(writer.lock_for_write(Duration::from_millis(10)).unwrap());
    }
}
