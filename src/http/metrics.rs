//! `/metrics`: the Prometheus text of every counter the daemon keeps — the listener's
//! refusals, each stream's ingest and recorder, and the catalog writer.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{HttpStats, Services};
use crate::base::BytePool;

/// Writes one metric family: its help, its type and one sample per label set.
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// A label value with Prometheus' escapes (`\`, `"`, newline).
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn load(v: &AtomicU64) -> u64 {
    v.load(Ordering::Relaxed)
}

/// The MQTT connection and its outbox.
fn mqtt(out: &mut String, services: &Services) {
    let s = &services.mqtt.stats;
    let connected = u64::from(s.connected.load(Ordering::Relaxed));
    family(
        out,
        "keeppeek_mqtt_connected",
        "gauge",
        "1 while the box is connected to its MQTT broker.",
        &[(String::new(), connected)],
    );
    let events: Vec<_> = [("sent", &s.events_sent), ("acked", &s.events_acked), ("gone", &s.events_gone)]
        .into_iter()
        .map(|(what, v)| (format!("outcome=\"{what}\""), load(v)))
        .collect();
    family(
        out,
        "keeppeek_mqtt_events_total",
        "counter",
        "Events published to the broker, acknowledged by it, or gone before they could be sent.",
        &events,
    );
    let outbox = services.catalog.outbox_state().unwrap_or_default();
    family(
        out,
        "keeppeek_mqtt_outbox_events",
        "gauge",
        "Events waiting in the catalog for the broker.",
        &[(String::new(), outbox.waiting)],
    );
    family(
        out,
        "keeppeek_mqtt_outbox_dropped_total",
        "counter",
        "Events dropped from the outbox at its ceiling (MQTT_OUTBOX_EVENTS_MAX).",
        &[(String::new(), outbox.dropped)],
    );
}

/// The archive's targets, by target.
fn archive(out: &mut String, services: &Services) {
    let all = services.archive.status();
    let by = |f: &dyn Fn(&crate::archive::TargetStatus) -> u64| -> Vec<(String, u64)> {
        all.iter().map(|t| (format!("target=\"{}\"", label(&t.id)), f(t))).collect()
    };
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    for (name, kind, help, f) in [
        (
            "keeppeek_archive_ok",
            "gauge",
            "1 while the target has no failure waiting.",
            &(|t: &crate::archive::TargetStatus| u64::from(t.error.is_none()))
                as &dyn Fn(&crate::archive::TargetStatus) -> u64,
        ),
        (
            "keeppeek_archive_uploaded_bytes_total",
            "counter",
            "Bytes of recordings the target stored since the box started.",
            &|t| t.uploaded_bytes,
        ),
        (
            "keeppeek_archive_uploaded_objects_total",
            "counter",
            "Recordings the target stored since the box started.",
            &|t| t.uploaded_objects,
        ),
        (
            "keeppeek_archive_uploaded_events_total",
            "counter",
            "Event revisions the target stored since the box started, each with its snapshot.",
            &|t| t.uploaded_events,
        ),
        (
            "keeppeek_archive_failures_total",
            "counter",
            "Steps of the target's work that failed since the box started.",
            &|t| t.failures,
        ),
        ("keeppeek_archive_backlog_bytes", "gauge", "Bytes of closed recordings the target has yet to store.", &|t| {
            t.backlog.bytes
        }),
        ("keeppeek_archive_backlog_objects", "gauge", "Closed recordings the target has yet to store.", &|t| {
            t.backlog.objects
        }),
        (
            "keeppeek_archive_backlog_oldest_seconds",
            "gauge",
            "How old the oldest recording waiting for the target is (0 with none).",
            &|t| t.backlog.oldest_us.map_or(0, |o| (now_s - o.div_euclid(1_000_000)).max(0) as u64),
        ),
        (
            "keeppeek_archive_deleted_unarchived_total",
            "counter",
            "Recordings local retention deleted before the target stored them (its backlog past backlog_max, or the disk's reserve), since the box started; 0 unless retention waits for it.",
            &|t| t.deleted_unarchived.unwrap_or(0),
        ),
    ] {
        family(out, name, kind, help, &by(f));
    }
}

