//! Holds: the footage around events, kept against ordinary retention.
//!
//! An event stored for a camera that keeps its events' footage (`keep_event_footage_days`)
//! holds that camera's recordings from its pre-roll to its post-roll until a time (the
//! catalog's `event_holds`, see [`crate::catalog::events::Hold`]). Here, in memory, the holds
//! of one camera that overlap are one span (the union of their windows, the latest end of
//! hold): a burst of events is one span, not hundreds. At most
//! [`limits::EVENT_HOLD_SPANS_MAX`] spans are kept; past that the oldest lapses.
//!
//! Before each retention pass the flusher asks which recordings are held ([`Holds::held`]):
//! spans newest first, each as long as every stream of its camera stays within the share of
//! its cap that holds may keep (`retention.held_max_percent`). A span that does not fit
//! lapses for good: its footage is ordinary footage again, and its events say so. Retention
//! then deletes unheld recordings before held ones ([`super::retention::plan`]); the disk's
//! reserve still wins over a hold.
//!
//! Deleting an event releases its hold: the camera's spans are built again from the
//! catalog's holds without it ([`Holds::reload_camera`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use super::retention::Index;
use crate::catalog::events::{Hold, HoldRow};
use crate::limits;

/// One span of held footage of a camera, from the key of its map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    to_us: i64,
    until_us: i64,
    /// The stream's held share was full: no longer held.
    lapsed: bool,
}

/// What holds an event's moment now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldState {
    /// Held against retention until then (µs).
    Held { until_us: i64 },
    /// Its hold lapsed early: the held share was full, or too many spans were held.
    Lapsed,
    /// Nothing holds it.
    None,
}

#[derive(Default)]
struct Spans {
    by_camera: BTreeMap<String, BTreeMap<i64, Span>>,
    count: usize,
}

impl Spans {
    fn add(&mut self, camera: &str, h: Hold) {
        let (mut from_us, mut to_us, mut until_us) = (h.from_us, h.to_us.max(h.from_us), h.until_us);
        let spans = self.by_camera.entry(camera.to_string()).or_default();
        // Spans are disjoint and in order: the ones that overlap the new window are the
        // last few starting at or before its end.
        let overlapping: Vec<i64> =
            spans.range(..=to_us).rev().take_while(|(_, s)| s.to_us >= from_us).map(|(&f, _)| f).collect();
        for f in overlapping {
            let s = spans.remove(&f).expect("listed above");
            from_us = from_us.min(f);
            to_us = to_us.max(s.to_us);
            until_us = until_us.max(s.until_us);
            self.count -= 1;
        }
        spans.insert(from_us, Span { to_us, until_us, lapsed: false });
        self.count += 1;
        while self.count > limits::EVENT_HOLD_SPANS_MAX {
            self.drop_oldest();
        }
    }

    /// Drops the span that starts first, of any camera.
    fn drop_oldest(&mut self) {
        let oldest =
            self.by_camera.iter().filter_map(|(c, spans)| spans.first_key_value().map(|(&f, _)| (f, c.clone()))).min();
        if let Some((from_us, camera)) = oldest {
            self.remove(&camera, from_us);
        }
    }

    fn remove(&mut self, camera: &str, from_us: i64) {
        if let Some(spans) = self.by_camera.get_mut(camera)
            && spans.remove(&from_us).is_some()
        {
            self.count -= 1;
            if spans.is_empty() {
                self.by_camera.remove(camera);
            }
        }
    }

    fn expire(&mut self, now_us: i64) {
        let mut gone = 0;
        for spans in self.by_camera.values_mut() {
            let before = spans.len();
            spans.retain(|_, s| s.until_us > now_us);
            gone += before - spans.len();
        }
        self.by_camera.retain(|_, spans| !spans.is_empty());
        self.count -= gone;
    }
}

/// Every camera's held spans, shared by the event intake (adds), the flusher (asks what is
/// held) and the API (asks what holds an event).
#[derive(Default)]
pub struct Holds {
    spans: Mutex<Spans>,
}

