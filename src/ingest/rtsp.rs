//! One RTSP camera session with retina: DESCRIBE, SETUP of the video stream, PLAY, then
//! frames until the session ends or stalls.
//!
//! retina has no timeouts of its own: connect and DESCRIBE, each SETUP and PLAY are bounded
//! here, and a watchdog ends a session that is connected but sends no video frame for
//! [`limits::INGEST_NO_FRAMES_TIMEOUT_MS`] (one dropped over its ceiling counts as sent). Frames arrive in the MP4 form (4-byte lengths,
//! parameter sets in the sample entry), which is what the recorder stores.
//!
//! A frame being put together has a ceiling (the stream's frame ceiling, or
//! [`limits::AUDIO_FRAME_MAX_BYTES`]): see [`Assembler`].

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use retina::client::{PacketItem, PlayOptions, Session, SessionGroup, SessionOptions, SetupOptions, Stream};
use retina::codec::{CodecItem, Depacketizer, FrameFormat, ParametersRef, VideoParameters};
use retina::rtp::{PacketMeta, ReceivedPacket};
use retina::testutil::DepacketizeBuf;
use tokio::time::{Instant, timeout};
use tracing::{info, warn};

use super::avsync::{AvSync, Moved, Report};
use super::{IngestError, Sink};
use crate::base::StreamKey;
use crate::config::Transport;
use crate::limits;
use crate::media::{AudioCodec, AudioFrame, AudioParams, Codec, Frame, VideoParams, audio};

/// Where and how to reach one camera stream.
pub struct Target<'a> {
    pub url: &'a url::Url,
    pub transport: Transport,
    pub credentials: Option<(&'a str, &'a str)>,
    pub group: &'a Arc<SessionGroup>,
    /// The stream it feeds, to name in what the session logs.
    pub key: &'a StreamKey,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// Runs one session until it fails; never returns `Ok` except when cancelled (by dropping).
pub async fn run(target: &Target<'_>, sink: &mut Sink<'_>) -> Result<(), IngestError> {
    let options = SessionOptions::default()
        .creds(
            target
                .credentials
                .map(|(u, p)| retina::client::Credentials { username: u.to_string(), password: p.to_string() }),
        )
        .user_agent(format!("KeepPeek/{}", env!("CARGO_PKG_VERSION")))
        .session_group(target.group.clone());
    let mut session = timeout(ms(limits::RTSP_DESCRIBE_TIMEOUT_MS), Session::describe(target.url.clone(), options))
        .await
        .map_err(|_| IngestError::Timeout("DESCRIBE"))??;
    let video_i = session
        .streams()
        .iter()
        .position(|s| s.media() == "video" && matches!(s.encoding_name(), "h264" | "h265"))
        .ok_or(IngestError::NoVideo)?;
    let sdp = sdp_types::Session::parse(session.sdp()).map_err(|e| IngestError::Source(format!("SDP: {e}")))?;
    // RTP over UDP is read as it comes: a socket buffer no one reads for a tick could
    // overflow and lose datagrams.
    let _udp = sink.pace.filter(|_| target.transport == Transport::Udp).map(|p| p.hold());
    let transport = match target.transport {
        Transport::Tcp => retina::client::Transport::Tcp(Default::default()),
        Transport::Udp => retina::client::Transport::Udp(Default::default()),
    };
    let setup = || SetupOptions::default().transport(transport.clone()).frame_format(FrameFormat::MP4);
    timeout(ms(limits::RTSP_SETUP_PLAY_TIMEOUT_MS), session.setup(video_i, setup()))
        .await
        .map_err(|_| IngestError::Timeout("SETUP"))??;
    let mut video = Assembler::new(&session.streams()[video_i], &sdp, sink.frame_max_bytes)?;
    // Audio is recorded along with the video when the camera offers a codec KeepPeek keeps.
    // Nothing about it may stop the video: a stream that cannot be set up or read is
    // dropped and counted, and the session goes on without it.
    let mut audio = match session.streams().iter().position(|s| s.media() == "audio" && audio_codec(s).is_some()) {
        None => None,
        Some(i) => match timeout(ms(limits::RTSP_SETUP_PLAY_TIMEOUT_MS), session.setup(i, setup())).await {
            // A request left without its answer leaves the connection in an unknown state.
            Err(_) => return Err(IngestError::Timeout("SETUP")),
            Ok(Err(e)) => {
                sink.audio_unusable(format!("audio SETUP refused: {e}"));
                None
            }
            Ok(Ok(_)) => match AudioIn::new(&session.streams()[i], i, &sdp) {
                Ok(a) => Some(AudioIn { key: target.key.to_string(), ..a }),
                Err(why) => {
                    sink.audio_unusable(why);
                    None
                }
            },
        },
    };
    sink.state.audio(audio.as_ref().map(|a| a.params.codec));
    drop(sdp);
    let play = PlayOptions::default().enforce_timestamps_with_max_jump_secs(NonZeroU32::new(10).expect("nonzero"));
    let mut session = timeout(ms(limits::RTSP_SETUP_PLAY_TIMEOUT_MS), session.play(play))
        .await
        .map_err(|_| IngestError::Timeout("PLAY"))??;

    let mut params: Option<Arc<VideoParams>> = None;
    let watchdog = ms(limits::INGEST_NO_FRAMES_TIMEOUT_MS);
    // One watchdog timer for the session, set again only when it fires, rather than one made
    // and dropped per packet: when it fires, the session ends if no video frame came within a
    // watchdog of now, else it waits again from the last frame.
    let mut last_frame = Instant::now();
    let timer = tokio::time::sleep_until(last_frame + watchdog);
    tokio::pin!(timer);
    loop {
        let item = tokio::select! {
            biased;
            item = session.next() => item,
            () = &mut timer => {
                if last_frame.elapsed() >= watchdog {
                    return Err(IngestError::NoFrames);
                }
                timer.as_mut().reset(last_frame + watchdog);
                continue;
            }
        };
        let pkt = match item {
            None => return Err(IngestError::Ended),
            Some(item) => match item? {
                PacketItem::Rtp(pkt) => pkt,
                PacketItem::Rtcp(r) => {
                    if let Some(a) = &mut audio {
                        a.rtcp(&r, video_i);
                    }
                    continue;
                }
                _ => continue,
            },
        };
        if let Some(a) = &mut audio
            && pkt.stream_id() == a.stream_i
        {
            a.packet(pkt, sink);
            continue;
        }
        if pkt.stream_id() != video_i {
            continue;
        }
        if video.push(&pkt)? {
            // A frame over its ceiling is still a frame the camera sent: the session is not
            // stalled, so it does not end. A frame that never ends is skipped no longer than
            // a watchdog from here, and then the session does end.
            last_frame = Instant::now();
            sink.oversized();
        }
        while let Some(item) = video.pull()? {
            let CodecItem::VideoFrame(frame) = item else { continue };
            last_frame = Instant::now();
            if params.is_none() || frame.has_new_parameters() {
                let Some(ParametersRef::Video(v)) = video.depacketizer.parameters() else {
                    return Err(IngestError::Source("video stream without parameters".into()));
                };
                let p = Arc::new(video_params(v)?);
                sink.connected(&p);
                params = Some(p);
            }
            let p = params.as_ref().expect("set above");
            let ts = frame.timestamp();
            let rate = i64::from(ts.clock_rate().get());
            let pts_90k = if rate == 90_000 { ts.elapsed() } else { ts.elapsed() * 90_000 / rate };
            let is_key = frame.is_random_access_point();
            let received_mono_us = sink.clocks.mono_us();
            if let Some(a) = &mut audio {
                a.sync.video_frame(pts_90k, received_mono_us);
            }
            sink.deliver(Frame {
                pts_90k,
                received_mono_us,
                received_wall_us: sink.clocks.wall_us(),
                is_key,
                data: frame.into_data().into(),
                params: p.clone(),
                audio: audio.as_ref().map(|a| a.params.clone()),
            });
        }
    }
}

