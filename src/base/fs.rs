//! The data disk's file layer: files written and made durable, and the space left on a
//! filesystem. What every room that writes to the data disk shares (the recorder, the
//! catalog, the event intake, the firmware's own records).
//!
//! Crash order is the caller's: a file is durable (synced, renamed, its directory synced)
//! before any row that points at it is committed.
//!
//! Every write, cut, sync, rename and removal the recorder, the catalog and the event
//! intake make goes through here, so that in tests a [`journal`] can keep what was written
//! apart from what was made durable, and the crash-point test can try every moment a power
//! cut could fall. Outside tests each call is the system call and nothing more.

use std::fs::File;
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::limits;

#[cfg(test)]
pub(crate) mod journal;

/// Tells the journal watching `$path` (tests only) what was just done to it.
macro_rules! note {
    ($path:expr, $op:expr) => {
        #[cfg(test)]
        journal::note($path, $op);
    };
}

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

/// A file being written on the data disk (a segment): positioned writes and cuts, each
/// whole or an error. Made durable by [`sync_file`] on its path.
pub struct DataFile {
    file: Arc<File>,
    #[cfg(test)]
    watch: Option<journal::Watch>,
}

impl DataFile {
    /// Creates `path`, which must not exist yet, and the directories above it.
    pub fn create_new(path: &Path) -> io::Result<DataFile> {
        if let Some(dir) = path.parent() {
            create_dir_all(dir)?;
        }
        let file = File::options().read(true).write(true).create_new(true).open(path)?;
        note!(path, |path| journal::Op::Create { path, truncate: true });
        Ok(DataFile {
            file: Arc::new(file),
            #[cfg(test)]
            watch: journal::watch(path),
        })
    }

    /// The open file, for reading back what was written.
    pub fn shared(&self) -> &Arc<File> {
        &self.file
    }

    /// Writes every slice, one after another, from `offset`.
    pub fn write_vectored_at(&self, offset: u64, slices: &mut [IoSlice<'_>]) -> io::Result<()> {
        // The bytes are taken before the write consumes the slices, and only when watched.
        #[cfg(test)]
        let noted =
            self.watch.as_ref().map(|w| (w, slices.iter().flat_map(|s| s.iter().copied()).collect::<Vec<u8>>()));
        (&*self.file).seek(SeekFrom::Start(offset))?;
        write_all_vectored(&self.file, slices)?;
        #[cfg(test)]
        if let Some((w, data)) = noted {
            w.note(|path| journal::Op::Write { path, offset, data });
        }
        Ok(())
    }

    /// Writes all of `bytes` at `offset`.
    pub fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)?;
        #[cfg(test)]
        if let Some(w) = &self.watch {
            w.note(|path| journal::Op::Write { path, offset, data: bytes.to_vec() });
        }
        Ok(())
    }

    /// Cuts (or extends) the file to `len` bytes.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        #[cfg(test)]
        if let Some(w) = &self.watch {
            w.note(|path| journal::Op::SetLen { path, len });
        }
        Ok(())
    }
}

/// `Write::write_all_vectored` is not stable; this is it.
fn write_all_vectored(mut file: &File, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Opens `path` to read and write, creating it (empty) if it does not exist: the catalog's
/// file.
pub fn open_or_create(path: &Path) -> io::Result<File> {
    let file = File::options().read(true).write(true).create(true).truncate(false).open(path)?;
    note!(path, |path| journal::Op::Create { path, truncate: false });
    Ok(file)
}

/// Makes `dir` and every directory above it that is missing. Their names are durable only
/// once their parents are synced.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    note!(dir, journal::Op::MkDirAll);
    Ok(())
}

/// Makes a file's bytes and length durable (not its name: see [`sync_dir`]).
pub fn sync_file(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_data()?;
    note!(path, journal::Op::SyncFile);
    Ok(())
}

/// Makes a directory's entries durable (a new file's name, a rename, a removal).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()?;
    note!(dir, journal::Op::SyncDir);
    Ok(())
}

/// Removes a file's name (durable once its directory is synced).
pub fn remove_file(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path)?;
    note!(path, journal::Op::Remove);
    Ok(())
}

/// Writes `bytes` to `path` durably: a synced temporary file renamed into place, and the
/// directory synced (created, and its parent synced, if new).
pub fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_synced_mode(path, bytes, 0o644)
}

/// [`write_synced`] for a file only its owner may read (a private key): the temporary file
/// has mode `0600` from its creation, before a byte is written.
pub fn write_synced_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_synced_mode(path, bytes, 0o600)
}

fn write_synced_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().ok_or_else(|| io::Error::other("no directory"))?;
    if !dir.exists() {
        create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    // A stale temporary file (a power cut mid-write) may have another mode: start afresh.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
    note!(&tmp, |path| journal::Op::Create { path, truncate: true });
    f.write_all(bytes)?;
    note!(&tmp, |path| journal::Op::Write { path, offset: 0, data: bytes.to_vec() });
    f.sync_all()?;
    note!(&tmp, journal::Op::SyncFile);
    drop(f);
    rename(&tmp, path)?;
    sync_dir(dir)
}

/// Renames `from` to `to` (durable once their directory is synced).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)?;
    #[cfg(test)]
    journal::note_rename(from, to);
    Ok(())
}
