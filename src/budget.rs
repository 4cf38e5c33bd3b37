//! The static memory budget: what KeepPeek may hold at most, by component, computed from
//! `src/limits.rs` and the config before anything starts. The daemon refuses a config whose
//! budget exceeds its share of the board's RAM ([`limits::RAM_SHARE_PERCENT`]).

use std::fmt;

use crate::base::StreamKind;
use crate::config::{Camera, Config, RecordMode, Source, Transport};
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

/// The archive's most with `targets` targets: nothing without one.
fn archive_bytes(targets: usize) -> u64 {
    if targets == 0 {
        return 0;
    }
    let per_target = 2 * limits::ARCHIVE_PART_BYTES
        + limits::ARCHIVE_ANSWER_MAX_BYTES
        + 2 * limits::ARCHIVE_MANIFEST_MAX_BYTES
        + limits::TLS_CONNECTION_BYTES
        + limits::ARCHIVE_BACKLOG_ROWS * 8
        + limits::ARCHIVE_DESCRIBE_BYTES
        // An event looked at; its snapshot is sent between recordings, within the parts'.
        + limits::EVENT_ENVELOPE_MAX_BYTES;
    // A read holds a manifest part and a window; a plan kept, one entry per fragment.
    let reads = limits::ARCHIVE_READS_RUNNING_MAX
        * (limits::ARCHIVE_MANIFEST_MAX_BYTES + limits::ARCHIVE_READ_WINDOW_BYTES)
        + limits::ARCHIVE_PLANS_KEPT * limits::EXPORT_FRAGMENTS_MAX * 80;
    (targets * per_target + reads) as u64
}

