//! What the benchmarks share: WebRTC viewers as full `str0m` peers on loopback sockets,
//! driven on a thread of their own.

// Each benchmark uses part of this.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use str0m::change::{SdpAnswer, SdpPendingOffer};
use str0m::channel::ChannelId;
use str0m::media::{Direction, MediaKind, Mid};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Event, Input, Output, Rtc};

/// One WebRTC viewer: a full (not ICE-lite) `str0m` peer on its own socket.
pub struct Viewer {
    rtc: Rtc,
    socket: UdpSocket,
    local: SocketAddr,
    next: Instant,
    /// Video frames received.
    pub frames: u64,
    /// The sound's line, when the viewer asked for it, and the sound frames received.
    audio_mid: Option<Mid>,
    pub audio_frames: u64,
    /// Bytes of datagrams received (media and everything else).
    pub received_bytes: u64,
    /// Control-channel messages received.
    pub messages: u64,
    /// ICE and DTLS are done: media can flow.
    pub connected: bool,
    /// Sent on the control channel once it opens.
    on_open: Option<Vec<u8>>,
    channel: Option<ChannelId>,
}

impl Viewer {
    /// A viewer with a recvonly video line and a control channel; returns it, its pending
    /// offer and the offer's SDP.
    pub fn offer() -> (Viewer, SdpPendingOffer, String) {
        Viewer::offer_tracks(1)
    }

    /// [`Viewer::offer`] with `videos` recvonly video lines (tracks).
    pub fn offer_tracks(videos: usize) -> (Viewer, SdpPendingOffer, String) {
        Viewer::offer_media(videos, false)
    }

    /// [`Viewer::offer`] with a recvonly sound line too (G.711 µ-law).
    pub fn offer_with_sound() -> (Viewer, SdpPendingOffer, String) {
        Viewer::offer_media(1, true)
    }

    fn offer_media(videos: usize, sound: bool) -> (Viewer, SdpPendingOffer, String) {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let local = socket.local_addr().unwrap();
        // A browser reassembles a frame of up to 2,048 packets (libwebrtc's packet buffer);
        // str0m's default of 30 would drop every frame over ~36 KB.
        let mut rtc = Rtc::builder()
            .clear_codecs()
            .enable_h264(true)
            .enable_pcmu(sound, false)
            .set_reordering_size_video(2048)
            .build(Instant::now());
        rtc.add_local_candidate(Candidate::host(local, "udp").unwrap());
        let mut api = rtc.sdp_api();
        for _ in 0..videos {
            api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
        }
        let audio_mid = sound.then(|| api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None));
        api.add_channel("control".into());
        let (offer, pending) = api.apply().unwrap();
        let sdp = offer.to_sdp_string();
        let v = Viewer {
            rtc,
            socket,
            local,
            next: Instant::now(),
            frames: 0,
            audio_mid,
            audio_frames: 0,
            received_bytes: 0,
            messages: 0,
            connected: false,
            on_open: None,
            channel: None,
        };
        (v, pending, sdp)
    }

    fn counts(&self) -> Counts {
        (self.frames, self.messages, self.received_bytes, self.connected, self.audio_frames)
    }

    /// Sends `message` on the control channel as soon as it opens.
    pub fn on_open(&mut self, message: Vec<u8>) {
        self.on_open = Some(message);
    }

    pub fn answer(&mut self, pending: SdpPendingOffer, sdp: &str) {
        let answer = SdpAnswer::from_sdp_string(sdp).expect("an SDP answer");
        self.rtc.sdp_api().accept_answer(pending, answer).expect("the answer is accepted");
    }

    /// Reads what arrived, lets time pass, sends what is due. Returns whether it did work.
    fn step(&mut self, buf: &mut [u8]) -> bool {
        let mut worked = false;
        while let Ok((n, from)) = self.socket.recv_from(buf) {
            worked = true;
            self.received_bytes += n as u64;
            if let Ok(r) = Receive::new(Protocol::Udp, from, self.local, &buf[..n]) {
                let _ = self.rtc.handle_input(Input::Receive(Instant::now(), r));
            }
            self.drain();
        }
        if Instant::now() >= self.next {
            let _ = self.rtc.handle_input(Input::Timeout(Instant::now()));
            self.drain();
        }
        worked
    }

    fn drain(&mut self) {
        loop {
            match self.rtc.poll_output() {
                Ok(Output::Timeout(t)) => {
                    self.next = t;
                    return;
                }
                Ok(Output::Transmit(t)) => {
                    let _ = self.socket.send_to(&t.contents, t.destination);
                }
                Ok(Output::Event(Event::MediaData(d))) if Some(d.mid) == self.audio_mid => self.audio_frames += 1,
                Ok(Output::Event(Event::MediaData(_))) => self.frames += 1,
                Ok(Output::Event(Event::Connected)) => self.connected = true,
                Ok(Output::Event(Event::ChannelOpen(id, _))) => {
                    self.channel = Some(id);
                    if let (Some(m), Some(mut ch)) = (self.on_open.take(), self.rtc.channel(id)) {
                        let _ = ch.write(true, &m);
                    }
                }
                Ok(Output::Event(Event::ChannelData(_))) => self.messages += 1,
                Ok(Output::Event(_)) => {}
                Err(_) => return,
            }
        }
    }
}

/// What the farm mirrors of a viewer: video frames, control messages, bytes received,
/// connected, sound frames.
type Counts = (u64, u64, u64, bool, u64);

/// Viewers driven on a thread of their own until stopped; `counts` mirrors each one's
/// (frames, control messages, bytes received, connected, sound frames).
pub struct Farm {
    counts: Arc<Mutex<Vec<Counts>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Viewer>>>,
}

impl Farm {
    pub fn start(mut viewers: Vec<Viewer>) -> Farm {
        let counts = Arc::new(Mutex::new(viewers.iter().map(Viewer::counts).collect::<Vec<_>>()));
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s) = (counts.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                let mut worked = false;
                for v in &mut viewers {
                    worked |= v.step(&mut buf);
                }
                if worked {
                    let mut counts = f.lock().unwrap();
                    for (c, v) in counts.iter_mut().zip(&viewers) {
                        *c = v.counts();
                    }
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            viewers
        });
        Farm { counts, stop, thread: Some(thread) }
    }

    /// The fewest frames any viewer has received.
    pub fn min_frames(&self) -> u64 {
        self.counts.lock().unwrap().iter().map(|c| c.0).min().unwrap_or(0)
    }

    /// The fewest sound frames any viewer has received.
    pub fn min_audio_frames(&self) -> u64 {
        self.counts.lock().unwrap().iter().map(|c| c.4).min().unwrap_or(0)
    }

    /// How many viewers have connected.
    pub fn connected(&self) -> usize {
        self.counts.lock().unwrap().iter().filter(|c| c.3).count()
    }

    /// Each viewer's frames so far.
    pub fn frames(&self) -> Vec<u64> {
        self.counts.lock().unwrap().iter().map(|c| c.0).collect()
    }

    /// The fewest bytes any viewer has received.
    pub fn min_received_bytes(&self) -> u64 {
        self.counts.lock().unwrap().iter().map(|c| c.2).min().unwrap_or(0)
    }

    /// The fewest control messages any viewer has received.
    pub fn min_messages(&self) -> u64 {
        self.counts.lock().unwrap().iter().map(|c| c.1).min().unwrap_or(0)
    }

    /// Stops driving the viewers and gives them back (their sessions stay open).
    pub fn stop(mut self) -> Vec<Viewer> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map(|t| t.join().unwrap()).unwrap_or_default()
    }
}

impl Drop for Farm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
