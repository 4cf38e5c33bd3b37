//! Revisions of the config file in the catalog: who changed it, when, what (a redacted
//! summary) and the whole text, so that a rollback can restore it. The newest
//! [`limits::CONFIG_REVISIONS_MAX`] are kept.
//!
//! Table `config_revisions`: revision number → [`ConfigRevision`] (JSON). The file is
//! written (and synced) before its revision is committed; a crash between the two leaves a
//! file newer than the newest revision, which the next start records as such.

use redb::{Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{Catalog, CatalogError, OrStorage, RowError};
use crate::limits;

pub(super) const CONFIG_REVISIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("config_revisions");

/// One revision of the config file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigRevision {
    /// Its number (the table's key; 0 until stored).
    #[serde(skip)]
    pub rev: u64,
    pub time_us: i64,
    /// Who made it: a user, or `the file` for a change made outside the web face.
    pub by: String,
    /// SHA-256 of the text, hex.
    pub hash: String,
    /// What changed, one line each, with no secret in it.
    pub summary: Vec<String>,
    /// The whole file (camera passwords included: it never leaves the box).
    pub text: String,
}

fn decode(rev: u64, b: &[u8]) -> Result<ConfigRevision, CatalogError> {
    let mut r: ConfigRevision =
        serde_json::from_slice(b).map_err(|_| RowError { table: "config_revisions", why: "not a config revision" })?;
    r.rev = rev;
    Ok(r)
}

impl Catalog {
    /// Stores `r` as the next revision (durably) and drops the oldest beyond the ceiling;
    /// returns its number.
    pub fn add_config_revision(&self, r: &ConfigRevision) -> Result<u64, CatalogError> {
        let json = serde_json::to_vec(r).expect("a revision serializes");
        let mut txn = self.db()?.begin_write().storage()?;
        txn.set_durability(Durability::Immediate).storage()?;
        let rev = {
            let mut t = txn.open_table(CONFIG_REVISIONS).storage()?;
            let rev = t.last().storage()?.map_or(1, |(k, _)| k.value() + 1);
            t.insert(rev, json.as_slice()).storage()?;
            let keep_from = rev.saturating_sub(limits::CONFIG_REVISIONS_MAX as u64 - 1);
            t.retain_in(..keep_from, |_, _| false).storage()?;
            rev
        };
        txn.commit().storage()?;
        Ok(rev)
    }

    /// The kept revisions, newest first.
    pub fn config_revisions(&self) -> Result<Vec<ConfigRevision>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(CONFIG_REVISIONS).storage()?;
        let mut out = Vec::new();
        for entry in t.iter().storage()?.rev() {
            let (k, v) = entry.storage()?;
            out.push(decode(k.value(), v.value())?);
        }
        Ok(out)
    }

    /// Revision `rev`, if it is kept.
    pub fn config_revision(&self, rev: u64) -> Result<Option<ConfigRevision>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(CONFIG_REVISIONS).storage()?;
        t.get(rev).storage()?.map(|v| decode(rev, v.value())).transpose()
    }

    /// The newest revision.
    pub fn newest_config_revision(&self) -> Result<Option<ConfigRevision>, CatalogError> {
        let txn = self.db()?.begin_read().storage()?;
        let t = txn.open_table(CONFIG_REVISIONS).storage()?;
        t.last().storage()?.map(|(k, v)| decode(k.value(), v.value())).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions_are_numbered_and_the_oldest_go_past_the_ceiling() {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(&dir.path().join("c.redb")).unwrap();
        assert_eq!(c.newest_config_revision().unwrap(), None);
        let make = |i: usize| ConfigRevision {
            rev: 0,
            time_us: i as i64,
            by: "root".into(),
            hash: format!("{i}"),
            summary: vec![format!("change {i}")],
            text: format!("# {i}\n"),
        };
        let n = limits::CONFIG_REVISIONS_MAX + 3;
        for i in 1..=n {
            assert_eq!(c.add_config_revision(&make(i)).unwrap(), i as u64);
        }
        let kept = c.config_revisions().unwrap();
        assert_eq!(kept.len(), limits::CONFIG_REVISIONS_MAX, "the ceiling");
        assert_eq!(kept[0].rev, n as u64, "newest first");
        assert_eq!(kept.last().unwrap().rev, 4);
        assert_eq!(c.config_revision(3).unwrap(), None, "dropped");
        assert_eq!(c.config_revision(4).unwrap().unwrap().text, "# 4\n");
        assert_eq!(c.newest_config_revision().unwrap().unwrap().rev, n as u64);
    }
}
