//! Files made durable, and the space left on a filesystem: what every room that writes to
//! the data disk shares (the recorder, the event intake, the firmware's own records).
//!
//! Crash order is the caller's: a file is durable (synced, renamed, its directory synced)
//! before any row that points at it is committed.

use std::path::Path;

use crate::limits;

/// A filesystem's state, when known.
#[derive(Clone, Copy, Debug, Default)]
pub struct Disk {
    pub free_bytes: u64,
    pub reserve_bytes: u64,
    pub total_bytes: u64,
}

/// Free and reserved space of the filesystem holding `dir`. The reserve is
/// [`limits::DISK_RESERVE_BYTES`], or a sixteenth of a smaller filesystem.
pub fn disk_space(dir: &Path) -> Option<Disk> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let frsize = s.f_frsize as u64;
    let total = s.f_blocks as u64 * frsize;
    Some(Disk {
        free_bytes: s.f_bavail as u64 * frsize,
        reserve_bytes: limits::DISK_RESERVE_BYTES.min(total / 16),
        total_bytes: total,
    })
}

/// Writes `bytes` to `path` durably: a synced temporary file renamed into place, and the
/// directory synced (created, and its parent synced, if new).
pub fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().ok_or_else(|| std::io::Error::other("no directory"))?;
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_dir(dir)
}

/// Makes a directory's entries durable (a new file's name, a removal).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}
