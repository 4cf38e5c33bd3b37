//! KeepPeek: network video recorder firmware for small ARM64 boards.
//!
//! Its rooms, one line each (`docs/architecture.md` draws them and the flow between them):
//!
//! - [`base`]: what every room builds on: files made durable, disk space, stream keys.
//! - [`limits`]: every ceiling, with its unit in its name and why.
//! - [`config`]: the TOML config, parsed and validated into types.
//! - [`budget`]: the memory budget, computed from the limits and the config before start.
//! - [`cameras`]: the cameras running now, by stream key: the one list every room reads.
//! - [`clock`]: monotonic, wall and 90 kHz media time, and how a run maps one onto the other.
//! - [`media`]: frames, codec parameters, and the fMP4 boxes they are stored in.
//! - [`ingest`]: one supervised RTSP session per camera stream, reconnecting forever.
//! - [`live`]: each stream's frames to whoever watches live.
//! - [`preroll`]: the pre-roll history in RAM and which frames a recorder writes.
//! - [`record`]: segment files and catalog rows, crash-safe, within retention.
//! - [`catalog`]: the redb index of what media, events and accounts exist.
//! - [`export`]: a time range as one playable MP4, spliced from stored fragments.
//! - [`events`]: events from analysis services: intake, storage, triggers, keyframes.
//! - [`auth`]: users, sessions, tokens, password hashing and login limits.
//! - [`webrtc`]: live view and stored playback over WebRTC, with the control channel.
//! - [`http`]: the HTTP listener with its ceilings, the route table and the handlers.
//! - [`system`]: the box as firmware: A/B slots, updates, PID 1, support.
//! - [`report`]: `keeppeek recordings`, what the catalog holds.
//! - [`daemon`]: starts the rooms in order and stops them in order.

pub mod archive;
pub mod auth;
pub mod base;
pub mod budget;
pub mod cameras;
pub mod camport;
pub mod catalog;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod events;
pub mod export;
pub mod http;
pub mod ingest;
pub mod limits;
pub mod live;
pub mod media;
pub mod mqtt;
pub mod oidc;
pub mod onvif;
pub mod preroll;
pub mod record;
pub mod report;
pub mod system;
pub mod tls;
pub mod webrtc;