/// The audio codec KeepPeek records `stream` in, from its RTP encoding name.
fn audio_codec(stream: &Stream) -> Option<AudioCodec> {
    codec_of_encoding(stream.encoding_name())
}

fn codec_of_encoding(encoding_name: &str) -> Option<AudioCodec> {
    match encoding_name {
        "mpeg4-generic" => Some(AudioCodec::Aac),
        "pcmu" => Some(AudioCodec::Pcmu),
        "pcma" => Some(AudioCodec::Pcma),
        "opus" => Some(AudioCodec::Opus),
        _ => None,
    }
}

/// A session's audio stream, while it is recorded: its parameters, how its packets become
/// frames, and where its frames fall on the video's timeline.
struct AudioIn {
    /// The stream's name in the log.
    key: String,
    stream_i: usize,
    payload_type: u8,
    params: Arc<AudioParams>,
    /// The stream's channels: a G.711 packet holds this many bytes a sample.
    channels: u16,
    /// retina's depacketizer under KeepPeek's ceiling, for AAC (whose frames may be split
    /// over packets or share one). `None` for G.711 and Opus, where every RTP packet is one
    /// frame as it stands (RFC 3551 section 4.5.14, RFC 7587): taken here without passing
    /// through a depacketizer, which would copy each packet into its buffer and out again.
    /// At 50 packets a second a camera, that copy and its allocations were a measured part
    /// of what recording sound cost (`benches/record.rs`).
    assembler: Option<Assembler>,
    sync: AvSync,
    /// Packets taken since audio was last dropped, to say so once per run of bad ones.
    since_drop: u64,
}

impl AudioIn {
    /// The audio stream `stream_i` (set up), or why it cannot be recorded.
    fn new(stream: &Stream, stream_i: usize, sdp: &sdp_types::Session) -> Result<AudioIn, String> {
        let codec =
            audio_codec(stream).ok_or_else(|| format!("audio codec {} is not recorded", stream.encoding_name()))?;
        let fmtp = match fmtp(stream, sdp) {
            Ok(f) => f,
            // Opus reads only whether it is stereo there.
            Err(_) if codec == AudioCodec::Opus => None,
            Err(e) => return Err(format!("{codec} audio: {e}")),
        };
        AudioIn::of(codec, stream_i, stream.rtp_payload_type(), stream.clock_rate_hz(), stream.channels(), fmtp)
    }

