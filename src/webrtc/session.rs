//! One viewer's WebRTC session: a `str0m` [`Rtc`] and what it is showing. No sockets here:
//! the engine ([`super::Engine`]) hands in datagrams and frames and takes out datagrams, so a
//! session can be driven by a test or a fuzz target as well.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use str0m::change::SdpOffer;
use str0m::channel::ChannelId;
use str0m::format::Codec as RtcCodec;
use str0m::media::{MediaKind, MediaTime, Mid, Pt};
use str0m::net::Transmit;
use str0m::{Candidate, Event, IceConnectionState, Output, Rtc, RtcError};

use crate::limits;
use crate::media::{Codec, VideoParams};

/// Who opened a session: counted per principal, closed with its login.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// `user:<name>` or `token:<id>`.
    pub principal: String,
    /// The login session it came from (a bearer token has none).
    pub login: Option<[u8; 32]>,
}

/// Who a new session is for.
pub struct Viewer {
    pub id: u64,
    pub owner: Owner,
    pub peer: IpAddr,
    /// Index of the stream it shows.
    pub stream: usize,
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
    /// The viewer is connected and needs a keyframe to start (or asked for one).
    pub keyframe: bool,
}

/// One session.
pub struct Session {
    pub id: u64,
    pub owner: Owner,
    pub peer: IpAddr,
    /// Index of the stream it shows.
    pub stream: usize,
    pub rtc: Rtc,
    video: Option<(Mid, Pt)>,
    connected: bool,
    /// Frames are skipped until a keyframe (start, loss, a lagging queue).
    need_key: bool,
    channel: Option<ChannelId>,
    /// Output RTP time = frame pts + offset, kept increasing across camera sessions.
    offset_90k: Option<i64>,
    last_rtp_90k: i64,
    pub frames_sent: u64,
    /// Receipt time of the newest frame sent: a frame not newer is not sent again.
    pub last_sent_mono_us: i64,
    pub created: Instant,
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

/// The `mid`s of an offer's video media lines, in order.
fn video_mids(sdp: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_video = false;
    for line in sdp.lines().map(str::trim_end) {
        if let Some(m) = line.strip_prefix("m=") {
            in_video = m.starts_with("video ");
        } else if let Some(mid) = line.strip_prefix("a=mid:")
            && in_video
        {
            out.push(mid);
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
        offer: &str,
        candidates: &[SocketAddr],
        now: Instant,
    ) -> Result<(Session, String), OfferError> {
        let offer_text = offer;
        let offer = SdpOffer::from_sdp_string(offer).map_err(|e| OfferError::BadSdp(e.to_string()))?;
        let mut rtc = Rtc::builder()
            .set_ice_lite(true)
            .clear_codecs()
            .enable_h264(params.codec == Codec::H264)
            .enable_h265(params.codec == Codec::H265)
            .set_send_buffer_video(limits::WEBRTC_SEND_BUFFER_PACKETS)
            .set_stats_interval(None)
            .build(now);
        for addr in candidates {
            if let Ok(c) = Candidate::host(*addr, "udp") {
                rtc.add_local_candidate(c);
            }
        }
        let answer = rtc.sdp_api().accept_offer(offer).map_err(|e| OfferError::Rejected(e.to_string()))?;
        let Viewer { id, owner, peer, stream } = who;
        let mut session = Session {
            id,
            owner,
            peer,
            stream,
            rtc,
            video: None,
            connected: false,
            need_key: true,
            channel: None,
            offset_90k: None,
            last_rtp_90k: 0,
            frames_sent: 0,
            last_sent_mono_us: i64::MIN,
            created: now,
        };
        // The offer's first video media line (its `mid`), which the answer accepted.
        let mid = video_mids(offer_text)
            .into_iter()
            .map(Mid::from)
            .find(|m| session.rtc.media(*m).is_some_and(|media| media.kind() == MediaKind::Video))
            .ok_or(OfferError::NoVideo)?;
        let pt = pick_pt(&mut session.rtc, mid, params)?;
        session.video = Some((mid, pt));
        Ok((session, answer.to_sdp_string()))
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    pub fn is_alive(&self) -> bool {
        self.rtc.is_alive()
    }

    /// Drains the session's output: datagrams to `send`, events handled here. Returns when
    /// the session next wants a timeout, and what it asks of the engine.
    pub fn drive(&mut self, send: &mut dyn FnMut(Transmit)) -> (Option<Instant>, Wants) {
        let mut wants = Wants::default();
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => return (Some(t), wants),
                Ok(Output::Transmit(t)) => send(t),
                Ok(Output::Event(e)) => match e {
                    Event::Connected => {
                        self.connected = true;
                        self.need_key = true;
                        wants.keyframe = true;
                    }
                    Event::KeyframeRequest(_) => {
                        self.need_key = true;
                        wants.keyframe = true;
                    }
                    Event::ChannelOpen(id, _) => self.channel = Some(id),
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

    /// Whether the session is waiting for a keyframe to (re)start its picture.
    pub fn needs_keyframe(&self) -> bool {
        self.connected && self.need_key
    }

    /// Marks the picture broken (frames were lost): it restarts at the next keyframe.
    pub fn lost_frames(&mut self) {
        self.need_key = true;
    }

    /// Sends one frame (Annex B, parameter sets in front of a keyframe) with presentation
    /// time `pts_90k`. Skipped until connected and, after a loss, until a keyframe.
    /// `squeeze` sends it 1 tick after the previous one instead (a GOP sent in a burst so a
    /// new viewer's decoder catches up at once).
    pub fn send_frame(
        &mut self,
        annexb: &Arc<[u8]>,
        is_key: bool,
        pts_90k: i64,
        squeeze: bool,
        now: Instant,
    ) -> Result<bool, RtcError> {
        let Some((mid, pt)) = self.video else { return Ok(false) };
        if !self.connected || (self.need_key && !is_key) {
            return Ok(false);
        }
        let offset = *self.offset_90k.get_or_insert(self.last_rtp_90k - pts_90k);
        let mut rtp = pts_90k + offset;
        if squeeze || rtp <= self.last_rtp_90k {
            rtp = self.last_rtp_90k + 1;
            self.offset_90k = Some(rtp - pts_90k);
        }
        let Some(writer) = self.rtc.writer(mid) else { return Ok(false) };
        writer.write(pt, now, MediaTime::from_90khz(rtp as u64), annexb.clone())?;
        self.last_rtp_90k = rtp;
        self.need_key = false;
        self.frames_sent += 1;
        Ok(true)
    }

    /// A new camera session: its presentation times start from a new base.
    pub fn rebase(&mut self) {
        self.offset_90k = None;
    }
}
