//! A session driven with arbitrary input, for the fuzz target `webrtc_session` (`fuzz/`):
//! datagrams as if from the browser, frames from the camera, time passing. Nothing here may
//! panic on any input.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use str0m::Input;
use str0m::net::{Protocol, Receive};

use super::session::{Owner, Session, Viewer};
use crate::base::{StreamKey, StreamKind};
use crate::media::{VideoParams, avc};

const LOCAL: ([u8; 4], u16) = ([127, 0, 0, 1], 9);
const PEER: ([u8; 4], u16) = ([127, 0, 0, 1], 40_000);

pub struct Harness {
    session: Session,
    now: Instant,
    pts_90k: i64,
}

/// A 640x360 H.264 stream's parameters (Main profile, level 3.1).
pub(super) fn params() -> VideoParams {
    let sps = [0x67, 0x4d, 0x00, 0x1f, 0x9a, 0x66, 0x02, 0x80, 0x2d, 0xd8];
    let pps = [0x68, 0xee, 0x3c, 0x80];
    avc::video_params(&sps, &pps, 640, 360).expect("valid parameter sets")
}

impl Harness {
    /// A session accepted from `offer`; `None` when the offer is refused.
    pub fn new(offer: &str) -> Option<Harness> {
        let owner = Owner { principal: "token:1".into(), login: None, admin: false };
        let who = Viewer { id: 1, owner, peer: PEER.0.into(), stream: StreamKey::new("cam", StreamKind::Main) };
        let now = Instant::now();
        let pool = crate::base::BytePool::shared(super::send_pool_bytes(1) as u64);
        let (session, _answer) =
            Session::accept(who, &params(), None, offer, &[SocketAddr::from(LOCAL)], pool, now).ok()?;
        Some(Harness { session, now, pts_90k: 0 })
    }

    fn drive(&mut self) {
        let _ = self.session.drive(&mut |_| {});
        self.session.inbox.clear();
    }

    #[cfg(test)]
    pub(super) fn session(&mut self) -> &mut Session {
        &mut self.session
    }

    /// A datagram from the browser's address.
    pub fn datagram(&mut self, bytes: &[u8]) {
        if let Ok(r) = Receive::new(Protocol::Udp, PEER.into(), LOCAL.into(), bytes) {
            let input = Input::Receive(self.now, r);
            if self.session.rtc.accepts(&input) && self.session.input(input).is_err() {
                self.session.rtc.disconnect();
            }
        }
        self.drive();
    }

    /// A frame on track `track` (Annex B bytes as given).
    pub fn frame(&mut self, track: usize, is_key: bool, data: &[u8]) {
        self.pts_90k += 6000;
        let data: Arc<[u8]> = data.into();
        let _ = self.session.send_frame(track, &data, is_key, self.pts_90k, false, self.now);
        self.drive();
    }

    /// Time passes.
    pub fn tick(&mut self, ms: u64) {
        self.now += Duration::from_millis(ms);
        if self.session.input(Input::Timeout(self.now)).is_err() {
            self.session.rtc.disconnect();
        }
        self.drive();
    }
}
