//! When the flusher flushes: a pure schedule over monotonic µs, tested without a clock.
//!
//! - **The interval**: one flush per flush interval, counted from the last flush, early or
//!   not, so an early flush takes the place of the next interval flush instead of adding one.
//! - **An event's moment**: every recorded stream of the event's camera cuts its open
//!   fragment at the first frame past the moment and says so ([`Schedule::moment`]); the
//!   flush comes once all of them have, or [`limits::EVENT_FLUSH_GATHER_MS`] after the first
//!   did. A camera recording a main and a sub stream costs one commit an event, not two; a
//!   cut that comes after its camera's flush (another flush came between, or the gathering
//!   ran out) is flushed at once, without a gathering of its own.
//! - **An event's post-roll**: covered by the first interval flush after it is written. An
//!   interval flush due after a post-roll's end, before the fragment holding that end is
//!   written (at its GOP's end), waits for it, at most [`limits::POST_ROLL_FLUSH_WAIT_MS`]
//!   past the end: the default post-roll is as long as the default interval, so without the
//!   wait the interval's flush would come just before the post-roll's last fragment is
//!   written, and the post-roll would wait a whole interval more. A post-roll told written
//!   again before that flush (an event recording goes on to its next keyframe) changes
//!   nothing. A post-roll written with nothing waiting for it (its moment was never told, or
//!   its wait ran out) is flushed early, but not sooner than
//!   [`limits::EVENT_FLUSH_MIN_INTERVAL_MS`] after the last flush.
//!
//! So an event costs one commit beyond the intervals' (its moment's) when the fragment
//! holding its post-roll's end is written within the wait (GOPs up to a fragment's longest,
//! 4 s), and its post-roll is durable within one interval of being written, as all footage
//! is, and at once when it ends with an interval. Why not a flush of its own for every
//! post-roll: two flushes an event cost 2 − (phase + post-roll) / interval commits each
//! beyond the intervals', up to 1.9 with a short post-roll (`docs/durability.md`).
//!
//! Bounded: one gathering a camera, dropped once complete or stale; one post-roll a stream,
//! dropped once covered or past its wait.

use std::collections::BTreeMap;

use crate::limits;

const WAIT_US: i64 = limits::POST_ROLL_FLUSH_WAIT_MS as i64 * 1000;
const GATHER_US: i64 = limits::EVENT_FLUSH_GATHER_MS as i64 * 1000;
const SPACING_US: i64 = limits::EVENT_FLUSH_MIN_INTERVAL_MS as i64 * 1000;

/// A flush the schedule asks for, and why (the early ones are counted apart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    Interval,
    Early,
}

/// The cuts of a camera's streams for an event's moment.
#[derive(Clone, Copy, Debug)]
struct Gathering {
    told: u32,
    /// Streams the event asked.
    asked: u32,
    first_us: i64,
}

/// A post-roll whose moment was told.
#[derive(Clone, Copy, Debug)]
struct PostRoll {
    end_us: i64,
    /// The fragment holding its end is written; the next interval flush covers it.
    written: bool,
}

#[derive(Debug)]
pub struct Schedule {
    interval_us: i64,
    /// The interval's next flush.
    interval_at_us: i64,
    /// The last flush.
    last_us: i64,
    /// An early flush asked for: an event's moment (gathering its camera's cuts), or a
    /// post-roll nothing waited for.
    early_at_us: Option<i64>,
    gathering: BTreeMap<String, Gathering>,
    post_rolls: BTreeMap<u32, PostRoll>,
}

impl Schedule {
    /// A schedule whose first flush is one interval after `now_us`.
    pub fn new(interval_us: i64, now_us: i64) -> Self {
        Schedule {
            interval_us,
            interval_at_us: now_us.saturating_add(interval_us),
            last_us: now_us,
            early_at_us: None,
            gathering: BTreeMap::new(),
            post_rolls: BTreeMap::new(),
        }
    }

    fn early_at(&mut self, at_us: i64) {
        self.early_at_us = Some(self.early_at_us.map_or(at_us, |e| e.min(at_us)));
    }

    /// Stream `stream_id` of `camera` has cut its fragment at an event's moment; the event
    /// asked `streams` of the camera's streams, and its post-roll ends at `post_roll_end_us`.
    pub fn moment(&mut self, now_us: i64, camera: &str, streams: u32, stream_id: u32, post_roll_end_us: i64) {
        let g = self.gathering.entry(camera.to_string()).or_insert(Gathering { told: 0, asked: 1, first_us: now_us });
        g.told += 1;
        g.asked = g.asked.max(streams);
        // The last cut, or a cut after its camera's flush (the gathering's time is past).
        let at = if g.told >= g.asked { now_us } else { g.first_us + GATHER_US };
        self.early_at(at);
        if post_roll_end_us > now_us {
            let p = self.post_rolls.entry(stream_id).or_insert(PostRoll { end_us: post_roll_end_us, written: false });
            *p = PostRoll { end_us: p.end_us.max(post_roll_end_us), written: false };
        }
    }

