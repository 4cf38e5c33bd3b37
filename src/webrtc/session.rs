//! One viewer's WebRTC session: a `str0m` [`Rtc`] and what it is showing. No sockets here:
//! the engine ([`super::Engine`]) hands in datagrams and frames and takes out datagrams, so a
//! session can be driven by a test or a fuzz target as well.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::bwe::Bitrate;
use str0m::change::SdpOffer;
use str0m::channel::ChannelId;
use str0m::format::Codec as RtcCodec;
use str0m::media::{Frequency, MediaKind, MediaTime, Mid, Pt};
use str0m::net::Transmit;
use str0m::rtp::Extension;
use str0m::{Candidate, Event, IceConnectionState, Input, Output, Rtc, RtcError};

use prost::Message;

use super::control::{self, PlayState};
use super::playback::Cursor;
use crate::base::{BytePool, Charge, StreamKey};
use crate::limits;
use crate::media::{AudioCodec, AudioFrame, AudioParams, Codec, VideoParams};

/// The RTP header extension a session sends: the MID (browsers demultiplex the tracks of a
/// bundle by it), at str0m's usual id.
const MID_EXTENSION_ID: u8 = 4;

/// Who opened a session: counted per principal, closed with its login.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// `user:<name>` or `token:<id>`.
    pub principal: String,
    /// The login session it came from (a bearer token has none).
    pub login: Option<[u8; 32]>,
    /// An admin (user or token): may use the sessions kept back for admins.
    pub admin: bool,
}

/// Who a new session is for.
pub struct Viewer {
    pub id: u64,
    pub owner: Owner,
    pub peer: IpAddr,
    /// The stream it shows.
    pub stream: StreamKey,
}

/// Why an offer was refused.
#[derive(Debug, thiserror::Error)]
pub enum OfferError {
    #[error("the SDP offer could not be read: {0}")]
    BadSdp(String),
    #[error("the offer could not be accepted: {0}")]
    Rejected(String),
    #[error("the offer has no video to receive")]
    NoVideo,
    #[error("the browser offers no {0} format this stream can be sent in")]
    NoCodec(&'static str),
}

/// What a session tells the engine after it was driven.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Wants {
    /// Tracks that need a keyframe now: the viewer connected, or asked for one.
    pub keyframe: Vec<usize>,
    /// Control messages arrived.
    pub control: bool,
}

/// One session.
pub struct Session {
    pub id: u64,
    pub owner: Owner,
    pub peer: IpAddr,
    /// The stream it shows.
    pub stream: StreamKey,
    pub rtc: Rtc,
    /// One per video media line of the offer, in order.
    pub tracks: Vec<Track>,
    /// The codec negotiated for every track.
    pub codec: Codec,
    connected: bool,
    channel: Option<ChannelId>,
    /// Control messages waiting for the engine.
    pub inbox: VecDeque<Vec<u8>>,
    /// Control messages dropped (too many waited) since the engine last counted.
    pub control_dropped: u64,
    /// Messages to the browser the channel would not take, since the engine last counted.
    pub replies_dropped: u64,
    pub frames_sent: u64,
    pub created: Instant,
    /// Live event notices, when subscribed.
    pub events: Option<EventSub>,
    /// Event notices written to the channel since the engine last counted.
    pub events_sent: u64,
    /// The subscription was cut off and the browser not told yet.
    cut_off_pending: bool,
    /// Where frames waiting for the pacer take their bytes from (shared by every session).
    send_pool: Arc<BytePool>,
    /// Bytes charged for this session's frames not yet all sent (the sum of its tracks'
    /// `sending`, kept so the per-frame check does not add them up).
    waiting_bytes: usize,
    /// Frames skipped (no room to wait for the pacer) since the engine last counted.
    pub frames_skipped: u64,
    /// The time of the newest input str0m took (it ignores one older than that).
    last_input: Option<Instant>,
    /// The live stream's sound, when the offer has an audio line and the stream's codec is
    /// one browsers take as it is (G.711, Opus).
    pub audio: Option<AudioOut>,
}

