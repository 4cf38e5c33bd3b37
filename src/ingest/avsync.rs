//! Where a session's audio falls on its video's timeline. Sans-IO.
//!
//! Each RTP stream's timestamps start at a random base of their own, and retina counts each
//! from that stream's first packet: the two counts say nothing about each other. Two sources
//! tie them together:
//!
//! - **RTCP sender reports.** A camera's report pairs a stream's RTP time with its wall clock
//!   (NTP); one report of each stream places audio on the video's timeline to the sample,
//!   whatever the network did. Cameras send them every few seconds, and this is what RTP
//!   says receivers should use (RFC 3550 section 6.4.1).
//! - **Arrival**, until both reports are in. Each stream's frames arrive some time after
//!   their moment on the camera's clock: the least of those delays seen so far (each
//!   stream's packets that waited least on the way, in the camera's sending or the
//!   ingest's reading) ties the two timelines. A burst of late packets, as a starved camera
//!   or a loaded box sends, moves it not at all; a camera that sends its pictures later than
//!   their sound is only put right by its reports.
//!
//! The offset follows each frame that came quicker than all before and then each new pair of
//! reports; the fragmenter keeps a segment's audio contiguous through small moves and
//! follows large ones (a gap when later, a cut when earlier).

/// A report's RTP time (the stream's own elapsed count, in its clock rate) and its NTP time
/// (32.32 fixed point seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    pub rtp_elapsed: i64,
    pub ntp: u64,
}

/// How far a pair of reports moved the audio on the video's timeline (later when positive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// The first pair, from where arrival had put it: the difference in the two streams'
    /// delays on their way from the camera's clock to the ingest.
    FromArrival { by_90k: i64 },
    /// A later pair, from where the pair before put it: the camera's clocks drifting apart.
    ByReports { by_90k: i64 },
}

/// Places one session's audio on its video's 90 kHz timeline.
#[derive(Debug)]
pub struct AvSync {
    audio_rate: u32,
    video_report: Option<Report>,
    audio_report: Option<Report>,
    /// Added to audio's elapsed time in 90 kHz to give the video's.
    offset_90k: Option<i64>,
    /// Whether the offset came from reports (else from arrival).
    by_reports: bool,
    /// The least delay of each stream's frames so far: when one came (monotonic, 90 kHz)
    /// less its time on its timeline (the audio's in 90 kHz).
    video_least_delay_90k: Option<i64>,
    audio_least_delay_90k: Option<i64>,
}

impl AvSync {
    pub fn new(audio_rate: u32) -> AvSync {
        AvSync {
            audio_rate: audio_rate.max(1),
            video_report: None,
            audio_report: None,
            offset_90k: None,
            by_reports: false,
            video_least_delay_90k: None,
            audio_least_delay_90k: None,
        }
    }

    /// A video frame at `pts_90k` came at `mono_us`.
    pub fn video_frame(&mut self, pts_90k: i64, mono_us: i64) {
        least(&mut self.video_least_delay_90k, mono_90k(mono_us).saturating_sub(pts_90k));
    }

    /// A sender report for the video stream (90 kHz); how far it moved the audio (see
    /// [`Moved`]).
    pub fn video_report(&mut self, r: Report) -> Option<Moved> {
        self.video_report = Some(r);
        self.place_by_reports()
    }

    /// A sender report for the audio stream (its own clock rate); how far it moved the audio.
    pub fn audio_report(&mut self, r: Report) -> Option<Moved> {
        self.audio_report = Some(r);
        self.place_by_reports()
    }

    /// Whether the offset now comes from both streams' reports.
    pub fn by_reports(&self) -> bool {
        self.by_reports
    }

    /// The video-timeline time of an audio frame at `audio_elapsed` (in the audio's clock
    /// rate) arriving at `mono_us`; `None` before the first video frame, which is when
    /// there is nothing to place it against (the recorder would drop it anyway).
    pub fn audio_pts_90k(&mut self, audio_elapsed: i64, mono_us: i64) -> Option<i64> {
        let audio_90k = self.to_90k(audio_elapsed);
        let audio = least(&mut self.audio_least_delay_90k, mono_90k(mono_us).saturating_sub(audio_90k));
        let video = self.video_least_delay_90k?;
        let offset = match self.offset_90k {
            Some(by_reports) if self.by_reports => by_reports,
            // An audio frame of delay a arrives with the video of delay v that is a - v
            // later on the video's timeline than on the audio's.
            _ => audio.saturating_sub(video),
        };
        self.offset_90k = Some(offset);
        Some(audio_90k.saturating_add(offset))
    }