/// Computes the budget of `config`: each line the most its component can hold with every
/// ceiling reached at once.
pub fn compute(config: &Config) -> Budget {
    let ram = config.ram_class_bytes;
    let streams: Vec<StreamKind> = config.cameras.iter().flat_map(|c| c.streams().map(|(k, _)| k)).collect();
    // A frame being put together is held in a buffer that grows by powers of two up to its
    // ceiling (`ingest::rtsp::Assembler`).
    let frames_received: u64 = config
        .cameras
        .iter()
        .flat_map(|c| c.streams().map(|(k, _)| c.frame_max_bytes(k).next_power_of_two() as u64))
        .sum();
    let frame_max = config.cameras.iter().map(|c| c.frame_max_bytes as u64).max().unwrap_or(0);
    let recorded: u64 = config.cameras.iter().map(|c| c.recorded_streams().count() as u64).sum();
    let prerolls: Vec<crate::preroll::Caps> = config
        .cameras
        .iter()
        .flat_map(|c| c.recorded_streams().map(move |(_, m)| (c, m)))
        .filter(|(c, m)| *m == RecordMode::Events && c.pre_roll_ms > 0)
        .map(|(c, _)| crate::preroll::Caps::for_pre_roll(c.pre_roll_ms, config.preroll.stream_max_bytes as usize))
        .collect();
    let preroll_bytes = (prerolls.len() as u64 * config.preroll.stream_max_bytes).min(config.preroll.total_max_bytes);
    let preroll_slots: u64 = prerolls.iter().map(|c| c.slot_bytes() as u64).sum();
    let live_sessions = crate::webrtc::max_sessions(ram) as u64;
    let writers = crate::record::writers::count_for(ram) as u64;
    let live_on = config.webrtc.port != 0;
    let mut lines = vec![
        Line {
            component: "process",
            bytes: limits::PROCESS_BASE_BYTES as u64,
            why: "code, async runtime, allocator slack (PROCESS_BASE_BYTES)".into(),
        },
        Line {
            component: "camera sessions",
            bytes: streams.len() as u64 * limits::RTSP_SESSION_OVERHEAD_BYTES as u64 + frames_received,
            why: format!(
                "{} streams × {} KiB of session buffers, and the frame each is receiving at its ceiling (rounded up to a power of two), {:.1} MiB in all (RTSP_SESSION_OVERHEAD_BYTES, each camera's frame_max_bytes, SUB_FRAME_MAX_BYTES)",
                streams.len(),
                limits::RTSP_SESSION_OVERHEAD_BYTES >> 10,
                mib(frames_received)
            ),
        },
        Line {
            component: "ingest queues",
            bytes: if recorded == 0 { 0 } else { config.ingest_pool_bytes() },
            why: format!(
                "{recorded} recorded streams' queues in one pool: {:.1} MiB queued and each stream's newest frame at its ceiling (INGEST_QUEUE_BYTES_PER_GIB or [pools], frame_max_bytes)",
                mib(config.pools.ingest_queues_max_bytes)
            ),
        },
        Line {
            component: "write buffers",
            bytes: if recorded == 0 {
                0
            } else {
                writers * frame_max.max(limits::RECORD_WRITE_BATCH_MAX_BYTES as u64)
                    + recorded * crate::record::stream_buffers_bytes() as u64
            },
            why: format!(
                "frames in hand for one write for each of {writers} writers, and {recorded} streams' fragment headers, init segments, samples' sizes and audio until their fragment is whole (RECORD_WRITE_BATCH_MAX_BYTES or frame_max_bytes, MOOF_MAX_BYTES, INIT_SEGMENT_MAX_BYTES, FRAGMENT_MAX_SAMPLES, FRAGMENT_AUDIO_MAX_BYTES)"
            ),
        },
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
            component: "https",
            bytes: if config.https.is_some() {
                ((limits::HTTP_CONNECTIONS_MAX + limits::TLS_HANDSHAKES_MAX) * limits::TLS_CONNECTION_BYTES) as u64
            } else {
                0
            },
            why: format!(
                "{} connections and {} handshakes × {} KiB of TLS state and records (HTTP_CONNECTIONS_MAX, TLS_HANDSHAKES_MAX, TLS_CONNECTION_BYTES); none without [https]",
                limits::HTTP_CONNECTIONS_MAX,
                limits::TLS_HANDSHAKES_MAX,
                limits::TLS_CONNECTION_BYTES >> 10
            ),
        },
        Line {
            component: "single sign-on",
            bytes: ((limits::OIDC_SIGN_INS_TALKING_MAX + limits::OIDC_PROVIDER_CACHES_MAX)
                * (limits::TLS_CONNECTION_BYTES + limits::OIDC_DOCUMENT_MAX_BYTES)
                + limits::OIDC_PROVIDER_CACHES_MAX * 2 * limits::OIDC_DOCUMENT_MAX_BYTES
                + limits::OIDC_LOGINS_PENDING_MAX * (1 << 10)) as u64,
            why: format!(
                "{} sign-ins talking and {} kept connections × ({} KiB TLS + {} KiB answer), {} providers' discovery documents and keys, {} pending sign-ins × 1 KiB (OIDC_SIGN_INS_TALKING_MAX, OIDC_PROVIDER_CACHES_MAX, TLS_CONNECTION_BYTES, OIDC_DOCUMENT_MAX_BYTES, OIDC_LOGINS_PENDING_MAX); counted without providers too, as they are added live",
                limits::OIDC_SIGN_INS_TALKING_MAX,
                limits::OIDC_PROVIDER_CACHES_MAX,
                limits::TLS_CONNECTION_BYTES >> 10,
                limits::OIDC_DOCUMENT_MAX_BYTES >> 10,
                limits::OIDC_PROVIDER_CACHES_MAX,
                limits::OIDC_LOGINS_PENDING_MAX
            ),
        },
        Line {
            component: "mqtt",
            bytes: (2 * limits::MQTT_PACKET_MAX_BYTES + limits::TLS_CONNECTION_BYTES + limits::MQTT_INFLIGHT_MAX * 64)
                as u64,
            why: format!(
                "a packet in and one out at {} KiB each, TLS state ({} KiB) and {} publishes in flight (MQTT_PACKET_MAX_BYTES, TLS_CONNECTION_BYTES, MQTT_INFLIGHT_MAX); counted without a broker too, as one is set live",
                limits::MQTT_PACKET_MAX_BYTES >> 10,
                limits::TLS_CONNECTION_BYTES >> 10,
                limits::MQTT_INFLIGHT_MAX
            ),
        },
        Line {
            component: "archive",
            bytes: archive_bytes(config.archive.len()),
            why: format!(
                "{} targets, each a part being sent and the next read ({} MiB each), an answer ({} KiB), a manifest read and one written ({} MiB each) with the entries a pass of manifests takes (ARCHIVE_DESCRIBE_BYTES), TLS state and the recordings retention waits for ({} at most); and the web face's reads of buckets ({} at once, each a manifest and a header's window) with the plans kept for a player ({}) (ARCHIVE_PART_BYTES, ARCHIVE_ANSWER_MAX_BYTES, ARCHIVE_MANIFEST_MAX_BYTES, ARCHIVE_BACKLOG_ROWS, ARCHIVE_READS_RUNNING_MAX, ARCHIVE_PLANS_KEPT)",
                config.archive.len(),
                limits::ARCHIVE_PART_BYTES >> 20,
                limits::ARCHIVE_ANSWER_MAX_BYTES >> 10,
                limits::ARCHIVE_MANIFEST_MAX_BYTES >> 20,
                limits::ARCHIVE_BACKLOG_ROWS,
                limits::ARCHIVE_READS_RUNNING_MAX,
                limits::ARCHIVE_PLANS_KEPT
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
            component: "event holds",
            bytes: limits::EVENT_HOLD_SPANS_MAX as u64 * 128,
            why: format!(
                "{} held spans × 128 B with their map's nodes (EVENT_HOLD_SPANS_MAX)",
                limits::EVENT_HOLD_SPANS_MAX
            ),
        },
        thread_stacks(writers),
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
            bytes: (streams.len() as u64 * limits::LIVE_GOP_MAX_BYTES as u64)
                .min(limits::LIVE_GOP_TOTAL_MAX_BYTES as u64)
                + if live_on { limits::LIVE_GOP_MAX_BYTES as u64 } else { 0 },
            why: format!(
                "{} streams × {:.0} MiB in RAM until written, at most {:.0} MiB in all, and one GOP read back for a new viewer (LIVE_GOP_MAX_BYTES, LIVE_GOP_TOTAL_MAX_BYTES)",
                streams.len(),
                mib(limits::LIVE_GOP_MAX_BYTES as u64),
                mib(limits::LIVE_GOP_TOTAL_MAX_BYTES as u64)
            ),
        },
        Line {
            component: "WHEP offers",
            bytes: if live_on { (limits::HTTP_HANDLERS_MAX * limits::WEBRTC_OFFER_MAX_BYTES) as u64 } else { 0 },
            why: format!(
                "{} handlers × {} KiB offer (HTTP_HANDLERS_MAX, WEBRTC_OFFER_MAX_BYTES)",
                limits::HTTP_HANDLERS_MAX,
                limits::WEBRTC_OFFER_MAX_BYTES >> 10
            ),
        },
        Line {
            component: "live sessions",
            bytes: if live_on {
                live_sessions * limits::WEBRTC_SESSION_BUDGET_BYTES as u64
                    + packetized(crate::webrtc::send_pool_bytes(live_sessions as usize) as u64)
                    + limits::LIVE_TAP_QUEUE_MAX_BYTES as u64
            } else {
                0
            },
            why: format!(
                "{live_sessions} WebRTC sessions for this RAM class × {} KiB, {:.0} MiB of frames waiting for their pacers (as RTP packets) and {:.0} MiB waiting for the engine (WEBRTC_SESSIONS_PER_GIB, WEBRTC_SESSION_BUDGET_BYTES, WEBRTC_SEND_POOL_BYTES_PER_SESSION, LIVE_TAP_QUEUE_MAX_BYTES)",
                limits::WEBRTC_SESSION_BUDGET_BYTES >> 10,
                mib(crate::webrtc::send_pool_bytes(live_sessions as usize) as u64),
                mib(limits::LIVE_TAP_QUEUE_MAX_BYTES as u64)
            ),
        },
        Line {
            component: "event uploads",
            bytes: limits::EVENT_UPLOADS_TOTAL_MAX_BYTES as u64,
            why: format!(
                "at most {} uploads holding {:.0} MiB together, each twice its body (EVENT_UPLOADS_MAX, EVENT_UPLOADS_TOTAL_MAX_BYTES)",
                limits::EVENT_UPLOADS_MAX,
                mib(limits::EVENT_UPLOADS_TOTAL_MAX_BYTES as u64)
            ),
        },
        Line {
            component: "event notices",
            bytes: if live_on {
                let per_session = (limits::WEBRTC_EVENT_QUEUE_MESSAGES * limits::EVENT_NOTICE_MAX_BYTES)
                    .min(limits::WEBRTC_EVENT_QUEUE_BYTES);
                live_sessions * per_session as u64
                    + (limits::WEBRTC_EVENTS_IN_MAX * limits::EVENT_NOTICE_MAX_BYTES) as u64
            } else {
                0
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
    Budget { lines, allowed_bytes: ram * limits::RAM_SHARE_PERCENT as u64 / 100 }
}

/// Every thread's stack, counted whole as if touched: the runtime's (the main thread), the
/// ingest thread's, the writers', the flusher's and both blocking pools' at their most.
fn thread_stacks(writers: u64) -> Line {
    let ours = (writers + 1) * limits::THREAD_STACK_BYTES as u64;
    let blocking_threads = (limits::BLOCKING_THREADS_MAX + limits::INGEST_BLOCKING_THREADS_MAX) as u64;
    let blocking = blocking_threads * limits::BLOCKING_THREAD_STACK_BYTES as u64;
    Line {
        component: "thread stacks",
        bytes: limits::MAIN_THREAD_STACK_BYTES as u64 + limits::INGEST_THREAD_STACK_BYTES as u64 + ours + blocking,
        why: format!(
            "the runtime's {} MiB, the ingest thread's {} KiB, {} writers and the flusher × {} KiB, {} blocking threads × {} KiB (MAIN_THREAD_STACK_BYTES, INGEST_THREAD_STACK_BYTES, RECORD_WRITERS_PER_GIB, THREAD_STACK_BYTES, BLOCKING_THREADS_MAX + INGEST_BLOCKING_THREADS_MAX, BLOCKING_THREAD_STACK_BYTES)",
            limits::MAIN_THREAD_STACK_BYTES >> 20,
            limits::INGEST_THREAD_STACK_BYTES >> 10,
            writers,
            limits::THREAD_STACK_BYTES >> 10,
            blocking_threads,
            limits::BLOCKING_THREAD_STACK_BYTES >> 10
        ),
    }
}

/// The camera a box with none is measured by: an RTSP main and sub stream, both recorded
/// continuously.
pub fn typical_camera() -> Camera {
    let url = |path: &str| format!("rtsp://camera.invalid/{path}").parse().expect("a valid url");
    Camera {
        name: "camera".into(),
        record: RecordMode::Continuous,
        record_sub: RecordMode::Continuous,
        pre_roll_ms: crate::config::PRE_ROLL_DEFAULT_S * 1000,
        post_roll_ms: crate::config::POST_ROLL_DEFAULT_S * 1000,
        keep_event_footage_days: crate::config::KEEP_EVENT_FOOTAGE_DAYS_DEFAULT,
        username: None,
        password: None,
        main: Source::Rtsp { url: url("main"), transport: Transport::Tcp },
        sub: Some(Source::Rtsp { url: url("sub"), transport: Transport::Tcp }),
        frame_max_bytes: limits::FRAME_DEFAULT_MAX_BYTES,
        onvif: None,
    }
}

/// How many more cameras like the last one of `config` (its streams, how they record,
/// its pre-roll), or like [`typical_camera`] when it has none, the board can take: none
/// when the budget does not fit as it is.
pub fn room_for_more(config: &Config) -> usize {
    let typical = typical_camera();
    let like = config.cameras.last().unwrap_or(&typical);
    let with = |more: usize| {
        let mut c = config.clone();
        c.cameras.extend((0..more).map(|i| {
            let mut cam = like.clone();
            cam.name = format!("{}-{i}", like.name);
            cam
        }));
        compute(&c).fits()
    };
    let (mut fits, mut over) = (0, limits::CAMERAS_MAX.saturating_sub(config.cameras.len()) + 1);
    if !with(0) {
        return 0;
    }
    // The budget grows with each camera: the most that fits is found by halving.
    while over - fits > 1 {
        let mid = (fits + over) / 2;
        if with(mid) { fits = mid } else { over = mid }
    }
    fits
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

/// What `bytes` of frames take once str0m has cut them into RTP packets: each packet of
/// ~1,150 payload bytes is its own allocation with a header and a struct beside it.
fn packetized(bytes: u64) -> u64 {
    bytes * 5 / 4
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

    fn config_with(cameras: usize, ram_class_bytes: u64) -> Config {
        config_recording(cameras, ram_class_bytes, RecordMode::Continuous)
    }

    fn config_recording(cameras: usize, ram_class_bytes: u64, record: RecordMode) -> Config {
        let mut c = Config::demo("/data".into(), "127.0.0.1:8080".parse().unwrap());
        c.ram_class_bytes = ram_class_bytes;
        c.pools = crate::config::Pools::for_ram_class(ram_class_bytes);
        c.cameras = (0..cameras)
            .map(|i| Camera {
                name: format!("c{i}"),
                record,
                record_sub: record,
                pre_roll_ms: 5000,
                post_roll_ms: 10_000,
                keep_event_footage_days: 14,
                username: None,
                password: None,
                main: Source::Builtin,
                sub: Some(Source::Builtin),
                frame_max_bytes: limits::FRAME_DEFAULT_MAX_BYTES,
                onvif: None,
            })
            .collect();
        c
    }

    /// The board presets' camera: an RTSP main stream and a sub stream, both recorded;
    /// one camera in four records on events with the default pre-roll.
    fn preset(cameras: usize, ram_class_bytes: u64) -> Config {
        let mut c = config_with(cameras, ram_class_bytes);
        c.preroll = crate::config::Preroll::for_ram_class(ram_class_bytes);
        for (i, cam) in c.cameras.iter_mut().enumerate() {
            let url = format!("rtsp://10.0.0.{}/", i + 2);
            cam.main =
                Source::Rtsp { url: format!("{url}main").parse().unwrap(), transport: crate::config::Transport::Tcp };
            cam.sub = Some(Source::Rtsp {
                url: format!("{url}sub").parse().unwrap(),
                transport: crate::config::Transport::Tcp,
            });
            if i % 4 == 0 {
                (cam.record, cam.record_sub) = (RecordMode::Events, RecordMode::Events);
            }
        }
        c
    }

    #[test]
    fn the_1_gib_class_records_32_cameras_and_the_2_gib_class_64_within_half_their_ram() {
        for (cameras, ram) in [(32, 1u64 << 30), (64, 2 << 30)] {
            let c = preset(cameras, ram);
            assert!(c.webrtc.port != 0, "with live view");
            let b = compute(&c);
            assert!(b.fits(), "{cameras} cameras on {} GiB:\n{b}", ram >> 30);
            assert_eq!(b.allowed_bytes, ram / 2);
            assert!(room_for_more(&c) > 0, "{cameras} cameras on {} GiB leave room", ram >> 30);
        }
    }

    fn config_like(c: &Config, camera: Camera) -> Config {
        let mut c = c.clone();
        c.cameras.push(camera);
        c
    }

    #[test]
    fn room_for_more_is_exactly_what_still_fits() {
        let c = preset(24, 1 << 30);
        let room = room_for_more(&c);
        let like = |n: usize| {
            let mut c = c.clone();
            for i in 0..n {
                let mut cam = c.cameras.last().unwrap().clone();
                cam.name = format!("more{i}");
                c.cameras.push(cam);
            }
            compute(&c)
        };
        assert!(room > 0);
        assert!(like(room).fits());
        assert!(!like(room + 1).fits());
        assert_eq!(room_for_more(&preset(200.min(limits::CAMERAS_MAX), 512 << 20)), 0, "does not fit at all");
        let typical = preset(0, 1 << 30);
        assert_eq!(room_for_more(&typical), room_for_more(&config_like(&typical, typical_camera())) + 1);
    }

    #[test]
    fn shared_pools_count_once_whatever_the_number_of_streams() {
        let line = |c: &Config, name: &str| compute(c).lines.into_iter().find(|l| l.component == name).unwrap().bytes;
        assert_eq!(line(&preset(16, 1 << 30), "live GOPs"), line(&preset(32, 1 << 30), "live GOPs"));
        let newest = (limits::FRAME_DEFAULT_MAX_BYTES + limits::SUB_FRAME_MAX_BYTES) as u64;
        let queues = line(&preset(32, 1 << 30), "ingest queues") - line(&preset(16, 1 << 30), "ingest queues");
        assert_eq!(queues, 16 * newest, "the queued share once, and each stream's newest frame");
        let each = crate::record::stream_buffers_bytes() as u64;
        let grows = line(&preset(32, 1 << 30), "write buffers") - line(&preset(16, 1 << 30), "write buffers");
        assert_eq!(grows, 32 * each, "only the streams' own buffers grow, not the frames in hand");
        let sessions = line(&preset(2, 1 << 30), "camera sessions");
        let each = limits::RTSP_SESSION_OVERHEAD_BYTES as u64;
        assert_eq!(
            sessions,
            2 * (2 * each + (limits::FRAME_DEFAULT_MAX_BYTES + limits::SUB_FRAME_MAX_BYTES) as u64),
            "a frame being received per stream, at its kind's ceiling"
        );
        let stacks = line(&preset(32, 1 << 30), "thread stacks");
        assert_eq!(stacks, line(&preset(1, 1 << 30), "thread stacks"), "writers do not grow with streams");
    }

    #[test]
    fn the_budget_grows_with_streams_and_refuses_what_does_not_fit() {
        let small = compute(&config_with(1, 1 << 30));
        let big = compute(&config_with(16, 1 << 30));
        assert!(big.total_bytes() > small.total_bytes());
        assert!(small.fits());
        assert!(!compute(&config_with(limits::CAMERAS_MAX, 512 << 20)).fits());
        let text = small.to_string();
        for component in ["process", "camera sessions", "ingest queues", "write buffers", "catalog cache", "total"] {
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
        assert_eq!(one, 2 * limits::PREROLL_STREAM_DEFAULT_BYTES as u64 + slots);
        let mut many = config_recording(64, 16 << 30, RecordMode::Events);
        many.preroll.total_max_bytes = limits::PREROLL_TOTAL_MAX_BYTES as u64;
        assert_eq!(line(&many), limits::PREROLL_TOTAL_MAX_BYTES as u64 + 64 * slots);
    }
}
