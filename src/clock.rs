//! Time: the monotonic clock, the wall clock, and media (90 kHz) time, and how a recording
//! run maps one onto the other.
//!
//! - Frames are stamped with both clocks at receipt ([`Clocks`]: the real ones on the box,
//!   [`SimulatedClocks`] in tests that run days in seconds).
//! - A run's wall time is anchored once, at its first frame; from there its duration follows
//!   the camera's clock, slewed toward the local monotonic clock by at most
//!   [`limits::CLOCK_SLEW_MAX_PPM`] ([`RunClock`]).
//! - A step of the wall clock against the monotonic clock larger than
//!   [`limits::CLOCK_STEP_MAX_US`] ends the run; the next frame starts a new one. Nothing is
//!   re-stamped or overwritten.
//! - A wall clock earlier than the firmware's build time is not sane (a board without an RTC
//!   before NTP): recording waits for it unless configured otherwise.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::limits;

/// The build time, UTC µs: no correct clock reads earlier.
pub const BUILD_WALL_US: i64 = match i64::from_str_radix(env!("KEEPPEEK_BUILD_UNIX_S"), 10) {
    Ok(s) => s * 1_000_000,
    Err(_) => 0,
};

/// True when `wall_us` could be the real time: not before this firmware was built.
pub fn is_sane(wall_us: i64) -> bool {
    wall_us >= BUILD_WALL_US
}

/// The clocks a room reads: monotonic and wall time, and waiting on either. Every room that
/// reads time takes one, so tests run it on [`SimulatedClocks`] (days in seconds) and the box
/// runs it on [`RealClocks`].
pub trait Clocks: Send + Sync + 'static {
    /// Monotonic µs since the clock's origin; never goes back.
    fn mono_us(&self) -> i64;
    /// Wall clock (UTC) µs since the Unix epoch; negative before 1970. It may step.
    fn wall_us(&self) -> i64;
    /// How long to block in real time, at most, while waiting `wanted` of this clock's time:
    /// all of it on the real clock, a short poll on a simulated one (its time moves when the
    /// test moves it).
    fn real_wait(&self, wanted: Duration) -> Duration;
}

/// A handle to the clocks, shared by the threads of a room.
pub type SharedClocks = Arc<dyn Clocks>;

/// The process's clocks. Monotonic time counts from the first read in the process.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealClocks;

impl RealClocks {
    pub fn shared() -> SharedClocks {
        Arc::new(RealClocks)
    }
}

impl Clocks for RealClocks {
    fn mono_us(&self) -> i64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_micros() as i64
    }

    fn wall_us(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_micros() as i64,
            Err(e) => -(e.duration().as_micros() as i64),
        }
    }

    fn real_wait(&self, wanted: Duration) -> Duration {
        wanted
    }
}

/// Clocks that move only when told to: [`SimulatedClocks::advance`] moves both,
/// [`SimulatedClocks::step_wall`] steps the wall clock alone (NTP setting a wrong clock right).
#[derive(Clone, Debug)]
pub struct SimulatedClocks(Arc<SimulatedTime>);

#[derive(Debug)]
struct SimulatedTime {
    mono_us: AtomicI64,
    wall_minus_mono_us: AtomicI64,
}

impl SimulatedClocks {
    /// Starts at monotonic zero and wall time `wall_us`.
    pub fn new(wall_us: i64) -> SimulatedClocks {
        SimulatedClocks(Arc::new(SimulatedTime {
            mono_us: AtomicI64::new(0),
            wall_minus_mono_us: AtomicI64::new(wall_us),
        }))
    }

    pub fn shared(&self) -> SharedClocks {
        Arc::new(self.clone())
    }

    pub fn advance(&self, by: Duration) {
        self.0.mono_us.fetch_add(by.as_micros() as i64, Ordering::SeqCst);
    }

    pub fn step_wall(&self, by_us: i64) {
        self.0.wall_minus_mono_us.fetch_add(by_us, Ordering::SeqCst);
    }
}

impl Clocks for SimulatedClocks {
    fn mono_us(&self) -> i64 {
        self.0.mono_us.load(Ordering::SeqCst)
    }

    fn wall_us(&self) -> i64 {
        self.mono_us() + self.0.wall_minus_mono_us.load(Ordering::SeqCst)
    }

    fn real_wait(&self, wanted: Duration) -> Duration {
        wanted.min(Duration::from_millis(1))
    }
}

/// Waits for a message until the monotonic `deadline_us` of `clocks`.
pub fn recv_until<T>(clocks: &dyn Clocks, rx: &Receiver<T>, deadline_us: i64) -> Result<T, RecvTimeoutError> {
    loop {
        let left_us = deadline_us - clocks.mono_us();
        if left_us <= 0 {
            return rx.try_recv().map_err(|e| match e {
                TryRecvError::Empty => RecvTimeoutError::Timeout,
                TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
            });
        }
        match rx.recv_timeout(clocks.real_wait(Duration::from_micros(left_us as u64))) {
            Err(RecvTimeoutError::Timeout) => continue,
            r => return r,
        }
    }
}

/// Converts 90 kHz media time to µs.
pub fn ticks_90k_to_us(ticks: i64) -> i64 {
    ((ticks as i128 * 1_000_000) / 90_000) as i64
}

