//! A camera tried before it is added: connect, DESCRIBE, SETUP and PLAY its video, wait for
//! the first keyframe and a few frames after it, and say what it sends (codec, picture
//! size, frame rate, audio), or why not in words a person can act on: nothing answers
//! there, it refused, the credentials are wrong, it did not answer in time, it does not
//! speak RTSP, or it sends a codec KeepPeek does not record.

use std::time::Duration;

use futures::StreamExt;
use retina::client::{PacketItem, PlayOptions, Session, SessionOptions, SetupOptions};
use retina::codec::{CodecItem, FrameFormat, ParametersRef};
use tokio::time::{Instant, timeout};

use super::rtsp::{Assembler, video_params};
use crate::config::Transport;
use crate::limits;
use crate::media::Codec;

/// What a camera's stream sends.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Found {
    pub codec: &'static str,
    pub width: u16,
    pub height: u16,
    /// Frames a second, from the timestamps of the first frames.
    pub fps: Option<f32>,
    /// The audio codec the camera offers (`mpeg4-generic` is AAC), if any.
    pub audio: Option<String>,
}

/// Why a probe found no stream to record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("nothing answers at that address and port: {0}")]
    Unreachable(String),
    #[error("the camera refused: {0}")]
    Refused(String),
    #[error("the camera refused the user name and password")]
    Credentials,
    #[error("the camera did not answer {0} within {1} s")]
    Timeout(&'static str, u64),
    #[error("what answers there does not speak RTSP: {0}")]
    NotRtsp(String),
    #[error("the camera sends {0}, and KeepPeek records H.264 and H.265 only")]
    Codec(String),
    #[error("{0}")]
    Other(String),
}

impl Failure {
    /// A stable code for the UI.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::Unreachable(_) => "unreachable",
            Failure::Refused(_) => "refused",
            Failure::Credentials => "wrong_credentials",
            Failure::Timeout(..) => "timeout",
            Failure::NotRtsp(_) => "not_rtsp",
            Failure::Codec(_) => "codec",
            Failure::Other(_) => "failed",
        }
    }

    /// The field of the camera form it is about.
    pub fn field(&self) -> &'static str {
        match self {
            Failure::Credentials => "password",
            _ => "url",
        }
    }
}

/// The frames after the first keyframe that give the frame rate.
const FPS_FRAMES: usize = 8;

/// Sorts retina's error into what a person can do about it.
fn classify(e: &retina::Error) -> Failure {
    match e.status_code() {
        Some(401) => return Failure::Credentials,
        Some(404) => return Failure::Refused("there is no stream at that path (RTSP 404)".into()),
        Some(403) => return Failure::Refused("this user may not watch it (RTSP 403)".into()),
        Some(code) => return Failure::Refused(format!("RTSP status {code}")),
        None => {}
    }
    // retina's message may go on with a dump of what was received: its first line says it.
    let whole = e.to_string();
    let first = whole.lines().next().unwrap_or("");
    let text: String = first.split("; buffered").next().unwrap_or(first).chars().take(200).collect();
    let lower = text.to_ascii_lowercase();
    if ["connection refused", "no route", "unreachable", "failed to lookup", "name or service"]
        .iter()
        .any(|w| lower.contains(w))
    {
        Failure::Unreachable(text)
    } else if lower.contains("connection reset") || lower.contains("broken pipe") {
        Failure::Refused(text)
    } else if lower.contains("parse") || lower.contains("invalid") || lower.contains("unexpected") {
        Failure::NotRtsp(text)
    } else {
        Failure::Other(text)
    }
}

