//! KeepPeek: network video recorder firmware for small ARM64 boards.
//!
//! Rooms (see `docs/architecture.md`): [`limits`] holds every ceiling; [`config`] the typed
//! config; [`clock`] time; [`media`] frames and fMP4; [`ingest`] cameras; [`record`] segment
//! files, crash recovery and retention; [`catalog`] the redb index; [`daemon`] wires them.

pub mod auth;
pub mod budget;
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
pub mod preroll;
pub mod record;
pub mod report;
pub mod system;
pub mod webrtc;
