//! The archive gate: local footage retention waits for, because a target with
//! `before_delete` has yet to archive it.
//!
//! Each such target tells the gate, after each count of its backlog, which recordings it
//! still wants (`pending`: not archived, and taken by it or maybe taken later: open, or an
//! event may still come for them) and up to which id it looked; every recording from that id
//! on waits too, as the target has not seen it yet. A recording it stores leaves `pending`
//! at once ([`Gate::archived`]).
//!
//! Before each retention pass the flusher asks which recordings wait ([`Gate::waiting`]):
//! per target, the recordings it wants, less the oldest of them while they are more than
//! its `backlog_max`; those go anyway. Retention's caps pass over a waiting recording; the
//! disk's reserve does not ([`super::retention::plan`]). A recording deleted while a target
//! still wanted it is counted against that target ([`Gate::deleted`]), and shown.
//!
//! A target is in the gate from the start (everything waits until its first count), so the
//! first retention pass after a restart cannot take what it had not archived.

use std::collections::BTreeSet;
use std::sync::Mutex;

use super::retention::Index;
use crate::config::ArchiveTarget;

/// One target retention waits for.
#[derive(Debug, Clone)]
struct Waiting {
    target: String,
    max_bytes: u64,
    /// Every recording from this id on waits (the target has not looked at it yet).
    looked_upto: u64,
    /// Recordings below `looked_upto` the target still wants, ascending.
    pending: Vec<u64>,
    /// Recordings deleted while the target wanted them.
    deleted: u64,
}

impl Waiting {
    fn wants(&self, rec: u64) -> bool {
        rec >= self.looked_upto || self.pending.binary_search(&rec).is_ok()
    }
}

/// What local retention waits for. Shared by the flusher (which reads it) and the archive's
/// targets (which keep it).
#[derive(Debug, Default)]
pub struct Gate {
    targets: Mutex<Vec<Waiting>>,
}

impl Gate {
    /// A gate for the `before_delete` targets of `targets`.
    pub fn new(targets: &[ArchiveTarget]) -> Gate {
        let gate = Gate::default();
        gate.set_targets(targets);
        gate
    }

    /// Target `target` looked at every recording below `looked_upto`: of those it wants
    /// `pending` (any order).
    pub fn looked(&self, target: &str, looked_upto: u64, mut pending: Vec<u64>) {
        pending.sort_unstable();
        pending.dedup();
        let mut targets = self.targets.lock().expect("lock");
        if let Some(w) = targets.iter_mut().find(|w| w.target == target) {
            (w.looked_upto, w.pending) = (looked_upto, pending);
        }
    }

    /// The targets are now `targets` (a config change): one that is not, or no longer waits
    /// (`before_delete` off), goes; a new one waits for everything until its first look; one
    /// that stays keeps what it knew, with its new ceiling.
    pub fn set_targets(&self, targets: &[ArchiveTarget]) {
        let mut waiting = self.targets.lock().expect("lock");
        waiting.retain(|w| targets.iter().any(|t| t.before_delete && t.id == w.target));
        for t in targets.iter().filter(|t| t.before_delete) {
            match waiting.iter_mut().find(|w| w.target == t.id) {
                Some(w) => w.max_bytes = t.backlog_max_bytes,
                None => waiting.push(Waiting {
                    target: t.id.clone(),
                    max_bytes: t.backlog_max_bytes,
                    looked_upto: 0,
                    pending: Vec::new(),
                    deleted: 0,
                }),
            }
        }
    }

    /// Target `target` does not run: retention no longer waits for it.
    pub fn forget(&self, target: &str) {
        self.targets.lock().expect("lock").retain(|w| w.target != target);
    }

    /// Target `target` stored recording `rec`.
    pub fn archived(&self, target: &str, rec: u64) {
        let mut targets = self.targets.lock().expect("lock");
        if let Some(w) = targets.iter_mut().find(|w| w.target == target)
            && let Ok(i) = w.pending.binary_search(&rec)
        {
            w.pending.remove(i);
        }
    }

    /// The closed recordings of `index` retention's caps must pass over: each target's
    /// wanted ones but the oldest of them past its backlog ceiling.
    pub fn waiting(&self, index: &Index) -> BTreeSet<u64> {
        let targets = self.targets.lock().expect("lock");
        let mut out = BTreeSet::new();
        for w in targets.iter() {
            let wanted: Vec<(u64, u64)> =
                index.iter().filter(|(id, e)| !e.open && w.wants(**id)).map(|(&id, e)| (id, e.bytes)).collect();
            let mut bytes: u64 = wanted.iter().map(|(_, b)| b).sum();
            for (id, b) in wanted {
                if bytes > w.max_bytes {
                    bytes -= b;
                } else {
                    out.insert(id);
                }
            }
        }
        out
    }

    /// Recordings `ids` were deleted: each a target still wanted counts against it. Returns
    /// the targets that wanted any, for the log.
    pub fn deleted(&self, ids: &[u64]) -> Vec<String> {
        let mut targets = self.targets.lock().expect("lock");
        let mut named = Vec::new();
        for w in targets.iter_mut() {
            let wanted = ids.iter().filter(|id| w.wants(**id)).count() as u64;
            if wanted > 0 {
                w.deleted += wanted;
                w.pending.retain(|p| !ids.contains(p));
                named.push(w.target.clone());
            }
        }
        named
    }

    /// Recordings deleted locally while `target` still wanted them (none for a target that
    /// retention does not wait for).
    pub fn deleted_unarchived(&self, target: &str) -> Option<u64> {
        self.targets.lock().expect("lock").iter().find(|w| w.target == target).map(|w| w.deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::retention::Entry;

    fn target(id: &str, before_delete: bool, max: u64) -> ArchiveTarget {
        let mut t = crate::config::archive::tests::target(id);
        (t.before_delete, t.backlog_max_bytes) = (before_delete, max);
        t
    }

    fn index(n: u64, open_from: u64) -> Index {
        (1..=n)
            .map(|id| (id, Entry { stream_id: 1, bytes: 10, open: id >= open_from, start_us: 0, end_us: 0 }))
            .collect()
    }

    #[test]
    fn everything_waits_until_a_target_first_looks_then_only_what_it_wants() {
        let gate = Gate::new(&[target("off", true, 1_000), target("other", false, 0)]);
        let i = index(6, 6);
        assert_eq!(gate.waiting(&i), BTreeSet::from([1, 2, 3, 4, 5]), "open ones are not counted");
        gate.looked("off", 4, vec![3, 2]);
        assert_eq!(gate.waiting(&i), BTreeSet::from([2, 3, 4, 5]), "and the ones past its look");
        gate.archived("off", 2);
        assert_eq!(gate.waiting(&i), BTreeSet::from([3, 4, 5]));
        assert_eq!(gate.deleted_unarchived("other"), None, "a target retention does not wait for");
    }

    #[test]
    fn past_the_backlog_ceiling_the_oldest_go_and_are_counted() {
        let gate = Gate::new(&[target("off", true, 25)]);
        gate.looked("off", 100, vec![1, 2, 3, 4]);
        // 40 bytes wanted, 25 may wait: the two oldest go.
        assert_eq!(gate.waiting(&index(5, 9)), BTreeSet::from([3, 4]));
        assert_eq!(gate.deleted(&[1, 2, 5]), vec!["off".to_string()]);
        assert_eq!(gate.deleted_unarchived("off"), Some(2), "5 was not wanted");
        assert_eq!(gate.waiting(&index(5, 9)), BTreeSet::from([3, 4]));
    }
}
