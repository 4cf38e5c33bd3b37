//! Live view over WebRTC: `str0m` sessions, all on one UDP port, driven by one task.
//!
//! - Signaling is WHEP (`src/http/api.rs`): an SDP offer in, an answer and a session id out.
//! - ICE-lite with a host candidate on every LAN address of the box (and loopback when
//!   configured): a browser on the LAN reaches one of them directly; no STUN or TURN.
//! - Frames come from each stream's live fanout ([`crate::live`]) through one bounded tap
//!   per watched stream, are turned into Annex B once, and the same bytes go to every viewer
//!   of the stream (`str0m` packetizes and encrypts per session).
//! - A viewer starts from the newest held keyframe: the GOP since it is sent at once, its
//!   timestamps squeezed together so the decoder catches up instead of playing it back. A
//!   picture-loss request is answered the same way. A viewer that lost frames (a lagging
//!   tap) skips to the next keyframe.
//!
//! Every ceiling (sessions per principal, per address and per server, offer size, send
//! buffer) is in `src/limits.rs`; each refusal and each bad datagram is counted.
//!
//! Built the way `str0m` is, sans-IO at the centre:
//! - `core.rs`: every session, admission, live fanout, stored playback and the sweep; takes
//!   inputs with the time and hands back datagrams. No socket, no clock.
//! - `commands.rs`: control-channel commands carried out into typed answers, which
//!   `control.rs` decodes and encodes.
//! - `session.rs`: one viewer's `str0m` session and its tracks; `playback.rs`: a cursor over
//!   stored recordings.
//! - `net.rs`: the shell, with every socket, the address following and the clock.
//! - this file: the handle the HTTP side holds, the counters and the session ceilings.

mod commands;
pub mod control;
mod core;
#[doc(hidden)]
pub mod fuzzing;
mod net;
mod playback;
mod session;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

pub use core::Streams;
pub use net::{Engine, host_addresses};
pub use session::{OfferError, Owner};

use crate::base::{BytePool, StreamKey};
use crate::events::{Notice, NoticeSink};
use crate::limits;

/// Counters of the engine.
#[derive(Debug, Default)]
pub struct WebrtcStats {
    pub sessions_open: AtomicUsize,
    pub sessions_total: AtomicU64,
    pub refused_principal: AtomicU64,
    pub refused_address: AtomicU64,
    pub refused_server: AtomicU64,
    pub bad_offers: AtomicU64,
    pub datagrams_in: AtomicU64,
    /// Datagrams that are not STUN, DTLS, RTP or RTCP.
    pub datagrams_bad: AtomicU64,
    /// Well-formed datagrams no session claims.
    pub datagrams_unmatched: AtomicU64,
    pub send_errors: AtomicU64,
    pub frames_sent: AtomicU64,
    /// Live audio frames written to sessions.
    pub audio_frames_sent: AtomicU64,
    pub keyframe_bursts: AtomicU64,
    pub control_messages: AtomicU64,
    /// Control messages answered with an error.
    pub control_errors: AtomicU64,
    /// Control messages dropped because too many waited.
    pub control_dropped: AtomicU64,
    /// Frames skipped for a viewer: no room to wait for its pacer.
    pub frames_skipped: AtomicU64,
    /// Ticks given to sessions (their pacers ask for one after each packet).
    pub pacer_ticks: AtomicU64,
    /// Messages to browsers their channel would not take (full, or closed).
    pub replies_dropped: AtomicU64,
    /// Sessions that never connected within [`limits::WEBRTC_CONNECT_TIMEOUT_MS`].
    pub connect_timeouts: AtomicU64,
    /// Stored events handed to the engine for subscribers.
    pub event_notices_in: AtomicU64,
    /// Stored events whose notice found the engine's queue full.
    pub event_notices_dropped: AtomicU64,
    /// Event notices written to subscribers' channels.
    pub event_notices_sent: AtomicU64,
    /// Subscriptions cut off because their session did not keep up.
    pub events_cut_off: AtomicU64,
    /// The engine's time for each of the last live frames (in to RTP out, all viewers), µs.
    frame_times: std::sync::Mutex<std::collections::VecDeque<u32>>,
    /// The same for the last live sound frames that reached a viewer, in ns (a few µs each).
    audio_times: std::sync::Mutex<std::collections::VecDeque<u32>>,
}