/// The cameras' own events (ONVIF), by camera.
fn camera_events(out: &mut String, services: &Services) {
    let all = services.camera_events.all();
    let by = |f: &dyn Fn(&crate::onvif::subscribe::Follower) -> u64| -> Vec<(String, u64)> {
        all.iter().map(|x| (format!("camera=\"{}\"", label(&x.camera)), f(x))).collect()
    };
    let subscribed = by(&|x| u64::from(matches!(*x.status.borrow(), crate::onvif::subscribe::Status::Subscribed)));
    family(
        out,
        "keeppeek_onvif_events_subscribed",
        "gauge",
        "1 while the camera's own events are subscribed to (ONVIF PullPoint).",
        &subscribed,
    );
    family(
        out,
        "keeppeek_onvif_events_total",
        "counter",
        "The camera's own detections that became events (starts and ends).",
        &by(&|x| load(&x.events)),
    );
    family(
        out,
        "keeppeek_onvif_events_dropped_total",
        "counter",
        "The camera's own detections dropped with the intake's queue full (ONVIF_EVENTS_QUEUED_MAX).",
        &by(&|x| load(&x.dropped)),
    );
}

/// The camera port: whether it serves, its leases and cameras, and what it dropped.
fn camera_port(out: &mut String, services: &Services) {
    let c = services.camera_port.counts();
    let one = |v: u64| vec![(String::new(), v)];
    family(
        out,
        "keeppeek_camport_serving",
        "gauge",
        "1 while the camera port's DHCP server serves.",
        &one(u64::from(c.serving)),
    );
    family(
        out,
        "keeppeek_camport_cameras",
        "gauge",
        "Cameras that took a lease on the camera port, plugged in or unplugged.",
        &[("state=\"plugged_in\"".into(), c.plugged_in), ("state=\"unplugged\"".into(), c.unplugged)],
    );
    family(
        out,
        "keeppeek_camport_sntp_answers_total",
        "counter",
        "SNTP requests answered on the camera port.",
        &one(c.sntp[0]),
    );
    family(
        out,
        "keeppeek_camport_sntp_dropped_total",
        "counter",
        "SNTP datagrams dropped: not a request, or over the client's rate.",
        &[("reason=\"refused\"".into(), c.sntp[1]), ("reason=\"rate\"".into(), c.sntp[2])],
    );
    // The DHCP server's own, while it runs.
    let Some(d) = c.dhcp else { return };
    family(
        out,
        "keeppeek_camport_leases",
        "gauge",
        "Leases the camera port's cameras hold (bound).",
        &one(d.leases.len() as u64),
    );
    family(
        out,
        "keeppeek_camport_dhcp_dropped_total",
        "counter",
        "DHCP messages left unanswered, by why: malformed, over the client's rate, every address taken, offers waiting full, an address found in use.",
        &[
            ("reason=\"malformed\"".into(), d.malformed),
            ("reason=\"rate\"".into(), d.rate_dropped),
            ("reason=\"exhausted\"".into(), d.counts.exhausted),
            ("reason=\"offers_full\"".into(), d.counts.offers_full),
            ("reason=\"conflict\"".into(), d.conflicts),
        ],
    );
}

/// The process's resident set, 0 where /proc is not there.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(0) as u64
}

