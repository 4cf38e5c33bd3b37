//! What the engine's tests share: a stream with a picture and a recording, offers made by
//! `str0m` as a browser, and [`Sim`], a browser and the engine's core wired together in
//! memory on simulated time: no socket, no clock.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use str0m::channel::ChannelId;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive, Transmit};
use str0m::{Candidate, Event, Input, Output, Rtc};
use tokio::sync::mpsc;

use super::control::pb;
use super::core::{Core, Streams};
use super::session::Owner;
use super::{WebrtcStats, fuzzing};
use crate::base::{StreamKey, StreamKind};
use crate::cameras::{Cameras, RunningStream};
use crate::catalog::Catalog;
use crate::live::{Fanout, Live};
use crate::media::Frame;

/// Wall time of the test recording's start.
pub const WALL0: i64 = 1_800_000_000_000_000;
/// The recording's length in seconds (one keyframe and 15 frames a second).
pub const RECORDED_S: u32 = 30;

const BOX: ([u8; 4], u16) = ([10, 0, 0, 1], 8189);
const BROWSER: ([u8; 4], u16) = ([10, 0, 0, 2], 50_000);

/// A browser's offer, made by `str0m` as a client: `videos` receive-only video tracks
/// and the control channel.
pub fn offer(videos: usize) -> String {
    let mut rtc = Rtc::new(Instant::now());
    let mut api = rtc.sdp_api();
    for _ in 0..videos {
        api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None);
    }
    api.add_channel("control".into());
    let (offer, _pending) = api.apply().expect("an offer");
    offer.to_sdp_string()
}

pub fn owner(principal: &str) -> Owner {
    Owner { principal: principal.into(), login: None, admin: false }
}

/// One stream, `cam/main`, that has a picture (and so parameters) and one recording of
/// [`RECORDED_S`] seconds from [`WALL0`].
pub fn streams(dir: &Path) -> (Streams, Arc<Fanout>) {
    let catalog = Arc::new(Catalog::open(&dir.join("catalog.redb")).unwrap());
    crate::record::testing::recording(&catalog, dir, "cam/main", WALL0, RECORDED_S);
    let fanout = Arc::new(Fanout::new(crate::live::gop_pool()));
    fanout.publish(&live_frame(0, true));
    let cameras = Arc::new(Cameras::default());
    cameras.add([RunningStream { key: key(), state: Arc::default(), recording: None, live: fanout.clone() }]);
    (Streams { cameras, catalog, data_dir: dir.into() }, fanout)
}

/// The test stream's key, `cam/main`.
pub fn key() -> StreamKey {
    StreamKey::new("cam", StreamKind::Main)
}

/// Live frame `n` of the test stream (15 a second), a keyframe or not.
pub fn live_frame(n: i64, is_key: bool) -> Frame {
    let nal: &[u8] = if is_key { &[0x65, 0x88, 0x84, 0x00, 0x33] } else { &[0x41, 0x9a, 0x02, 0x04] };
    live_frame_of(n, nal)
}

/// [`live_frame`] `n` of `len` bytes (its one NAL padded with `0x55`).
pub fn large_live_frame(n: i64, is_key: bool, len: usize) -> Frame {
    let mut nal = vec![0x55; len];
    nal[0] = if is_key { 0x65 } else { 0x41 };
    live_frame_of(n, &nal)
}

fn live_frame_of(n: i64, nal: &[u8]) -> Frame {
    let is_key = nal[0] & 0x1f == 5;
    let mut data = (nal.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(nal);
    Frame {
        pts_90k: n * 6000,
        received_mono_us: 1 + n * 66_666,
        data: Bytes::from(data),
        params: Arc::new(fuzzing::params()),
        ..Frame::for_test(0, is_key)
    }
}

/// A core serving [`streams`], with the queue its live frames come back on.
pub fn core(dir: &Path, max_sessions: usize) -> (Core, mpsc::Receiver<Live>, Arc<Fanout>) {
    let (streams, fanout) = streams(dir);
    let (frames_tx, frames_rx) = mpsc::channel(crate::limits::LIVE_TAP_FRAMES);
    let core = Core::new(streams, frames_tx, Arc::new(WebrtcStats::default()), max_sessions);
    (core, frames_rx, fanout)
}

/// Collects the core's datagrams, each of which must leave from the box's one address (the
/// shell sends nothing else).
fn from_box(sent: &mut Vec<Transmit>) -> impl FnMut(Transmit) + '_ {
    |t| {
        assert_eq!(t.source, SocketAddr::from(BOX), "a datagram from an address the box was not offered on");
        sent.push(t)
    }
}