/// Frame times kept for [`WebrtcStats::frame_times_us`].
const FRAME_TIMES_KEPT: usize = 4096;

impl WebrtcStats {
    fn record_frame(&self, took: Duration) {
        keep_time(&self.frame_times, took.as_micros());
    }

    fn record_audio(&self, took: Duration) {
        keep_time(&self.audio_times, took.as_nanos());
    }

    /// Takes the engine's recorded times per live frame (for the benchmark), µs.
    pub fn frame_times_us(&self) -> Vec<u32> {
        self.frame_times.lock().expect("stats lock").drain(..).collect()
    }

    /// Takes the engine's recorded times per live sound frame (for the benchmark), ns.
    pub fn audio_times_ns(&self) -> Vec<u32> {
        self.audio_times.lock().expect("stats lock").drain(..).collect()
    }
}

/// Keeps `took` among the last [`FRAME_TIMES_KEPT`] times.
fn keep_time(times: &std::sync::Mutex<std::collections::VecDeque<u32>>, took: u128) {
    let mut times = times.lock().expect("stats lock");
    if times.len() == FRAME_TIMES_KEPT {
        times.pop_front();
    }
    times.push_back(took.min(u128::from(u32::MAX)) as u32);
}

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Offer(#[from] OfferError),
    #[error("{0} already has {1} live sessions, the most it may")]
    Principal(String, usize),
    #[error("this address already has {0} live sessions, the most it may")]
    Address(usize),
    #[error("the box already serves {0} live sessions, the most it can")]
    Server(usize),
    #[error("the camera is not connected: no picture to send yet")]
    NotLive,
    #[error("no such stream")]
    NoStream,
    #[error("live view is stopping")]
    Stopped,
    #[error("live view has {0} requests waiting, the most it queues: try again")]
    Busy(usize),
}

enum Command {
    Open {
        stream: StreamKey,
        offer: String,
        owner: Owner,
        peer: IpAddr,
        reply: oneshot::Sender<Result<(u64, String), OpenError>>,
    },
    Close {
        id: u64,
        /// Only the owner (or an admin: `None`) may close a session.
        principal: Option<String>,
        reply: oneshot::Sender<bool>,
    },
    CloseLogin([u8; 32]),
    ClosePrincipal(String),
}

/// What the HTTP side holds to reach the engine.
#[derive(Clone)]
pub struct WebrtcHandle {
    tx: mpsc::Sender<Command>,
    events_tx: mpsc::Sender<Notice>,
    pub stats: Arc<WebrtcStats>,
    pub max_sessions: usize,
    /// Frames waiting for the sessions' pacers.
    pub send_pool: Arc<BytePool>,
}

/// Stored events reach the subscribed sessions through the engine's queue.
impl NoticeSink for WebrtcHandle {
    fn publish(&self, notice: Notice) {
        self.publish_event(notice);
    }
}

