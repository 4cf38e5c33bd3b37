//! The cameras running now: each stream's ingest state, live fanout and recording, by
//! [`StreamKey`], in the order they started (the config's). The daemon writes it as cameras
//! start and stop (`daemon::Running::start_camera` and `stop_camera`); HTTP, live view and
//! the event intake read it. No other room keeps a list of cameras of its own, so a camera
//! added or removed while the box runs is seen by all of them at once.

use std::sync::{Arc, RwLock};

use crate::base::StreamKey;
use crate::config::RecordMode;
use crate::ingest::state::StreamState;
use crate::live::Fanout;
use crate::preroll::Trigger;
use crate::record::RecordingWatch;

/// One running stream of a camera.
pub struct RunningStream {
    pub key: StreamKey,
    /// What its camera session is doing (connected, codec, rates, last error).
    pub state: Arc<StreamState>,
    /// Its recorder's queue, counters and trigger, when it is recorded.
    pub recording: Option<RecordingWatch>,
    /// Its live frames.
    pub live: Arc<Fanout>,
}

/// Every running stream; cheap to read, written only when a camera starts or stops.
#[derive(Default)]
pub struct Cameras {
    streams: RwLock<Vec<Arc<RunningStream>>>,
}

impl Cameras {
    /// Cameras `names` running, each its main stream only, not recorded (for tests).
    #[cfg(test)]
    pub fn main_streams(names: &[&str]) -> Arc<Cameras> {
        let cameras = Arc::new(Cameras::default());
        cameras.add(names.iter().map(|name| RunningStream {
            key: crate::base::StreamKey::new(name, crate::base::StreamKind::Main),
            state: Arc::default(),
            recording: None,
            live: Arc::new(crate::live::Fanout::new(crate::live::gop_pool())),
        }));
        cameras
    }

    /// Every running stream, in the order they started.
    pub fn streams(&self) -> Vec<Arc<RunningStream>> {
        self.streams.read().expect("cameras lock").clone()
    }

    /// The running stream `key`, if any.
    pub fn stream(&self, key: &StreamKey) -> Option<Arc<RunningStream>> {
        self.streams.read().expect("cameras lock").iter().find(|s| s.key == *key).cloned()
    }

    /// The triggers of `camera`'s streams recorded on events; `None` when no such camera runs.
    pub fn triggers(&self, camera: &str) -> Option<Vec<Arc<Trigger>>> {
        let streams = self.streams.read().expect("cameras lock");
        let mut of_camera = streams.iter().filter(|s| s.key.of(camera)).peekable();
        of_camera.peek()?;
        let on_events = of_camera.filter_map(|s| s.recording.as_ref()).filter(|r| r.mode == RecordMode::Events);
        Some(on_events.map(|r| r.trigger.clone()).collect())
    }

    /// What an event of `camera` holds: its recorded streams' policy (one per camera), none
    /// when nothing of it is recorded.
    pub fn hold_policy(&self, camera: &str) -> Option<crate::record::HoldPolicy> {
        let streams = self.streams.read().expect("cameras lock");
        streams.iter().filter(|s| s.key.of(camera)).find_map(|s| s.recording.as_ref()).map(|r| r.hold)
    }

    /// The triggers of `camera`'s recorded streams, whatever their mode (an event asks each
    /// to make its footage durable early).
    pub fn recorded_triggers(&self, camera: &str) -> Vec<Arc<Trigger>> {
        let streams = self.streams.read().expect("cameras lock");
        streams
            .iter()
            .filter(|s| s.key.of(camera))
            .filter_map(|s| s.recording.as_ref())
            .map(|r| r.trigger.clone())
            .collect()
    }

    /// Adds a camera's streams (after those running).
    pub fn add(&self, streams: impl IntoIterator<Item = RunningStream>) {
        self.streams.write().expect("cameras lock").extend(streams.into_iter().map(Arc::new));
    }

    /// Removes `camera`'s streams and returns them.
    pub fn remove_camera(&self, camera: &str) -> Vec<Arc<RunningStream>> {
        let mut streams = self.streams.write().expect("cameras lock");
        let (gone, kept) = streams.drain(..).partition(|s| s.key.of(camera));
        *streams = kept;
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::StreamKind;

    fn stream(camera: &str, kind: StreamKind) -> RunningStream {
        RunningStream {
            key: StreamKey::new(camera, kind),
            state: Arc::default(),
            recording: None,
            live: Arc::new(Fanout::new(crate::live::gop_pool())),
        }
    }

    #[test]
    fn a_camera_comes_and_goes_with_all_its_streams() {
        let cameras = Cameras::default();
        cameras.add([stream("front", StreamKind::Main), stream("front", StreamKind::Sub)]);
        cameras.add([stream("yard", StreamKind::Main)]);
        let names: Vec<_> = cameras.streams().iter().map(|s| s.key.name()).collect();
        assert_eq!(names, ["front/main", "front/sub", "yard/main"]);
        assert!(cameras.stream(&StreamKey::new("front", StreamKind::Sub)).is_some());
        assert_eq!(cameras.triggers("front").map(|t| t.len()), Some(0), "running, nothing recorded on events");
        assert!(cameras.triggers("side").is_none(), "no such camera");

        let gone = cameras.remove_camera("front");
        assert_eq!(gone.len(), 2);
        assert!(cameras.triggers("front").is_none());
        let names: Vec<_> = cameras.streams().iter().map(|s| s.key.name()).collect();
        assert_eq!(names, ["yard/main"]);
    }
}
