//! A camera at its ceilings: an RTSP server (RTP interleaved over TCP, H.264) whose every
//! session sends frames of a size the test picks, in step with each other. Each frame is
//! sent all but its last packet, then waits for its group's release ([`Firehose::release`]):
//! so every session is holding a frame being received at the same moment, and then a group
//! of them (or all) arrive at once. Sessions are in [`GROUPS`] groups by the order they
//! started playing.
//! The gst camera cannot send frames of a chosen size on request, so this small one does.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::common::fixtures;

/// Bytes of one RTP payload (FU-A fragments over TCP may be large).
const PACKET_BYTES: usize = 16 << 10;

/// Groups of sessions released together.
pub const GROUPS: usize = 4;

struct Shared {
    /// Frames released so far, by group.
    released: Mutex<[u64; GROUPS]>,
    /// Sessions that have started playing.
    playing: std::sync::atomic::AtomicUsize,
    changed: Condvar,
    stop: AtomicBool,
    start: Instant,
}

/// The server; stops its sessions when dropped.
pub struct Firehose {
    pub port: u16,
    shared: Arc<Shared>,
}

impl Firehose {
    /// Serves `/main` with frames of `main_bytes` and `/sub` with frames of `sub_bytes`,
    /// each frame a keyframe every `gop` frames.
    pub fn start(main_bytes: usize, sub_bytes: usize, gop: u64) -> Firehose {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            released: Mutex::new([0; GROUPS]),
            playing: std::sync::atomic::AtomicUsize::new(0),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            start: Instant::now(),
        });
        let (sps, pps) = parameter_sets();
        let sdp_for = move |port: u16| {
            use base64::Engine as _;
            let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
            format!(
                "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=firehose\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\n\
                 a=rtpmap:96 H264/90000\r\na=fmtp:96 packetization-mode=1;sprop-parameter-sets={},{}\r\n\
                 a=control:rtsp://127.0.0.1:{port}/track1\r\n",
                b64(&sps),
                b64(&pps)
            )
        };
        let sdp = sdp_for(port);
        let s = shared.clone();
        std::thread::spawn(move || {
            for stream in l.incoming().flatten() {
                let (s, sdp) = (s.clone(), sdp.clone());
                std::thread::spawn(move || serve(stream, port, &sdp, &s, (main_bytes, sub_bytes), gop));
            }
        });
        Firehose { port, shared }
    }

    pub fn url(&self, path: &str) -> String {
        format!("rtsp://127.0.0.1:{}{path}", self.port)
    }

    /// Lets every session send the last packet of its frame, then the next frame but its
    /// last packet.
    pub fn release(&self) {
        for group in 0..GROUPS {
            self.release_group(group);
        }
    }

    /// [`Firehose::release`] for the sessions of one group.
    pub fn release_group(&self, group: usize) {
        self.shared.released.lock().unwrap()[group] += 1;
        self.shared.changed.notify_all();
    }
}

impl Drop for Firehose {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.changed.notify_all();
    }
}

/// The SPS and PPS of the fixture clip (640×360), for the SDP.
pub(crate) fn parameter_sets() -> (Vec<u8>, Vec<u8>) {
    let clip = std::fs::read(fixtures().join("h264.264")).expect("the fixture clip");
    let mut nals = Vec::new();
    let mut i = 0;
    let mut start = None;
    while i + 3 <= clip.len() {
        if clip[i..i + 3] == [0, 0, 1] {
            if let Some(s) = start {
                let end = if clip[i - 1] == 0 { i - 1 } else { i };
                nals.push(clip[s..end].to_vec());
            }
            i += 3;
            start = Some(i);
            if nals.len() > 8 {
                break;
            }
        } else {
            i += 1;
        }
    }
    let find = |t: u8| nals.iter().find(|n| n[0] & 0x1f == t).cloned().expect("a parameter set");
    (find(7), find(8))
}

