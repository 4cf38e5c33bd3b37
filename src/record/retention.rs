//! Which recordings to delete, oldest first, to keep each stream under its byte cap, all
//! streams under the total cap, and the disk above its free-space reserve. Pure: the caller
//! deletes, through the catalog's garbage list.
//!
//! An open recording (still being written) is never chosen; everything else is fair game,
//! so a full disk always gives way to new video. Recordings an event holds
//! ([`super::holds`]) go only after every unheld one, whatever their age: ordinary footage
//! first. At shutdown (`keep_newest`) the disk reserve spares each stream's newest
//! recording: nothing more will be recorded to need the space, and the box keeps its latest
//! footage however full the disk is with other files.
//!
//! Recordings an archive target must store first ([`super::gate`]) are passed over by the
//! caps; the disk's reserve takes them only after all other unheld footage.

use std::collections::{BTreeMap, BTreeSet};

use crate::base::fs::Disk;
use crate::catalog::Loss;
use crate::config::Retention;

/// What retention needs to know of one recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub stream_id: u32,
    pub bytes: u64,
    pub open: bool,
    /// Its wall-time span, µs: what holds are matched against.
    pub start_us: i64,
    pub end_us: i64,
}

/// Recordings by id; ids grow with time, so the first is the oldest.
pub type Index = BTreeMap<u64, Entry>;

