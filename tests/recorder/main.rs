//! Integration tests of recording: the real binary against real peers. One test binary, so
//! the slow, mostly waiting tests run side by side.

mod common;

mod archive;
mod auth;
mod bad_sound;
mod camera_failures;
mod camport;
mod cli;
mod config_apply;
mod events;
mod export;
mod firehose;
mod firmware;
mod hostile;
mod http_limits;
mod live;
mod media_api;
mod mqtt;
mod onvif;
mod power_cut;
mod retention;
mod rtsp_recording;
mod scale;
#[path = "../../benches/support/segment.rs"]
mod segment;
mod sound;
mod sso;
mod tls;
#[path = "../../benches/support/viewer.rs"]
mod viewer;
mod worst_case;