/// The whole `/metrics` body.
pub fn render(s: &HttpStats, services: &Services) -> String {
    let mut out = String::new();
    let one = |v: u64| vec![(String::new(), v)];
    family(
        &mut out,
        "keeppeek_process_resident_bytes",
        "gauge",
        "Resident memory of the keeppeek process (from /proc/self/statm).",
        &one(resident_bytes()),
    );
    family(
        &mut out,
        "keeppeek_http_connections_open",
        "gauge",
        "Open HTTP connections.",
        &one(s.connections_open.load(Ordering::Relaxed) as u64),
    );
    family(
        &mut out,
        "keeppeek_http_connections_total",
        "counter",
        "HTTP connections accepted.",
        &one(load(&s.connections_total)),
    );
    family(
        &mut out,
        "keeppeek_http_connections_evicted_total",
        "counter",
        "HTTP connections closed to give a newcomer their slot (the table was full).",
        &one(load(&s.connections_evicted)),
    );
    family(
        &mut out,
        "keeppeek_http_camera_port_refused_total",
        "counter",
        "Connections at the box's address on the camera port, closed unanswered (the web face is not served there).",
        &one(load(&s.camera_port_refused)),
    );
    family(&mut out, "keeppeek_http_requests_total", "counter", "HTTP requests parsed.", &one(load(&s.requests)));
    let refused: Vec<_> = [
        ("connection_limit", 503, &s.connections_refused),
        ("busy", 503, &s.busy),
        ("request_timeout", 408, &s.request_timeouts),
        ("write_timeout", 0, &s.write_timeouts),
        ("bad_request", 400, &s.bad_requests),
        ("uri_too_long", 414, &s.uri_too_long),
        ("headers_too_large", 431, &s.headers_too_large),
        ("body_too_large", 413, &s.body_too_large),
    ]
    .into_iter()
    .map(|(reason, status, v)| (format!("reason=\"{reason}\",status=\"{status}\""), load(v)))
    .collect();
    family(
        &mut out,
        "keeppeek_http_refused_total",
        "counter",
        "Requests and connections refused, by reason.",
        &refused,
    );
    let handshakes: Vec<_> = [
        ("done", &s.tls_handshakes),
        ("failed", &s.tls_handshake_failures),
        ("timed_out", &s.tls_handshake_timeouts),
        ("dropped_for_newcomer", &s.tls_handshakes_dropped),
    ]
    .into_iter()
    .map(|(outcome, v)| (format!("outcome=\"{outcome}\""), load(v)))
    .collect();
    family(
        &mut out,
        "keeppeek_tls_handshakes_total",
        "counter",
        "TLS handshakes on the HTTPS port, by outcome.",
        &handshakes,
    );
    family(
        &mut out,
        "keeppeek_http_redirects_total",
        "counter",
        "Plain HTTP requests sent on to HTTPS.",
        &one(load(&s.redirects)),
    );
    mqtt(&mut out, services);
    archive(&mut out, services);
    camera_events(&mut out, services);
    camera_port(&mut out, services);
    streams(&mut out, services);
    let c = &services.config_stats;
    let outcomes: Vec<_> = [
        ("planned", &c.plans),
        ("applied", &c.applies),
        ("refused", &c.refused),
        ("stale_base", &c.conflicts),
        ("probed", &c.probes),
        ("searched", &c.searches),
        ("onvif_read", &c.onvif_reads),
    ]
    .into_iter()
    .map(|(outcome, v)| (format!("outcome=\"{outcome}\""), load(v)))
    .collect();
    family(
        &mut out,
        "keeppeek_config_changes_total",
        "counter",
        "Config change sets from the web face (planned, applied, refused for bad input, on a stale base), camera probes, searches for cameras and cameras read over ONVIF.",
        &outcomes,
    );
    if let Some(w) = &services.webrtc {
        let st = &w.stats;
        family(
            &mut out,
            "keeppeek_webrtc_sessions_open",
            "gauge",
            "Live view sessions open.",
            &one(st.sessions_open.load(Ordering::Relaxed) as u64),
        );
        family(
            &mut out,
            "keeppeek_webrtc_sessions_max",
            "gauge",
            "Live view sessions the box may hold.",
            &one(w.max_sessions as u64),
        );
        let refused: Vec<_> = [
            ("principal", &st.refused_principal),
            ("address", &st.refused_address),
            ("server", &st.refused_server),
            ("bad_offer", &st.bad_offers),
        ]
        .into_iter()
        .map(|(reason, v)| (format!("reason=\"{reason}\""), load(v)))
        .collect();
        family(
            &mut out,
            "keeppeek_webrtc_refused_total",
            "counter",
            "Live view sessions refused, by reason.",
            &refused,
        );
        for (name, help, v) in [
            ("keeppeek_webrtc_sessions_total", "Live view sessions opened.", &st.sessions_total),
            ("keeppeek_webrtc_connect_timeouts_total", "Sessions whose browser never connected.", &st.connect_timeouts),
            ("keeppeek_webrtc_datagrams_total", "Datagrams received on the WebRTC port.", &st.datagrams_in),
            (
                "keeppeek_webrtc_datagrams_bad_total",
                "Datagrams that are not STUN, DTLS, RTP or RTCP.",
                &st.datagrams_bad,
            ),
            ("keeppeek_webrtc_datagrams_unmatched_total", "Datagrams no session claims.", &st.datagrams_unmatched),
            ("keeppeek_webrtc_send_errors_total", "Datagrams the socket would not take.", &st.send_errors),
            ("keeppeek_webrtc_frames_total", "Frames sent to viewers.", &st.frames_sent),
            (
                "keeppeek_webrtc_frames_skipped_total",
                "Frames skipped for a viewer: no room to wait for its pacer.",
                &st.frames_skipped,
            ),
            (
                "keeppeek_webrtc_pacer_ticks_total",
                "Ticks given to the sessions' pacers (about one per packet sent).",
                &st.pacer_ticks,
            ),
            ("keeppeek_webrtc_event_notices_total", "Event notices written to subscribers.", &st.event_notices_sent),
            (
                "keeppeek_webrtc_event_notices_dropped_total",
                "Stored events whose notice found the engine's queue full.",
                &st.event_notices_dropped,
            ),
            ("keeppeek_webrtc_events_cut_off_total", "Subscriptions cut off for not keeping up.", &st.events_cut_off),
            (
                "keeppeek_webrtc_keyframe_bursts_total",
                "Held GOPs sent to start or repair a picture.",
                &st.keyframe_bursts,
            ),
        ] {
            family(&mut out, name, "counter", help, &one(load(v)));
        }
    }
    {
        let p = &services.preroll;
        for (name, help, v) in [
            ("keeppeek_preroll_total_bytes", "Bytes of pre-roll history held across every stream.", p.held_bytes()),
            (
                "keeppeek_preroll_total_high_water_bytes",
                "The most pre-roll history ever held at once across every stream.",
                p.high_water_bytes(),
            ),
            ("keeppeek_preroll_total_max_bytes", "The cap on pre-roll history across every stream.", p.max_bytes()),
        ] {
            family(&mut out, name, "gauge", help, &one(v as u64));
        }
    }
    for (name, help, read) in [
        ("keeppeek_pool_bytes", "Bytes held in a shared pool.", BytePool::held_bytes as fn(&BytePool) -> usize),
        ("keeppeek_pool_peak_bytes", "The most a shared pool ever held at once.", BytePool::peak_bytes),
        ("keeppeek_pool_max_bytes", "A shared pool's ceiling.", BytePool::max_bytes),
    ] {
        let samples: Vec<_> =
            services.pools.iter().map(|(pool, p)| (format!("pool=\"{pool}\""), read(p) as u64)).collect();
        family(&mut out, name, "gauge", help, &samples);
    }
    let refusals: Vec<_> = services.pools.iter().map(|(pool, p)| (format!("pool=\"{pool}\""), p.refusals())).collect();
    family(&mut out, "keeppeek_pool_refusals_total", "counter", "Reservations a shared pool refused.", &refusals);
    {
        let st = &services.events.stats;
        for (name, help, v) in [
            ("keeppeek_events_stored_total", "Event revisions stored.", &st.stored),
            ("keeppeek_events_replayed_total", "Events whose idempotency key was seen before.", &st.replayed),
            ("keeppeek_events_refused_total", "Events refused (bad input, busy, storage).", &st.refused),
            ("keeppeek_event_snapshot_bytes_total", "Bytes of snapshots stored.", &st.snapshot_bytes),
            ("keeppeek_event_triggers_total", "Recording triggers fired by events.", &st.triggers),
        ] {
            family(&mut out, name, "counter", help, &one(load(v)));
        }
    }
    {
        let f = &services.flusher;
        for (name, help, v) in [
            ("keeppeek_catalog_commits_total", "Durable catalog commits.", &f.commits),
            ("keeppeek_catalog_commit_errors_total", "Catalog commits that failed.", &f.commit_errors),
            ("keeppeek_file_syncs_total", "Recording files synced to disk.", &f.file_syncs),
            ("keeppeek_file_sync_errors_total", "File syncs that failed.", &f.sync_errors),
            ("keeppeek_retention_recordings_deleted_total", "Recordings deleted by retention.", &f.recordings_deleted),
            ("keeppeek_retention_bytes_deleted_total", "Bytes deleted by retention.", &f.bytes_deleted),
            (
                "keeppeek_catalog_early_flushes_total",
                "Flushes an event asked for before the interval.",
                &f.early_flushes,
            ),
            (
                "keeppeek_retention_held_deleted_total",
                "Recordings events held that were deleted all the same (a full disk, the total cap).",
                &f.held_deleted,
            ),
        ] {
            family(&mut out, name, "counter", help, &one(load(v)));
        }
        let w = &services.wear;
        let written = [
            ("recording", w.recording_bytes.load(std::sync::atomic::Ordering::Relaxed)),
            ("catalog", services.catalog.writes.bytes()),
            ("event_snapshots", services.events.stats.snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed)),
        ];
        let samples: Vec<(String, u64)> = written.iter().map(|(what, b)| (format!("what=\"{what}\""), *b)).collect();
        family(
            &mut out,
            "keeppeek_written_bytes_total",
            "counter",
            "Bytes written to the disk, by what wrote them.",
            &samples,
        );
        for (name, help, v) in [
            ("keeppeek_catalog_syncs_total", "Syncs the catalog asked of its file.", &services.catalog.writes.syncs),
            (
                "keeppeek_catalog_event_bytes_total",
                "Catalog bytes written storing events.",
                &services.catalog.writes.event_bytes,
            ),
            (
                "keeppeek_catalog_early_flush_bytes_total",
                "Catalog bytes written by early flushes for events.",
                &f.early_flush_bytes,
            ),
        ] {
            family(&mut out, name, "counter", help, &one(load(v)));
        }
        family(
            &mut out,
            "keeppeek_catalog_reopens_total",
            "counter",
            "Times the catalog was opened again after an I/O error.",
            &one(services.catalog.reopens.load(std::sync::atomic::Ordering::Relaxed)),
        );
        for (name, help, v) in [
            ("keeppeek_retention_held_recordings", "Recordings events hold against retention.", &f.held_recordings),
            ("keeppeek_retention_held_bytes", "Bytes of the recordings events hold against retention.", &f.held_bytes),
        ] {
            family(&mut out, name, "gauge", help, &one(load(v)));
        }
    }
    out
}