/// A browser (`str0m` as the offering client) and the box's core, passing datagrams to each
/// other in memory while simulated time passes.
pub struct Sim {
    pub core: Core,
    frames_rx: mpsc::Receiver<Live>,
    pub fanout: Arc<Fanout>,
    browser: Rtc,
    channel: ChannelId,
    channel_open: bool,
    pub id: u64,
    pub now: Instant,
    to_browser: Vec<Transmit>,
    next_request: u32,
    /// Every control message the box sent, in order.
    pub messages: Vec<pb::ServerMessage>,
    /// Frames the browser received: (track, RTP time in 90 kHz, the frame's bytes).
    pub frames: Vec<(usize, u64, Vec<u8>)>,
    mids: Vec<str0m::media::Mid>,
    /// The offer's audio line, when it has one.
    audio_mid: Option<str0m::media::Mid>,
    /// Sound the browser received: (RTP time in its clock, the frame's bytes).
    pub sound: Vec<(u64, Vec<u8>)>,
    /// The newest sender report the browser had of the first track's pictures, and of the
    /// sound.
    pub video_report: Option<str0m::rtp::rtcp::SenderInfo>,
    pub sound_report: Option<str0m::rtp::rtcp::SenderInfo>,
    pub connected: bool,
}

impl Sim {
    /// A browser with `videos` tracks, its session opened on the box and connected.
    pub fn connected(dir: &Path, videos: usize) -> Sim {
        Sim::connected_with(dir, videos, None)
    }

    /// [`Sim::connected`], its offer with an audio line too when the camera has `sound`
    /// (the fanout hears one frame of it first).
    pub fn connected_with(dir: &Path, videos: usize, sound: Option<&crate::media::AudioFrame>) -> Sim {
        let (core, frames_rx, fanout) = core(dir, 8);
        if let Some(s) = sound {
            fanout.publish_audio(s);
        }
        let now = Instant::now();
        // A browser's packet buffer holds a frame of up to 2,048 packets.
        // And G.711 besides str0m's Opus, as browsers offer.
        let mut browser =
            Rtc::builder().set_reordering_size_video(2048).enable_pcmu(true, false).enable_pcma(true, false).build(now);
        browser.add_local_candidate(Candidate::host(BROWSER.into(), "udp").unwrap());
        let mut api = browser.sdp_api();
        let mids: Vec<_> =
            (0..videos).map(|_| api.add_media(MediaKind::Video, Direction::RecvOnly, None, None, None)).collect();
        let audio_mid = sound.map(|_| api.add_media(MediaKind::Audio, Direction::RecvOnly, None, None, None));
        let channel = api.add_channel("control".into());
        let (offer, pending) = api.apply().expect("an offer");
        let mut sim = Sim {
            core,
            frames_rx,
            fanout,
            browser,
            channel,
            channel_open: false,
            id: 0,
            now,
            to_browser: Vec::new(),
            next_request: 1,
            messages: Vec::new(),
            frames: Vec::new(),
            mids,
            audio_mid,
            sound: Vec::new(),
            video_report: None,
            sound_report: None,
            connected: false,
        };
        let peer = IpAddr::from(BROWSER.0);
        let (id, answer) = sim
            .core
            .open(key(), &offer.to_sdp_string(), owner("user:sim"), peer, || vec![SocketAddr::from(BOX)], now)
            .expect("the box accepts the offer");
        sim.id = id;
        let answer = str0m::change::SdpAnswer::from_sdp_string(&answer).expect("an answer");
        sim.browser.sdp_api().accept_answer(pending, answer).expect("the browser takes the answer");
        sim.run_for(Duration::from_millis(2_000));
        assert!(sim.connected && sim.channel_open, "the session connects and opens its channel");
        sim
    }

    /// Sends a control command on `track`; returns its request id.
    pub fn send(&mut self, track: u32, command: pb::client_message::Command) -> u32 {
        let request_id = self.next_request;
        self.next_request += 1;
        let bytes = pb::ClientMessage { request_id, track, command: Some(command) }.encode_to_vec();
        let mut ch = self.browser.channel(self.channel).expect("the channel is open");
        assert!(ch.write(true, &bytes).expect("written"), "the channel takes it");
        self.exchange();
        request_id
    }

    /// The answer to request `id` (it must have come).
    pub fn answer(&self, id: u32) -> &pb::server_message::Body {
        let m = self.messages.iter().find(|m| m.request_id == id).unwrap_or_else(|| panic!("no answer to {id}"));
        m.body.as_ref().expect("a body")
    }

    /// The newest position reported for `track`.
    pub fn position(&self, track: u32) -> Option<i64> {
        self.messages.iter().rev().find_map(|m| match &m.body {
            Some(pb::server_message::Body::Position(p)) if m.track == track => Some(p.wall_us),
            _ => None,
        })
    }

