//! Where a `ken serve` finds the shared service of its repository: a Unix
//! socket in a private folder of the user (0700, refused when anyone else
//! could write to it), named by a hash of what the service must share with
//! its clients (root, index folder, behaviour settings, binary).

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

/// `sun_path` holds 108 bytes with its terminating zero.
const MAX_SOCKET_PATH: usize = 107;

/// The files of one service: its socket, its locks and its log.
#[derive(Debug, Clone)]
pub struct Rendezvous {
    dir: PathBuf,
    key: String,
}

impl Rendezvous {
    /// The rendezvous of the service for this root and index with this
    /// process's settings and binary; `watch` is part of it (a client asking
    /// for no watcher gets a service without one).
    /// A workspace file is part of it too: its sessions search its members.
    pub fn for_index(root: &Path, index_dir: &Path, watch: bool, workspace: Option<&Path>) -> Result<Rendezvous> {
        let settings = crate::config::try_settings()?;
        let exe = std::env::current_exe().context("cannot find the ken binary")?;
        // A rebuilt or upgraded binary gets a service of its own.
        let built = std::fs::metadata(&exe).map(|m| (m.mtime(), m.mtime_nsec(), m.size()))?;
        let index_dir = index_dir.canonicalize().unwrap_or_else(|_| index_dir.to_path_buf());
        let mut hash = Sha256::new();
        for part in [
            root.as_os_str().as_encoded_bytes(),
            index_dir.as_os_str().as_encoded_bytes(),
            settings.behaviour_fingerprint().as_bytes(),
            exe.as_os_str().as_encoded_bytes(),
            format!("{built:?} watch={watch}").as_bytes(),
            workspace.map_or(&[][..], |w| w.as_os_str().as_encoded_bytes()),
        ] {
            hash.update(part);
            hash.update([0]);
        }
        let key: String = hash.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect();
        Rendezvous::at(private_dir()?, &key)
    }

    /// The rendezvous named `key` (as handed to the service) in `dir`.
    pub fn at(dir: PathBuf, key: &str) -> Result<Rendezvous> {
        if key.len() != 16 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!("not a service key: {key}");
        }
        let rendezvous = Rendezvous {
            dir,
            key: key.to_string(),
        };
        let socket = rendezvous.socket();
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "the service socket path {} is too long for a Unix socket; set XDG_RUNTIME_DIR to a shorter folder \
or run `ken serve --no-service`",
                socket.display()
            );
        }
        Ok(rendezvous)
    }

    /// The rendezvous named `key` in this user's private folder.
    pub fn named(key: &str) -> Result<Rendezvous> {
        Rendezvous::at(private_dir()?, key)
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.key))
    }

    /// Held by the service while it lives: one service per key.
    pub fn life_lock(&self) -> PathBuf {
        self.dir.join(format!("{}.lock", self.key))
    }

    /// Held by a `ken serve` while it starts the service: one start at a time.
    pub fn start_lock(&self) -> PathBuf {
        self.dir.join(format!("{}.start", self.key))
    }

    /// The service's stderr.
    pub fn log(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.key))
    }
}

/// Takes an exclusive lock on `file` if nobody holds it; whether it did.
pub fn try_lock(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor we own.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Takes an exclusive lock on `file`, waiting for its holder.
pub fn lock(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Opens (creating, owner-only) a lock file.
pub fn lock_file(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))
}

/// `$XDG_RUNTIME_DIR/ken`, else `/tmp/ken-<uid>`: created 0700, and refused
/// unless it is a folder of this user that nobody else may write to.
fn private_dir() -> Result<PathBuf> {
    // SAFETY: getuid cannot fail and touches no memory.
    let uid = unsafe { libc::getuid() };
    let dir = match dirs::runtime_dir() {
        Some(runtime) => runtime.join("ken"),
        None => std::env::temp_dir().join(format!("ken-{uid}")),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    check_private(&dir, uid)?;
    Ok(dir)
}

/// Why `dir` is not a private folder of `uid`, if it is not.
pub fn check_private(dir: &Path, uid: u32) -> Result<()> {
    let meta = std::fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a folder; the ken service will not use it", dir.display());
    }
    if meta.uid() != uid {
        bail!(
            "{} belongs to another user (uid {}); the ken service will not use it",
            dir.display(),
            meta.uid()
        );
    }
    if meta.permissions().mode() & 0o077 != 0 {
        bail!(
            "{} is open to other users (mode {:o}); the ken service needs it owner-only (chmod 700)",
            dir.display(),
            meta.permissions().mode() & 0o777
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_others_may_write_to_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ken");
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        // SAFETY: getuid cannot fail.
        let uid = unsafe { libc::getuid() };
        check_private(&dir, uid).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = check_private(&dir, uid).unwrap_err();
        assert!(format!("{e:#}").contains("chmod 700"), "{e:#}");
        assert!(check_private(&dir, uid + 1).is_err());
    }

    #[test]
    fn keys_are_hex_and_short() {
        assert!(Rendezvous::at(PathBuf::from("/tmp"), "../../etc/passwd").is_err());
        assert!(Rendezvous::at(PathBuf::from("/tmp"), "0123456789abcdef").is_ok());
        let long = PathBuf::from("/tmp").join("x".repeat(100));
        assert!(Rendezvous::at(long, "0123456789abcdef").is_err());
    }
}