impl Holds {
    /// The holds the catalog keeps (those still running).
    pub fn new(rows: impl IntoIterator<Item = HoldRow>) -> Holds {
        let mut spans = Spans::default();
        for r in rows {
            spans.add(&r.camera, r.hold);
        }
        Holds { spans: Mutex::new(spans) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spans> {
        self.spans.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `camera`'s footage of a new event.
    pub fn add(&self, camera: &str, hold: Hold) {
        self.lock().add(camera, hold);
    }

    /// Builds `camera`'s spans again from its holds in the catalog (after an event's hold was
    /// released). Spans that had lapsed stay lapsed.
    pub fn reload_camera(&self, camera: &str, rows: impl IntoIterator<Item = HoldRow>) {
        let mut spans = self.lock();
        let lapsed: Vec<(i64, i64)> = spans
            .by_camera
            .get(camera)
            .map(|m| m.iter().filter(|(_, s)| s.lapsed).map(|(&f, s)| (f, s.to_us)).collect())
            .unwrap_or_default();
        if let Some(old) = spans.by_camera.remove(camera) {
            spans.count -= old.len();
        }
        for r in rows {
            spans.add(camera, r.hold);
        }
        if let Some(m) = spans.by_camera.get_mut(camera) {
            for s in m.iter_mut().filter(|(f, s)| lapsed.iter().any(|&(lf, lt)| **f <= lt && s.to_us >= lf)) {
                s.1.lapsed = true;
            }
        }
    }

    /// What holds `camera`'s footage at `at_us`.
    pub fn state(&self, camera: &str, at_us: i64, now_us: i64) -> HoldState {
        let spans = self.lock();
        let span = spans.by_camera.get(camera).and_then(|m| m.range(..=at_us).next_back()).map(|(_, s)| *s);
        match span {
            Some(s) if s.to_us >= at_us && s.until_us > now_us && s.lapsed => HoldState::Lapsed,
            Some(s) if s.to_us >= at_us && s.until_us > now_us => HoldState::Held { until_us: s.until_us },
            _ => HoldState::None,
        }
    }

    /// Spans kept (lapsed ones too).
    pub fn len(&self) -> usize {
        self.lock().count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The closed recordings held now (see the module's notes); spans that ended go, spans
    /// that no longer fit their streams' share lapse. `camera_of` names each stream's camera.
    pub fn held(
        &self,
        index: &Index,
        camera_of: &BTreeMap<u32, String>,
        held_max_bytes: u64,
        now_us: i64,
    ) -> BTreeSet<u64> {
        let mut spans = self.lock();
        spans.expire(now_us);
        let mut held = BTreeSet::new();
        if spans.count == 0 {
            return held;
        }
        // Each stream's closed recordings in time order, and each camera's streams.
        let mut by_stream: BTreeMap<u32, Vec<(i64, i64, u64, u64)>> = BTreeMap::new();
        for (&id, e) in index.iter().filter(|(_, e)| !e.open) {
            by_stream.entry(e.stream_id).or_default().push((e.start_us, e.end_us, id, e.bytes));
        }
        for recs in by_stream.values_mut() {
            recs.sort_unstable();
        }
        let mut streams_of: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (stream_id, camera) in camera_of {
            streams_of.entry(camera.as_str()).or_default().push(*stream_id);
        }
        let mut order: Vec<(i64, &String, &mut Span)> = spans
            .by_camera
            .iter_mut()
            .flat_map(|(camera, m)| m.iter_mut().map(move |(&f, s)| (f, camera, s)))
            .filter(|(_, _, s)| !s.lapsed)
            .collect();
        order.sort_unstable_by_key(|(f, _, _)| std::cmp::Reverse(*f));
        let mut held_bytes: BTreeMap<u32, u64> = BTreeMap::new();
        for (from_us, camera, span) in order {
            let mut taken: Vec<(u32, u64, u64)> = Vec::new();
            for &stream_id in streams_of.get(camera.as_str()).map_or(&[][..], |v| v.as_slice()) {
                let Some(recs) = by_stream.get(&stream_id) else { continue };
                let first = recs.partition_point(|r| r.1 < from_us);
                for &(start_us, _, id, bytes) in recs[first..].iter().take_while(|r| r.0 <= span.to_us) {
                    if start_us <= span.to_us && !held.contains(&id) {
                        taken.push((stream_id, id, bytes));
                    }
                }
            }
            let mut wanted: BTreeMap<u32, u64> = BTreeMap::new();
            for &(stream_id, _, bytes) in &taken {
                *wanted.entry(stream_id).or_default() += bytes;
            }
            let fits = wanted
                .iter()
                .all(|(s, b)| held_bytes.get(s).copied().unwrap_or(0).saturating_add(*b) <= held_max_bytes);
            if !fits {
                span.lapsed = true;
                continue;
            }
            for (stream_id, id, bytes) in taken {
                *held_bytes.entry(stream_id).or_default() += bytes;
                held.insert(id);
            }
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::super::retention::Entry;
    use super::*;

    const MIN: i64 = 60_000_000;

    fn hold(from_min: i64, to_min: i64, until_us: i64) -> Hold {
        Hold { from_us: from_min * MIN, to_us: to_min * MIN, until_us }
    }

    /// Recordings of a minute each: id n is minute n of stream 1 (camera `a`), id 100 + n
    /// minute n of stream 2 (camera `b`), each of 10 bytes.
    fn index(minutes: i64) -> (Index, BTreeMap<u32, String>) {
        let mut i = Index::new();
        for n in 0..minutes {
            for (stream_id, base) in [(1, 0), (2, 100)] {
                let e = Entry { stream_id, bytes: 10, open: false, start_us: n * MIN, end_us: (n + 1) * MIN };
                i.insert(base + n as u64, e);
            }
        }
        (i, BTreeMap::from([(1, "a".to_string()), (2, "b".to_string())]))
    }

    #[test]
    fn overlapping_holds_of_a_camera_are_one_span_and_others_stand_apart() {
        let h = Holds::default();
        h.add("a", hold(10, 12, 100));
        h.add("a", hold(11, 13, 200));
        h.add("a", hold(20, 21, 100));
        h.add("b", hold(10, 12, 100));
        assert_eq!(h.len(), 3);
        assert_eq!(h.state("a", 10 * MIN, 0), HoldState::Held { until_us: 200 }, "the latest end of hold");
        assert_eq!(h.state("a", 15 * MIN, 0), HoldState::None, "between spans");
        // A window over both joins them.
        h.add("a", hold(12, 20, 50));
        assert_eq!(h.len(), 2);
        assert_eq!(h.state("a", 21 * MIN, 0), HoldState::Held { until_us: 200 });
        assert_eq!(h.state("a", 21 * MIN, 200), HoldState::None, "ended");
    }

    #[test]
    fn the_recordings_a_span_reaches_are_held_until_it_ends() {
        let (i, cams) = index(30);
        let h = Holds::default();
        h.add("a", hold(10, 11, 1_000));
        // Minutes 9 (ends at 10), 10 and 11 (starts at 11): all touch the window.
        assert_eq!(h.held(&i, &cams, 1_000, 0), BTreeSet::from([9, 10, 11]));
        assert_eq!(h.held(&i, &cams, 1_000, 1_000), BTreeSet::new(), "ended: gone");
        assert!(h.is_empty());
    }

    #[test]
    fn past_a_streams_held_share_the_oldest_spans_lapse_for_good() {
        let (i, cams) = index(60);
        let h = Holds::default();
        for m in [10, 20, 30, 40] {
            h.add("a", hold(m, m, i64::MAX));
        }
        // Each span holds 2 recordings (the minute before it ends where it starts): 20
        // bytes; 50 bytes fit two spans, the newest.
        let held = h.held(&i, &cams, 50, 0);
        assert_eq!(held, BTreeSet::from([29, 30, 39, 40]));
        assert_eq!(h.state("a", 10 * MIN, 0), HoldState::Lapsed);
        assert_eq!(h.state("a", 40 * MIN, 0), HoldState::Held { until_us: i64::MAX });
        // Lapsed stays lapsed, even with room again.
        assert_eq!(h.held(&i, &cams, 1_000, 0), held);
        // Camera b's share is its own.
        h.add("b", hold(5, 5, i64::MAX));
        assert!(h.held(&i, &cams, 50, 0).is_superset(&BTreeSet::from([104, 105])));
    }

    #[test]
    fn a_released_hold_is_built_again_without_it() {
        let (i, cams) = index(30);
        let rows = |spans: &[(i64, i64)]| -> Vec<HoldRow> {
            spans
                .iter()
                .enumerate()
                .map(|(n, &(f, t))| HoldRow { event: n as u64, camera: "a".into(), hold: hold(f, t, i64::MAX) })
                .collect()
        };
        let h = Holds::new(rows(&[(10, 10), (20, 20)]));
        assert_eq!(h.held(&i, &cams, 1_000, 0), BTreeSet::from([9, 10, 19, 20]));
        h.reload_camera("a", rows(&[(20, 20)]));
        assert_eq!(h.held(&i, &cams, 1_000, 0), BTreeSet::from([19, 20]));
    }

    #[test]
    fn at_most_event_hold_spans_max_spans_are_kept_the_oldest_lapsing() {
        let h = Holds::default();
        let n = limits::EVENT_HOLD_SPANS_MAX as i64 + 5;
        for m in 0..n {
            h.add(
                if m % 2 == 0 { "a" } else { "b" },
                Hold { from_us: m * 10 * MIN, to_us: m * 10 * MIN + 1, until_us: i64::MAX },
            );
        }
        assert_eq!(h.len(), limits::EVENT_HOLD_SPANS_MAX);
        assert_eq!(h.state("a", 0, 0), HoldState::None, "the oldest went");
        let last = if (n - 1) % 2 == 0 { "a" } else { "b" };
        assert_eq!(h.state(last, (n - 1) * 10 * MIN, 0), HoldState::Held { until_us: i64::MAX });
    }
}
