//! What became of an event's footage, as the API and the UI say it: on disk (and whether it
//! is held against retention, until when), gone (and why: retention, a full disk, a power
//! cut, an admin), or never recorded (the camera was not recording then).

use serde::Serialize;

use crate::base::{StreamKey, StreamKind};
use crate::catalog::events::EventRecord;
use crate::catalog::{Catalog, CatalogError, Loss};
use crate::record::holds::{HoldState, Holds};

/// An event's footage now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Footage {
    /// Its keyframe resolves: the recording of its moment is kept.
    OnDisk {
        /// The keyframe at or before the event, where its picture is (wall µs).
        keyframe_us: i64,
        /// Held against ordinary retention until then (µs); none when not held.
        #[serde(skip_serializing_if = "Option::is_none")]
        held_until_us: Option<i64>,
        /// It was held, but the hold lapsed early (the held share of its stream was full).
        hold_lapsed: bool,
    },
    /// Recorded once, deleted since.
    Gone { why: Loss },
    /// Nothing of its moment was recorded.
    NotRecorded,
}

/// The footage of event `r` at `now_us`.
pub fn footage(catalog: &Catalog, holds: &Holds, r: &EventRecord, now_us: i64) -> Result<Footage, CatalogError> {
    let (camera, time_us) = (r.envelope.camera.as_str(), r.envelope.time());
    if let Some((_, kf)) = super::keyframe::find(catalog, camera, time_us)? {
        let held_once = r.hold.is_some_and(|h| h.until_us > now_us);
        let (held_until_us, hold_lapsed) = match holds.state(camera, time_us, now_us) {
            HoldState::Held { until_us } => (Some(until_us), false),
            HoldState::Lapsed => (None, true),
            HoldState::None => (None, held_once),
        };
        return Ok(Footage::OnDisk { keyframe_us: kf.wall_us, held_until_us, hold_lapsed });
    }
    for kind in [StreamKind::Main, StreamKind::Sub] {
        let Some(stream_id) = catalog.find_stream(&StreamKey::new(camera, kind))? else { continue };
        if let Some(why) = catalog.loss_at(stream_id, time_us)? {
            return Ok(Footage::Gone { why });
        }
    }
    Ok(Footage::NotRecorded)
}
