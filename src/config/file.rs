//! The config file as the web face changes it: its text, the typed config read from it and
//! the revision they are, held under one lock so that one change is planned, written and
//! applied at a time. A change is written crash-safely (a synced temporary file renamed
//! over it, the folder synced) before its revision is committed to the catalog; a power
//! cut leaves the whole old file or the whole new one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::{Mutex, MutexGuard, OwnedMutexGuard};

use super::Config;
use super::change::ChangeSet;
use super::plan::{self, Plan};
use crate::catalog::{Catalog, CatalogError, ConfigRevision};

/// What the running box was configured from.
pub struct Current {
    pub rev: u64,
    pub text: String,
    pub config: Config,
    /// The text parsed for changes (once per revision, not once per plan).
    doc: toml_edit::DocumentMut,
    /// The running file as a revision not stored yet (a first start, a change by hand).
    unrecorded: Option<ConfigRevision>,
}

impl Current {
    fn new(rev: u64, text: String, config: Config) -> Current {
        // A file that `toml` read but `toml_edit` does not is left as an empty document: plans
        // on it fail with the validator's reason rather than the box failing to start.
        let doc = text.parse().unwrap_or_default();
        Current { rev, text, config, doc, unrecorded: None }
    }
}

/// Why a change set cannot become a plan.
#[derive(Debug)]
pub enum PlanError {
    /// The change set was made against `base`; the config is at `current` now.
    Conflict {
        base: u64,
        current: u64,
    },
    /// The field the change or the file names, and why.
    Refused(String, String),
    Catalog(CatalogError),
}

/// The config file and its revisions.
pub struct ConfigFile {
    path: PathBuf,
    catalog: Arc<Catalog>,
    current: Arc<Mutex<Current>>,
}

pub fn hash(text: &str) -> String {
    Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

impl ConfigFile {
    /// The file at `path`, whose `text` the running `config` was read from. When the newest
    /// revision kept is not this text (a first start, a change by hand, a crash between a
    /// write and its commit), the text becomes a new revision by `the file`.
    pub fn open(
        path: &Path,
        text: String,
        config: Config,
        catalog: Arc<Catalog>,
        now_us: i64,
    ) -> Result<ConfigFile, CatalogError> {
        let digest = hash(&text);
        let newest = catalog.newest_config_revision()?;
        // Nothing is written here: a box that starts on a full disk must not have a catalog
        // write fail before retention has made room. A file that is not the newest revision
        // becomes one (numbered now, stored with the next change).
        let (rev, unrecorded) = match newest {
            Some(r) if r.hash == digest => (r.rev, None),
            newest => {
                let summary = vec![
                    if newest.is_some() { "changed outside the web face" } else { "the first revision" }.to_string(),
                ];
                let r = ConfigRevision {
                    rev: 0,
                    time_us: now_us,
                    by: "the file".into(),
                    hash: digest,
                    summary,
                    text: text.clone(),
                };
                (newest.map_or(1, |n| n.rev + 1), Some(r))
            }
        };
        let mut current = Current::new(rev, text, config);
        current.unrecorded = unrecorded;
        Ok(ConfigFile { path: path.to_path_buf(), catalog, current: Arc::new(Mutex::new(current)) })
    }

    /// The running file as a revision when it is not stored yet: it heads the list of
    /// revisions the catalog keeps.
    pub fn unrecorded(current: &Current) -> Option<ConfigRevision> {
        current.unrecorded.as_ref().map(|r| ConfigRevision { rev: current.rev, ..r.clone() })
    }

    /// Holds the config for one plan or apply.
    pub async fn lock(&self) -> MutexGuard<'_, Current> {
        self.current.lock().await
    }

    /// [`ConfigFile::lock`], held across a write on the blocking pool.
    pub async fn lock_owned(&self) -> OwnedMutexGuard<Current> {
        self.current.clone().lock_owned().await
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Plans `set` on `current`.
    pub fn plan(&self, current: &Current, set: &ChangeSet) -> Result<Plan, PlanError> {
        if set.base != current.rev {
            return Err(PlanError::Conflict { base: set.base, current: current.rev });
        }
        let mut lookup = None;
        let earlier = |rev| match self.catalog.config_revision(rev) {
            Ok(r) => r.map(|r| r.text),
            Err(e) => {
                lookup = Some(e);
                None
            }
        };
        let name = self.path.file_name().map_or("config".into(), |n| n.to_string_lossy().into_owned());
        let base_dir = self.path.parent().unwrap_or(Path::new("."));
        let result = plan::plan_on(&current.config, &current.doc, set, earlier, &name, base_dir);
        if let Some(e) = lookup {
            return Err(PlanError::Catalog(e));
        }
        result.map_err(|(field, why)| PlanError::Refused(field, why))
    }

    /// Writes `plan` as the file (durably), then its revision by `by`; `current` follows.
    /// Returns the new revision.
    pub fn write(&self, current: &mut Current, plan: Plan, by: &str, now_us: i64) -> Result<u64, WriteError> {
        // The file it replaces is kept as a revision first, if it is not yet.
        if let Some(r) = &current.unrecorded {
            self.catalog.add_config_revision(r).map_err(WriteError::Catalog)?;
            current.unrecorded = None;
        }
        crate::base::fs::write_synced(&self.path, plan.text.as_bytes()).map_err(WriteError::File)?;
        let r = ConfigRevision {
            rev: 0,
            time_us: now_us,
            by: by.to_string(),
            hash: hash(&plan.text),
            summary: plan.summary(),
            text: plan.text.clone(),
        };
        let rev = self.catalog.add_config_revision(&r).map_err(WriteError::Catalog)?;
        *current = Current::new(rev, plan.text, plan.config);
        Ok(rev)
    }
}

/// Why a planned change was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing the config file: {0}")]
    File(std::io::Error),
    #[error("recording the revision: {0}")]
    Catalog(CatalogError),
}