    /// The audio stream `stream_i` in `codec` from what its SDP says.
    fn of(
        codec: AudioCodec,
        stream_i: usize,
        payload_type: u8,
        clock_rate: u32,
        channels: Option<std::num::NonZeroU16>,
        fmtp: Option<String>,
    ) -> Result<AudioIn, String> {
        let n_channels = channels.map_or(1, std::num::NonZeroU16::get);
        let error = |e: IngestError| format!("{codec} audio: {e}");
        let (params, assembler, n_channels) = match codec {
            AudioCodec::Aac => {
                let max = limits::AUDIO_FRAME_MAX_BYTES;
                let a =
                    Assembler::from_parts("audio", "mpeg4-generic", clock_rate, channels, fmtp, max).map_err(error)?;
                let Some(ParametersRef::Audio(p)) = a.parameters() else {
                    return Err("AAC audio without its configuration in the SDP".into());
                };
                (audio_params(p).map_err(error)?, Some(a), n_channels)
            }
            AudioCodec::Pcmu | AudioCodec::Pcma => {
                (audio::g711_params(codec, clock_rate, n_channels).map_err(|e| e.to_string())?, None, n_channels)
            }
            AudioCodec::Opus => {
                // RTP always says 2 channels for Opus; `sprop-stereo=1` says the camera
                // sends stereo (RFC 7587 section 7.1).
                let stereo =
                    fmtp.is_some_and(|f| f.split(';').any(|p| p.trim().eq_ignore_ascii_case("sprop-stereo=1")));
                let n = if stereo { 2 } else { 1 };
                (audio::opus_params(n, 0).map_err(|e| e.to_string())?, None, n)
            }
        };
        Ok(AudioIn {
            key: String::new(),
            stream_i,
            payload_type,
            sync: AvSync::new(params.sample_rate),
            params: Arc::new(params),
            channels: n_channels,
            assembler,
            since_drop: u64::MAX,
        })
    }

    /// A sender report of the video's stream or of this one.
    fn rtcp(&mut self, r: &retina::rtcp::ReceivedCompoundPacket, video_i: usize) {
        let Some(ts) = r.rtp_timestamp() else { return };
        let Some(Ok(Some(sr))) = r.pkts().next().map(|p| p.as_sender_report()) else { return };
        let rate = i64::from(ts.clock_rate().get());
        let report = |rtp_elapsed| Report { rtp_elapsed, ntp: sr.ntp_timestamp().0 };
        let moved = if r.stream_id() == video_i {
            let elapsed = if rate == 90_000 { ts.elapsed() } else { ts.elapsed().saturating_mul(90_000) / rate };
            self.sync.video_report(report(elapsed))
        } else if r.stream_id() == self.stream_i {
            self.sync.audio_report(report(ts.elapsed()))
        } else {
            None
        };
        // Said once per session, and then only when the camera's reports jump: what a
        // sound out of step in a recording is traced back to.
        match moved {
            Some(Moved::FromArrival { by_90k }) => {
                info!(
                    stream = self.key,
                    "sound placed by the camera's sender reports, {} ms from its arrival",
                    by_90k / 90
                )
            }
            Some(Moved::ByReports { by_90k }) if by_90k.unsigned_abs() >= SOUND_JUMP_LOGGED_90K => {
                warn!(stream = self.key, "the camera's sender reports moved its sound {} ms", by_90k / 90)
            }
            _ => {}
        }
    }

    /// Takes one packet of this stream: the frames it completes go to `sink`. A packet that
    /// cannot be used is dropped and counted, and the stream goes on from the next.
    fn packet(&mut self, pkt: ReceivedPacket, sink: &mut Sink<'_>) {
        let pt = pkt.header().payload_type();
        if pt != self.payload_type {
            match switched_codec(pt) {
                Some(codec) => {
                    // The camera changed codec mid-stream: the segment being written closes
                    // at the next keyframe and the next records the new one.
                    match audio::g711_params(codec, 8_000, 1) {
                        Ok(p) => {
                            if self.params.sample_rate != p.sample_rate {
                                self.sync = AvSync::new(p.sample_rate);
                            }
                            self.params = Arc::new(p);
                            self.payload_type = pt;
                            self.channels = 1;
                            self.assembler = None;
                            sink.state.audio(Some(codec));
                        }
                        Err(e) => return self.drop(sink, e.to_string()),
                    }
                }
                _ => {
                    return self.drop(
                        sink,
                        format!("audio packet of payload type {pt}, not the {pt0} set up", pt0 = self.payload_type),
                    );
                }
            }
        }
        let elapsed = pkt.timestamp().elapsed();
        let Some(assembler) = &mut self.assembler else {
            // G.711 and Opus: the packet is the frame, its payload taken as retina holds it
            // (the packet's own bytes, nothing else), not copied again.
            let payload = pkt.payload();
            let samples = match self.params.codec {
                AudioCodec::Opus => audio::opus_packet_samples(payload),
                _ => g711_samples(payload.len(), self.channels),
            };
            match samples {
                Some(samples) => self.frame(elapsed, samples, pkt.into_payload_bytes(), sink),
                None => {
                    self.drop(sink, format!("{} packet that is not one ({} bytes)", self.params.codec, payload.len()))
                }
            }
            return;
        };
        match assembler.push(&pkt) {
            Ok(true) => {
                return self
                    .drop(sink, format!("audio frame over AUDIO_FRAME_MAX_BYTES ({})", limits::AUDIO_FRAME_MAX_BYTES));
            }
            Ok(false) => {}
            Err(e) => {
                assembler.reset();
                return self.drop(sink, e.to_string());
            }
        }
        loop {
            let assembler = self.assembler.as_mut().expect("set");
            match assembler.pull() {
                Ok(None) => break,
                Ok(Some(CodecItem::AudioFrame(a))) => {
                    let ts = a.timestamp();
                    // Both depacketizers run at the stream's clock rate, the sample rate.
                    let (elapsed, samples) = (ts.elapsed(), a.frame_length().get());
                    self.frame(elapsed, samples, Bytes::copy_from_slice(a.data()), sink);
                }
                Ok(Some(_)) => {}
                Err(e) => {
                    assembler.reset();
                    self.drop(sink, e.to_string());
                    break;
                }
            }
        }
    }

