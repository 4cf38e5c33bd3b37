//! The static memory budget: what KeepPeek may hold at most, by component, computed from
//! `src/limits.rs` and the config before anything starts. The daemon refuses a config whose
//! budget exceeds its share of the board's RAM ([`limits::RAM_SHARE_PERCENT`]).

use std::fmt;

use crate::config::Config;
use crate::limits;

/// One line of the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    pub component: &'static str,
    pub bytes: u64,
    pub why: String,
}

/// The whole budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    pub lines: Vec<Line>,
    pub allowed_bytes: u64,
}

impl Budget {
    pub fn total_bytes(&self) -> u64 {
        self.lines.iter().map(|l| l.bytes).sum()
    }

    pub fn fits(&self) -> bool {
        self.total_bytes() <= self.allowed_bytes
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1u32 << 20)
}

/// A line of `each_bytes` for each of `count` streams (`what` they are), the ceilings it
/// follows `named`.
fn per_stream(component: &'static str, (count, what): (u64, &str), each_bytes: usize, named: &str) -> Line {
    Line {
        component,
        bytes: count * each_bytes as u64,
        why: format!("{count} {what} × {:.1} MiB ({named})", mib(each_bytes as u64)),
    }
}

/// Computes the budget of `config`.
pub fn compute(config: &Config) -> Budget {
    let streams: u64 = config.cameras.iter().map(|c| c.streams().count() as u64).sum();
    let recorded: u64 = config.cameras.iter().map(|c| c.recorded_streams().count() as u64).sum();
    let prerolls: Vec<crate::preroll::Caps> = config
        .cameras
        .iter()
        .flat_map(|c| c.recorded_streams().map(move |(_, m)| (c, m)))
        .filter(|(c, m)| *m == crate::config::RecordMode::Events && c.pre_roll_ms > 0)
        .map(|(c, _)| crate::preroll::Caps::for_pre_roll(c.pre_roll_ms, config.preroll.stream_max_bytes as usize))
        .collect();
    let preroll_bytes = (prerolls.len() as u64 * config.preroll.stream_max_bytes).min(config.preroll.total_max_bytes);
    let preroll_slots: u64 = prerolls.iter().map(|c| c.slot_bytes() as u64).sum();
    let live_sessions = crate::webrtc::max_sessions(config.ram_class_bytes) as u64;
    let mut lines = vec![
        Line {
            component: "process",
            bytes: limits::PROCESS_BASE_BYTES as u64,
            why: "code, async runtime, allocator slack (PROCESS_BASE_BYTES)".into(),
        },
        per_stream(
            "rtsp sessions",
            (streams, "streams"),
            limits::RTSP_SESSION_OVERHEAD_BYTES,
            "RTSP_SESSION_OVERHEAD_BYTES",
        ),
        per_stream(
            "ingest queues",
            (recorded, "recorded streams"),
            limits::INGEST_QUEUE_BYTES_PER_STREAM,
            "INGEST_QUEUE_BYTES_PER_STREAM",
        ),
        per_stream(
            "fragment buffers",
            (recorded, "recorded streams"),
            limits::FRAGMENT_MAX_BYTES + limits::MOOF_MAX_BYTES,
            "FRAGMENT_MAX_BYTES + MOOF_MAX_BYTES",
        ),
        Line {
            component: "http connections",
            bytes: limits::HTTP_CONNECTIONS_MAX as u64
                * (limits::HTTP_HEAD_MAX_BYTES as u64 + (16 << 10) + limits::HTTP_SMALL_BODY_MAX_BYTES),
            why: format!(
                "{} connections × ({} KiB head + 16 KiB write buffer + {} KiB small body read before its handler) (HTTP_CONNECTIONS_MAX, HTTP_HEAD_MAX_BYTES, HTTP_SMALL_BODY_MAX_BYTES)",
                limits::HTTP_CONNECTIONS_MAX,
                limits::HTTP_HEAD_MAX_BYTES >> 10,
                limits::HTTP_SMALL_BODY_MAX_BYTES >> 10
            ),
        },
        Line {
            component: "accounts",
            bytes: accounts_bytes(),
            why: format!(
                "{} argon2id buffers × {} MiB, allocated once, the login-limit table and {} sessions (AUTH_HASHES_CONCURRENT_MAX, AUTH_LOGIN_TRACKED_MAX, AUTH_SESSIONS_MAX)",
                limits::AUTH_HASHES_CONCURRENT_MAX,
                crate::auth::hashing::HASH_MEMORY_BYTES >> 20,
                limits::AUTH_SESSIONS_MAX
            ),
        },
        Line {
            component: "catalog cache",
            bytes: limits::CATALOG_CACHE_BYTES as u64,
            why: "redb page cache (CATALOG_CACHE_BYTES)".into(),
        },
        Line {
            component: "catalog pending rows",
            bytes: limits::CATALOG_PENDING_FRAGMENTS_MAX as u64 * 256,
            why: format!("{} rows × 256 B (CATALOG_PENDING_FRAGMENTS_MAX)", limits::CATALOG_PENDING_FRAGMENTS_MAX),
        },
        Line {
            component: "thread stacks",
            bytes: (recorded + 1) * limits::THREAD_STACK_BYTES as u64,
            why: format!(
                "{} recorder and flusher threads × {} KiB (THREAD_STACK_BYTES)",
                recorded + 1,
                limits::THREAD_STACK_BYTES >> 10
            ),
        },
        Line {
            component: "exports",
            bytes: (limits::EXPORTS_RUNNING_MAX * (limits::EXPORT_FRAGMENTS_MAX * 64 + limits::EXPORT_CHUNK_BYTES))
                as u64,
            why: format!(
                "{} exports × ({} fragments × 64 B + {} KiB chunk) (EXPORTS_RUNNING_MAX, EXPORT_FRAGMENTS_MAX, EXPORT_CHUNK_BYTES)",
                limits::EXPORTS_RUNNING_MAX,
                limits::EXPORT_FRAGMENTS_MAX,
                limits::EXPORT_CHUNK_BYTES >> 10
            ),
        },
        Line {
            component: "firmware",
            bytes: (limits::BUNDLE_WRITE_CHUNK_BYTES
                + limits::UPDATE_UPLOAD_CHUNKS_MAX * limits::HTTP_HEAD_MAX_BYTES
                + limits::SUPPORT_BUNDLE_MAX_BYTES) as u64,
            why: format!(
                "one update: a {} KiB slot buffer and {} upload chunks of at most {} KiB; one {} MiB support bundle (BUNDLE_WRITE_CHUNK_BYTES, UPDATE_UPLOAD_CHUNKS_MAX, HTTP_HEAD_MAX_BYTES, SUPPORT_BUNDLE_MAX_BYTES)",
                limits::BUNDLE_WRITE_CHUNK_BYTES >> 10,
                limits::UPDATE_UPLOAD_CHUNKS_MAX,
                limits::HTTP_HEAD_MAX_BYTES >> 10,
                limits::SUPPORT_BUNDLE_MAX_BYTES >> 20
            ),
        },
        Line {
            component: "pre-roll history",
            bytes: preroll_bytes + preroll_slots,
            why: format!(
                "{} streams with a pre-roll × {:.0} MiB, at most {:.0} MiB in all ([preroll]), + {:.1} MiB of frame slots",
                prerolls.len(),
                mib(config.preroll.stream_max_bytes),
                mib(config.preroll.total_max_bytes),
                mib(preroll_slots)
            ),
        },
        Line {
            component: "live GOPs",
            bytes: (streams * limits::LIVE_GOP_MAX_BYTES as u64).min(limits::LIVE_GOP_TOTAL_MAX_BYTES as u64),
            why: format!(
                "{streams} streams × {:.0} MiB, at most {:.0} MiB in all (LIVE_GOP_MAX_BYTES, LIVE_GOP_TOTAL_MAX_BYTES)",
                mib(limits::LIVE_GOP_MAX_BYTES as u64),
                mib(limits::LIVE_GOP_TOTAL_MAX_BYTES as u64)
            ),
        },
        Line {
            component: "WHEP offers",
            bytes: if config.webrtc.port == 0 {
                0
            } else {
                (limits::HTTP_HANDLERS_MAX * limits::WEBRTC_OFFER_MAX_BYTES) as u64
            },
            why: format!(
                "{} handlers × {} KiB offer (HTTP_HANDLERS_MAX, WEBRTC_OFFER_MAX_BYTES)",
                limits::HTTP_HANDLERS_MAX,
                limits::WEBRTC_OFFER_MAX_BYTES >> 10
            ),
        },
        Line {
            component: "live sessions",
            bytes: if config.webrtc.port == 0 { 0 } else { live_sessions * limits::WEBRTC_SESSION_BUDGET_BYTES as u64 },
            why: format!(
                "{live_sessions} WebRTC sessions for this RAM class × {} KiB (WEBRTC_SESSIONS_PER_GIB, WEBRTC_SESSION_BUDGET_BYTES)",
                limits::WEBRTC_SESSION_BUDGET_BYTES >> 10
            ),
        },
        Line {
            component: "event uploads",
            bytes: (limits::EVENT_UPLOADS_MAX * 2 * crate::limits::EVENT_INTAKE_BODY_MAX_BYTES) as u64,
            why: format!(
                "{} uploads × 2 × {:.1} MiB body, its parts split out (EVENT_UPLOADS_MAX, EVENT_JPEG_MAX_BYTES)",
                limits::EVENT_UPLOADS_MAX,
                mib(crate::limits::EVENT_INTAKE_BODY_MAX_BYTES as u64)
            ),
        },
        Line {
            component: "event notices",
            bytes: if config.webrtc.port == 0 {
                0
            } else {
                let per_session = (limits::WEBRTC_EVENT_QUEUE_MESSAGES * limits::EVENT_NOTICE_MAX_BYTES)
                    .min(limits::WEBRTC_EVENT_QUEUE_BYTES);
                live_sessions * per_session as u64
                    + (limits::WEBRTC_EVENTS_IN_MAX * limits::EVENT_NOTICE_MAX_BYTES) as u64
            },
            why: format!(
                "{live_sessions} sessions × {} notices of at most {} KiB, and {} waiting for the engine (WEBRTC_EVENT_QUEUE_MESSAGES, EVENT_NOTICE_MAX_BYTES, WEBRTC_EVENTS_IN_MAX)",
                limits::WEBRTC_EVENT_QUEUE_MESSAGES,
                limits::EVENT_NOTICE_MAX_BYTES >> 10,
                limits::WEBRTC_EVENTS_IN_MAX
            ),
        },
    ];
    lines.retain(|l| l.bytes > 0 || l.component == "process");
    Budget { lines, allowed_bytes: config.ram_class_bytes * limits::RAM_SHARE_PERCENT as u64 / 100 }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        for l in &self.lines {
            writeln!(f, "{:<22} {:>9.1} MiB  {}", l.component, mib(l.bytes), l.why)?;
        }
        writeln!(f, "{:<22} {:>9.1} MiB", "total", mib(self.total_bytes()))?;
        write!(
            f,
            "{:<22} {:>9.1} MiB  {}% of the board's RAM: {}",
            "allowed",
            mib(self.allowed_bytes),
            limits::RAM_SHARE_PERCENT,
            if self.fits() { "fits" } else { "DOES NOT FIT" }
        )
    }
}

