//! Cameras whose sound goes wrong keep their video recording, and say so.
//!
//! A small RTSP camera of the test's own (RTP interleaved over TCP: the fixture clip's H.264
//! at 15 fps, a keyframe a second, and a sound track) does to its sound what the gst camera cannot
//! be told to: on `/stops` its G.711 stops after 3 s; on `/switch` it changes from µ-law
//! (payload type 0) to A-law (8) after 4 s, both offered in its SDP; on `/garbage` one AAC
//! packet in five is garbage (an AU-header length past the packet), the others the fixture's
//! AAC.

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;
use crate::firehose::{answer_beside_media, parameter_sets, read_request};

/// The camera; stops its sessions when dropped.
struct NoisyCamera {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl NoisyCamera {
    fn start() -> NoisyCamera {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            for stream in l.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(stream, port, &s));
            }
        });
        NoisyCamera { port, stop }
    }

    fn url(&self, path: &str) -> String {
        format!("rtsp://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for NoisyCamera {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The SDP of a path: the picture, then its sound.
fn sdp(port: u16, path: &str) -> String {
    use base64::Engine as _;
    let (sps, pps) = parameter_sets();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let audio = if path == "/garbage" {
        // AAC-LC, 48 kHz mono (AudioSpecificConfig 0x1188), as cameras send it (RFC 3640).
        "m=audio 0 RTP/AVP 97\r\na=rtpmap:97 MPEG4-GENERIC/48000/1\r\na=fmtp:97 streamtype=5;profile-level-id=15;\
         mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1188\r\n"
            .to_string()
    } else {
        "m=audio 0 RTP/AVP 0 8\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n".to_string()
    };
    format!(
        "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=noisy\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
         a=fmtp:96 packetization-mode=1;sprop-parameter-sets={},{}\r\na=control:rtsp://127.0.0.1:{port}{path}/video\r\n\
         {audio}a=control:rtsp://127.0.0.1:{port}{path}/audio\r\n",
        b64(&sps),
        b64(&pps)
    )
}

/// One session: the requests, then picture and sound in real time until the client goes.
fn serve(stream: TcpStream, port: u16, stop: &AtomicBool) {
    let writer = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let mut reader = BufReader::new(stream);
    let mut path = String::new();
    let mut setups = 0;
    loop {
        let Some((method, cseq, uri)) = read_request(&mut reader) else { return };
        let reply = match method.as_str() {
            "DESCRIBE" => {
                path = ["/stops", "/switch", "/garbage"].into_iter().find(|p| uri.ends_with(p)).unwrap_or("").into();
                let sdp = sdp(port, &path);
                format!(
                    "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nContent-Base: rtsp://127.0.0.1:{port}{path}/\r\n\
                     Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
                    sdp.len()
                )
            }
            "SETUP" => {
                let channels = if setups == 0 { "0-1" } else { "2-3" };
                setups += 1;
                format!(
                    "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nTransport: RTP/AVP/TCP;unicast;interleaved={channels}\r\n\
                     Session: 4242;timeout=60\r\n\r\n"
                )
            }
            // Where each stream's RTP starts, as cameras say (retina wants it with two).
            "PLAY" => format!(
                "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nSession: 4242\r\nRTP-Info: \
                 url=rtsp://127.0.0.1:{port}{path}/video;seq=0;rtptime=0,url=rtsp://127.0.0.1:{port}{path}/audio;seq=0;rtptime=0\r\n\r\n"
            ),
            _ => format!("RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nSession: 4242\r\n\r\n"),
        };
        if writer.lock().unwrap().write_all(reply.as_bytes()).is_err() {
            return;
        }
        if method == "PLAY" {
            break;
        }
    }
    answer_beside_media(reader, writer.clone());
    let clip = clip_frames();
    let start = Instant::now();
    let (mut video_seq, mut audio_seq) = (0u16, 0u16);
    let (mut frame, mut sound) = (0u64, 0u64);
    let aac = path == "/garbage";
    // AAC at 48 kHz: 1024 samples (21.3 ms) a frame; G.711: 160 samples (20 ms) a packet.
    let aac_frames = if aac { adts_frames() } else { Vec::new() };
    let sound_us: u64 = if aac { 21_333 } else { 20_000 };
    while !stop.load(Ordering::Relaxed) {
        let video_due = frame * 1000 / 15;
        let sound_due = sound * sound_us / 1000;
        let due = video_due.min(sound_due);
        let now = start.elapsed().as_millis() as u64;
        if due > now {
            std::thread::sleep(Duration::from_millis(due - now));
        }
        let sent = if video_due <= sound_due {
            let packets = packetize(&clip[frame as usize % clip.len()]);
            let ts = (frame * 6000) as u32;
            frame += 1;
            let last = packets.len() - 1;
            packets.iter().enumerate().try_for_each(|(i, p)| rtp(&writer, 0, 96, &mut video_seq, ts, p, i == last, 1))
        } else {
            sound += 1;
            let at_ms = sound * sound_us / 1000;
            match path.as_str() {
                "/stops" if at_ms > 3_000 => Ok(()),
                "/switch" | "/stops" => {
                    let pt = if path == "/switch" && at_ms > 4_000 { 8 } else { 0 };
                    let ts = ((sound - 1) * 160) as u32;
                    rtp(&writer, 2, pt, &mut audio_seq, ts, &[0xd5; 160], true, 2)
                }
                _ => {
                    let ts = ((sound - 1) * 1024) as u32;
                    // One access unit: its AU header (size << 3, index 0), then the frame.
                    let au = &aac_frames[(sound as usize - 1) % aac_frames.len()];
                    let size = (au.len() as u16) << 3;
                    let mut p = vec![0x00, 0x10, (size >> 8) as u8, size as u8];
                    p.extend_from_slice(au);
                    if sound.is_multiple_of(5) {
                        p[0..2].copy_from_slice(&[0xff, 0xff]);
                    }
                    rtp(&writer, 2, 97, &mut audio_seq, ts, &p, true, 2)
                }
            }
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The fixture clip's frames (15 a second, a keyframe a second, parameter sets before each),
/// each as its NAL units.
fn clip_frames() -> Vec<Vec<Vec<u8>>> {
    let clip = std::fs::read(fixtures().join("h264.264")).expect("the fixture clip");
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= clip.len() {
        if clip[i..i + 3] == [0, 0, 1] {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut frames: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).map_or(clip.len(), |&n| n - 3);
        let nal = clip[s..end].strip_suffix(&[0]).unwrap_or(&clip[s..end]).to_vec();
        let slice = matches!(nal[0] & 0x1f, 1 | 5);
        frames.last_mut().unwrap().push(nal);
        if slice {
            frames.push(Vec::new());
        }
    }
    frames.retain(|f| !f.is_empty());
    frames
}

/// The raw AAC frames of the fixture's sound (ADTS headers taken off).
fn adts_frames() -> Vec<Vec<u8>> {
    let adts = std::fs::read(fixtures().join("tone.adts")).expect("the fixture sound");
    let mut out = Vec::new();
    let mut at = 0;
    while at + 7 <= adts.len() {
        let h = &adts[at..];
        let len = (usize::from(h[3] & 0x03) << 11) | (usize::from(h[4]) << 3) | usize::from(h[5] >> 5);
        let header = if h[1] & 0x01 == 0 { 9 } else { 7 };
        out.push(adts[at + header..at + len].to_vec());
        at += len;
    }
    out
}

/// A frame's NAL units as RTP payloads: single NAL packets, FU-A for the large ones.
fn packetize(nals: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for nal in nals {
        if nal.len() <= 1400 {
            out.push(nal.clone());
            continue;
        }
        let chunks: Vec<&[u8]> = nal[1..].chunks(1400).collect();
        for (i, c) in chunks.iter().enumerate() {
            let s = if i == 0 { 0x80 } else { 0 };
            let e = if i + 1 == chunks.len() { 0x40 } else { 0 };
            let mut p = vec![(nal[0] & 0xe0) | 28, s | e | (nal[0] & 0x1f)];
            p.extend_from_slice(c);
            out.push(p);
        }
    }
    out
}

/// Sends one RTP packet on interleaved `channel`.
#[allow(clippy::too_many_arguments)]
fn rtp(
    writer: &Mutex<TcpStream>,
    channel: u8,
    pt: u8,
    seq: &mut u16,
    ts: u32,
    payload: &[u8],
    marker: bool,
    ssrc: u32,
) -> std::io::Result<()> {
    let len = 12 + payload.len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&[b'$', channel]);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&[0x80, pt | if marker { 0x80 } else { 0 }]);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.extend_from_slice(payload);
    *seq = seq.wrapping_add(1);
    writer.lock().unwrap().write_all(&out)
}

#[test]
fn sound_that_stops_switches_codec_or_is_garbage_leaves_the_video_recording() {
    let cam = NoisyCamera::start();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut config = format!(
        "listen = \"127.0.0.1:{port}\"\nflush_interval_s = 1\n[retention]\nstream_max_bytes = \"1 GiB\"\n\
         total_max_bytes = \"1 GiB\"\n"
    );
    for name in ["stops", "switch", "garbage"] {
        config += &format!("[[cameras]]\nname = \"{name}\"\nmain = {{ url = \"{}\" }}\n", cam.url(&format!("/{name}")));
    }
    write_config(dir.path(), &config);
    let mut d = Daemon::start(dir.path());
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let metrics = make_token(port, &admin, r#""metrics""#);
    for name in ["stops", "switch", "garbage"] {
        d.wait_log(&format!("recording to recordings/{name}/main"), 1, Duration::from_secs(20));
    }
    std::thread::sleep(Duration::from_secs(12));
    let (_, _, body) = request(port, "GET", "/api/cameras", &[("cookie", &admin.0)], "");
    let cameras: Value = serde_json::from_str(&body).unwrap();
    let stream =
        |name: &str| cameras.as_array().unwrap().iter().find(|c| c["camera"] == name).unwrap()["streams"][0].clone();
    let dropped =
        |name: &str| sample(port, &metrics, &format!("keeppeek_stream_audio_dropped_total{{stream=\"{name}/main\"}}"));
    // Garbage: counted and said, the good packets between kept.
    let garbage = stream("garbage");
    assert!(garbage["audio_dropped"].as_u64().unwrap() >= 10, "{garbage}");
    assert!(garbage["audio_frames"].as_u64().unwrap() >= 100, "{garbage}");
    assert!(garbage["audio_last_error"].as_str().unwrap().contains("audio"), "{garbage}");
    assert_eq!(dropped("garbage"), garbage["audio_dropped"].as_u64());
    // A codec change is no error: the stream goes on in the new one.
    let switch = stream("switch");
    assert_eq!((switch["audio"].as_str(), switch["audio_dropped"].as_u64()), (Some("pcma"), Some(0)), "{switch}");
    // Sound that stops is no error either.
    let stops = stream("stops");
    assert_eq!(stops["audio_dropped"], 0, "{stops}");
    for name in ["stops", "switch", "garbage"] {
        let s = stream(name);
        assert_eq!(s["connected"], true, "{name}: {s}");
        let sessions = sample(port, &metrics, &format!("keeppeek_stream_sessions_total{{stream=\"{name}/main\"}}"));
        assert_eq!(sessions, Some(1), "{name}: one session, never restarted");
    }
    d.stop();
    let log = d.log_text();
    assert!(!log.contains("camera session ended"), "no session ended for its sound:\n{log}");

    let recs = d.recordings();
    for name in ["stops", "switch", "garbage"] {
        let mine = of_stream(&recs, &format!("{name}/main"));
        let secs = seconds(&mine);
        assert!(secs >= 11.0, "{name}: {secs} s recorded of 12");
        let runs: std::collections::BTreeSet<_> = mine.iter().map(|r| r["run_id"].as_u64()).collect();
        assert_eq!(runs.len(), 1, "{name}: one run, no gap: {mine:?}");
        let frames: u64 = mine.iter().map(|r| r["frames"].as_u64().unwrap()).sum();
        assert!((frames as f64 - secs * 15.0).abs() <= 2.0, "{name}: {frames} frames in {secs} s");
        for r in &mine {
            assert_decodes(&d.data().join(r["path"].as_str().unwrap()));
        }
    }
    // The switch: µ-law until the keyframe after the change, A-law from it, one run.
    let switch: Vec<_> = of_stream(&recs, "switch/main").iter().map(|r| r["audio"].clone()).collect();
    assert_eq!(switch, ["pcmu", "pcma"], "a segment for each codec");
    let pcma = &of_stream(&recs, "switch/main")[1];
    let audio = ffprobe_stream_packets(&d.data().join(pcma["path"].as_str().unwrap()), "a:0");
    let heard_s: f64 = audio.iter().map(|p| p.duration_s).sum();
    assert!(heard_s > 6.0, "{heard_s} s of A-law in {} samples", audio.len());
    // The sound that stopped: its track ends after 3 s, the picture goes on.
    let stops = &of_stream(&recs, "stops/main")[0];
    let path = d.data().join(stops["path"].as_str().unwrap());
    let audio = ffprobe_stream_packets(&path, "a:0");
    let video = ffprobe_packets(&path);
    let (a_end, v_end) = (audio.last().unwrap().pts_s, video.last().unwrap().pts_s);
    assert!(a_end < 3.5 && v_end > 10.0, "sound to {a_end} s, picture to {v_end} s");
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}