/// The sound a session sends with its first track's live picture.
pub struct AudioOut {
    mid: Mid,
    pt: Pt,
    codec: AudioCodec,
    /// Samples a second: the RTP clock of G.711 and Opus alike is the sample rate.
    rate: u32,
    /// Output RTP time = the frame's time in samples + offset.
    offset: Option<i64>,
    last_rtp: Option<i64>,
    pub frames_sent: u64,
    /// The capture times the first track's pictures and the sound are written with.
    clock: MediaClock,
}

/// Places a stream's frames in time by their own timestamps: the wall clock time the
/// sender reports of the first track's pictures and of the sound are made from.
///
/// The browser puts picture and sound in step by those reports alone (RFC 3550 section
/// 6.4.1): each pairs a track's RTP time with the moment it was captured. Written with the
/// time each frame reached the engine, a report says a picture that came late was captured
/// late; when the camera, the network or a starved box delays pictures more than sound, the
/// browser then plays the sound that much ahead of its picture. Written with its place on
/// the stream's timeline (on which the ingest puts the sound from the camera's own reports,
/// see `ingest::avsync`) both tracks' reports agree whatever delayed them.
///
/// The timeline is pinned to the clock at the earliest a frame has come: a frame that would
/// fall after now (one that came sooner than those before it) moves the pin to it, so no
/// time written is in the future (str0m reports RTP time 0 from such a write). A frame later
/// than its place by more than [`limits::WEBRTC_MEDIA_CLOCK_LAG_MAX_MS`] starts the timeline
/// anew, as a new camera session does.
#[derive(Debug, Default)]
struct MediaClock {
    /// A frame's time (90 kHz) and the moment it is placed at.
    pin: Option<(i64, Instant)>,
}

impl MediaClock {
    /// The moment of a frame at `pts_90k` reaching the engine at `now`.
    fn place(&mut self, pts_90k: i64, now: Instant) -> Instant {
        if let Some((base, at)) = self.pin {
            let after_us = pts_90k.saturating_sub(base).saturating_mul(100) / 9;
            let placed = if after_us >= 0 {
                at.checked_add(Duration::from_micros(after_us.unsigned_abs()))
            } else {
                at.checked_sub(Duration::from_micros(after_us.unsigned_abs()))
            };
            let max_lag = Duration::from_millis(limits::WEBRTC_MEDIA_CLOCK_LAG_MAX_MS);
            if let Some(placed) = placed
                && placed <= now
                && now.duration_since(placed) <= max_lag
            {
                return placed;
            }
        }
        self.pin = Some((pts_90k, now));
        now
    }

    /// A new timeline (a new camera session, or a recording).
    fn restart(&mut self) {
        self.pin = None;
    }
}

/// A session's subscription to event notices, with the notices its channel has not taken
/// yet: at most [`limits::WEBRTC_EVENT_QUEUE_MESSAGES`] and
/// [`limits::WEBRTC_EVENT_QUEUE_BYTES`].
pub struct EventSub {
    /// The cameras (empty: every camera).
    pub cameras: Vec<String>,
    queue: VecDeque<Arc<[u8]>>,
    queued_bytes: usize,
}

impl EventSub {
    pub fn new(cameras: Vec<String>) -> EventSub {
        EventSub { cameras, queue: VecDeque::new(), queued_bytes: 0 }
    }

    fn wants(&self, camera: &str) -> bool {
        self.cameras.is_empty() || self.cameras.iter().any(|c| c == camera)
    }
}

/// What became of an event notice offered to a session.
#[derive(Debug, PartialEq, Eq)]
pub enum Offered {
    /// Not subscribed to that camera.
    NotWanted,
    Queued,
    /// Its queue was full: the subscription was cut off (and told so).
    CutOff,
}

/// What a track shows.
pub enum Source {
    /// Nothing yet (tracks past the first, until told).
    Idle,
    /// A stream's live frames.
    Live(StreamKey),
    /// Stored video.
    Stored(Box<Cursor>),
}

/// One video track of a session.
pub struct Track {
    mid: Mid,
    pt: Pt,
    pub source: Source,
    pub play: PlayState,
    /// Frames are skipped until a keyframe (start, loss, a lagging queue, a switch).
    need_key: bool,
    /// Output RTP time = frame pts + offset, kept increasing across sources.
    offset_90k: Option<i64>,
    last_rtp_90k: i64,
    /// Receipt time of the newest live frame sent: a frame not newer is not sent again.
    pub last_sent_mono_us: i64,
    /// When the last position report went out.
    pub reported: Option<Instant>,
    /// Frames written and not yet all sent by the pacer, oldest first.
    sending: VecDeque<Sending>,
}