/// How a per-stream family reads its value from stream `i` (none: the family skips it).
type PerStream<'a> = (&'static str, &'static str, &'a dyn Fn(usize) -> Option<u64>);

/// Per-stream families, each sample labelled `stream="camera/kind"`.
fn streams(out: &mut String, services: &Services) {
    let streams = services.cameras.streams();
    let snapshots: Vec<_> = streams.iter().map(|s| s.state.snapshot()).collect();
    let name = |i: usize| format!("stream=\"{}/{}\"", label(&streams[i].key.camera), streams[i].key.kind.name());
    let per = |f: &dyn Fn(usize) -> Option<u64>| -> Vec<(String, u64)> {
        (0..streams.len()).filter_map(|i| Some((name(i), f(i)?))).collect()
    };
    let history = |i: usize| streams[i].recording.as_ref().and_then(|r| r.history.as_ref());
    let admission = |i: usize| streams[i].recording.as_ref().map(|r| &r.admission);
    let gauges: [PerStream; 8] = [
        ("keeppeek_stream_connected", "1 while the camera session is up.", &|i| {
            Some(u64::from(snapshots[i].connected))
        }),
        ("keeppeek_stream_bitrate_bps", "Measured bitrate of the stream.", &|i| Some(snapshots[i].bitrate_bps)),
        ("keeppeek_recorder_queue_bytes", "Frame bytes waiting for the recorder.", &|i| {
            streams[i].recording.as_ref().map(|r| r.queue.bytes_in_flight.load(Ordering::Relaxed) as u64)
        }),
        ("keeppeek_preroll_bytes", "Bytes of pre-roll history held.", &|i| {
            history(i).map(|h| h.held_bytes.load(Ordering::Relaxed) as u64)
        }),
        ("keeppeek_preroll_high_water_bytes", "The most pre-roll history ever held at once.", &|i| {
            history(i).map(|h| h.high_water_bytes.load(Ordering::Relaxed) as u64)
        }),
        ("keeppeek_preroll_frames", "Frames of pre-roll history held.", &|i| {
            history(i).map(|h| h.held_frames.load(Ordering::Relaxed) as u64)
        }),
        ("keeppeek_live_gop_bytes", "Bytes of the GOP held for new viewers, in RAM or on disk.", &|i| {
            Some(streams[i].live.gop_bytes().0 as u64)
        }),
        ("keeppeek_live_gop_ram_bytes", "Bytes of the held GOP in RAM (not yet written by the recorder).", &|i| {
            Some(streams[i].live.gop_bytes().1 as u64)
        }),
    ];
    for (metric, help, f) in gauges {
        family(out, metric, "gauge", help, &per(f));
    }
    let rec = |i: usize, f: fn(&crate::record::stream::RecorderStats) -> &AtomicU64| {
        streams[i].recording.as_ref().map(|r| load(f(&r.stats)))
    };
    let counters: [PerStream; 22] = [
        ("keeppeek_stream_sessions_total", "Camera sessions started.", &|i| Some(snapshots[i].sessions_started)),
        ("keeppeek_stream_frames_total", "Video frames received.", &|i| Some(snapshots[i].frames_received)),
        ("keeppeek_stream_frames_oversized_total", "Frames over the frame ceiling, dropped.", &|i| {
            Some(snapshots[i].frames_oversized)
        }),
        ("keeppeek_stream_audio_frames_total", "Audio frames received.", &|i| Some(snapshots[i].audio_frames_received)),
        (
            "keeppeek_stream_audio_dropped_total",
            "Audio frames, packets or streams that could not be used, dropped (the video goes on).",
            &|i| Some(snapshots[i].audio_dropped),
        ),
        ("keeppeek_recorder_queue_dropped_total", "Frames dropped at a full recorder queue.", &|i| {
            streams[i].recording.as_ref().map(|r| load(&r.queue.frames_dropped))
        }),
        ("keeppeek_recorder_fragments_total", "Fragments written.", &|i| rec(i, |r| &r.fragments_written)),
        ("keeppeek_recorder_bytes_total", "Bytes of fragments written.", &|i| rec(i, |r| &r.bytes_written)),
        ("keeppeek_recorder_fragments_dropped_total", "Fragments that could not be written.", &|i| {
            rec(i, |r| &r.fragments_dropped)
        }),
        (
            "keeppeek_recorder_fragments_cut_short_total",
            "Fragments ended before their GOP did: at the room kept for their header or a fragment ceiling.",
            &|i| rec(i, |r| &r.fragments_cut_short),
        ),
        (
            "keeppeek_recorder_early_flushes_total",
            "Times an event's moment had the stream's footage made durable before the flush interval.",
            &|i| rec(i, |r| &r.early_flushes),
        ),
        ("keeppeek_recorder_fragments_cut_for_events_total", "Fragments ended early for an event's footage.", &|i| {
            rec(i, |r| &r.fragments_cut_for_events)
        }),
        ("keeppeek_recorder_frame_writes_total", "Writes of frames tried (a writer's turn's in one).", &|i| {
            rec(i, |r| &r.frame_writes)
        }),
        ("keeppeek_recorder_disk_full_total", "Writes that met a full disk.", &|i| rec(i, |r| &r.disk_full)),
        ("keeppeek_recorder_write_errors_total", "Writes that failed otherwise.", &|i| rec(i, |r| &r.write_errors)),
        ("keeppeek_preroll_gops_capped_total", "Pre-roll GOPs let go early to stay under a cap.", &|i| {
            history(i).map(|h| load(&h.gops_capped))
        }),
        ("keeppeek_preroll_frames_refused_total", "Frames the pre-roll could not hold at all.", &|i| {
            history(i).map(|h| load(&h.frames_refused))
        }),
        ("keeppeek_event_recordings_total", "Event recordings started.", &|i| {
            admission(i).map(|a| load(&a.recordings_started))
        }),
        ("keeppeek_event_recordings_finished_total", "Event recordings ended after their post-roll.", &|i| {
            admission(i).map(|a| load(&a.recordings_finished))
        }),
        ("keeppeek_event_preroll_frames_total", "Pre-roll frames written into event recordings.", &|i| {
            admission(i).map(|a| load(&a.preroll_frames))
        }),
        ("keeppeek_live_tap_drops_total", "Frames a live tap had no room for.", &|i| {
            Some(load(&streams[i].live.stats.tap_drops))
        }),
        ("keeppeek_live_gops_dropped_total", "GOPs not held for new viewers: over a cap.", &|i| {
            Some(load(&streams[i].live.stats.gops_dropped))
        }),
    ];
    for (metric, help, f) in counters {
        family(out, metric, "counter", help, &per(f));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