/// One RTSP session: answers the requests, then streams until the client goes.
fn serve(stream: TcpStream, port: u16, sdp: &str, shared: &Shared, sizes: (usize, usize), gop: u64) {
    let writer = Arc::new(Mutex::new(stream.try_clone().unwrap()));
    let mut reader = BufReader::new(stream);
    let mut frame_bytes = sizes.0;
    loop {
        let Some((method, cseq, uri)) = read_request(&mut reader) else { return };
        if uri.contains("/sub") {
            frame_bytes = sizes.1;
        }
        let reply = match method.as_str() {
            "DESCRIBE" => format!(
                "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nContent-Base: rtsp://127.0.0.1:{port}/\r\n\
                 Content-Type: application/sdp\r\nContent-Length: {}\r\n\r\n{sdp}",
                sdp.len()
            ),
            "SETUP" => format!(
                "RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\
                 Session: 4242;timeout=60\r\n\r\n"
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
    let group = shared.playing.fetch_add(1, Ordering::Relaxed) % GROUPS;
    let mut seq: u16 = 0;
    let mut n: u64 = 0;
    loop {
        let nal_type = if n.is_multiple_of(gop) { 5 } else { 1 };
        let packets = frame_packets(frame_bytes, nal_type);
        let ts = (shared.start.elapsed().as_micros() as u64 * 9 / 100) as u32;
        let (last, first) = packets.split_last().unwrap();
        for p in first {
            if send(&writer, &mut seq, ts, p, false).is_err() {
                return;
            }
        }
        let mut released = shared.released.lock().unwrap();
        while released[group] <= n && !shared.stop.load(Ordering::Relaxed) {
            released = shared.changed.wait_timeout(released, Duration::from_millis(200)).unwrap().0;
        }
        drop(released);
        if shared.stop.load(Ordering::Relaxed) || send(&writer, &mut seq, ts, last, true).is_err() {
            return;
        }
        n += 1;
    }
}

/// Reads the client's keep-alives and RTCP beside the media, answering each request, on a
/// thread of its own until the client goes.
pub(crate) fn answer_beside_media(mut reader: BufReader<TcpStream>, writer: Arc<Mutex<TcpStream>>) {
    std::thread::spawn(move || {
        while let Some((_, cseq, _)) = read_request(&mut reader) {
            let reply = format!("RTSP/1.0 200 OK\r\nCSeq: {cseq}\r\nSession: 4242\r\n\r\n");
            if writer.lock().unwrap().write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    });
}

/// Reads one request head: (method, CSeq, URI); skips interleaved binary frames.
pub(crate) fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, String, String)> {
    use std::io::Read;
    let mut head = Vec::new();
    loop {
        let buf = reader.fill_buf().ok()?;
        if buf.is_empty() {
            return None;
        }
        if head.is_empty() && buf[0] == b'$' {
            let mut frame = [0u8; 4];
            reader.read_exact(&mut frame).ok()?;
            let mut body = vec![0u8; usize::from(u16::from_be_bytes([frame[2], frame[3]]))];
            reader.read_exact(&mut body).ok()?;
            continue;
        }
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push(line);
    }
    let first: Vec<String> = head.first()?.split_whitespace().map(str::to_string).collect();
    let cseq = head.iter().find_map(|l| l.strip_prefix("CSeq:").map(|v| v.trim().to_string())).unwrap_or_default();
    Some((first.first()?.clone(), cseq, first.get(1).cloned().unwrap_or_default()))
}

/// One access unit of `bytes` (NAL header and payload) as FU-A payloads.
fn frame_packets(bytes: usize, nal_type: u8) -> Vec<Vec<u8>> {
    let header = 0x60 | nal_type;
    let payload = vec![0x5au8; bytes - 1];
    let chunks: Vec<&[u8]> = payload.chunks(PACKET_BYTES).collect();
    let count = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let s = if i == 0 { 0x80 } else { 0 };
            let e = if i + 1 == count { 0x40 } else { 0 };
            let mut p = vec![(header & 0xe0) | 28, s | e | nal_type];
            p.extend_from_slice(c);
            p
        })
        .collect()
}

fn send(writer: &Mutex<TcpStream>, seq: &mut u16, ts: u32, payload: &[u8], marker: bool) -> std::io::Result<()> {
    let len = 12 + payload.len();
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&[b'$', 0]);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&[0x80, 96 | if marker { 0x80 } else { 0 }]);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(&0x4b50_4b50u32.to_be_bytes());
    out.extend_from_slice(payload);
    *seq = seq.wrapping_add(1);
    writer.lock().unwrap().write_all(&out)
}