/// A frame handed to str0m and not yet all sent, with its charge to the send pool.
struct Sending {
    /// Its Annex B bytes.
    charge: Charge,
    /// When str0m cut it into packets (its send queue's counts include it from then on).
    packetized: Option<Instant>,
}

impl Sending {
    /// The least its payloads in str0m's queue can be: each NAL loses its 4-byte start code
    /// (and its header byte when cut into fragments, each of which adds two back). An eighth
    /// covers NALs of 40 bytes and more, and parameter sets below that, with room to spare.
    fn least_payload(&self) -> usize {
        let bytes = self.charge.bytes();
        bytes.saturating_sub(bytes / 8 + 64)
    }
}

impl Track {
    /// Whether it waits for a keyframe to (re)start its picture.
    pub fn needs_keyframe(&self) -> bool {
        self.need_key
    }

    /// Marks the picture broken (frames were lost): it restarts at the next keyframe.
    pub fn lost_frames(&mut self) {
        self.need_key = true;
    }

    /// A new source or camera session: presentation times start from a new base (for the
    /// session's sound too, when it is the first track's: see [`Session::rebase_track`]).
    pub fn rebase(&mut self) {
        self.offset_90k = None;
        self.need_key = true;
    }
}

/// The payload type of `codec` the offer allows, for a stream of `params`: for H.264 with
/// packetization mode 1 and, when offered, the stream's own profile.
fn pick_pt(rtc: &mut Rtc, mid: Mid, params: &VideoParams) -> Result<Pt, OfferError> {
    let writer = rtc.writer(mid).ok_or(OfferError::NoVideo)?;
    let (want, name) = match params.codec {
        Codec::H264 => (RtcCodec::H264, "H.264"),
        Codec::H265 => (RtcCodec::H265, "H.265"),
    };
    let candidates: Vec<_> = writer
        .payload_params()
        .filter(|p| p.spec().codec == want)
        .filter(|p| want != RtcCodec::H264 || p.spec().format.packetization_mode == Some(1))
        .map(|p| (p.pt(), p.spec().format.profile_level_id))
        .collect();
    // `avc1.PPCCLL`: the stream's profile_idc.
    let profile = u32::from_str_radix(params.rfc6381.get(5..7).unwrap_or(""), 16).ok();
    let same_profile = candidates.iter().find(|(_, pli)| pli.is_some_and(|v| Some(v >> 16) == profile));
    same_profile.or(candidates.first()).map(|(pt, _)| *pt).ok_or(OfferError::NoCodec(name))
}

/// The `mid`s of an offer's media lines of `kind` (`video`, `audio`), in order.
fn mids_of<'a>(sdp: &'a str, kind: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut in_kind = false;
    for line in sdp.lines().map(str::trim_end) {
        if let Some(m) = line.strip_prefix("m=") {
            in_kind = m.strip_prefix(kind).is_some_and(|rest| rest.starts_with(' '));
        } else if let Some(mid) = line.strip_prefix("a=mid:")
            && in_kind
        {
            out.push(mid);
        }
    }
    out
}

/// The payload type the offer allows for `codec` on media `mid`.
fn audio_pt(rtc: &mut Rtc, mid: Mid, codec: AudioCodec) -> Option<Pt> {
    let want = match codec {
        AudioCodec::Pcmu => RtcCodec::PCMU,
        AudioCodec::Pcma => RtcCodec::PCMA,
        AudioCodec::Opus => RtcCodec::Opus,
        AudioCodec::Aac => return None,
    };
    let writer = rtc.writer(mid)?;
    writer.payload_params().find(|p| p.spec().codec == want).map(|p| p.pt())
}