/// Recording ids to delete, unheld ones oldest first then held ones oldest first, each with
/// why: a cap, or the disk's reserve.
pub fn plan(
    index: &Index,
    caps: &Retention,
    disk: Option<Disk>,
    keep_newest: bool,
    held: &BTreeSet<u64>,
    waiting: &BTreeSet<u64>,
) -> Vec<(u64, Loss)> {
    let mut per_stream: BTreeMap<u32, u64> = BTreeMap::new();
    let mut total: u64 = 0;
    for e in index.values() {
        *per_stream.entry(e.stream_id).or_default() += e.bytes;
        total += e.bytes;
    }
    let mut newest: BTreeMap<u32, u64> = BTreeMap::new();
    for (&id, e) in index {
        newest.insert(e.stream_id, id);
    }
    let mut freed: u64 = 0;
    let mut doomed = Vec::new();
    // Ordinary footage first, then what an archive target still wants (the caps pass over
    // it, the disk's reserve takes it only when the rest is not enough), then what events
    // hold.
    let unheld = index.iter().filter(|(id, _)| !held.contains(id));
    let archived = unheld.clone().filter(|(id, _)| !waiting.contains(id));
    let unarchived = unheld.filter(|(id, _)| waiting.contains(id));
    let held = index.iter().filter(|(id, _)| held.contains(id));
    for (&id, e) in archived.chain(unarchived).chain(held) {
        if e.open {
            continue;
        }
        let stream_bytes = per_stream.get_mut(&e.stream_id).expect("counted above");
        let over_cap = *stream_bytes > caps.stream_max_bytes || total > caps.total_max_bytes;
        let by_cap = over_cap && !waiting.contains(&id);
        let spared = keep_newest && newest.get(&e.stream_id) == Some(&id);
        let short_of_disk = !spared && disk.is_some_and(|d| d.free_bytes + freed < d.reserve_bytes);
        if by_cap || short_of_disk {
            *stream_bytes -= e.bytes;
            total -= e.bytes;
            freed += e.bytes;
            doomed.push((id, if by_cap { Loss::Retention } else { Loss::DiskFull }));
        }
    }
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(stream: u64, total: u64) -> Retention {
        Retention { stream_max_bytes: stream, total_max_bytes: total, held_max_percent: 50 }
    }

    fn index(entries: &[(u64, u32, u64, bool)]) -> Index {
        let entry = |id: u64, stream_id, bytes, open| {
            let start_us = id as i64 * 60_000_000;
            Entry { stream_id, bytes, open, start_us, end_us: start_us + 60_000_000 }
        };
        entries.iter().map(|&(id, stream_id, bytes, open)| (id, entry(id, stream_id, bytes, open))).collect()
    }

    /// The plan's ids, with nothing held.
    fn plan(index: &Index, caps: &Retention, disk: Option<Disk>, keep_newest: bool) -> Vec<u64> {
        super::plan(index, caps, disk, keep_newest, &BTreeSet::new(), &BTreeSet::new())
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    #[test]
    fn per_stream_cap_deletes_that_streams_oldest() {
        let i = index(&[(1, 1, 10, false), (2, 2, 10, false), (3, 1, 10, false), (4, 1, 10, true)]);
        assert_eq!(plan(&i, &caps(20, 1000), None, true), vec![1]);
        assert_eq!(plan(&i, &caps(10, 1000), None, true), vec![1, 3]);
    }

    #[test]
    fn total_cap_deletes_the_oldest_of_any_stream() {
        let i = index(&[(1, 2, 10, false), (2, 1, 10, false), (3, 1, 10, true)]);
        assert_eq!(plan(&i, &caps(100, 25), None, true), vec![1]);
        assert_eq!(plan(&i, &caps(100, 10), None, true), vec![1, 2]);
    }

    #[test]
    fn without_a_waiting_write_the_disk_reserve_spares_each_streams_newest_recording() {
        let disk = Some(Disk { free_bytes: 0, reserve_bytes: 1_000, total_bytes: 10_000 });
        // Stream 1 stopped: its last recording stays; stream 2's closed one goes, as its open
        // one is newer.
        let i = index(&[(1, 1, 10, false), (2, 2, 10, false), (3, 1, 10, false), (4, 2, 10, true)]);
        assert_eq!(plan(&i, &caps(1000, 1000), disk, true), vec![1, 2]);
        // A write waiting for space may take it; so may the caps.
        assert_eq!(plan(&i, &caps(1000, 1000), disk, false), vec![1, 2, 3]);
        assert_eq!(plan(&i, &caps(5, 1000), disk, true), vec![1, 2, 3]);
    }

    #[test]
    fn open_recordings_are_never_deleted() {
        let i = index(&[(1, 1, 100, true)]);
        assert!(plan(&i, &caps(1, 1), None, true).is_empty());
    }

    #[test]
    fn held_recordings_go_after_every_unheld_one_and_each_says_why() {
        let i = index(&[(1, 1, 10, false), (2, 1, 10, false), (3, 1, 10, false), (4, 1, 10, true)]);
        let held = BTreeSet::from([1]);
        // Over the stream cap by 20: the two oldest unheld go, the held one stays.
        assert_eq!(
            super::plan(&i, &caps(20, 1000), None, false, &held, &BTreeSet::new()),
            vec![(2, Loss::Retention), (3, Loss::Retention)]
        );
        // Over by 30: the held one goes last.
        assert_eq!(
            super::plan(&i, &caps(10, 1000), None, false, &held, &BTreeSet::new()),
            vec![(2, Loss::Retention), (3, Loss::Retention), (1, Loss::Retention)]
        );
        // A short disk, within the caps, deletes unheld first too, and says so.
        let disk = Some(Disk { free_bytes: 0, reserve_bytes: 15, total_bytes: 100 });
        assert_eq!(
            super::plan(&i, &caps(100, 1000), disk, false, &held, &BTreeSet::new()),
            vec![(2, Loss::DiskFull), (3, Loss::DiskFull)]
        );
        let disk = Some(Disk { free_bytes: 0, reserve_bytes: 25, total_bytes: 100 });
        assert_eq!(
            super::plan(&i, &caps(100, 1000), disk, false, &held, &BTreeSet::new()).last(),
            Some(&(1, Loss::DiskFull))
        );
    }

    #[test]
    fn the_caps_pass_over_footage_waiting_for_the_archive_and_the_disk_reserve_does_not() {
        let i = index(&[(1, 1, 10, false), (2, 1, 10, false), (3, 1, 10, false), (4, 1, 10, true)]);
        let waiting = BTreeSet::from([1, 2]);
        let planned = |disk| super::plan(&i, &caps(10, 1000), disk, false, &BTreeSet::new(), &waiting);
        assert_eq!(planned(None), vec![(3, Loss::Retention)], "over the cap by 30: only the archived one goes");
        // Short of 15 bytes: the archived one first, then the oldest waiting one.
        let disk = Some(Disk { free_bytes: 0, reserve_bytes: 15, total_bytes: 100 });
        assert_eq!(planned(disk), vec![(3, Loss::Retention), (1, Loss::DiskFull)]);
    }

    #[test]
    fn a_short_disk_frees_until_the_reserve_is_met() {
        let i = index(&[(1, 1, 10, false), (2, 1, 10, false), (3, 1, 10, false)]);
        let disk = Disk { free_bytes: 5, reserve_bytes: 20, total_bytes: 100 };
        assert_eq!(plan(&i, &caps(100, 100), Some(disk), false), vec![1, 2]);
        let fine = Disk { free_bytes: 50, reserve_bytes: 20, total_bytes: 100 };
        assert!(plan(&i, &caps(100, 100), Some(fine), false).is_empty());
    }
}