impl WebrtcHandle {
    /// Opens a session on stream `stream` for a WHEP offer; returns its id and the answer.
    pub async fn open(
        &self,
        stream: StreamKey,
        offer: String,
        owner: Owner,
        peer: IpAddr,
    ) -> Result<(u64, String), OpenError> {
        let (reply, rx) = oneshot::channel();
        let cmd = Command::Open { stream, offer, owner, peer, reply };
        self.tx.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => OpenError::Busy(limits::WEBRTC_COMMANDS_MAX),
            mpsc::error::TrySendError::Closed(_) => OpenError::Stopped,
        })?;
        rx.await.map_err(|_| OpenError::Stopped)?
    }

    /// Closes session `id`; `principal` must own it unless it is `None` (an admin).
    pub async fn close(&self, id: u64, principal: Option<String>) -> bool {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Command::Close { id, principal, reply }).await.is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// Hands a stored event to the subscribed sessions; never waits: with the engine's
    /// queue full the notice is dropped and counted (the event itself is stored).
    pub fn publish_event(&self, e: Notice) {
        if self.events_tx.try_send(e).is_err() {
            self.stats.event_notices_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes every session opened with a login session (at logout). Waits for room in
    /// the queue rather than lose the request: a logout must end its sessions.
    pub async fn close_login(&self, login: [u8; 32]) {
        let _ = self.tx.send(Command::CloseLogin(login)).await;
    }

    /// Closes every session of a principal (a user deleted); waits for room like
    /// [`WebrtcHandle::close_login`].
    pub async fn close_principal(&self, principal: String) {
        let _ = self.tx.send(Command::ClosePrincipal(principal)).await;
    }
}

/// Sessions the whole box may hold, by its RAM class.
pub fn max_sessions(ram_class_bytes: u64) -> usize {
    let by_ram = (limits::WEBRTC_SESSIONS_PER_GIB as u64 * ram_class_bytes) >> 30;
    (by_ram as usize).clamp(limits::WEBRTC_SESSIONS_MIN, limits::WEBRTC_SESSIONS_SERVER_MAX)
}

/// The bytes of frames that may wait for the pacers of `max_sessions` sessions: a share
/// per session, and never less than one frame at the largest ceiling.
pub fn send_pool_bytes(max_sessions: usize) -> usize {
    (max_sessions * limits::WEBRTC_SEND_POOL_BYTES_PER_SESSION).max(limits::FRAME_MAX_BYTES)
}

/// Sessions one principal may hold on a box of `max_sessions`: its share, so that others
/// always find room.
pub fn principal_max(max_sessions: usize) -> usize {
    (max_sessions * limits::WEBRTC_PRINCIPAL_SHARE_PERCENT / 100).clamp(1, limits::WEBRTC_SESSIONS_PER_PRINCIPAL_MAX)
}

/// Sessions anyone may open on a box of `max_sessions`; the rest are kept for admins.
pub fn for_everyone(max_sessions: usize) -> usize {
    max_sessions.saturating_sub(limits::WEBRTC_SESSIONS_ADMIN_RESERVED).max(1)
}

#[cfg(test)]
mod testing;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;

    use super::testing::{self, offer, owner};
    use super::*;

    #[test]
    fn a_principal_gets_its_share_and_admins_keep_room() {
        // A 1 GiB box: 64 sessions, 32 for one principal, 62 for anyone, 64 for admins.
        assert_eq!((principal_max(64), for_everyone(64)), (32, 62));
        assert_eq!(principal_max(512), limits::WEBRTC_SESSIONS_PER_PRINCIPAL_MAX);
        assert_eq!((principal_max(1), for_everyone(1)), (1, 1));
    }

    #[tokio::test]
    async fn opening_sessions_beyond_the_request_queue_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (e, handle) = testing::engine(dir.path(), 1).await;
        // The engine is not running yet: requests wait in its queue.
        let mut waiting = Vec::new();
        for _ in 0..limits::WEBRTC_COMMANDS_MAX {
            let h = handle.clone();
            let peer = IpAddr::from([127, 0, 0, 1]);
            waiting.push(tokio::spawn(async move { h.open(testing::key(), offer(1), owner("user:a"), peer).await }));
        }
        while e.cmd_rx.len() < limits::WEBRTC_COMMANDS_MAX {
            tokio::task::yield_now().await;
        }
        let refused = handle.open(testing::key(), offer(1), owner("user:a"), IpAddr::from([127, 0, 0, 1])).await;
        assert!(matches!(refused, Err(OpenError::Busy(limits::WEBRTC_COMMANDS_MAX))), "{refused:?}");
        // Logout does not lose its request to a full queue: it waits for room.
        let logout = tokio::spawn({
            let h = handle.clone();
            async move { h.close_login([1; 32]).await }
        });
        let (_stop_tx, stop) = watch::channel(false);
        let engine = tokio::spawn(e.run(stop));
        let mut opened = 0;
        for w in waiting {
            match w.await.unwrap() {
                Ok(_) => opened += 1,
                // On a box of one session, one principal's share is that session.
                Err(OpenError::Principal(_, 1)) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(opened, 1, "the engine took every queued request in turn");
        tokio::time::timeout(Duration::from_secs(5), logout).await.unwrap().unwrap();
        engine.abort();
    }

    #[test]
    fn the_box_holds_sessions_by_its_ram_class_up_to_the_server_ceiling() {
        assert_eq!(max_sessions(512 << 20), limits::WEBRTC_SESSIONS_PER_GIB / 2, "in proportion to the RAM");
        assert_eq!(max_sessions(64 << 20), limits::WEBRTC_SESSIONS_MIN, "never below the least");
        assert_eq!(max_sessions(2 << 30), 2 * limits::WEBRTC_SESSIONS_PER_GIB);
        assert_eq!(max_sessions(1 << 40), limits::WEBRTC_SESSIONS_SERVER_MAX);
    }

    #[tokio::test]
    async fn event_notices_past_the_engines_queue_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        // The engine is not running: its queue fills.
        let (_e, handle) = testing::engine(dir.path(), 1).await;
        let notice = Notice {
            id: 1,
            rev: 1,
            camera: "cam".into(),
            time_us: 0,
            labels: Vec::new(),
            score: None,
            text: String::new(),
            has_snapshot: false,
        };
        for _ in 0..limits::WEBRTC_EVENTS_IN_MAX + 2 {
            handle.publish_event(notice.clone());
        }
        assert_eq!(handle.stats.event_notices_dropped.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_subscriber_that_does_not_keep_up_is_cut_off_at_its_queue_ceilings() {
        let offer = include_str!("../../tests/recorder/chromium-offer.sdp");
        let mut h = fuzzing::Harness::new(offer).expect("the canned offer is accepted");
        let s = h.session();
        let notice: Arc<[u8]> = vec![1u8; 100].into();
        assert_eq!(s.offer_event("front", &notice), session::Offered::NotWanted, "not subscribed");
        s.events = Some(session::EventSub::new(vec!["front".into()]));
        assert_eq!(s.offer_event("back", &notice), session::Offered::NotWanted, "another camera");
        // Not connected: nothing leaves, so the queue fills.
        for _ in 0..limits::WEBRTC_EVENT_QUEUE_MESSAGES {
            assert_eq!(s.offer_event("front", &notice), session::Offered::Queued);
        }
        assert_eq!(s.events_waiting(), limits::WEBRTC_EVENT_QUEUE_MESSAGES);
        assert!(!s.cut_off_pending());
        assert_eq!(s.offer_event("front", &notice), session::Offered::CutOff);
        assert!(s.events.is_none(), "unsubscribed");
        assert!(s.cut_off_pending(), "the browser is owed a notice, sent once the channel takes it");
        // By bytes: two notices of more than half the byte ceiling.
        s.events = Some(session::EventSub::new(Vec::new()));
        let big: Arc<[u8]> = vec![2u8; limits::WEBRTC_EVENT_QUEUE_BYTES / 2 + 1].into();
        assert_eq!(s.offer_event("any", &big), session::Offered::Queued);
        assert_eq!(s.offer_event("any", &big), session::Offered::CutOff);
    }

    #[test]
    fn a_flood_of_control_messages_keeps_the_newest_and_counts_the_dropped() {
        let offer = include_str!("../../tests/recorder/chromium-offer.sdp");
        let mut h = fuzzing::Harness::new(offer).expect("the canned offer is accepted");
        let s = h.session();
        for i in 0..limits::WEBRTC_CONTROL_QUEUE_MESSAGES + 3 {
            s.queue_control(vec![i as u8]);
        }
        assert_eq!(s.inbox.len(), limits::WEBRTC_CONTROL_QUEUE_MESSAGES);
        assert_eq!(s.control_dropped, 3);
        assert_eq!(s.inbox.front(), Some(&vec![3u8]), "the oldest went");
    }
}