/// The answer with every media line in one media stream (`a=msid`): a browser plays the
/// tracks of one stream in step (lip sync), and str0m names a stream for each line the
/// browser offered without one.
fn one_media_stream(answer: &str) -> String {
    const STREAM: &str = "keeppeek";
    let mut out = String::with_capacity(answer.len());
    for line in answer.split_inclusive('\n') {
        let (body, end) = line.find(['\r', '\n']).map_or((line, ""), |i| line.split_at(i));
        if let Some(rest) = body.strip_prefix("a=msid:") {
            let track = rest.split_whitespace().nth(1).unwrap_or("-");
            out.push_str(&format!("a=msid:{STREAM} {track}{end}"));
        } else if body.starts_with("a=msid-semantic:") {
            out.push_str(&format!("a=msid-semantic: WMS {STREAM}{end}"));
        } else if let (Some(rest), true) = (body.strip_prefix("a=ssrc:"), body.contains(" msid:")) {
            let ssrc = rest.split_whitespace().next().unwrap_or("0");
            let track = body.split_whitespace().nth(2).unwrap_or("-");
            out.push_str(&format!("a=ssrc:{ssrc} msid:{STREAM} {track}{end}"));
        } else {
            out.push_str(line);
        }
    }
    out
}

impl Session {
    /// Accepts a WHEP offer for a stream with `params`, answering from `candidates` (the
    /// engine's local addresses). Returns the session and the SDP answer.
    pub fn accept(
        who: Viewer,
        params: &VideoParams,
        audio: Option<&AudioParams>,
        offer: &str,
        candidates: &[SocketAddr],
        send_pool: Arc<BytePool>,
        now: Instant,
    ) -> Result<(Session, String), OfferError> {
        let offer_text = offer;
        let sound = audio.map(|a| a.codec);
        let offer = SdpOffer::from_sdp_string(offer).map_err(|e| OfferError::BadSdp(e.to_string()))?;
        let mut rtc = Rtc::builder()
            .set_ice_lite(true)
            .clear_codecs()
            .enable_h264(params.codec == Codec::H264)
            .enable_h265(params.codec == Codec::H265)
            // The camera's sound as it comes, no transcode: G.711 and Opus, which browsers
            // decode; AAC is not sent (see docs/architecture.md, "Sound").
            .enable_pcmu(sound == Some(AudioCodec::Pcmu), false)
            .enable_pcma(sound == Some(AudioCodec::Pcma), false)
            .enable_opus(sound == Some(AudioCodec::Opus), false)
            .set_send_buffer_video(limits::WEBRTC_SEND_BUFFER_PACKETS)
            // str0m paces only with its bandwidth estimator on; without it every frame leaves
            // in one burst. With no transport-wide congestion feedback negotiated (the map
            // below has only the MID), the estimate never moves from its start, so the pacer
            // keeps one rate, twice the start: no padding to probe the link, no probes, and
            // nothing to do for an idle viewer.
            .enable_bwe(Some(Bitrate::bps(limits::WEBRTC_PACING_BITS_PER_S / 2)))
            .clear_extension_map()
            .set_extension(MID_EXTENSION_ID, Extension::RtpMid)
            .set_stats_interval(None)
            .build(now);
        for addr in candidates {
            if let Ok(c) = Candidate::host(*addr, "udp") {
                rtc.add_local_candidate(c);
            }
        }
        let answer = rtc.sdp_api().accept_offer(offer).map_err(|e| OfferError::Rejected(e.to_string()))?;
        let Viewer { id, owner, peer, stream } = who;
        let mids: Vec<Mid> = mids_of(offer_text, "video")
            .into_iter()
            .map(Mid::from)
            .filter(|m| rtc.media(*m).is_some_and(|media| media.kind() == MediaKind::Video))
            .take(limits::WEBRTC_CURSORS_PER_SESSION_MAX + 1)
            .collect();
        if mids.is_empty() {
            return Err(OfferError::NoVideo);
        }
        let mut tracks = Vec::new();
        for (i, mid) in mids.into_iter().enumerate() {
            let pt = pick_pt(&mut rtc, mid, params)?;
            tracks.push(Track {
                mid,
                pt,
                source: if i == 0 { Source::Live(stream.clone()) } else { Source::Idle },
                play: PlayState::live(String::new()),
                need_key: true,
                offset_90k: None,
                last_rtp_90k: 0,
                last_sent_mono_us: i64::MIN,
                reported: None,
                sending: VecDeque::new(),
            });
        }
        let audio = audio.and_then(|a| {
            let mid = mids_of(offer_text, "audio")
                .into_iter()
                .map(Mid::from)
                .find(|m| rtc.media(*m).is_some_and(|media| media.kind() == MediaKind::Audio))?;
            let pt = audio_pt(&mut rtc, mid, a.codec)?;
            Some(AudioOut {
                mid,
                pt,
                codec: a.codec,
                rate: a.sample_rate,
                offset: None,
                last_rtp: None,
                frames_sent: 0,
                clock: MediaClock::default(),
            })
        });
        let session = Session {
            id,
            owner,
            peer,
            stream,
            rtc,
            tracks,
            codec: params.codec,
            connected: false,
            channel: None,
            inbox: VecDeque::new(),
            control_dropped: 0,
            replies_dropped: 0,
            frames_sent: 0,
            created: now,
            events: None,
            events_sent: 0,
            cut_off_pending: false,
            send_pool,
            waiting_bytes: 0,
            frames_skipped: 0,
            last_input: None,
            audio,
        };
        Ok((session, one_media_stream(&answer.to_sdp_string())))
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Hands str0m a datagram or a tick. Each input str0m takes cuts the oldest frame
    /// written to each track and not yet cut into packets (str0m 0.25 cuts one per track per
    /// input, in `Session::handle_timeout`); the send pool's accounting follows that.
    pub fn input(&mut self, input: Input<'_>) -> Result<(), RtcError> {
        let at = match &input {
            Input::Timeout(t) | Input::Receive(t, _) => *t,
        };
        let taken = self.last_input.is_none_or(|last| at >= last);
        let result = self.rtc.handle_input(input);
        if taken {
            self.last_input = Some(at);
            for t in &mut self.tracks {
                if let Some(next) = t.sending.iter_mut().find(|s| s.packetized.is_none()) {
                    next.packetized = Some(at);
                }
            }
        }
        result
    }

    /// The time of the newest input str0m took.
    pub fn last_input(&self) -> Option<Instant> {
        self.last_input
    }

    pub fn is_alive(&self) -> bool {
        self.rtc.is_alive()
    }

    /// Drains the session's output: datagrams to `send`, events handled here. Returns when
    /// the session next wants a timeout, and what it asks of the engine.
    pub fn drive(&mut self, send: &mut dyn FnMut(Transmit)) -> (Option<Instant>, Wants) {
        let mut wants = Wants::default();
        self.release_sent();
        self.flush_events();
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return (Some(t), wants),
                Ok(Output::Transmit(t)) => send(t),
                Ok(Output::Event(e)) => match e {
                    Event::Connected => {
                        self.connected = true;
                        for (i, t) in self.tracks.iter_mut().enumerate() {
                            t.need_key = true;
                            wants.keyframe.push(i);
                        }
                    }
                    Event::KeyframeRequest(r) => {
                        if let Some(i) = self.tracks.iter().position(|t| t.mid == r.mid) {
                            self.tracks[i].need_key = true;
                            wants.keyframe.push(i);
                        }
                    }
                    Event::ChannelOpen(id, _) => {
                        self.channel = Some(id);
                        if let Some(mut ch) = self.rtc.channel(id) {
                            ch.set_buffered_amount_low_threshold(limits::WEBRTC_CONTROL_MESSAGE_MAX_BYTES);
                        }
                    }
                    Event::ChannelBufferedAmountLow(_) => self.flush_events(),
                    Event::ChannelData(d) => {
                        self.queue_control(d.data);
                        wants.control = true;
                    }
                    Event::ChannelClose(_) => self.channel = None,
                    Event::IceConnectionStateChange(IceConnectionState::Disconnected) | Event::Closed => {
                        self.rtc.disconnect();
                    }
                    _ => {}
                },
                Err(_) => {
                    self.rtc.disconnect();
                    return (None, wants);
                }
            }
        }
    }

    /// Sends one frame on track `t` (Annex B, parameter sets in front of a keyframe) with
    /// presentation time `pts_90k`. Skipped until connected and, after a loss, until a
    /// keyframe. `squeeze` sends it 1 tick after the previous one instead (a GOP sent in a
    /// burst so a new viewer's decoder catches up at once).
    pub fn send_frame(
        &mut self,
        t: usize,
        annexb: &Arc<[u8]>,
        is_key: bool,
        pts_90k: i64,
        squeeze: bool,
        now: Instant,
    ) -> Result<bool, RtcError> {
        let waiting = self.waiting_bytes;
        let Some(track) = self.tracks.get_mut(t) else { return Ok(false) };
        if !self.connected || (track.need_key && !is_key) {
            return Ok(false);
        }
        // Room to wait for the pacer: within the session's share (a frame alone always
        // fits it) and in the pool, of which only keyframes may take the last part, so a
        // viewer waiting for one gets it even while the others keep the rest full. Without
        // room the frame is skipped and the picture waits for a keyframe.
        let len = annexb.len();
        let pool = &self.send_pool;
        let reserve = pool.max_bytes() / 100 * limits::WEBRTC_SEND_POOL_KEYFRAME_RESERVE_PERCENT;
        let in_share = waiting == 0 || waiting + len <= limits::WEBRTC_SEND_SESSION_MAX_BYTES;
        let room = in_share && (is_key || pool.held_bytes() + len + reserve <= pool.max_bytes());
        let Some(charge) = room.then(|| pool.charge(len)).flatten() else {
            track.need_key = true;
            self.frames_skipped += 1;
            return Ok(false);
        };
        // Camera timestamps are outside input: saturate rather than overflow.
        let offset = *track.offset_90k.get_or_insert(track.last_rtp_90k.saturating_sub(pts_90k));
        let mut rtp = pts_90k.saturating_add(offset);
        if squeeze || rtp <= track.last_rtp_90k {
            rtp = track.last_rtp_90k + 1;
            track.offset_90k = Some(rtp.saturating_sub(pts_90k));
        }
        let (mid, pt) = (track.mid, track.pt);
        // The first track's pictures are placed on the timeline the sound is (see
        // `MediaClock`); a track without sound beside it is written as it comes.
        let captured = match self.audio.as_mut() {
            Some(out) if t == 0 => out.clock.place(pts_90k, now),
            _ => now,
        };
        let Some(writer) = self.rtc.writer(mid) else { return Ok(false) };
        writer.write(pt, captured, MediaTime::from_90khz(rtp as u64), annexb.clone())?;
        let track = &mut self.tracks[t];
        track.last_rtp_90k = rtp;
        track.need_key = false;
        track.sending.push_back(Sending { charge, packetized: None });
        self.waiting_bytes += len;
        self.frames_sent += 1;
        Ok(true)
    }

    /// Track `t` starts from a new base; the sound with it when it is the first.
    pub fn rebase_track(&mut self, t: usize) {
        self.tracks[t].rebase();
        if t == 0 {
            self.rebase_audio();
        }
    }

    /// A new camera session: the sound's times start from a new base.
    pub fn rebase_audio(&mut self) {
        if let Some(out) = self.audio.as_mut() {
            out.offset = None;
            out.clock.restart();
        }
    }

    /// Sends one frame of the stream's sound (live, or a recording's at 1×) as it comes;
    /// skipped when it would go back in time (a new placement of the sound, or a frame older
    /// than one sent).
    pub fn send_audio(&mut self, frame: &AudioFrame, now: Instant) -> Result<bool, RtcError> {
        let (Some(out), true) = (self.audio.as_mut(), self.connected) else {
            return Ok(false);
        };
        if frame.params.codec != out.codec || frame.params.sample_rate != out.rate {
            return Ok(false);
        }
        // Placed on the timeline its pictures are (see `MediaClock`).
        let wallclock = out.clock.place(frame.pts_90k, now);
        let samples = (i128::from(frame.pts_90k) * i128::from(out.rate) / 90_000) as i64;
        let offset = *out.offset.get_or_insert(out.last_rtp.map_or(0, |l| l + 1).saturating_sub(samples));
        let rtp = samples.saturating_add(offset);
        if out.last_rtp.is_some_and(|l| rtp <= l) || rtp < 0 {
            return Ok(false);
        }
        let (mid, pt, rate) = (out.mid, out.pt, out.rate);
        let Some(writer) = self.rtc.writer(mid) else { return Ok(false) };
        let clock = Frequency::new(rate).unwrap_or(Frequency::FORTY_EIGHT_KHZ);
        writer.write(pt, wallclock, MediaTime::new(rtp as u64, clock), frame.data.to_vec())?;
        let out = self.audio.as_mut().expect("checked");
        out.last_rtp = Some(rtp);
        out.frames_sent += 1;
        Ok(true)
    }

    /// Gives back the send pool's bytes of frames the pacer has sent. str0m tells how many
    /// payload bytes each track's send queue held when it last looked (after cutting a frame
    /// into packets, in the same input); frames not yet cut are in none of its counts, so
    /// they stay charged. Of the frames cut by then, the oldest has all left once the ones
    /// after it could hold what is queued, each counted at the least its payloads can be
    /// (resends and padding in the count only keep charges longer).
    fn release_sent(&mut self) {
        for t in &mut self.tracks {
            if !t.sending.front().is_some_and(|s| s.packetized.is_some()) {
                continue;
            }
            let mut api = self.rtc.direct_api();
            let info = api.stream_tx_by_mid(t.mid, None).and_then(|tx| tx.queue_info());
            let Some((at, queued)) = info.map(|q| (q.created_at(), q.byte_size())) else { continue };
            let counted = |s: &&Sending| s.packetized.is_some_and(|p| p <= at);
            let mut could_hold: usize = t.sending.iter().take_while(counted).map(Sending::least_payload).sum();
            while let Some(front) = t.sending.front().filter(counted) {
                let rest = could_hold - front.least_payload();
                if queued > rest {
                    break;
                }
                could_hold = rest;
                self.waiting_bytes -= front.charge.bytes();
                t.sending.pop_front();
            }
        }
    }

    /// Bytes of this session's frames waiting for the pacer.
    #[cfg(test)]
    pub fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }

    /// Queues a control message for the engine; past [`limits::WEBRTC_CONTROL_QUEUE_MESSAGES`]
    /// the oldest is dropped, counted and answered with an error.
    pub fn queue_control(&mut self, data: Vec<u8>) {
        if self.inbox.len() >= limits::WEBRTC_CONTROL_QUEUE_MESSAGES {
            self.inbox.pop_front();
            self.control_dropped += 1;
            self.send_control(&control::error(0, 0, "flooded", "too many control messages at once: one was dropped"));
        }
        self.inbox.push_back(data);
    }

    /// Sends a control message to the browser (dropped when the channel is not open or full).
    pub fn send_control(&mut self, m: &control::pb::ServerMessage) {
        let Some(id) = self.channel else { return };
        let bytes = m.encode_to_vec();
        if bytes.len() > limits::WEBRTC_CONTROL_MESSAGE_MAX_BYTES {
            return;
        }
        let sent = self.rtc.channel(id).is_some_and(|mut ch| ch.write(true, &bytes).unwrap_or(false));
        if !sent {
            self.replies_dropped += 1;
        }
    }

    /// Offers an event notice (encoded once for every session) about `camera`.
    pub fn offer_event(&mut self, camera: &str, notice: &Arc<[u8]>) -> Offered {
        let Some(sub) = self.events.as_mut().filter(|s| s.wants(camera)) else { return Offered::NotWanted };
        let full = sub.queue.len() >= limits::WEBRTC_EVENT_QUEUE_MESSAGES
            || sub.queued_bytes + notice.len() > limits::WEBRTC_EVENT_QUEUE_BYTES;
        if full {
            self.events = None;
            self.cut_off_pending = true;
            self.flush_events();
            return Offered::CutOff;
        }
        sub.queued_bytes += notice.len();
        sub.queue.push_back(notice.clone());
        self.flush_events();
        Offered::Queued
    }

    /// Writes the cut-off notice if one is owed, then waiting event notices while the
    /// channel holds less than [`limits::WEBRTC_EVENT_CHANNEL_BUFFERED_MAX_BYTES`]: the rest of
    /// its room stays for answers to the browser's commands.
    fn flush_events(&mut self) {
        let Some(id) = self.channel else { return };
        let Some(mut ch) = self.rtc.channel(id) else { return };
        if self.cut_off_pending {
            let m = "event notices were not taken fast enough: unsubscribed (subscribe again to go on)";
            let bytes = control::error(0, 0, "events_cut_off", m).encode_to_vec();
            if !ch.write(true, &bytes).unwrap_or(false) {
                return;
            }
            self.cut_off_pending = false;
        }
        let Some(sub) = self.events.as_mut() else { return };
        while let Some(front) = sub.queue.front() {
            if ch.buffered_amount() >= limits::WEBRTC_EVENT_CHANNEL_BUFFERED_MAX_BYTES
                || !ch.write(true, front).unwrap_or(false)
            {
                break;
            }
            sub.queued_bytes -= front.len();
            sub.queue.pop_front();
            self.events_sent += 1;
        }
    }

    /// Whether a cut-off notice is owed to the browser.
    #[cfg(test)]
    pub fn cut_off_pending(&self) -> bool {
        self.cut_off_pending
    }

    /// Event notices waiting for the channel.
    #[cfg(test)]
    pub fn events_waiting(&self) -> usize {
        self.events.as_ref().map_or(0, |s| s.queue.len())
    }

    /// Stored-playback cursors this session holds.
    pub fn cursors(&self) -> usize {
        self.tracks.iter().filter(|t| matches!(t.source, Source::Stored(_))).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_placed_by_their_own_time_never_in_the_future_and_anew_past_the_lag_ceiling() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut clock = MediaClock::default();
        // The first frame is pinned where it came; one 100 ms on the timeline that came
        // 400 ms late (a starved box, a camera that fell behind) is placed at its own time.
        assert_eq!(clock.place(9_000, ms(0)), ms(0));
        assert_eq!(clock.place(18_000, ms(500)), ms(100));
        // Sound of the same moment that came at once is placed with it.
        assert_eq!(clock.place(18_000, ms(101)), ms(100));
        // Earlier than its place (the first frame had come late): the pin moves to it.
        assert_eq!(clock.place(45_000, ms(350)), ms(350));
        assert_eq!(clock.place(54_000, ms(460)), ms(450));
        // A keyframe burst sends older frames: placed in the past, where they were.
        assert_eq!(clock.place(36_000, ms(470)), ms(250));
        // Up to the ceiling a late frame keeps its place; past it the timeline starts anew.
        let lag = limits::WEBRTC_MEDIA_CLOCK_LAG_MAX_MS;
        assert_eq!(clock.place(63_000, ms(550 + lag)), ms(550));
        assert_eq!(clock.place(72_000, ms(651 + lag)), ms(651 + lag));
        assert_eq!(clock.place(81_000, ms(760 + lag)), ms(751 + lag));
        // A new timeline: pinned where its first frame comes, whatever its time.
        clock.restart();
        assert_eq!(clock.place(5, ms(800 + lag)), ms(800 + lag));
        // Camera timestamps are outside input: the far ends of the range do not overflow.
        assert_eq!(clock.place(i64::MAX, ms(900 + lag)), ms(900 + lag));
        assert_eq!(clock.place(i64::MIN, ms(901 + lag)), ms(901 + lag));
    }

    #[test]
    fn every_line_of_an_answer_joins_one_media_stream() {
        let answer = "v=0\r\na=msid-semantic: WMS a b\r\nm=video 9 x 96\r\na=msid:a t1\r\na=ssrc:11 msid:a t1\r\n\
                      a=ssrc:11 cname:c\r\nm=audio 9 x 0\r\na=msid:b t2\r\na=ssrc:12 msid:b t2\r\n";
        let one = one_media_stream(answer);
        assert_eq!(
            one,
            "v=0\r\na=msid-semantic: WMS keeppeek\r\nm=video 9 x 96\r\na=msid:keeppeek t1\r\n\
             a=ssrc:11 msid:keeppeek t1\r\na=ssrc:11 cname:c\r\nm=audio 9 x 0\r\na=msid:keeppeek t2\r\n\
             a=ssrc:12 msid:keeppeek t2\r\n"
        );
        assert_eq!(
            mids_of("m=audio 9 x 0\r\na=mid:1\r\nm=audiox 9\r\na=mid:2\r\nm=video 9\r\na=mid:3\r\n", "audio"),
            ["1"]
        );
    }
}