    fn frame(&mut self, elapsed: i64, samples: u32, data: Bytes, sink: &mut Sink<'_>) {
        self.since_drop = self.since_drop.saturating_add(1);
        let now_mono_us = sink.clocks.mono_us();
        let Some(pts_90k) = self.sync.audio_pts_90k(elapsed, now_mono_us) else { return };
        let frame = AudioFrame { pts_90k, duration_samples: samples, data, params: self.params.clone() };
        sink.deliver_audio(frame, now_mono_us);
    }

    fn drop(&mut self, sink: &mut Sink<'_>, why: String) {
        if self.since_drop > 0 {
            warn!(stream = self.key, "audio dropped: {why}");
        }
        self.since_drop = 0;
        sink.audio_dropped(why);
    }
}

/// The samples a G.711 packet of `len` bytes holds for `channels` (one byte a sample a
/// channel); `None` for an empty packet or one that does not hold whole samples.
fn g711_samples(len: usize, channels: u16) -> Option<u32> {
    let channels = usize::from(channels.max(1));
    (len > 0 && len.is_multiple_of(channels)).then(|| u32::try_from(len / channels).ok()).flatten()
}

/// The G.711 codec of a static RTP payload type (RFC 3551: 0 µ-law, 8 A-law, at 8 kHz): what
/// a camera that changes codec mid-stream changes to.
fn switched_codec(payload_type: u8) -> Option<AudioCodec> {
    match payload_type {
        0 => Some(AudioCodec::Pcmu),
        8 => Some(AudioCodec::Pcma),
        _ => None,
    }
}

/// One set-up stream's depacketizer, fed the session's packets by KeepPeek with a ceiling on
/// the frame being put together.
///
/// Written here because retina (0.4) has no such ceiling: its demuxer assembles an access
/// unit of any size in its read buffer, and keeps the buffer at that size, so a camera that
/// sends an endless frame would take the box's memory before the frame, once whole, could be
/// dropped. retina has no option for one and its `Depacketizer::push` is crate-private; its
/// `testutil::DepacketizeBuf` (public, and documented as not a stable interface: the
/// retina version is pinned in `Cargo.toml` for it) pushes one payload into a depacketizer.
///
/// A packet that would take the frame being put together past `max_bytes` is not pushed:
/// that frame is dropped (the caller counts it), its other packets (those with its RTP
/// timestamp) are skipped, and a new depacketizer starts with the next frame's first packet.
/// So the buffer holding a frame being put together never needs more than `max_bytes`, and
/// as it grows by powers of two it stays at most `max_bytes` rounded up to one (the budget
/// counts that).
pub(super) struct Assembler {
    /// What the depacketizer is made from, to make it anew after a dropped frame.
    media: String,
    encoding_name: String,
    clock_rate: u32,
    channels: Option<std::num::NonZeroU16>,
    fmtp: Option<String>,
    depacketizer: Depacketizer,
    buf: DepacketizeBuf,
    /// Payload bytes pushed since the depacketizer last gave an item.
    pending_bytes: usize,
    max_bytes: usize,
    /// The RTP timestamp of the frame being dropped, while its packets are skipped.
    skipping: Option<i64>,
}

impl Assembler {
    pub(super) fn new(stream: &Stream, sdp: &sdp_types::Session, max_bytes: usize) -> Result<Assembler, IngestError> {
        let fmtp = fmtp(stream, sdp)?;
        Assembler::from_parts(
            stream.media(),
            stream.encoding_name(),
            stream.clock_rate_hz(),
            stream.channels(),
            fmtp,
            max_bytes,
        )
    }

    fn from_parts(
        media: &str,
        encoding_name: &str,
        clock_rate: u32,
        channels: Option<std::num::NonZeroU16>,
        fmtp: Option<String>,
        max_bytes: usize,
    ) -> Result<Assembler, IngestError> {
        let depacketizer = new_depacketizer(media, encoding_name, clock_rate, channels, fmtp.as_deref())?;
        Ok(Assembler {
            media: media.to_string(),
            encoding_name: encoding_name.to_string(),
            clock_rate,
            channels,
            fmtp,
            depacketizer,
            // It grows by powers of two to the largest frame seen, up to its ceiling.
            buf: DepacketizeBuf::new(FIRST_BUF_BYTES.min(max_bytes)),
            pending_bytes: 0,
            max_bytes,
            skipping: None,
        })
    }

    /// Starts again from the next packet: what a bad packet left is dropped.
    pub(super) fn reset(&mut self) {
        self.skipping = None;
        self.pending_bytes = 0;
        if let Ok(d) =
            new_depacketizer(&self.media, &self.encoding_name, self.clock_rate, self.channels, self.fmtp.as_deref())
        {
            self.depacketizer = d;
        }
    }

    /// Pushes one packet into the frame being put together; true when it would have taken
    /// that frame past the ceiling, which drops it.
    pub(super) fn push(&mut self, pkt: &ReceivedPacket) -> Result<bool, IngestError> {
        let ts = pkt.timestamp().timestamp();
        if let Some(dropped) = self.skipping {
            if ts == dropped {
                return Ok(false);
            }
            // The next frame: what the dropped one left in the depacketizer goes with it.
            self.reset();
        }
        let payload = pkt.payload();
        if self.pending_bytes + payload.len() > self.max_bytes {
            self.skipping = Some(ts);
            return Ok(true);
        }
        self.pending_bytes += payload.len();
        self.buf
            .push(&mut self.depacketizer, PacketMeta::from_received(pkt), payload)
            .map_err(|e| IngestError::Source(format!("{} RTP packet: {e}", self.media)))?;
        Ok(false)
    }

