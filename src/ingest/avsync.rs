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
//! - **Arrival**, until both reports are in: the audio frame arriving now is placed where the
//!   video is now (its last frame, plus the time since it came). Off by the network's jitter
//!   between the two streams, a few milliseconds on a LAN.
//!
//! The offset is found once by arrival and then from each new pair of reports; the
//! fragmenter keeps a segment's audio contiguous through small moves and follows large ones.

/// A report's RTP time (the stream's own elapsed count, in its clock rate) and its NTP time
/// (32.32 fixed point seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    pub rtp_elapsed: i64,
    pub ntp: u64,
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
    /// The last video frame: its time and when it came (µs, monotonic).
    last_video: Option<(i64, i64)>,
}

impl AvSync {
    pub fn new(audio_rate: u32) -> AvSync {
        AvSync {
            audio_rate: audio_rate.max(1),
            video_report: None,
            audio_report: None,
            offset_90k: None,
            by_reports: false,
            last_video: None,
        }
    }

    /// A video frame at `pts_90k` came at `mono_us`.
    pub fn video_frame(&mut self, pts_90k: i64, mono_us: i64) {
        self.last_video = Some((pts_90k, mono_us));
    }

    /// A sender report for the video stream (90 kHz).
    pub fn video_report(&mut self, r: Report) {
        self.video_report = Some(r);
        self.place_by_reports();
    }

    /// A sender report for the audio stream (its own clock rate).
    pub fn audio_report(&mut self, r: Report) {
        self.audio_report = Some(r);
        self.place_by_reports();
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
        let offset = match self.offset_90k {
            Some(o) => o,
            None => {
                let (video_pts, video_mono) = self.last_video?;
                let video_now = video_pts.saturating_add(mono_us.saturating_sub(video_mono).max(0) / 100 * 9);
                *self.offset_90k.insert(video_now.saturating_sub(audio_90k))
            }
        };
        Some(audio_90k.saturating_add(offset))
    }

    fn to_90k(&self, audio_elapsed: i64) -> i64 {
        let t = i128::from(audio_elapsed) * 90_000 / i128::from(self.audio_rate);
        t.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    fn place_by_reports(&mut self) {
        let (Some(v), Some(a)) = (self.video_report, self.audio_report) else { return };
        // The audio report's moment on the video's timeline: the video report's RTP time
        // plus the wall time between the two reports.
        let ntp_delta_90k = ((i128::from(a.ntp) - i128::from(v.ntp)) * 90_000) >> 32;
        let audio_90k = i128::from(a.rtp_elapsed) * 90_000 / i128::from(self.audio_rate);
        // Reports this far apart are not of one camera's clock: keep what there is.
        let Ok(offset) = i64::try_from(i128::from(v.rtp_elapsed) + ntp_delta_90k - audio_90k) else { return };
        self.offset_90k = Some(offset);
        self.by_reports = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND_NTP: u64 = 1 << 32;

    #[test]
    fn before_reports_audio_lands_where_the_video_is_when_it_arrives() {
        let mut s = AvSync::new(8_000);
        assert_eq!(s.audio_pts_90k(0, 0), None, "no video yet");
        s.video_frame(90_000, 1_000_000);
        // 20 ms after the video frame came, audio at its own 160th sample.
        assert_eq!(s.audio_pts_90k(160, 1_020_000), Some(90_000 + 1_800));
        // And from then on at the same offset.
        assert_eq!(s.audio_pts_90k(8_160, 9_000_000), Some(90_000 + 1_800 + 90_000));
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
        s.audio_report(Report { rtp_elapsed: 480_000, ntp: 1000 * SECOND_NTP + SECOND_NTP / 2 });
        assert!(s.by_reports());
        assert_eq!(s.audio_pts_90k(0, 0), Some(45_000));
        assert_eq!(s.audio_pts_90k(48_000, 0), Some(135_000));
    }

    #[test]
    fn reports_far_apart_or_far_off_do_not_overflow() {
        let mut s = AvSync::new(8_000);
        s.video_report(Report { rtp_elapsed: i64::MAX / 2, ntp: u64::MAX });
        s.audio_report(Report { rtp_elapsed: i64::MIN / 2, ntp: 0 });
        let _ = s.audio_pts_90k(i64::MAX / 4, i64::MAX);
    }
}