    /// Stream `stream_id` has written the fragment holding a post-roll's end: the next
    /// interval flush covers it, or, when nothing waited for it, an early flush.
    pub fn post_roll_written(&mut self, now_us: i64, stream_id: u32) {
        match self.post_rolls.get_mut(&stream_id) {
            Some(p) => p.written = true,
            None => self.early_at(now_us.max(self.last_us + SPACING_US)),
        }
    }

    /// When the next flush is due: the interval's, moved on for post-rolls ended by then and
    /// not yet written, or an early one.
    pub fn next_us(&self) -> i64 {
        let waited = self.post_rolls.values().filter(|p| !p.written && p.end_us <= self.interval_at_us);
        let interval = waited.map(|p| p.end_us + WAIT_US).fold(self.interval_at_us, i64::max);
        self.early_at_us.map_or(interval, |early| early.min(interval))
    }

    /// The flush due at `now_us`, if any.
    pub fn due(&self, now_us: i64) -> Option<Due> {
        if self.early_at_us.is_some_and(|e| now_us >= e) {
            Some(Due::Early)
        } else if now_us >= self.next_us() {
            Some(Due::Interval)
        } else {
            None
        }
    }

    /// A flush of `kind` was made at `now_us`: the interval counts from it; the gatherings it
    /// completed, or whose time is long past, end; an interval flush covers the post-rolls
    /// written; post-rolls that should have been written by now, and were not (their stream
    /// stopped), are waited for no more.
    pub fn flushed(&mut self, now_us: i64, kind: Due) {
        self.interval_at_us = now_us.saturating_add(self.interval_us);
        self.last_us = now_us;
        self.early_at_us = None;
        self.gathering.retain(|_, g| g.told < g.asked && g.first_us + 2 * GATHER_US > now_us);
        self.post_rolls.retain(|_, p| !(p.written && kind == Due::Interval) && p.end_us + WAIT_US > now_us);
    }

    /// Entries held, for the soak to bound.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.gathering.len() + self.post_rolls.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    /// Runs `schedule` from `from_us` to `to_us` in 10 ms steps, flushing when due; the
    /// flushes made.
    fn run(s: &mut Schedule, from_us: i64, to_us: i64) -> Vec<(i64, Due)> {
        let mut made = Vec::new();
        let mut t = from_us;
        while t <= to_us {
            if let Some(kind) = s.due(t) {
                s.flushed(t, kind);
                made.push((t, kind));
            }
            t += 10_000;
        }
        made
    }

    #[test]
    fn an_early_flush_takes_the_place_of_the_next_interval_flush() {
        let mut s = Schedule::new(10 * S, 0);
        assert_eq!(run(&mut s, 0, 6 * S), vec![]);
        s.moment(6 * S, "door", 1, 1, 6 * S);
        assert_eq!(run(&mut s, 6 * S, 20 * S), vec![(6 * S, Due::Early), (16 * S, Due::Interval)]);
    }

    #[test]
    fn a_post_roll_ending_with_the_interval_is_waited_for_and_costs_no_flush_of_its_own() {
        let mut s = Schedule::new(10 * S, 0);
        s.moment(3 * S, "door", 1, 1, 12 * S + 700_000);
        assert_eq!(run(&mut s, 3 * S, 13 * S), vec![(3 * S, Due::Early)]);
        // The interval's flush (13 s) waits: the fragment holding the post-roll's end is
        // written at its GOP's end, 14.5 s.
        assert_eq!(run(&mut s, 13 * S + 10_000, 14 * S + 490_000), vec![]);
        s.post_roll_written(14 * S + 500_000, 1);
        assert_eq!(s.due(14 * S + 500_000), Some(Due::Interval));
        s.flushed(14 * S + 500_000, Due::Interval);
        assert_eq!(s.next_us(), 24 * S + 500_000);
    }