/// Maps one run's media time onto wall time.
///
/// Lifecycle: [`RunClock::start`] at the run's first frame; [`RunClock::wall_us_at`] for
/// every frame in media-time order; [`RunClock::is_stepped`] on every frame, and a `true`
/// ends the run.
#[derive(Clone, Debug)]
pub struct RunClock {
    wall_anchor_us: i64,
    mono_anchor_us: i64,
    pts_anchor_90k: i64,
    /// Accumulated slew toward the local clock.
    correction_us: i64,
    last_media_elapsed_us: i64,
}

impl RunClock {
    /// Anchors a run at its first frame.
    pub fn start(pts_90k: i64, mono_us: i64, wall_us: i64) -> Self {
        RunClock {
            wall_anchor_us: wall_us,
            mono_anchor_us: mono_us,
            pts_anchor_90k: pts_90k,
            correction_us: 0,
            last_media_elapsed_us: 0,
        }
    }

    /// The run's wall start.
    pub fn wall_anchor_us(&self) -> i64 {
        self.wall_anchor_us
    }

    /// True when the wall clock has stepped against the monotonic clock since the anchor.
    pub fn is_stepped(&self, mono_us: i64, wall_us: i64) -> bool {
        let drift = (wall_us - mono_us) - (self.wall_anchor_us - self.mono_anchor_us);
        drift.abs() > limits::CLOCK_STEP_MAX_US
    }

    /// How long after the wall time this run gives it (before slewing) the frame with media
    /// time `pts_90k` was received at `mono_us`, µs; negative when before. Within what the
    /// anchor's own delay and the slew left.
    pub fn lag_us(&self, pts_90k: i64, mono_us: i64) -> i64 {
        let media_elapsed_us = ticks_90k_to_us(pts_90k - self.pts_anchor_90k);
        (mono_us - self.mono_anchor_us) - (media_elapsed_us + self.correction_us)
    }

    /// Wall time of the frame with media time `pts_90k`, received at `mono_us`. Calls must
    /// come in media-time order; each may move the slew correction by at most
    /// `CLOCK_SLEW_MAX_PPM` of the media time elapsed since the last call.
    pub fn wall_us_at(&mut self, pts_90k: i64, mono_us: i64) -> i64 {
        let media_elapsed_us = ticks_90k_to_us(pts_90k - self.pts_anchor_90k);
        let step_us = (media_elapsed_us - self.last_media_elapsed_us).max(0);
        let allowed_us = step_us * limits::CLOCK_SLEW_MAX_PPM / 1_000_000;
        let local_elapsed_us = mono_us - self.mono_anchor_us;
        let error_us = local_elapsed_us - (media_elapsed_us + self.correction_us);
        self.correction_us += error_us.clamp(-allowed_us, allowed_us);
        self.last_media_elapsed_us = self.last_media_elapsed_us.max(media_elapsed_us);
        self.wall_anchor_us + media_elapsed_us + self.correction_us
    }
}

/// Days since 1970-01-01 to a (year, month, day) date, proleptic Gregorian (H. Hinnant's
/// algorithm): with its inverse below: the only date conversions KeepPeek needs, not worth a crate.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A (year, month, day) date to days since 1970-01-01: the inverse of [`civil_from_days`].
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_camera_running_fast_is_slewed_toward_local_time_within_the_bound() {
        // The camera's clock runs 1% fast: 101 s of media time per 100 s of local time.
        let mut c = RunClock::start(0, 0, 1_000_000_000);
        let mut last_wall = 1_000_000_000;
        for sec in 1..=100i64 {
            let wall = c.wall_us_at(sec * 90_000 * 101 / 100, sec * 1_000_000);
            let media_us = sec * 1_010_000;
            let bound = media_us * limits::CLOCK_SLEW_MAX_PPM / 1_000_000;
            let off = wall - 1_000_000_000 - media_us;
            assert!(off <= 0 && -off <= bound, "offset {off} µs outside ±{bound}");
            assert!(wall > last_wall, "wall time must keep increasing");
            last_wall = wall;
        }
    }

    #[test]
    fn a_matching_clock_is_not_corrected() {
        let mut c = RunClock::start(1000, 5, 7);
        assert_eq!(c.wall_us_at(1000 + 90_000 * 3600, 5 + 3_600_000_000), 7 + 3_600_000_000);
    }

    #[test]
    fn a_wall_clock_step_is_detected_and_slew_is_not() {
        let c = RunClock::start(0, 1_000_000, 50_000_000);
        assert!(!c.is_stepped(11_000_000, 60_000_000));
        assert!(!c.is_stepped(11_000_000, 60_000_000 + limits::CLOCK_STEP_MAX_US));
        assert!(c.is_stepped(11_000_000, 60_000_000 + limits::CLOCK_STEP_MAX_US + 1));
        assert!(c.is_stepped(11_000_000, 0));
    }

    #[test]
    fn a_clock_before_the_build_is_not_sane() {
        assert!(is_sane(RealClocks.wall_us()));
        assert!(!is_sane(0));
        assert!(!is_sane(BUILD_WALL_US - 1));
    }

    #[test]
    fn dates_are_civil_utc() {
        for days in [-1, 0, 19_723, 20_513, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
