//! The catalog's share of flash wear: a redb storage backend around redb's own file backend
//! that counts the bytes redb writes and the syncs it asks for. redb reports neither, and on
//! an SD card or eMMC the catalog's page rewrites are a real part of what wears it out
//! (see `docs/durability.md`). Every call is passed on unchanged (and, in tests, noted in
//! the file layer's journal when one watches the catalog, like every other write to the
//! data disk).

use std::fs::File;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// What the catalog wrote since the box started.
#[derive(Debug, Default)]
pub struct CatalogWrites {
    pub bytes: AtomicU64,
    pub syncs: AtomicU64,
    /// Of `bytes`, what storing events wrote (their commits).
    pub event_bytes: AtomicU64,
}

impl CatalogWrites {
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// redb's file backend, counted.
#[derive(Debug)]
pub(super) struct Counted {
    inner: FileBackend,
    writes: Arc<CatalogWrites>,
    #[cfg(test)]
    watch: Option<crate::base::fs::journal::Watch>,
}

impl Counted {
    pub(super) fn new(
        file: File,
        #[cfg_attr(not(test), allow(unused_variables))] path: &std::path::Path,
        writes: Arc<CatalogWrites>,
    ) -> Result<Counted, redb::DatabaseError> {
        Ok(Counted {
            inner: FileBackend::new(file)?,
            writes,
            #[cfg(test)]
            watch: crate::base::fs::journal::watch(path),
        })
    }
}

/// Notes what was just done to the catalog's file in the journal watching it (tests only).
macro_rules! note {
    ($self:ident, $op:expr) => {
        #[cfg(test)]
        if let Some(w) = &$self.watch {
            w.note($op);
        }
    };
}

impl StorageBackend for Counted {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.inner.set_len(len)?;
        note!(self, |path| crate::base::fs::journal::Op::SetLen { path, len });
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.writes.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()?;
        note!(self, crate::base::fs::journal::Op::SyncFile);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.writes.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset, data)?;
        note!(self, |path| crate::base::fs::journal::Op::Write { path, offset, data: data.to_vec() });
        Ok(())
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