    fn to_90k(&self, audio_elapsed: i64) -> i64 {
        let t = i128::from(audio_elapsed) * 90_000 / i128::from(self.audio_rate);
        t.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    fn place_by_reports(&mut self) -> Option<Moved> {
        let (Some(v), Some(a)) = (self.video_report, self.audio_report) else { return None };
        // The audio report's moment on the video's timeline: the video report's RTP time
        // plus the wall time between the two reports.
        let ntp_delta_90k = ((i128::from(a.ntp) - i128::from(v.ntp)) * 90_000) >> 32;
        let audio_90k = i128::from(a.rtp_elapsed) * 90_000 / i128::from(self.audio_rate);
        // Reports this far apart are not of one camera's clock: keep what there is.
        let Ok(offset) = i64::try_from(i128::from(v.rtp_elapsed) + ntp_delta_90k - audio_90k) else { return None };
        let moved = self.offset_90k.map(|before| {
            let by_90k = offset.saturating_sub(before);
            if self.by_reports { Moved::ByReports { by_90k } } else { Moved::FromArrival { by_90k } }
        });
        self.offset_90k = Some(offset);
        self.by_reports = true;
        moved
    }
}

/// The monotonic clock's µs in 90 kHz ticks.
fn mono_90k(mono_us: i64) -> i64 {
    mono_us.saturating_mul(9) / 100
}

/// Keeps the least of `delay` and what `least` holds, and returns it.
fn least(least: &mut Option<i64>, delay: i64) -> i64 {
    *least.insert(least.map_or(delay, |l| l.min(delay)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND_NTP: u64 = 1 << 32;

    #[test]
    fn before_reports_audio_lands_where_the_video_is_when_it_arrives() {
        let mut s = AvSync::new(8_000);
        assert_eq!(s.audio_pts_90k(0, 1_000_000), None, "no video yet");
        s.video_frame(90_000, 1_000_000);
        // 20 ms after the video frame came, audio at its own 160th sample.
        assert_eq!(s.audio_pts_90k(160, 1_020_000), Some(90_000 + 1_800));
        // And from then on at the same offset.
        assert_eq!(s.audio_pts_90k(8_160, 9_000_000), Some(90_000 + 1_800 + 90_000));
        assert!(!s.by_reports());
    }

    #[test]
    fn before_reports_the_quickest_frames_place_the_audio_and_a_late_burst_does_not() {
        let mut s = AvSync::new(8_000);
        // Video frames at 15 fps, each 10 ms on the way; one 300 ms late.
        for i in 0..30 {
            let late_us = if i == 10 { 300_000 } else { 10_000 };
            s.video_frame(i * 6_000, i * 66_667 + late_us);
        }
        // The first audio (its sample 0 at the video's 0) comes 250 ms late: placed 240 ms
        // late at first.
        assert_eq!(s.audio_pts_90k(0, 250_000), Some(21_600));
        assert_eq!(s.audio_pts_90k(160, 270_000), Some(21_600 + 1_800));
        // The camera catches up: 300 ms of sound comes 10 ms after its moment, as the video
        // does. From then on in step.
        assert_eq!(s.audio_pts_90k(2_400, 310_000), Some(27_000));
        // Another burst, late: it stays.
        assert_eq!(s.audio_pts_90k(8_000, 1_500_000), Some(90_000));
        assert!(!s.by_reports());
    }

    #[test]
    fn reports_place_audio_to_the_sample_whatever_the_arrival() {
        let mut s = AvSync::new(48_000);
        s.video_frame(0, 0);
        // Arrival says audio 0 is at video 0 (the audio came late, say).
        assert_eq!(s.audio_pts_90k(0, 0), Some(0));
        // The camera says: video RTP 900,000 (10 s) was at NTP 1000 s; audio 480,000 (10 s)
        // at NTP 1000.5 s. So audio 0 was at NTP 990.5 s, video 9.5 s.
        s.video_report(Report { rtp_elapsed: 900_000, ntp: 1000 * SECOND_NTP });
        let moved = s.audio_report(Report { rtp_elapsed: 480_000, ntp: 1000 * SECOND_NTP + SECOND_NTP / 2 });
        assert_eq!(moved, Some(Moved::FromArrival { by_90k: 45_000 }));
        assert!(s.by_reports());
        assert_eq!(s.audio_pts_90k(0, 0), Some(45_000));
        assert_eq!(s.audio_pts_90k(48_000, 0), Some(135_000));
        // The next pair: 10 s of the audio's clock took 10.125 s of the camera's wall clock.
        let moved =
            s.audio_report(Report { rtp_elapsed: 960_000, ntp: 1010 * SECOND_NTP + SECOND_NTP / 2 + SECOND_NTP / 8 });
        assert_eq!(moved, Some(Moved::ByReports { by_90k: 11_250 }));
    }

    #[test]
    fn reports_far_apart_or_far_off_do_not_overflow() {
        let mut s = AvSync::new(8_000);
        s.video_report(Report { rtp_elapsed: i64::MAX / 2, ntp: u64::MAX });
        s.audio_report(Report { rtp_elapsed: i64::MIN / 2, ntp: 0 });
        let _ = s.audio_pts_90k(i64::MAX / 4, i64::MAX);
    }
}