/// What accounts hold at most: the hashing buffers, the login-limit table and the session
/// table (a session: its key, name, CSRF token and times, with the map's slack).
pub fn accounts_bytes() -> u64 {
    let hashing = limits::AUTH_HASHES_CONCURRENT_MAX * crate::auth::hashing::HASH_MEMORY_BYTES;
    let sessions = limits::AUTH_SESSIONS_MAX * 256;
    (hashing + crate::auth::limiter::table_bytes() + sessions) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Camera, RecordMode, Source};

    fn config_with(cameras: usize, ram_class_bytes: u64) -> Config {
        config_recording(cameras, ram_class_bytes, RecordMode::Continuous)
    }

    fn config_recording(cameras: usize, ram_class_bytes: u64, record: RecordMode) -> Config {
        let mut c = Config::demo("/data".into(), "127.0.0.1:8080".parse().unwrap());
        c.ram_class_bytes = ram_class_bytes;
        c.cameras = (0..cameras)
            .map(|i| Camera {
                name: format!("c{i}"),
                record,
                record_sub: record,
                pre_roll_ms: 5000,
                post_roll_ms: 10_000,
                username: None,
                password: None,
                main: Source::Builtin,
                sub: Some(Source::Builtin),
            })
            .collect();
        c
    }

    #[test]
    fn the_budget_grows_with_streams_and_refuses_what_does_not_fit() {
        let small = compute(&config_with(1, 1 << 30));
        let big = compute(&config_with(16, 1 << 30));
        assert!(big.total_bytes() > small.total_bytes());
        assert!(small.fits());
        assert!(!compute(&config_with(limits::CAMERAS_MAX, 512 << 20)).fits());
        let text = small.to_string();
        for component in ["process", "rtsp sessions", "ingest queues", "fragment buffers", "catalog cache", "total"] {
            assert!(text.contains(component), "{component} in {text}");
        }
    }

    #[test]
    fn pre_roll_is_budgeted_for_event_streams_only_and_capped_in_total() {
        let line = |c: &Config| {
            compute(c).lines.into_iter().find(|l| l.component == "pre-roll history").map_or(0, |l| l.bytes)
        };
        assert_eq!(line(&config_with(4, 2 << 30)), 0, "continuous streams hold no history");
        let one = line(&config_recording(1, 2 << 30, RecordMode::Events));
        let slots = 2 * crate::preroll::Caps::for_pre_roll(5000, 0).slot_bytes() as u64;
        assert_eq!(one, 2 * limits::PREROLL_STREAM_MAX_BYTES as u64 + slots);
        let many = config_recording(64, 16 << 30, RecordMode::Events);
        assert_eq!(line(&many), limits::PREROLL_TOTAL_MAX_BYTES as u64 + 64 * slots);
    }
}