    #[test]
    fn a_post_roll_that_is_never_written_holds_the_interval_only_for_the_wait() {
        let mut s = Schedule::new(10 * S, 0);
        s.moment(3 * S, "door", 1, 1, 12 * S + 800_000);
        run(&mut s, 3 * S, 3 * S);
        assert_eq!(s.next_us(), 12 * S + 800_000 + WAIT_US);
        let made = run(&mut s, 3 * S + 10_000, 30 * S);
        let first = 12 * S + 800_000 + WAIT_US;
        assert_eq!(made, vec![(first, Due::Interval), (first + 10 * S, Due::Interval)]);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn a_short_post_roll_is_covered_by_the_interval_flush_after_the_moments() {
        let mut s = Schedule::new(10 * S, 0);
        s.moment(3 * S, "door", 1, 1, 4 * S);
        assert_eq!(run(&mut s, 3 * S, 4 * S), vec![(3 * S, Due::Early)]);
        s.post_roll_written(4 * S + 30_000, 1);
        assert_eq!(run(&mut s, 4 * S + 30_000, 13 * S), vec![(13 * S, Due::Interval)]);
    }

    #[test]
    fn a_post_roll_longer_than_the_interval_is_covered_by_the_interval_flush_it_ends_by() {
        let mut s = Schedule::new(10 * S, 0);
        s.moment(3 * S, "door", 1, 1, 33 * S);
        let made = run(&mut s, 3 * S, 33 * S + 20_000);
        assert_eq!(made, vec![(3 * S, Due::Early), (13 * S, Due::Interval), (23 * S, Due::Interval)]);
        // The interval at 33 s waits for the post-roll ending then.
        s.post_roll_written(33 * S + 30_000, 1);
        assert_eq!(s.due(33 * S + 30_000), Some(Due::Interval));
    }

    #[test]
    fn a_post_roll_nothing_waited_for_is_flushed_once_written_but_spaced_from_the_last_flush() {
        let mut s = Schedule::new(10 * S, 0);
        s.post_roll_written(4 * S, 1);
        assert_eq!(s.due(4 * S), Some(Due::Early));
        s.flushed(4 * S, Due::Early);
        s.post_roll_written(5 * S, 2);
        assert_eq!(s.due(5 * S), None);
        assert_eq!(s.next_us(), 4 * S + SPACING_US);
    }

    #[test]
    fn a_post_roll_told_written_twice_is_covered_by_one_interval_flush() {
        // An event recording with long GOPs: the 4 s fragment holding the post-roll's end,
        // then its last fragment at the next keyframe.
        let mut s = Schedule::new(10 * S, 0);
        s.moment(1 * S, "door", 1, 1, 3 * S);
        run(&mut s, 1 * S, 1 * S);
        s.post_roll_written(5 * S, 1);
        s.post_roll_written(9 * S, 1);
        assert_eq!(run(&mut s, 5 * S, 20 * S), vec![(11 * S, Due::Interval)]);
        assert_eq!(s.len(), 0);
    }

    #[test]
    fn an_events_streams_are_flushed_together_once_all_have_cut() {
        let mut s = Schedule::new(10 * S, 0);
        s.moment(3 * S, "door", 2, 1, 5 * S);
        assert_eq!(s.due(3 * S + 10_000), None, "the sub stream's cut is awaited");
        s.moment(3 * S + 60_000, "door", 2, 2, 5 * S);
        assert_eq!(s.due(3 * S + 60_000), Some(Due::Early));
        s.flushed(3 * S + 60_000, Due::Early);
        // A cut that comes late: the first one is flushed after the gathering time, the late
        // one at once.
        s.moment(6 * S, "door", 2, 1, 8 * S);
        assert_eq!(s.due(6 * S + GATHER_US - 1), None);
        assert_eq!(s.due(6 * S + GATHER_US), Some(Due::Early));
        s.flushed(6 * S + GATHER_US, Due::Early);
        s.moment(6 * S + GATHER_US + 100_000, "door", 2, 2, 8 * S);
        assert_eq!(s.due(6 * S + GATHER_US + 100_000), Some(Due::Early));
    }

    #[test]
    fn another_flush_between_an_events_cuts_leaves_the_last_cut_flushed_at_once() {
        let mut s = Schedule::new(10 * S, 0);
        s.moment(9 * S + 900_000, "door", 2, 1, 12 * S);
        // The interval's flush at 10 s comes between the main stream's cut and the sub's.
        assert_eq!(run(&mut s, 9 * S + 900_000, 10 * S), vec![(10 * S, Due::Interval)]);
        s.moment(10 * S + 50_000, "door", 2, 2, 12 * S);
        assert_eq!(s.due(10 * S + 50_000), Some(Due::Early));
    }

    #[test]
    fn isolated_events_cost_at_most_one_commit_each_beyond_the_intervals() {
        // Events at every phase of the interval, with post-rolls of 1 s to 25 s: the flushes
        // over 10 minutes against the same 10 minutes with none.
        let quiet = run(&mut Schedule::new(10 * S, 0), 0, 600 * S).len();
        // Written 40 ms after its end (an event recording ends there), or at the end of a
        // GOP of 4 s (a continuous recording's fragment holding its end).
        for (post_roll_s, written_us) in [1, 5, 10, 25].into_iter().flat_map(|p| [(p, 40_000), (p, 3_900_000)]) {
            for phase_ms in (0..10_000).step_by(700) {
                let mut s = Schedule::new(10 * S, 0);
                let mut made = run(&mut s, 0, 100 * S + phase_ms * 1000).len();
                let at = 100 * S + phase_ms * 1000 + 10_000;
                s.moment(at, "door", 1, 1, at + post_roll_s * S);
                let end = at + post_roll_s * S + written_us;
                made += run(&mut s, at, end - 10_000).len();
                s.post_roll_written(end, 1);
                made += run(&mut s, end, 600 * S).len();
                assert!(made <= quiet + 1, "post-roll {post_roll_s} s, phase {phase_ms} ms: {made} vs {quiet}");
            }
        }
    }
}