    /// The stream's codec parameters, once the depacketizer has seen them.
    pub(super) fn parameters(&self) -> Option<ParametersRef<'_>> {
        self.depacketizer.parameters()
    }

    /// The next frame (or other item) the pushed packets made, if any.
    pub(super) fn pull(&mut self) -> Result<Option<CodecItem>, IngestError> {
        match self.depacketizer.pull() {
            None => Ok(None),
            Some(Ok(item)) => {
                self.pending_bytes = 0;
                Ok(Some(item))
            }
            Some(Err(e)) => Err(IngestError::Source(format!("{} stream: {e:?}", self.media))),
        }
    }
}

/// A move of the sound by the camera's sender reports worth a warning: over a frame of
/// video at 20 fps, which a viewer sees as out of step.
const SOUND_JUMP_LOGGED_90K: u64 = 4_500;

/// What a frame being put together starts with: one large RTP packet, or its ceiling if less.
const FIRST_BUF_BYTES: usize = 64 << 10;

fn new_depacketizer(
    media: &str,
    encoding_name: &str,
    clock_rate: u32,
    channels: Option<std::num::NonZeroU16>,
    fmtp: Option<&str>,
) -> Result<Depacketizer, IngestError> {
    let mut d = Depacketizer::new(media, encoding_name, clock_rate, channels, fmtp)
        .map_err(|e| IngestError::Source(format!("{media} stream: {e}")))?;
    d.set_frame_format(FrameFormat::MP4);
    Ok(d)
}

/// The format parameters (`a=fmtp`) of `stream`'s media description in `sdp`, which retina
/// reads but does not hand out. retina's streams are the media descriptions it could read:
/// this finds `stream`'s among those of the same media and payload type by its control URL,
/// or takes the first of them when controls do not tell them apart.
fn fmtp(stream: &Stream, sdp: &sdp_types::Session) -> Result<Option<String>, IngestError> {
    let pt = stream.rtp_payload_type().to_string();
    let candidates: Vec<&sdp_types::Media> = sdp
        .medias
        .iter()
        .filter(|m| m.media == stream.media() && m.fmt.split_ascii_whitespace().next() == Some(pt.as_str()))
        .collect();
    let control = stream.control().map(url::Url::as_str);
    let by_control: Vec<&&sdp_types::Media> = candidates
        .iter()
        .filter(|m| match (m.get_first_attribute_value("control"), control) {
            (Ok(Some(c)), Some(url)) => url == c || url.ends_with(&format!("/{}", c.trim_start_matches('/'))),
            _ => false,
        })
        .collect();
    let media = match by_control.as_slice() {
        [one] => **one,
        _ => *candidates.first().ok_or_else(|| {
            IngestError::Source(format!("no SDP media description for the {} stream", stream.media()))
        })?,
    };
    Ok(media.attributes.iter().filter(|a| a.attribute == "fmtp").find_map(|a| {
        let (a_pt, params) = a.value.as_deref()?.split_once(' ')?;
        (a_pt == pt).then(|| params.to_string())
    }))
}

/// Our form of retina's audio parameters, bounded.
fn audio_params(a: &retina::codec::AudioParameters) -> Result<AudioParams, IngestError> {
    let entry = a.mp4_sample_entry().build().map_err(|e| IngestError::Source(format!("audio sample entry: {e}")))?;
    if entry.len() > limits::SAMPLE_ENTRY_MAX_BYTES {
        return Err(IngestError::Source("audio parameters over SAMPLE_ENTRY_MAX_BYTES".into()));
    }
    Ok(AudioParams {
        codec: crate::media::AudioCodec::Aac,
        rfc6381: a.rfc6381_codec().unwrap_or("mp4a.40.2").to_string(),
        sample_rate: a.clock_rate(),
        sample_entry: entry.into(),
    })
}

/// Our form of retina's video parameters, bounded.
pub(super) fn video_params(v: &VideoParameters) -> Result<VideoParams, IngestError> {
    let rfc6381 = v.rfc6381_codec().to_string();
    let codec = match rfc6381.get(..4) {
        Some("avc1" | "avc3") => Codec::H264,
        Some("hvc1" | "hev1") => Codec::H265,
        _ => return Err(IngestError::Source(format!("unsupported codec {rfc6381}"))),
    };
    let entry = v.mp4_sample_entry().build().map_err(|e| IngestError::Source(format!("sample entry: {e}")))?;
    if entry.len() > limits::SAMPLE_ENTRY_MAX_BYTES {
        return Err(IngestError::Source("codec parameters over SAMPLE_ENTRY_MAX_BYTES".into()));
    }
    let (w, h) = v.pixel_dimensions();
    let (Ok(width), Ok(height)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err(IngestError::Source(format!("picture size {w}x{h} out of range")));
    };
    Ok(VideoParams { codec, rfc6381, width, height, sample_entry: entry.into() })
}