/// Probes the stream at `url`, giving up after [`limits::PROBE_TIMEOUT_MS`] in all.
pub async fn probe(url: &url::Url, transport: Transport, credentials: Option<(&str, &str)>) -> Result<Found, Failure> {
    let total = Duration::from_millis(limits::PROBE_TIMEOUT_MS);
    let deadline = Instant::now() + total;
    let left = || deadline.saturating_duration_since(Instant::now());
    let late = |what| Failure::Timeout(what, limits::PROBE_TIMEOUT_MS / 1000);
    let options = SessionOptions::default()
        .creds(credentials.map(|(u, p)| retina::client::Credentials { username: u.into(), password: p.into() }))
        .user_agent(format!("KeepPeek/{}", env!("CARGO_PKG_VERSION")));
    let mut session = timeout(left(), Session::describe(url.clone(), options))
        .await
        .map_err(|_| late("DESCRIBE"))?
        .map_err(|e| classify(&e))?;
    let streams = session.streams();
    let audio = streams.iter().find(|s| s.media() == "audio").map(|s| s.encoding_name().to_string());
    let Some(video_i) = streams.iter().position(|s| s.media() == "video") else {
        return Err(Failure::Codec("no video".into()));
    };
    let encoding = streams[video_i].encoding_name().to_string();
    if !matches!(encoding.as_str(), "h264" | "h265") {
        return Err(Failure::Codec(encoding.to_uppercase()));
    }
    let sdp = sdp_types::Session::parse(session.sdp()).map_err(|e| Failure::NotRtsp(format!("its SDP: {e}")))?;
    let transport = match transport {
        Transport::Tcp => retina::client::Transport::Tcp(Default::default()),
        Transport::Udp => retina::client::Transport::Udp(Default::default()),
    };
    let setup = SetupOptions::default().transport(transport).frame_format(FrameFormat::MP4);
    timeout(left(), session.setup(video_i, setup)).await.map_err(|_| late("SETUP"))?.map_err(|e| classify(&e))?;
    let mut video = Assembler::new(&session.streams()[video_i], &sdp, limits::FRAME_MAX_BYTES)
        .map_err(|e| Failure::Other(e.to_string()))?;
    drop(sdp);
    let mut session = timeout(left(), session.play(PlayOptions::default()))
        .await
        .map_err(|_| late("PLAY"))?
        .map_err(|e| classify(&e))?;
    let mut found: Option<Found> = None;
    // RTP timestamps (90 kHz for video) of the first keyframe and of the frames after it.
    let mut stamps: Vec<i64> = Vec::with_capacity(FPS_FRAMES + 1);
    loop {
        let item = match timeout(left(), session.next()).await {
            Ok(item) => item,
            // Time is up: what was seen of the frame rate is enough.
            Err(_) if found.is_some() => break,
            Err(_) => return Err(late("with a keyframe")),
        };
        let pkt = match item {
            None => return Err(Failure::Other("the camera ended the stream".into())),
            Some(Err(e)) => return Err(classify(&e)),
            Some(Ok(PacketItem::Rtp(pkt))) if pkt.stream_id() == video_i => pkt,
            Some(Ok(_)) => continue,
        };
        video.push(&pkt).map_err(|e| Failure::Other(e.to_string()))?;
        while let Some(item) = video.pull().map_err(|e| Failure::Other(e.to_string()))? {
            let CodecItem::VideoFrame(frame) = item else { continue };
            if found.is_none() {
                if !frame.is_random_access_point() {
                    continue;
                }
                let Some(ParametersRef::Video(v)) = video.parameters() else { continue };
                let p = video_params(v).map_err(|e| Failure::Codec(e.to_string()))?;
                let codec = match p.codec {
                    Codec::H264 => "H.264",
                    Codec::H265 => "H.265",
                };
                found = Some(Found { codec, width: p.width, height: p.height, fps: None, audio: audio.clone() });
            }
            stamps.push(frame.timestamp().elapsed());
        }
        if stamps.len() > FPS_FRAMES {
            break;
        }
    }
    let mut found = found.expect("set before the loop ends");
    if let (Some(first), Some(last)) = (stamps.first(), stamps.last())
        && last > first
    {
        // To a hundredth: the camera's clock, not a measurement of ours.
        let fps = (stamps.len() - 1) as f64 * 90_000.0 / (last - first) as f64;
        found.fps = Some(((fps * 100.0).round() / 100.0) as f32);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A camera that takes the connection and never answers: the probe gives up at its
    /// ceiling, on tokio's paused clock.
    #[tokio::test(start_paused = true)]
    async fn a_camera_that_never_answers_is_given_up_on_at_the_probes_ceiling() {
        let port = crate::base::testing::silent_peer().await;
        let url: url::Url = format!("rtsp://127.0.0.1:{port}/stream").parse().unwrap();
        let started = Instant::now();
        let got = probe(&url, Transport::Tcp, None).await;
        assert_eq!(got.err(), Some(Failure::Timeout("DESCRIBE", limits::PROBE_TIMEOUT_MS / 1000)));
        assert_eq!(started.elapsed(), Duration::from_millis(limits::PROBE_TIMEOUT_MS));
    }
}
