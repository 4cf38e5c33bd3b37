//! The control channel's commands carried out: each request on a track becomes a typed
//! [`Answer`] or [`Refusal`] here, and `control.rs` encodes it. The ceilings on stored
//! tracks are checked here, streams are found through the catalog's one reader, and track
//! state changes in one place.

use std::sync::Arc;
use std::time::Instant;

use super::control::{self, Answer, Command, Refusal, Subscription};
use super::core::{Core, Out};
use super::playback::Cursor;
use super::session::{self, Session, Source};
use crate::base::StreamKey;
use crate::cameras::RunningStream;
use crate::limits;

impl Core {
    /// Answers one request on track `req.track` of session `i`.
    pub(super) fn answer(
        &mut self,
        i: usize,
        req: &control::Request,
        now: Instant,
        out: Out<'_>,
    ) -> control::pb::ServerMessage {
        control::answer(req.id, req.track, self.carry_out(i, req, now, out))
    }

    /// A running stream named in a command (empty: the session's own).
    fn stream_named(&self, i: usize, name: &str) -> Result<Arc<RunningStream>, Refusal> {
        let key = if name.is_empty() { Some(self.sessions[i].stream.clone()) } else { StreamKey::parse(name) };
        let found = key.and_then(|k| self.streams.cameras.stream(&k));
        found.ok_or_else(|| Refusal::NoStream(name.to_string()))
    }

    /// Carries out one request on track `req.track` of session `i`.
    fn carry_out(&mut self, i: usize, req: &control::Request, now: Instant, out: Out<'_>) -> Result<Answer, Refusal> {
        let t = req.track;
        match &req.command {
            Command::PlayLive { stream } => {
                let running = self.stream_named(i, stream)?;
                let codec = running.live.params().map(|p| p.codec);
                if codec.is_some_and(|c| c != self.sessions[i].codec) {
                    return Err(Refusal::LiveCodec(running.key.name()));
                }
                self.watch(running.key.clone(), &running.live);
                let track = &mut self.sessions[i].tracks[t];
                track.source = Source::Live(running.key.clone());
                track.play = control::PlayState::live(running.key.name());
                track.last_sent_mono_us = i64::MIN;
                self.sessions[i].rebase_track(t);
                self.keyframe_burst(i, t, now, out);
            }
            Command::PlayStored { stream, wall_us } => {
                let key = self.stream_named(i, stream)?.key.clone();
                let cursor = self.open_cursor(i, t, &key, *wall_us, now)?;
                let track = &mut self.sessions[i].tracks[t];
                track.source = Source::Stored(Box::new(cursor));
                let name = key.name();
                track.play = control::PlayState { stored: true, stream: name, paused: false, rate: 1.0, step: false };
                self.sessions[i].rebase_track(t);
            }
            Command::Seek { wall_us } => {
                let track = &mut self.sessions[i].tracks[t];
                let Source::Stored(cursor) = &mut track.source else { return Err(Refusal::NotStored) };
                cursor.seek(*wall_us, now).map_err(Refusal::NoFootage)?;
                self.sessions[i].rebase_track(t);
            }
            Command::Pause | Command::Resume | Command::SetRate { .. } | Command::Step => {
                let track = &mut self.sessions[i].tracks[t];
                track.play.apply(&req.command)?;
                if let Source::Stored(cursor) = &mut track.source {
                    cursor.set_rate(track.play.rate, track.play.keyframes_only(), now);
                    cursor.set_paused(track.play.paused, track.play.step, now);
                    if track.play.keyframes_only() {
                        track.lost_frames();
                    }
                }
            }
            Command::SubscribeEvents { cameras } => {
                self.sessions[i].events = Some(session::EventSub::new(cameras.clone()));
                let sub =
                    if cameras.is_empty() { Subscription::Everything } else { Subscription::Cameras(cameras.clone()) };
                return Ok(Answer::Subscribed(sub));
            }
            Command::UnsubscribeEvents => {
                self.sessions[i].events = None;
                return Ok(Answer::Subscribed(Subscription::Nothing));
            }
            Command::Timeline { stream, from_us, to_us } => {
                let key = self.stream_named(i, stream)?.key.clone();
                let catalog = &self.streams.catalog;
                let found = match catalog.find_stream(&key)? {
                    Some(id) => catalog.runs(id, *from_us, *to_us, limits::WEBRTC_TIMELINE_RUNS_MAX)?,
                    None => Default::default(),
                };
                return Ok(Answer::Timeline { stream: key.name(), runs: found.runs, truncated: found.truncated });
            }
        }
        Ok(Answer::State(self.sessions[i].tracks[t].play.clone()))
    }

    /// A cursor on stream `key` at `wall_us` for track `t` of session `i`, within the
    /// ceilings on stored tracks (a track already playing stored video keeps its room).
    fn open_cursor(&self, i: usize, t: usize, key: &StreamKey, wall_us: i64, now: Instant) -> Result<Cursor, Refusal> {
        let is_stored = matches!(self.sessions[i].tracks[t].source, Source::Stored(_));
        if !is_stored && self.sessions[i].cursors() >= limits::WEBRTC_CURSORS_PER_SESSION_MAX {
            return Err(Refusal::SessionCursors(limits::WEBRTC_CURSORS_PER_SESSION_MAX));
        }
        let all: usize = self.sessions.iter().map(Session::cursors).sum();
        if !is_stored && all >= limits::WEBRTC_CURSORS_MAX {
            return Err(Refusal::BoxCursors(limits::WEBRTC_CURSORS_MAX));
        }
        let catalog = &self.streams.catalog;
        let stream_id = catalog.find_stream(key)?.ok_or_else(|| Refusal::NotRecorded(key.name()))?;
        let cursor = Cursor::open(catalog.clone(), &self.streams.data_dir, stream_id, wall_us, now)
            .map_err(Refusal::NoFootage)?;
        if cursor.params().is_some_and(|p| p.codec != self.sessions[i].codec) {
            return Err(Refusal::StoredCodec(key.name()));
        }
        Ok(cursor)
    }
}