/// Packets from a camera, as arbitrary bytes, into an [`Assembler`]: for the fuzz target
/// `rtp_assemble` (`fuzz/`). No input may panic, and the frame being put together never holds
/// more than its ceiling.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing {
    use super::*;
    use retina::rtp::ReceivedPacketBuilder;

    /// An RTP packet of stream 0 as the session hands it out; `None` if retina refuses it
    /// (a payload too long for one packet).
    pub fn packet(seq: u16, ts: i64, clock_rate: u32, mark: bool, loss: u16, payload: &[u8]) -> Option<ReceivedPacket> {
        packet_of_type(96, seq, ts, clock_rate, mark, loss, payload)
    }

    /// [`packet`] with its payload type.
    pub fn packet_of_type(
        payload_type: u8,
        seq: u16,
        ts: i64,
        clock_rate: u32,
        mark: bool,
        loss: u16,
        payload: &[u8],
    ) -> Option<ReceivedPacket> {
        ReceivedPacketBuilder {
            ctx: retina::PacketContext::dummy(),
            stream_id: 0,
            sequence_number: seq,
            timestamp: retina::Timestamp::new(ts, NonZeroU32::new(clock_rate)?, 0)?,
            payload_type,
            ssrc: 1,
            mark,
            loss,
        }
        .build(payload.iter().copied())
        .ok()
    }

    /// The first byte picks the stream (H.264 with and without parameter sets in the SDP,
    /// H.265, AAC); then each packet is a flags byte (bit 0 the marker, bits 1-3 how many
    /// frame times its timestamp moves on, bit 4 a packet lost before it), a 2-byte length
    /// and the payload.
    pub fn assemble(data: &[u8]) {
        let Some((&first, mut rest)) = data.split_first() else { return };
        let h264_sdp = "packetization-mode=1;sprop-parameter-sets=Z01AFtoCgL/lwEQAAAMABAAAAwB4PFi6gA==,aO8Gcg==";
        let aac_sdp =
            "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190";
        let (media, encoding, clock_rate, channels, fmtp) = match first % 4 {
            0 => ("video", "h264", 90_000, None, Some(h264_sdp)),
            1 => ("video", "h264", 90_000, None, None),
            2 => ("video", "h265", 90_000, None, None),
            _ => ("audio", "mpeg4-generic", 48_000, std::num::NonZeroU16::new(2), Some(aac_sdp)),
        };
        // Small, so that inputs reach it.
        let max_bytes = 8 << 10;
        let Ok(mut a) =
            Assembler::from_parts(media, encoding, clock_rate, channels, fmtp.map(str::to_string), max_bytes)
        else {
            return;
        };
        let (mut ts, mut seq) = (0i64, 0u16);
        while let [flags, hi, lo, tail @ ..] = rest {
            let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
            let (payload, next) = tail.split_at(len);
            rest = next;
            ts += i64::from(flags >> 1 & 7) * 3000;
            let lost = u16::from(flags >> 4 & 1);
            seq = seq.wrapping_add(1 + lost);
            let Some(pkt) = packet(seq, ts, clock_rate, flags & 1 == 1, lost, payload) else {
                return;
            };
            if a.push(&pkt).is_err() {
                return;
            }
            assert!(a.pending_bytes <= a.max_bytes, "held {} of {}", a.pending_bytes, a.max_bytes);
            loop {
                match a.pull() {
                    Ok(Some(CodecItem::VideoFrame(_))) => {
                        if let Some(ParametersRef::Video(v)) = a.depacketizer.parameters() {
                            let _ = video_params(v);
                        }
                    }
                    Ok(Some(CodecItem::AudioFrame(_))) => {
                        if let Some(ParametersRef::Audio(p)) = a.depacketizer.parameters() {
                            let _ = audio_params(p);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => return,
                }
            }
        }
    }

    /// Whether retina would take `raw` as a compound RTCP packet: it checks one as it comes
    /// off the wire (a session never hands out another), but its `dummy` does not.
    fn valid_compound(raw: &[u8]) -> bool {
        use retina::rtcp::PacketRef;
        let Ok((mut pkt, mut rest)) = PacketRef::parse(raw) else { return false };
        while !rest.is_empty() {
            if pkt.has_padding() {
                return false;
            }
            let Ok((next, after)) = PacketRef::parse(rest) else { return false };
            (pkt, rest) = (next, after);
        }
        true
    }

    /// A sink that only counts, in `state`: no recorder, no live viewers.
    pub(super) fn detached_sink<'a>(
        state: &'a super::super::StreamState,
        clocks: &'a dyn crate::clock::Clocks,
    ) -> Sink<'a> {
        Sink {
            recorder: None,
            state,
            live: None,
            clocks,
            frame_max_bytes: 1 << 20,
            pace: None,
            watched: None,
            connecting: None,
        }
    }

    /// A session's audio stream as a camera sends it. The first byte picks the codec (AAC,
    /// G.711 µ-law, A-law, Opus; bit 2 two channels); then each record is a flags byte, a
    /// 2-byte length and its bytes:
    /// - flags bit 7 clear: an RTP packet of the stream (bit 0 the marker, bits 1-3 how many
    ///   frame times its timestamp moves on, bit 4 a packet lost before it, bits 5-6 its
    ///   payload type: the one set up, 0, 8 or one not set up);
    /// - flags bit 7 set, bits 0-1: a video frame at the time in the first 8 bytes; a sender
    ///   report of the video's stream or of the audio's (its RTP time in the first 8 bytes,
    ///   the RTCP packet after them); the clock moving on by the first 2 bytes in ms.
    pub fn audio(data: &[u8]) {
        let Some((&first, mut rest)) = data.split_first() else { return };
        let codec = [AudioCodec::Aac, AudioCodec::Pcmu, AudioCodec::Pcma, AudioCodec::Opus][usize::from(first % 4)];
        let two = first & 4 != 0;
        let aac_sdp =
            "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1190";
        let (set_up_type, rate, step, fmtp) = match codec {
            AudioCodec::Aac => (96, 48_000, 1024, Some(aac_sdp.to_string())),
            AudioCodec::Pcmu => (0, 8_000, 160, None),
            AudioCodec::Pcma => (8, 8_000, 160, None),
            AudioCodec::Opus => (111, 48_000, 960, two.then(|| "sprop-stereo=1".to_string())),
        };
        let channels = std::num::NonZeroU16::new(if two { 2 } else { 1 });
        let Ok(mut a) = AudioIn::of(codec, 0, set_up_type, rate, channels, fmtp) else { return };
        let state = super::super::StreamState::default();
        state.audio(Some(codec));
        let clocks = crate::clock::SimulatedClocks::new(0);
        let mut sink = detached_sink(&state, &clocks);
        let (mut ts, mut seq) = (0i64, 0u16);
        while let [flags, hi, lo, tail @ ..] = rest {
            let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
            let (body, next) = tail.split_at(len);
            rest = next;
            if flags & 0x80 != 0 {
                let at = body.get(..8).map_or(0, |b| i64::from_be_bytes(b.try_into().expect("8 bytes")));
                match flags & 3 {
                    0 => a.sync.video_frame(at, crate::clock::Clocks::mono_us(&clocks)),
                    3 => {
                        let ms = body.get(..2).map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
                        clocks.advance(std::time::Duration::from_millis(u64::from(ms)));
                    }
                    kind => {
                        let report_rate = if kind == 1 { 90_000 } else { rate };
                        let Some(t) = NonZeroU32::new(report_rate).and_then(|r| retina::Timestamp::new(at, r, 0))
                        else {
                            continue;
                        };
                        let raw = body.get(8..).unwrap_or_default();
                        if !valid_compound(raw) {
                            continue;
                        }
                        let r = retina::rtcp::ReceivedCompoundPacket::dummy(Some(t), raw);
                        // The report is of stream 0, the audio's here: naming stream 0 the
                        // video's makes it the video's report.
                        a.rtcp(&r, if kind == 1 { 0 } else { 1 });
                    }
                }
                continue;
            }
            ts = ts.saturating_add(i64::from(flags >> 1 & 7) * step);
            let lost = u16::from(flags >> 4 & 1);
            seq = seq.wrapping_add(1 + lost);
            let payload_type = [set_up_type, 0, 8, 101][usize::from(flags >> 5 & 3)];
            let Some(pkt) = packet_of_type(payload_type, seq, ts, rate, flags & 1 == 1, lost, body) else {
                return;
            };
            a.packet(pkt, &mut sink);
            if let Some(asm) = &a.assembler {
                assert!(asm.pending_bytes <= asm.max_bytes, "held {} of {}", asm.pending_bytes, asm.max_bytes);
            }
            // A static payload type is read as its own codec, never as the one before it.
            match a.payload_type {
                0 => assert_eq!(a.params.codec, AudioCodec::Pcmu),
                8 => assert_eq!(a.params.codec, AudioCodec::Pcma),
                _ => {}
            }
            assert_eq!(state.snapshot().audio, Some(a.params.codec), "the stream shows the codec it records");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture clip's parameter sets (640×360).
    const SPS: [u8; 25] = [
        0x67, 0x4d, 0x40, 0x16, 0xda, 0x02, 0x80, 0xbf, 0xe5, 0xc0, 0x44, 0x00, 0x00, 0x03, 0x00, 0x04, 0x00, 0x00,
        0x03, 0x00, 0x78, 0x3c, 0x58, 0xba, 0x80,
    ];
    const PPS: [u8; 4] = [0x68, 0xef, 0x06, 0x72];
    /// Bytes of an IDR slice in each FU-A packet.
    const FRAGMENT_BYTES: usize = 1000;

    struct Camera {
        seq: u16,
    }

    impl Camera {
        fn packet(&mut self, ts: i64, mark: bool, payload: Vec<u8>) -> ReceivedPacket {
            self.seq = self.seq.wrapping_add(1);
            fuzzing::packet(self.seq, ts, 90_000, mark, 0, &payload).unwrap()
        }

        /// A keyframe at `ts` whose packets' payloads add up to `bytes`: the parameter sets,
        /// then an IDR slice in FU-A fragments.
        fn keyframe(&mut self, ts: i64, bytes: usize) -> Vec<ReceivedPacket> {
            let mut packets = vec![self.packet(ts, false, SPS.to_vec()), self.packet(ts, false, PPS.to_vec())];
            let mut left = bytes - SPS.len() - PPS.len();
            let mut first = true;
            while left > 0 {
                let n = left.min(FRAGMENT_BYTES + 2);
                left -= n;
                let end = left == 0;
                let header = 5 | if first { 0x80 } else { 0 } | if end { 0x40 } else { 0 };
                let mut payload = vec![0x7c, header];
                payload.resize(n, 0x5a);
                packets.push(self.packet(ts, end, payload));
                first = false;
            }
            packets
        }
    }

    fn frames(a: &mut Assembler, packets: Vec<ReceivedPacket>) -> (Vec<retina::codec::VideoFrame>, usize) {
        let (mut frames, mut dropped) = (Vec::new(), 0);
        for p in packets {
            dropped += usize::from(a.push(&p).unwrap());
            assert!(a.pending_bytes <= a.max_bytes, "held {} of {}", a.pending_bytes, a.max_bytes);
            while let Some(item) = a.pull().unwrap() {
                if let CodecItem::VideoFrame(f) = item {
                    frames.push(f);
                }
            }
        }
        (frames, dropped)
    }

    #[test]
    fn the_fuzz_harness_takes_a_keyframe_and_rubbish() {
        // H.264 with its SDP: SPS, PPS, a small IDR slice with the marker; then rubbish.
        let mut input = vec![0u8];
        for (flags, payload) in [(0u8, SPS.to_vec()), (0, PPS.to_vec()), (1, vec![0x65, 0x88, 0x84, 0x00])] {
            input.push(flags);
            input.extend_from_slice(&(payload.len() as u16).to_be_bytes());
            input.extend_from_slice(&payload);
        }
        input.extend_from_slice(&[3, 0xff, 0xff, 0x7c, 0x85, 1, 2, 3]);
        for first in 0..4u8 {
            input[0] = first;
            fuzzing::assemble(&input);
        }
    }

    #[test]
    fn the_fuzz_corpus_goes_through_without_panicking() {
        let n = crate::base::testing::replay_corpus("rtp_assemble", fuzzing::assemble);
        assert!(n > 100, "{n} inputs in the corpus");
    }

    #[test]
    fn the_audio_fuzz_corpus_goes_through_without_panicking() {
        let n = crate::base::testing::replay_corpus("rtp_audio", fuzzing::audio);
        assert!(n > 20, "{n} inputs in the corpus");
    }

    /// A camera's G.711 and Opus packets are each a frame; one that holds no whole sample,
    /// or is no Opus packet, is dropped and counted, and the stream goes on.
    #[test]
    fn g711_and_opus_packets_are_frames_as_they_stand() {
        let state = super::super::StreamState::default();
        let clocks = crate::clock::SimulatedClocks::new(0);
        let mut sink = fuzzing::detached_sink(&state, &clocks);
        let two = std::num::NonZeroU16::new(2);
        let mut pcmu = AudioIn::of(AudioCodec::Pcmu, 1, 0, 8_000, two, None).unwrap();
        pcmu.sync.video_frame(0, 0);
        let pkt = |pt, seq, ts, payload: &[u8]| fuzzing::packet_of_type(pt, seq, ts, 8_000, false, 0, payload).unwrap();
        pcmu.packet(pkt(0, 1, 0, &[0xff; 320]), &mut sink);
        pcmu.packet(pkt(0, 2, 160, &[0xff; 321]), &mut sink);
        pcmu.packet(pkt(0, 3, 320, &[]), &mut sink);
        pcmu.packet(pkt(0, 4, 480, &[0xff; 2]), &mut sink);
        let s = state.snapshot();
        assert_eq!((s.audio_frames_received, s.audio_dropped), (2, 2));
        assert!(s.audio_last_error.unwrap().contains("pcmu packet that is not one"));
        // A switch to A-law (payload type 8) is mono G.711 at 8 kHz.
        pcmu.packet(pkt(8, 5, 640, &[0xd5; 160]), &mut sink);
        assert_eq!(
            (pcmu.params.codec, pcmu.channels, state.snapshot().audio_frames_received),
            (AudioCodec::Pcma, 1, 3)
        );
        let mut opus = AudioIn::of(AudioCodec::Opus, 1, 111, 48_000, two, None).unwrap();
        opus.sync.video_frame(0, 0);
        // A 20 ms SILK frame (TOC config 1, code 0), then a code 3 packet missing its count.
        let opus_pkt = |seq, payload: &[u8]| fuzzing::packet_of_type(111, seq, 0, 48_000, false, 0, payload).unwrap();
        opus.packet(opus_pkt(1, &[0x08, 0xaa]), &mut sink);
        opus.packet(opus_pkt(2, &[0x0b]), &mut sink);
        let s = state.snapshot();
        assert_eq!((s.audio_frames_received, s.audio_dropped), (4, 3));
    }

    #[test]
    fn a_frame_at_its_ceiling_is_put_together_and_one_byte_more_is_dropped_alone() {
        let max = 64 << 10;
        let mut a =
            Assembler::from_parts("video", "h264", 90_000, None, Some("packetization-mode=1".into()), max).unwrap();
        let mut cam = Camera { seq: 0 };
        let (got, dropped) = frames(&mut a, cam.keyframe(0, max));
        assert_eq!((got.len(), dropped), (1, 0), "a frame of exactly its ceiling");
        assert!(got[0].is_random_access_point());
        assert!(got[0].data().len() >= max * 9 / 10, "the frame is whole: {} bytes", got[0].data().len());

        // One byte over: dropped once, at the packet that would pass the ceiling; the rest
        // of its packets are skipped without being held.
        let (got, dropped) = frames(&mut a, cam.keyframe(3000, max + 1));
        assert_eq!((got.len(), dropped), (0, 1));

        // An endless frame (packets with one timestamp, never a last one) is dropped once and
        // holds no more than the ceiling however long it goes on.
        let mut endless = cam.keyframe(6000, 10 * max);
        endless.pop();
        let (got, dropped) = frames(&mut a, endless);
        assert_eq!((got.len(), dropped), (0, 1));

        // The next frame starts afresh and comes out whole.
        let (got, dropped) = frames(&mut a, cam.keyframe(9000, 4000));
        assert_eq!((got.len(), dropped), (1, 0));
        assert_eq!(got[0].timestamp().elapsed(), 9000);
        assert!(got[0].is_random_access_point());
    }
}