    /// Frames the browser got on `track`.
    pub fn frames_on(&self, track: usize) -> usize {
        self.frames.iter().filter(|(t, ..)| *t == track).count()
    }

    /// The camera sends live frame `n`; the box's tap hands it to the core.
    pub fn camera(&mut self, n: i64, is_key: bool) {
        self.camera_frame(live_frame(n, is_key));
    }

    /// The camera sends `frame` of sound.
    pub fn camera_audio(&mut self, frame: &crate::media::AudioFrame) {
        self.fanout.publish_audio(frame);
        self.hand_over();
    }

    /// Hands the core what the tap holds.
    fn hand_over(&mut self) {
        while let Ok(item) = self.frames_rx.try_recv() {
            let mut sent = Vec::new();
            match item {
                Live::Video(lf) => {
                    self.core.frame(lf, self.now, &mut from_box(&mut sent));
                }
                Live::Audio(la) => {
                    self.core.audio(la, self.now, &mut from_box(&mut sent));
                }
            }
            self.to_browser.extend(sent);
        }
        self.exchange();
    }

    /// The camera sends `frame`.
    pub fn camera_frame(&mut self, frame: Frame) {
        self.fanout.publish(&frame);
        self.hand_over();
    }

    /// Lets `dur` of simulated time pass, each side woken at its deadlines.
    pub fn run_for(&mut self, dur: Duration) {
        let end = self.now + dur;
        loop {
            self.exchange();
            let browser_next = match self.browser.poll_output() {
                Ok(Output::Timeout(t)) => t,
                other => panic!("the browser is quiet after an exchange: {other:?}"),
            };
            let next = [Some(browser_next), self.core.next_deadline()].into_iter().flatten().min().expect("a deadline");
            // At least a millisecond a step, so time always moves.
            let next = next.max(self.now + Duration::from_millis(1));
            if next > end {
                self.now = end;
                break;
            }
            self.now = next;
            self.browser.handle_input(Input::Timeout(self.now)).expect("the browser takes a tick");
            let mut sent = Vec::new();
            self.core.timeouts(self.now, &mut from_box(&mut sent));
            self.to_browser.extend(sent);
            self.core.sweep(self.now);
        }
    }

    /// Passes datagrams both ways until neither side has any to send.
    fn exchange(&mut self) {
        loop {
            let mut moved = false;
            loop {
                match self.browser.poll_output().expect("the browser runs") {
                    Output::Timeout(_) => break,
                    Output::Transmit(t) => {
                        moved = true;
                        let receive = Receive::new(Protocol::Udp, t.source, t.destination, &t.contents).unwrap();
                        let mut sent = Vec::new();
                        self.core.datagram(receive, self.now, &mut from_box(&mut sent));
                        self.to_browser.extend(sent);
                    }
                    Output::Event(e) => self.browser_event(e),
                }
            }
            for t in std::mem::take(&mut self.to_browser) {
                moved = true;
                let receive = Receive::new(Protocol::Udp, t.source, t.destination, &t.contents).unwrap();
                self.browser.handle_input(Input::Receive(self.now, receive)).expect("the browser takes it");
            }
            let mut sent = Vec::new();
            self.core.timeouts(self.now, &mut from_box(&mut sent));
            moved |= !sent.is_empty();
            self.to_browser.extend(sent);
            // As the shell does after every input.
            self.core.sweep(self.now);
            if !moved {
                return;
            }
        }
    }

    fn browser_event(&mut self, e: Event) {
        match e {
            Event::Connected => self.connected = true,
            Event::ChannelOpen(..) => self.channel_open = true,
            Event::ChannelData(d) => self.messages.push(pb::ServerMessage::decode(&d.data[..]).expect("a message")),
            Event::MediaData(m) if Some(m.mid) == self.audio_mid => {
                self.sound_report = m.last_sender_info.or(self.sound_report);
                self.sound.push((m.time.numer(), m.data.to_vec()));
            }
            Event::MediaData(m) => {
                let track = self.mids.iter().position(|x| *x == m.mid).expect("a track of the offer");
                if track == 0 {
                    self.video_report = m.last_sender_info.or(self.video_report);
                }
                self.frames.push((track, m.time.numer(), m.data.to_vec()));
            }
            _ => {}
        }
    }
}

/// An engine on a loopback port serving [`streams`].
pub async fn engine(dir: &Path, max_sessions: usize) -> (super::Engine, super::WebrtcHandle) {
    let (streams, _fanout) = streams(dir);
    let addrs = [IpAddr::from([127, 0, 0, 1])];
    super::Engine::bind(0, &addrs, streams, max_sessions).await.unwrap()
}
