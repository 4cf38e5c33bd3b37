//! Every ceiling KeepPeek enforces, with its unit in its name and the reason beside it.
//!
//! Nothing in the firmware queues, buffers or allocates without one of these bounds. Work
//! that would pass a ceiling fails fast with an error that names the constant. The static
//! memory budget (`keeppeek budget`) is computed from these values and the config, so the
//! daemon knows before it starts whether it fits the board.
//!
//! `docs/limits.md` is checked against this file by a unit test: change both together.

// ---- media ----

/// One encoded frame of a main stream, on any camera: a 4K I-frame at high quality stays
/// under 2 MiB; anything larger is a broken or hostile camera, dropped and counted rather
/// than buffered. A camera's config may raise its own ceiling up to this. From RTSP, the
/// ceiling bounds both the frame and the RTP payloads that carry it while it is put
/// together (a few bytes of packet headers a fragment more than the frame).
pub const FRAME_MAX_BYTES: usize = 4 << 20;

/// One encoded frame of a main stream unless its camera's config says otherwise: a 1080p
/// I-frame at high quality is under 512 KiB. Each stream may be receiving one frame and
/// holding the one before, so the budget counts two of its ceiling per stream.
pub const FRAME_DEFAULT_MAX_BYTES: usize = 1 << 20;

/// One encoded frame of a sub stream (at most 720p, which is what sub streams are for: a
/// 720p I-frame at a sub stream's bitrate is under 100 KiB). A larger one is dropped and
/// counted.
pub const SUB_FRAME_MAX_BYTES: usize = 256 << 10;

/// One audio frame from a camera: an AAC frame is at most 6,144 bits a channel (ISO
/// 14496-3), 6 KiB for eight channels; a G.711 or Opus frame is one RTP packet (under 1.5
/// KiB on a LAN). A larger one is dropped and counted; while one is put together from RTP
/// packets it holds at most this (within each camera session's `RTSP_SESSION_OVERHEAD_BYTES`).
pub const AUDIO_FRAME_MAX_BYTES: usize = 16 << 10;

/// How long a video frame of a session with sound waits on the ingest's side of the recorder
/// queue for the session's audio to reach it (its bytes charged to the queue meanwhile).
/// Cameras send sound a packet or two (20-60 ms) after the picture of the same moment; past
/// this the frame goes on, and audio that comes later still lands at its time in the track.
pub const AUDIO_SYNC_WAIT_MS: u64 = 250;

/// Video frames held at once for audio: 250 ms of a 60 fps stream. Past it the oldest goes on.
pub const AUDIO_SYNC_HOLD_FRAMES: usize = 16;

/// How long an audio frame waits on the ingest's side of the recorder queue for the
/// session's video to reach it (its bytes charged to the queue meanwhile). Cameras whose
/// video encoder is slower than their sound's send the sound of a moment before its
/// picture, by up to half a second or more, and a loaded box can add as much again (a
/// second was not enough for the test camera's 600 ms under the test suite's load); past
/// this the frame goes on, and lands at its time in the track all the same, but a segment
/// that ends meanwhile may end with it.
pub const AUDIO_AHEAD_WAIT_MS: u64 = 2_000;

/// Audio frames held at once for video: two seconds of AAC at 48 kHz (94 frames) or of
/// 20 ms packets (100), with room. Past it the oldest goes on.
pub const AUDIO_AHEAD_HOLD_FRAMES: usize = 128;

/// How far a live stream's sound may be ahead of its newest picture when it is sent to
/// viewers; sound further ahead waits in the live engine (once per stream, at most
/// AUDIO_AHEAD_WAIT_MS and AUDIO_AHEAD_HOLD_FRAMES) for pictures to near it. A browser puts
/// a smaller gap in step at once; a larger one it closes at about 80 ms a second.
pub const LIVE_AUDIO_LEAD_MAX_MS: u64 = 100;

/// The longest G.711 sample the recorder writes: a camera's packets (20 ms each, most
/// often) that follow on from each other are gathered into one, on the ingest's side of the
/// recorder queue, until they hold this much sound. Each packet that goes through the queue,
/// the pre-roll and the fragment header costs about what a video frame does, so 50 a second
/// added a quarter to what a 2 Mbit/s camera cost; gathered, the recorder sees 10 a second.
/// The gathered bytes are charged to the queue. Live viewers get each packet as it comes.
pub const RECORD_AUDIO_GATHER_MS: u64 = 100;

/// Codec parameters (an `avc1`/`hvc1` sample entry with SPS/PPS/VPS). Real ones are under
/// 200 bytes; this bounds what a camera's SDP can make us store per segment.
pub const SAMPLE_ENTRY_MAX_BYTES: usize = 4 << 10;

/// Frames waiting between ingest and the recorder, per stream, video and audio together. At
/// 30 fps with G.711 in 10 ms packets (100 audio frames a second) this is two seconds of slack
/// for a slow disk; past it frames are dropped until the next keyframe. A slot is a few words
/// (the frame's bytes are counted by `INGEST_QUEUE_BYTES_PER_STREAM`).
pub const INGEST_QUEUE_FRAMES: usize = 256;

/// Bytes of frames waiting between ingest and the recorder, per stream (the byte side of the
/// same queue: two seconds of a 32 Mbit/s stream and its sound fit).
pub const INGEST_QUEUE_BYTES_PER_STREAM: usize = 8 << 20;

/// Bytes of frames waiting between ingest and the recorder across every stream, per GiB of
/// the board's RAM class: on a 1 GiB board, two seconds of 32 cameras at 4.5 Mbit/s each.
/// The pool holds this and each recorded stream's newest frame at its ceiling (kept until
/// the next one gives its duration). Past it a stream drops until its next keyframe, as at
/// its own ceiling.
pub const INGEST_QUEUE_BYTES_PER_GIB: usize = 32 << 20;

/// Threads that write recordings, per GiB of the board's RAM class, at least two: every
/// recorded stream is written by whichever is free, so one slow write holds one of them.
pub const RECORD_WRITERS_PER_GIB: usize = 2;

/// Writer threads on any board.
pub const RECORD_WRITERS_MAX: usize = 4;

/// Length of a file camera's clip: its times are untrusted, and pacing a loop needs them
/// small enough to add to a clock.
pub const FILE_SOURCE_MAX_DURATION_90K: i64 = 24 * 3600 * 90_000;

/// A writer thread with nothing to write looks at the queues again this often instead of
/// waking for every frame: a thread wake per frame costs more CPU than recording the frame.
/// A queue holds 2 s at 30 fps, eight times this.
pub const RECORDER_POLL_INTERVAL_MS: u64 = 250;

/// The other idle writer threads look at the queues this often: a stream's frames wait at
/// most this long for a writer while the one on watch is held in a slow write. A queue
/// holds 2 s at 30 fps, twice this.
pub const RECORDER_BACKUP_POLL_INTERVAL_MS: u64 = 1000;

/// While no one watches live, the ingest thread reads the cameras once per tick of this,
/// not as each packet comes: one wake serves every session, and a thread's wake costs more
/// CPU than reading a frame. What a camera sends meanwhile waits in the kernel's socket
/// buffer (2 Mbit/s: 62 KB a tick); a frame's receipt time may be one tick late.
pub const INGEST_READ_TICK_MS: u64 = 250;

/// Bytes a file camera (demo and tests) may load into memory. The built-in clip is ~0.5 MB.
pub const FILE_SOURCE_MAX_BYTES: u64 = 64 << 20;

// ---- fragments and segments ----

/// A fragment is one GOP, cut early at this media duration for cameras with long GOPs so a
/// power cut loses little and playback can seek.
pub const FRAGMENT_MAX_DURATION_90K: i64 = 4 * 90_000;

/// Samples in one fragment: bounds the `moof` (one 12-byte `trun` entry each). 4 s at 60 fps
/// is 240.
pub const FRAGMENT_MAX_SAMPLES: usize = 512;

/// Audio frames in one fragment. AAC at 48 kHz makes 47 a second; a fragment is at most
/// 4 s of video, and audio beyond this is dropped and counted.
pub const FRAGMENT_MAX_AUDIO_SAMPLES: usize = 256;

/// Audio bytes one fragment holds until it is whole (its audio is written after its video):
/// 8 s of 128 kbit/s AAC. A fragment ends once it holds half of this, so the audio that
/// comes before its next video frame still fits; audio past it is dropped and counted.
pub const FRAGMENT_AUDIO_MAX_BYTES: usize = 128 << 10;

/// Media bytes in one fragment: 4 s of a 32 Mbit/s stream. Its frames are written as they
/// come, so this bounds a fragment's shape (its boxes' 32-bit sizes), not what recording
/// holds in RAM.
pub const FRAGMENT_MAX_BYTES: usize = 16 << 20;

/// Frames a recorder writes in one call at most: a writer's turn takes what the stream's
/// queue holds and writes it together (one `writev` of up to this many frames, well under
/// the kernel's 1,024 slices).
pub const RECORD_WRITE_FRAMES_MAX: usize = 64;

/// Bytes of frames a writer holds for one call at most (a frame larger than this is
/// written alone): with [`RECORD_WRITE_FRAMES_MAX`], what recording holds between a
/// stream's queue and its file, per writer. A turn at 4 Mbit/s brings about 130 KiB; a
/// pre-roll handed over at an event's start brings seconds at once.
pub const RECORD_WRITE_BATCH_MAX_BYTES: usize = 1 << 20;

/// The encoded `prft`, `moof` (video and audio `traf`s) and `mdat` header of one fragment,
/// written into a fixed buffer.
pub const MOOF_MAX_BYTES: usize = 128 + (FRAGMENT_MAX_SAMPLES + FRAGMENT_MAX_AUDIO_SAMPLES) * 12 + 256;

/// The init segment (`ftyp` + `moov` with a video and an audio track), written into a fixed
/// buffer.
pub const INIT_SEGMENT_MAX_BYTES: usize = 2 * SAMPLE_ENTRY_MAX_BYTES + 2048;

/// A segment file closes at the first keyframe past this media duration, so retention can
/// free space in small steps and a file stays easy to copy.
pub const SEGMENT_MAX_DURATION_90K: i64 = 5 * 60 * 90_000;

/// A segment file closes at the first keyframe past this size.
pub const SEGMENT_MAX_BYTES: u64 = 256 << 20;

/// A clock step bigger than this between the wall clock and the monotonic clock ends a run.
/// NTP slews small errors; anything this large is a step (first sync, manual change).
pub const CLOCK_STEP_MAX_US: i64 = 2_000_000;

/// How fast a run's wall time may be pulled toward the local clock, in parts per million of
/// elapsed media time. Camera clocks drift by tens of ppm; 1000 ppm corrects that without
/// visible jumps.
pub const CLOCK_SLEW_MAX_PPM: i64 = 1_000;

// ---- catalog ----

/// redb's page cache. Its default is 1 GiB, the whole RAM of a small board; the catalog's hot
/// set (open recordings, recent fragments) is a few MiB.
pub const CATALOG_CACHE_BYTES: usize = 16 << 20;

/// Commands waiting for the catalog writer thread, across all streams.
pub const CATALOG_QUEUE_COMMANDS: usize = 1024;

/// Fragment rows waiting for the next durable commit, across all streams. At 32 streams with
/// one fragment per second and a 60 s flush interval this is 1920; past it we commit early.
pub const CATALOG_PENDING_FRAGMENTS_MAX: usize = 4096;

/// Longest accepted flush interval: the most video a power cut may take.
pub const FLUSH_INTERVAL_MAX_S: u64 = 300;

/// Smallest retention cap accepted: segments are an eighth of the cap, and smaller ones
/// would hold only a few fragments each.
pub const RETENTION_MIN_BYTES: u64 = 1 << 20;

/// The largest share of a stream's retention cap that events may hold against retention
/// (`retention.held_max_percent`): the rest always takes new video.
pub const EVENT_HELD_MAX_PERCENT: u8 = 90;

/// The longest a camera may keep its events' footage (`keep_event_footage_days`).
pub const EVENT_FOOTAGE_KEEP_MAX_DAYS: u32 = 3650;

/// Spans of held footage kept in memory, every camera together (overlapping holds of a
/// camera are one span); past this the oldest span lapses. 48 bytes each.
pub const EVENT_HOLD_SPANS_MAX: usize = 20_000;

/// How long reopening the catalog after an I/O error waits for operations under way to let
/// go of it; past this it tries again at the next flush.
pub const CATALOG_REOPEN_WAIT_MS: u64 = 2_000;

/// Spans of lost footage the catalog keeps with their reason (`losses`); past this the
/// first goes. About 40 bytes each on disk.
pub const LOSS_SPANS_MAX: u64 = 100_000;

/// Bytes kept free on the data filesystem: retention deletes before the disk is full so a
/// write rarely meets ENOSPC at all.
pub const DISK_RESERVE_BYTES: u64 = 64 << 20;

/// Bytes of a catalog file path (relative to the data directory).
pub const RECORDING_PATH_MAX_BYTES: usize = 255;

// ---- cameras and config ----

/// Cameras in one config on any board: a 2 GiB board records 64 main and sub pairs (a 1 GiB
/// board 32); the memory budget says how many a given board can take.
pub const CAMERAS_MAX: usize = 128;

/// Bytes of a config file.
pub const CONFIG_FILE_MAX_BYTES: u64 = 256 << 10;

/// Bytes of a camera name. Names become directory names, so they are short ASCII.
pub const CAMERA_NAME_MAX_BYTES: usize = 32;

/// Bytes of a camera URL.
pub const CAMERA_URL_MAX_BYTES: usize = 1024;

/// Bytes of a camera user name or password.
pub const CAMERA_CREDENTIAL_MAX_BYTES: usize = 128;

/// Revisions of the config kept in the catalog (who, when, what, the whole file): a year of
/// weekly changes; older ones go first. At most this many files of
/// [`CONFIG_FILE_MAX_BYTES`] each.
pub const CONFIG_REVISIONS_MAX: usize = 50;

/// Bytes of one change set sent to `/api/config/plan` or `/apply`: a bulk change of 64
/// cameras is under 4 KiB, adding a camera under 2 KiB.
pub const CONFIG_CHANGE_SET_MAX_BYTES: u64 = 64 << 10;

/// Changes in one change set.
pub const CONFIG_CHANGES_MAX: usize = 256;

/// Cameras one bulk change sets a policy on.
pub const CONFIG_BULK_CAMERAS_MAX: usize = 64;

/// Camera probes (`/api/cameras/probe`) running at once: each holds an RTSP session for up
/// to [`PROBE_TIMEOUT_MS`]; more are refused with 503 until one ends.
pub const PROBES_RUNNING_MAX: usize = 2;

/// The longest a camera probe waits, from connecting to the frames after its first
/// keyframe (a camera with a 4 s GOP still shows one).
pub const PROBE_TIMEOUT_MS: u64 = 8_000;

/// Bytes of a setting's key path (`retention.total_max_bytes`).
pub const CONFIG_KEY_MAX_BYTES: usize = 128;

/// Cameras on one page of `/api/config`: a camera at every field's ceiling (two URLs of
/// [`CAMERA_URL_MAX_BYTES`], a user name of [`CAMERA_CREDENTIAL_MAX_BYTES`] escaped) is
/// under 3.5 KiB as JSON, so a page stays under 64 KiB.
pub const CONFIG_PAGE_CAMERAS_MAX: usize = 16;

/// How long a search for cameras (WS-Discovery) listens for answers after its probe: ONVIF
/// devices answer within a random delay of up to 500 ms, Wi-Fi ones later.
pub const DISCOVERY_WAIT_MS: u64 = 3_000;

/// Devices one search lists; answers from more are counted and left out.
pub const DISCOVERY_DEVICES_MAX: usize = 64;

/// Interfaces (IPv4 addresses) one search probes on.
pub const DISCOVERY_INTERFACES_MAX: usize = 8;

/// Bytes of one WS-Discovery answer read (a camera's ProbeMatches is 1–3 KiB); a longer
/// datagram is dropped.
pub const DISCOVERY_DATAGRAM_MAX_BYTES: usize = 16 << 10;

/// Searches for cameras running at once; another is refused with 503 until it ends.
pub const DISCOVERIES_RUNNING_MAX: usize = 1;

/// Bytes of one answer from a camera's ONVIF service read: a camera with 16 profiles
/// answers GetProfiles in about 60 KiB.
pub const ONVIF_RESPONSE_MAX_BYTES: usize = 256 << 10;

/// XML nodes of one ONVIF document parsed, whatever its bytes.
pub const ONVIF_XML_NODES_MAX: u32 = 20_000;

/// The longest one ONVIF request waits, from connecting to the last byte of its answer.
pub const ONVIF_REQUEST_TIMEOUT_MS: u64 = 4_000;

/// The longest reading a camera's streams over ONVIF takes in all (clock, device,
/// capabilities, profiles and two stream addresses).
pub const ONVIF_QUERY_TIMEOUT_MS: u64 = 10_000;

/// Media profiles of a camera read; the rest are left out (cameras have 2–4).
pub const ONVIF_PROFILES_MAX: usize = 16;

/// Messages read from one PullMessages answer (and asked for).
pub const ONVIF_EVENTS_PER_PULL_MAX: usize = 32;

/// How long a pull may wait at the camera for an event (under [`ONVIF_REQUEST_TIMEOUT_MS`]).
pub const ONVIF_PULL_WAIT_S: u64 = 2;

/// The least time between two pulls: a camera that answers at once with nothing is not asked
/// again sooner.
pub const ONVIF_PULL_MIN_INTERVAL_MS: u64 = 1_000;

/// How long a subscription is asked for; it is renewed at half of it.
pub const ONVIF_SUBSCRIPTION_S: u64 = 60;

/// The first wait before subscribing again after a failure; it doubles up to
/// [`ONVIF_RESUBSCRIBE_MAX_MS`].
pub const ONVIF_RESUBSCRIBE_MIN_MS: u64 = 2_000;

/// The longest wait before subscribing again.
pub const ONVIF_RESUBSCRIBE_MAX_MS: u64 = 60_000;

/// A camera's own events waiting for the intake; past it one is dropped and logged.
pub const ONVIF_EVENTS_QUEUED_MAX: usize = 64;

/// The soonest a stream's footage is flushed early again after an event asked for it (a
/// later ask waits for this, it is not dropped): an event storm cannot become a write
/// storm on flash. Each early flush is one fragment header and one catalog commit.
pub const EVENT_FLUSH_MIN_INTERVAL_MS: u64 = 2_000;

/// How long an event's early flush waits, after the first of its camera's streams has cut
/// its fragment at the moment, for the others: a stream cuts before the frame after the
/// first past the moment (within 400 ms at 5 fps), and the writers may take two streams'
/// frames a poll apart (`RECORDER_POLL_INTERVAL_MS`). One commit an event, not one a
/// stream; added to an event's time to durable at most, when a stream is that late.
pub const EVENT_FLUSH_GATHER_MS: u64 = 700;

/// The longest an interval flush waits for an event's post-roll that ended before it but is
/// not yet written (the fragment holding its end is written at its GOP's end, at most a
/// fragment's duration later, then queued), instead of a second flush right after: the most
/// the flush interval stretches, and so what a power cut may lose beyond it.
pub const POST_ROLL_FLUSH_WAIT_MS: u64 = (FRAGMENT_MAX_DURATION_90K / 90) as u64 + 1_000;

// ---- ingest timing ----

/// Bound on TCP connect plus DESCRIBE: a camera that accepts and never answers is given up.
pub const RTSP_DESCRIBE_TIMEOUT_MS: u64 = 10_000;

/// Bound on each SETUP and on PLAY.
pub const RTSP_SETUP_PLAY_TIMEOUT_MS: u64 = 10_000;

/// A connected session that delivers no frame for this long is restarted.
pub const INGEST_NO_FRAMES_TIMEOUT_MS: u64 = 10_000;

/// The first reconnect waits this long (then doubles, with jitter).
pub const RECONNECT_BACKOFF_MIN_MS: u64 = 500;

/// Reconnect attempts never wait longer than this.
pub const RECONNECT_BACKOFF_MAX_MS: u64 = 30_000;

/// A session that delivered frames for this long resets the backoff.
pub const RECONNECT_HEALTHY_AFTER_MS: u64 = 30_000;

/// Old RTSP sessions are given this long to send TEARDOWN before a reconnect goes ahead.
pub const RTSP_TEARDOWN_WAIT_MS: u64 = 5_000;

/// Shutdown closes fragments and commits within this bound, then exits regardless.
pub const SHUTDOWN_TIMEOUT_MS: u64 = 5_000;

// ---- http ----

/// Open HTTP connections. The next one is answered 503 and closed at once, never queued in
/// the kernel's backlog.
pub const HTTP_CONNECTIONS_MAX: usize = 256;

/// How long a newcomer waits for the connection that gives its slot up to close (it is told
/// at once and closes at its next poll).
pub const HTTP_EVICT_WAIT_MS: u64 = 100;

/// A reply the client has taken no byte of for this long counts as waiting for its client:
/// a full table may give its slot to a newcomer (a reader that stalls on purpose must not
/// keep everyone out; one that moves is never taken).
pub const HTTP_EVICT_WRITE_STALLED_MS: u64 = 5_000;

/// A request (head and body) must arrive within this long of the server starting to read
/// it; a slow-loris client gets 408 and is dropped.
pub const HTTP_READ_TIMEOUT_MS: u64 = 30_000;

/// Past [`HTTP_READ_TIMEOUT_MS`], a request that keeps arriving at this rate or faster is read
/// on: each byte read moves its deadline out (never more than the timeout ahead), so an
/// update bundle or a snapshot uploads over a slow link, and a trickle still gets its 408.
pub const HTTP_READ_MIN_RATE_BYTES_PER_S: u64 = 16 << 10;

/// A response write that makes no progress for this long drops the connection.
pub const HTTP_WRITE_TIMEOUT_MS: u64 = 30_000;

/// The request line, and each header line: 414 or 431 beyond it.
pub const HTTP_LINE_MAX_BYTES: usize = 8 << 10;

/// All header lines of a request together (with the request line): 431 beyond it.
pub const HTTP_HEAD_MAX_BYTES: usize = 64 << 10;

/// Header fields in one request: 431 beyond it.
pub const HTTP_HEADERS_MAX: usize = 100;

/// Parsed requests waiting for a free handler: the next gets 503.
pub const HTTP_REQUESTS_WAITING_MAX: usize = 8;

/// Request handlers running at once.
pub const HTTP_HANDLERS_MAX: usize = 64;

/// Longest time range one API query may cover.
pub const API_RANGE_MAX_US: i64 = 400 * 24 * 3600 * 1_000_000;

/// The latest time a request may name (2200-01-01 UTC); the earliest is 1970. Anything
/// outside is refused before any arithmetic on it.
pub const API_TIME_MAX_US: i64 = 7_258_118_400 * 1_000_000;

/// Longest list one API reply holds (runs, tokens, …); a longer one says `truncated`.
pub const API_LIST_MAX: usize = 10_000;

/// Streams on one page of the recording health list (`/api/health`): each row reads a
/// stream's hourly summaries, so a page's cost is bounded whatever the count of cameras.
pub const HEALTH_PAGE_ROWS_MAX: usize = 100;

/// Fragments in one export. Its plan holds one small entry (~64 B) per fragment, so this
/// bounds an export's memory at about 2 MiB: some 36 hours of 4-second fragments. A longer
/// range is refused with a clear error (export it in parts).
pub const EXPORT_FRAGMENTS_MAX: usize = 32_768;

/// Exports (MP4 downloads and HLS segments) streaming at once: the next gets 503. With
/// [`EXPORT_FRAGMENTS_MAX`] and [`EXPORT_CHUNK_BYTES`] this bounds exports at 9 MiB.
pub const EXPORTS_RUNNING_MAX: usize = 4;

/// One read of an export's body, off the async runtime: the buffer each running export
/// holds. Larger reads cost fewer thread hand-offs per megabyte.
pub const EXPORT_CHUNK_BYTES: usize = 256 << 10;

/// A request body where no route allows more (small JSON such as a delete): 413 beyond it.
pub const HTTP_SMALL_BODY_MAX_BYTES: u64 = 16 << 10;

// ---- HTTPS ----

/// TLS handshakes in progress on the HTTPS port. A handshake holds no connection slot (only
/// a finished one takes a place in [`HTTP_CONNECTIONS_MAX`]); past this the oldest handshake
/// in progress is dropped for the newcomer, so clients that open TLS and stop keep no one out.
pub const TLS_HANDSHAKES_MAX: usize = 64;

/// A handshake not finished within this long is dropped (a LAN client needs a few ms).
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

/// Plaintext a TLS connection buffers for sending before its writer waits (rustls's own
/// default is 64 KiB): one record's worth, which keeps each connection's memory small.
pub const TLS_SEND_BUFFER_MAX_BYTES: usize = 16 << 10;

/// Memory one TLS connection or handshake holds beyond its HTTP side: a received record (16
/// KiB and its overhead), [`TLS_SEND_BUFFER_MAX_BYTES`] and the session's state. Measured by
/// the handshake-flood test, which holds [`TLS_HANDSHAKES_MAX`] of them.
pub const TLS_CONNECTION_BYTES: usize = 48 << 10;

/// Lifetime of the box's own certificate, in days: the most browsers accept for a server
/// certificate (Apple's rule), counted from its `notBefore`.
pub const TLS_CERT_VALIDITY_DAYS: u64 = 825;

/// The box's own certificate is valid from this long before it was made: a board whose
/// clock is a little late (no battery, before its time sync) still accepts it.
pub const TLS_CERT_BACKDATE_S: u64 = 24 * 3600;

/// The box's own certificate is made again this long before it expires.
pub const TLS_CERT_RENEW_BEFORE_S: u64 = 30 * 24 * 3600;

/// How often the box looks at its addresses (and its clock) to make its own certificate
/// again when they changed: a new DHCP lease is served under its new name within this.
pub const TLS_ADDRESS_POLL_MS: u64 = 10_000;

/// Names the box no longer has that its own certificate, made again, keeps naming: an address that comes and goes does not cost a new certificate, and a
/// browser's exception, each time.
pub const TLS_CERT_PAST_NAMES_MAX: usize = 8;

/// Certificates in an uploaded chain (the server's and its issuers'): refused beyond it.
pub const TLS_CHAIN_CERTS_MAX: usize = 8;

/// An uploaded certificate chain or key file, each: refused beyond it.
pub const TLS_UPLOAD_MAX_BYTES: usize = 64 << 10;

// ---- single sign-on (OpenID Connect) ----

/// Providers people may sign in with.
pub const OIDC_PROVIDERS_MAX: usize = 4;

/// Providers whose discovery document, keys and TLS trust are held: the active ones and as
/// many candidates while a change replaces them (the oldest unused goes first).
pub const OIDC_PROVIDER_CACHES_MAX: usize = 2 * OIDC_PROVIDERS_MAX;

/// One request to a provider (discovery, keys, the code's exchange), connect to last byte.
pub const OIDC_FETCH_TIMEOUT_MS: u64 = 5_000;

/// How long the one connection kept for a provider may idle and still be used: past it a
/// new one is made (and a sign-in's start fetches the discovery document again, which finds
/// a provider that went down).
pub const OIDC_CONNECTION_IDLE_S: u64 = 30;

/// A whole sign-in's work at the box once the provider sends the browser back (the code
/// exchanged, perhaps the discovery document and keys fetched again, the token verified):
/// past it the sign-in is refused and its handler free.
pub const OIDC_CALLBACK_TIMEOUT_MS: u64 = 10_000;

/// A discovery document, a key set or a token answer from a provider.
pub const OIDC_DOCUMENT_MAX_BYTES: usize = 64 << 10;

/// Keys in a provider's key set (providers list two or three while they rotate).
pub const OIDC_JWKS_KEYS_MAX: usize = 32;

/// How long a discovery document and a key set are used before they are fetched again.
pub const OIDC_DOCUMENT_TTL_S: u64 = 3_600;

/// A token naming a key the box does not hold makes it fetch the keys again (the provider
/// rotated them), at most once in this long per provider: forged `kid`s cannot make it hammer
/// the provider.
pub const OIDC_JWKS_REFETCH_MIN_INTERVAL_MS: u64 = 10_000;

/// Difference allowed between the provider's clock and the box's when judging an id
/// token's `exp`, `nbf` and `iat`.
pub const OIDC_CLOCK_SKEW_S: u64 = 60;

/// An id token's length (the box keeps it with the session for the provider's logout).
pub const OIDC_ID_TOKEN_MAX_BYTES: usize = 8 << 10;

/// Values of the role claim looked at.
pub const OIDC_CLAIM_VALUES_MAX: usize = 64;

/// Sign-ins started and not yet back from the provider; past it the oldest is forgotten.
pub const OIDC_LOGINS_PENDING_MAX: usize = 64;

/// How long a started sign-in may take at the provider.
pub const OIDC_LOGIN_PENDING_S: u64 = 600;

/// Sign-ins talking to a provider at once (starting: its discovery document; finishing: the
/// code's exchange and the keys): past it a sign-in is refused at once, so a provider that
/// is down holds at most this many handlers, each at most its timeout.
pub const OIDC_SIGN_INS_TALKING_MAX: usize = 8;

/// One field of a provider's config (issuer, client id, secret, a claim's name).
pub const OIDC_FIELD_MAX_BYTES: usize = 512;

// ---- MQTT ----

/// One MQTT packet either way (an event's JSON, a snapshot for Home Assistant's image
/// entity): a larger one from the broker ends the connection; a larger snapshot is not sent.
pub const MQTT_PACKET_MAX_BYTES: usize = 1 << 20;

/// Connecting to the broker: TCP, TLS, CONNECT and its CONNACK.
pub const MQTT_CONNECT_TIMEOUT_MS: u64 = 10_000;

/// Writing what is queued to the broker: past it the connection is given up.
pub const MQTT_WRITE_TIMEOUT_MS: u64 = 10_000;

/// The keep-alive the box asks for; a PINGRESP not back within half of it ends the
/// connection.
pub const MQTT_KEEP_ALIVE_S: u16 = 30;

/// Publishes at QoS 1 sent and not yet acknowledged.
pub const MQTT_INFLIGHT_MAX: usize = 32;

/// The first wait before connecting again; it doubles up to [`MQTT_RECONNECT_MAX_MS`].
pub const MQTT_RECONNECT_MIN_MS: u64 = 1_000;

/// The longest wait before connecting again.
pub const MQTT_RECONNECT_MAX_MS: u64 = 30_000;

/// Event revisions waiting in the catalog for the broker; past it the oldest is dropped and
/// counted.
pub const MQTT_OUTBOX_EVENTS_MAX: u64 = 10_000;

/// Delivered outbox rows removed in one commit while events are still in flight (with none
/// in flight, or at the state tick, whatever was delivered goes at once).
pub const MQTT_OUTBOX_REMOVE_ROWS: u64 = 64;

/// A topic prefix (`[mqtt] prefix`, `discovery_prefix`).
pub const MQTT_PREFIX_MAX_BYTES: usize = 64;

/// One field of the broker's config (user name, password, client id).
pub const MQTT_FIELD_MAX_BYTES: usize = 256;

/// A topic the box reads a command from: longer ones are refused unread.
pub const MQTT_TOPIC_MAX_BYTES: usize = 256;

/// A command's payload (`ON`, `OFF`, `PRESS`, `online`).
pub const MQTT_COMMAND_MAX_BYTES: usize = 64;

/// Labels per camera announced to Home Assistant as binary sensors.
pub const MQTT_LABELS_PER_CAMERA_MAX: usize = 16;

/// How often the box looks for cameras that came or went and states that changed, for Home
/// Assistant.
pub const MQTT_STATE_TICK_MS: u64 = 2_000;

/// A label's sensor stays on this long after an event with it (or its end).
pub const MQTT_LABEL_ON_S: u64 = 30;

/// Commands from Home Assistant waiting to be carried out; past it one is dropped and logged.
pub const MQTT_ORDERS_MAX: usize = 8;

/// At a stop, the time the box takes to say `offline` and disconnect.
pub const MQTT_GOODBYE_MS: u64 = 1_000;

// ---- offsite archive (S3) ----

/// Archive targets (`[archive.<id>]`).
pub const ARCHIVE_TARGETS_MAX: usize = 4;

/// A target's text fields (endpoint, bucket, prefix, keys, region).
pub const ARCHIVE_FIELD_MAX_BYTES: usize = 256;

/// One request without a body to send (a list, a head, a delete, a multipart's start or
/// end), connect to last byte.
pub const ARCHIVE_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// The slowest link a request's body is given time for, on top of
/// [`ARCHIVE_REQUEST_TIMEOUT_MS`]: a part of [`ARCHIVE_PART_BYTES`] has 30 s + 128 s.
pub const ARCHIVE_SLOWEST_BYTES_PER_S: u64 = 64 << 10;

/// How long a request's signature is good for (`X-Amz-Expires`): a request is signed as it
/// is sent, so this only has to cover its own time on the wire.
pub const ARCHIVE_SIGNATURE_EXPIRES_S: u64 = 900;

/// The box's clock and the server's (its `Date`) may differ by this much before the target
/// is reported as refusing for the box's clock (S3 refuses requests 15 minutes off).
pub const ARCHIVE_CLOCK_SKEW_MAX_S: i64 = 900;

/// One multipart upload's part: at least S3's 5 MiB. A target holds two: the one being sent
/// and the next, read meanwhile. A recording over [`ARCHIVE_WHOLE_MAX_BYTES`] goes in parts,
/// and one that would take over [`ARCHIVE_WHOLE_MAX_MS`] at its target's cap.
pub const ARCHIVE_PART_BYTES: usize = 8 << 20;

/// The largest recording sent whole, in one request read from its file as it goes: an
/// interruption sends it again from its start, where parts resume at the first missing.
pub const ARCHIVE_WHOLE_MAX_BYTES: usize = 32 << 20;

/// At a target's bandwidth cap, a recording over [`ARCHIVE_PART_BYTES`] goes whole only when
/// it takes at most this: on a slow link an interruption loses at most a part.
pub const ARCHIVE_WHOLE_MAX_MS: u64 = 10_000;

/// A chunk of a recording sent whole, read from its file while the one before is sent.
pub const ARCHIVE_STREAM_CHUNK_BYTES: usize = 256 << 10;

/// Chunks of a recording sent whole read ahead of the connection.
pub const ARCHIVE_STREAM_CHUNKS_AHEAD: usize = 4;

/// An answer from the server other than an object's bytes (S3's XML: errors, a list page, a
/// multipart's id).
pub const ARCHIVE_ANSWER_MAX_BYTES: usize = 1 << 20;

/// Nodes of one XML answer: a list page of [`ARCHIVE_LIST_KEYS_MAX`] keys, indented, takes
/// about 20 a key.
pub const ARCHIVE_XML_NODES_MAX: u32 = 32_768;

/// Keys asked for in one list page (`max-keys`).
pub const ARCHIVE_LIST_KEYS_MAX: usize = 1_000;

/// One object key (S3 allows 1,024 bytes).
pub const ARCHIVE_KEY_MAX_BYTES: usize = 1_024;

/// How often an idle target looks for recordings that closed.
pub const ARCHIVE_IDLE_POLL_MS: u64 = 5_000;

/// The first wait after a target's failure that may pass (the network, a busy server); it
/// doubles up to [`ARCHIVE_RETRY_MAX_MS`].
pub const ARCHIVE_RETRY_MIN_MS: u64 = 1_000;

/// The longest wait after a failure that may pass.
pub const ARCHIVE_RETRY_MAX_MS: u64 = 60_000;

/// Reads of an event's snapshot that may fail while the event is there (a bad sector)
/// before the event is archived without it: one unreadable file must not hold back every
/// event and recording behind it.
pub const ARCHIVE_SNAPSHOT_TRIES: u32 = 3;

/// The wait after a refusal that needs someone (the keys, the box's clock, a full bucket)
/// before the target tries again.
pub const ARCHIVE_REFUSED_WAIT_MS: u64 = 30_000;

/// Recordings a target reads from the catalog at a time as it looks for its next work…
pub const ARCHIVE_SCAN_ROWS: usize = 256;

/// …and pages of them in one look: past them it looks again at its next step.
pub const ARCHIVE_SCAN_PAGES: usize = 16;

/// Events a target looks at from its events' mark in one step, each read and let go in
/// turn: past them (revisions kept open by their late window) it looks again at its next.
pub const ARCHIVE_EVENTS_LOOKED_MAX: usize = 4_096;

/// How often a target counts its backlog (bytes, recordings, the oldest) for the UI, the API
/// and `/metrics`.
pub const ARCHIVE_BACKLOG_LOOK_MS: u64 = 5_000;

/// Recordings a backlog count looks at, at most: past them it says "at least".
pub const ARCHIVE_BACKLOG_ROWS: usize = 100_000;

/// A manifest part (a stream's day, `archive::manifest`) takes recordings until it is this
/// big; then the day goes on in the next part. Each rewrite sends at most about this much.
pub const ARCHIVE_MANIFEST_PART_BYTES: usize = 1 << 20;

/// A manifest part read from a bucket: past it, it is refused unread.
pub const ARCHIVE_MANIFEST_MAX_BYTES: usize = 2 << 20;

/// While a target uploads, how often it writes the manifests of what it stored (an idle
/// target writes them at once).
pub const ARCHIVE_DESCRIBE_EVERY_MS: u64 = 60_000;

/// A stream's days whose manifests one pass writes…
pub const ARCHIVE_DESCRIBE_DAYS: usize = 16;

/// …and the entries it takes from the catalog for them, at most (about).
pub const ARCHIVE_DESCRIBE_BYTES: usize = 4 << 20;

/// Pages of a list one pass reads (the parts of a day's manifest).
pub const ARCHIVE_LIST_PAGES_MAX: usize = 4;

/// With `what = "events"`, how long after a recording ends an event may still come for it
/// (a sender posts an event a while after its moment): until then the target does not pass
/// over it.
pub const ARCHIVE_EVENTS_LATE_MS: u64 = 600_000;

/// With `keep_days`, how often a target deletes the bucket's days older than that.
pub const ARCHIVE_SWEEP_EVERY_MS: u64 = 3_600_000;

/// Objects one pass of that deletes; past it the pass goes on at the target's next step.
pub const ARCHIVE_SWEEP_DELETES_MAX: usize = 1_000;

/// List requests one read of a bucket's layout makes (its boxes, a box's streams and days):
/// [`ARCHIVE_BOXES_MAX`] boxes of four cameras with two streams take 13 each.
pub const ARCHIVE_READ_LISTS_MAX: usize = 1_024;

/// Boxes one listing of a bucket names.
pub const ARCHIVE_BOXES_MAX: usize = 64;

/// Levels of a prefix (`site/house-1` has two), so a bucket's boxes are found in that many.
pub const ARCHIVE_PREFIX_LEVELS_MAX: usize = 4;

/// Days of manifests one read of a stream's archived recordings covers (a range of one day
/// fewer: the day before it may hold a recording that reaches in).
pub const ARCHIVE_READ_DAYS_MAX: usize = 32;

/// Recordings one read of a stream's archive returns.
pub const ARCHIVE_READ_ENTRIES_MAX: usize = 20_000;

/// Reads of archive buckets the web face runs at once (listings, a stream's recordings, an
/// export's plan); past it one is refused as busy.
pub const ARCHIVE_READS_RUNNING_MAX: usize = 2;

/// Archived exports' plans kept for the byte ranges a player asks for one after another…
pub const ARCHIVE_PLANS_KEPT: usize = 4;

/// …each for this long.
pub const ARCHIVE_PLAN_KEEP_MS: u64 = 60_000;

/// Bytes of an archived object read at a time while an export's plan walks its fragments'
/// headers (one request each): a fragment's `moof` and the `mdat` header after it.
pub const ARCHIVE_READ_WINDOW_BYTES: usize = 16 << 10;

// ---- live view ----

/// The current GOP a stream holds so a new viewer starts at once: a GOP larger than this is
/// not held (the viewer waits for the next keyframe). 2 s of a 8 Mbit/s main stream.
pub const LIVE_GOP_MAX_BYTES: usize = 2 << 20;

/// Held GOPs across all streams.
pub const LIVE_GOP_TOTAL_MAX_BYTES: usize = 32 << 20;

/// Frames waiting in one live tap (a consumer such as the WebRTC engine); a frame past it is
/// dropped for that tap, which then skips to the next keyframe.
pub const LIVE_TAP_FRAMES: usize = 256;

/// Bytes of the frames waiting in live view's tap queue, every watched stream together: a
/// frame there may be the only thing keeping it alive, so a lagging engine holds no more than
/// this (8 frames at a main stream's default ceiling, 32 at a sub stream's) before frames
/// are dropped for it.
pub const LIVE_TAP_QUEUE_MAX_BYTES: usize = 8 << 20;

// ---- WebRTC ----

/// Live sessions one principal (a user or a token) may hold at most: the 65th is refused (on
/// a smaller box, past its share, WEBRTC_PRINCIPAL_SHARE_PERCENT).
pub const WEBRTC_SESSIONS_PER_PRINCIPAL_MAX: usize = 64;

/// The share of the box's live sessions one principal may hold, so one viewer or token
/// never takes them all.
pub const WEBRTC_PRINCIPAL_SHARE_PERCENT: usize = 50;

/// Live sessions kept for admins: an admin can always watch, however full the box is.
pub const WEBRTC_SESSIONS_ADMIN_RESERVED: usize = 2;

/// Live sessions from one client address.
pub const WEBRTC_SESSIONS_PER_ADDRESS_MAX: usize = 128;

/// Live sessions the box holds per GiB of its RAM class, in proportion (so 64 on a 1 GiB
/// board, 32 on 512 MiB).
pub const WEBRTC_SESSIONS_PER_GIB: usize = 64;

/// Live sessions on the smallest board: a few viewers and the admins' reserved places.
pub const WEBRTC_SESSIONS_MIN: usize = 8;

/// Live sessions on any board, whatever its RAM.
pub const WEBRTC_SESSIONS_SERVER_MAX: usize = 512;

/// Addresses of the box live view listens on (a UDP socket each). Addresses that appear
/// after the start (a late DHCP lease, a new one after years) are bound when the next session
/// opens; past this many, a new address takes the socket of one the box no longer has.
pub const WEBRTC_HOST_ADDRESSES_MAX: usize = 8;

/// What one session is budgeted (str0m's state, send buffers, DTLS and SCTP): the goal per
/// viewer. Its sound adds str0m's resend buffer for audio (50 packets, its default: 10 KB of
/// G.711, at most 64 KB of Opus) and a few words of state; nothing else per viewer, as the
/// camera's frames are passed through, not transcoded.
pub const WEBRTC_SESSION_BUDGET_BYTES: usize = 512 << 10;

/// RTP packets a session keeps for resends (~1.2 KB each): with paced sending, the packets
/// of a LAN's round trip at the pacing rate, with room to spare; the largest share of a
/// viewer's memory.
pub const WEBRTC_SEND_BUFFER_PACKETS: usize = 128;

/// The rate each session's pacer sends at: a frame goes out spread over time in bursts of at
/// most 63 KB instead of in one burst that a Wi-Fi access point or the viewer's socket would
/// drop (a 256 KiB frame in ~50 ms, a 4K keyframe in a fraction of a second). A camera's
/// stream is sent at the camera's bitrate whatever the link, so the rate is fixed rather
/// than estimated: no padding or probes to learn the link, nothing sent to an idle viewer.
pub const WEBRTC_PACING_BITS_PER_S: u64 = 40_000_000;

/// A live frame (picture or sound) reaching the engine this much later than its place on its
/// stream's timeline starts that timeline anew: the capture times sent to the browser follow
/// the stream's own timestamps through delays up to this, which a camera that stalled and
/// caught up, or a starved box, can cause; longer is a camera whose clock went wrong.
pub const WEBRTC_MEDIA_CLOCK_LAG_MAX_MS: u64 = 10_000;

/// Frame bytes waiting for the pacer across every session, per session the RAM class
/// holds: one pool, so a viewer catching up (a keyframe burst, a slow link) borrows what the
/// others do not use. A frame the pool cannot take is skipped for that viewer, who waits for
/// the next keyframe.
pub const WEBRTC_SEND_POOL_BYTES_PER_SESSION: usize = 128 << 10;

/// The part of the send pool only keyframes may take: a viewer waiting for a keyframe gets
/// one even while the others' frames keep the rest full, so when the box cannot keep up
/// every viewer still sees pictures, not the same few.
pub const WEBRTC_SEND_POOL_KEYFRAME_RESERVE_PERCENT: usize = 25;

/// Frame bytes one session may have waiting for the pacer: its held GOP goes whole to a new
/// viewer with as much again behind it (the parameter sets, the frames that arrive while it
/// is sent), and a viewer whose link cannot keep up skips frames past it (a frame alone
/// always goes, whatever its size).
pub const WEBRTC_SEND_SESSION_MAX_BYTES: usize = 2 * LIVE_GOP_MAX_BYTES;

/// Ticks one session's pacer is given in one turn of the engine (it asks for one after each
/// packet): a turn sends at most this many of a session's packets, ~300 KB, so one session
/// catching up cannot hold the others' turn for long.
pub const WEBRTC_PACER_TICKS_PER_TURN_MAX: usize = 256;

/// Sessions driven in one turn of timeouts: the others due wait for the next turn, and a
/// command (a logout, a new viewer) waiting goes between. Sessions opened together fall due
/// together; 30 of them in one turn held a logout for up to 1.8 ms.
pub const WEBRTC_TIMEOUT_SESSIONS_PER_TURN_MAX: usize = 4;

/// An SDP offer (a WHEP body): a browser's offer is ~4.5 KiB per video track, and a session
/// has at most 17 (16 cursors and one more to be refused).
pub const WEBRTC_OFFER_MAX_BYTES: usize = 128 << 10;

/// A datagram read from the WebRTC port; a larger one is cut and fails to parse.
pub const WEBRTC_DATAGRAM_MAX_BYTES: usize = 2048;

/// A session whose browser has not connected by then is dropped.
pub const WEBRTC_CONNECT_TIMEOUT_MS: u64 = 15_000;

/// One control message, either way: a larger one is answered with an error.
pub const WEBRTC_CONTROL_MESSAGE_MAX_BYTES: usize = 64 << 10;

/// Control messages of one session waiting to be handled: past it the oldest is dropped
/// (and answered with an error), so a flood cannot grow memory or starve other sessions.
pub const WEBRTC_CONTROL_QUEUE_MESSAGES: usize = 16;

/// Stored-playback cursors (tracks playing stored video) in one session.
pub const WEBRTC_CURSORS_PER_SESSION_MAX: usize = 16;

/// Stored-playback cursors across the box.
pub const WEBRTC_CURSORS_MAX: usize = 1024;

/// Runs in one timeline answer (about 20 bytes each, under the message ceiling); a longer
/// timeline says `truncated`.
pub const WEBRTC_TIMELINE_RUNS_MAX: usize = 2000;

/// Event notices waiting for one session's control channel; past this (or
/// [`WEBRTC_EVENT_QUEUE_BYTES`]) the session is unsubscribed with a notice, so a slow
/// browser never holds up the others or the intake.
pub const WEBRTC_EVENT_QUEUE_MESSAGES: usize = 64;

/// Bytes of event notices waiting for one session's control channel.
pub const WEBRTC_EVENT_QUEUE_BYTES: usize = 8 << 20;

/// Bytes a session's control channel may hold before event notices wait in their queue:
/// the channel's remaining room stays for answers to the browser's commands.
pub const WEBRTC_EVENT_CHANNEL_BUFFERED_MAX_BYTES: usize = 64 << 10;

/// Stored events waiting for the engine to hand them to subscribers; past this a notice is
/// dropped and counted (the event itself is stored).
pub const WEBRTC_EVENTS_IN_MAX: usize = 256;

/// Requests (open, close) waiting for the engine; one more session opening is refused at
/// once (503 `busy`).
pub const WEBRTC_COMMANDS_MAX: usize = 64;

// ---- accounts ----

/// Users. A box has a handful; the table stays small enough to list in one page.
pub const AUTH_USERS_MAX: usize = 64;

/// Bearer tokens for services and scripts.
pub const AUTH_TOKENS_MAX: usize = 256;

/// Open browser sessions, kept in memory. Expired ones are dropped when the table is full;
/// past that, a login is refused until one ends.
pub const AUTH_SESSIONS_MAX: usize = 256;

/// Sessions one user may hold: a new login past it ends that user's oldest, so no one user
/// fills the table.
pub const AUTH_SESSIONS_PER_USER_MAX: usize = 16;

/// A session's lifetime from login.
pub const AUTH_SESSION_LIFETIME_S: u64 = 7 * 24 * 3600;

/// Failed logins allowed from one client address at one user name within the window: 429
/// beyond, for that address and name only.
pub const AUTH_LOGIN_FAILURES_MAX: u32 = 5;

/// The window of the login failure count.
pub const AUTH_LOGIN_WINDOW_S: u64 = 60;

/// After a wrong password (or an unknown user) from an address, its next try is refused
/// (`429`) until this has passed: one guess a second, as people type, and guesses in the
/// pause cost no password hash.
pub const AUTH_LOGIN_FAILURE_PAUSE_MS: u64 = 1_000;

/// Failed logins from one address (any users) in the window before that address is refused.
pub const AUTH_LOGIN_ADDRESS_FAILURES_MAX: u32 = 30;

/// Failed logins at one user (from any addresses) in the window past which each try at that
/// user is slowed, never refused.
pub const AUTH_LOGIN_USER_FAILURES_SLOW: u32 = 10;

/// The wait of a slowed login.
pub const AUTH_LOGIN_SLOW_DELAY_MS: u64 = 1_000;

/// Login-limit entries (an address, an address and a name, or a name; each of a fixed size)
/// tracked at once; past it a shared count limits every untracked try.
pub const AUTH_LOGIN_TRACKED_MAX: usize = 4096;

/// Password hashes computed at once: argon2id holds 19 MiB for each, allocated once and kept.
pub const AUTH_HASHES_CONCURRENT_MAX: usize = 2;

/// Logins in progress at once, waiting for a hash or a slowed turn: past it, 503 at once.
/// They wait here, not in the HTTP handler slots.
pub const AUTH_LOGINS_IN_FLIGHT_MAX: usize = 32;

/// Logins in progress at once from one client address (an IPv6 /64): past it, 429 at once,
/// so one host cannot take every place of [`AUTH_LOGINS_IN_FLIGHT_MAX`].
pub const AUTH_LOGINS_IN_FLIGHT_PER_ADDRESS_MAX: u32 = 4;

/// Bytes of a user or token name.
pub const AUTH_NAME_MAX_BYTES: usize = 32;

/// Shortest password accepted.
pub const AUTH_PASSWORD_MIN_BYTES: usize = 8;

/// Longest password accepted: hashing is costly, and nobody types more.
pub const AUTH_PASSWORD_MAX_BYTES: usize = 128;

// ---- pre-roll and events ----

/// Pre-roll history of one stream (the config may lower it): a minute of a 8 Mbit/s stream.
pub const PREROLL_STREAM_MAX_BYTES: usize = 64 << 20;

/// Pre-roll history of every stream together (the config may lower it).
pub const PREROLL_TOTAL_MAX_BYTES: usize = 256 << 20;

/// Pre-roll history of one stream unless the config says otherwise: 5 s of pre-roll, the
/// detector's lag and a 10 s GOP of an 8 Mbit/s stream. Each history keeps only its time,
/// so a stream holds what its bitrate needs, up to this.
pub const PREROLL_STREAM_DEFAULT_BYTES: usize = 16 << 20;

/// Pre-roll history of every stream together unless the config says otherwise, per GiB of
/// the board's RAM class (at most [`PREROLL_TOTAL_MAX_BYTES`]): on 1 GiB, events with the
/// default pre-roll on eight 4 Mbit/s cameras and their sub streams, 10 s GOPs and all.
pub const PREROLL_BYTES_PER_GIB: usize = 64 << 20;

/// The longest pre-roll a camera may ask for.
pub const PREROLL_MAX_MS: u32 = 30_000;

/// The longest post-roll a camera may ask for.
pub const POSTROLL_MAX_MS: u32 = 600_000;

/// How long before its arrival an event may say it happened and still get its whole
/// pre-roll (detectors lag); the history keeps this much more than the pre-roll, and an
/// earlier event time is taken as this.
pub const EVENT_BACKDATE_MAX_MS: u64 = 2_000;

/// The frame rate a history's slots are sized for.
pub const PREROLL_FPS_MAX: usize = 60;

/// The longest GOP a history's slots are sized for (beyond the kept time, it holds the GOP
/// the kept time starts in).
pub const PREROLL_GOP_MAX_MS: u64 = 10_000;

/// Frame slots of one stream's history, whatever its pre-roll.
pub const PREROLL_FRAMES_MAX: usize = 4096;

/// The audio frames a second a history's audio slots are sized for: G.711 in 10 ms packets
/// (AAC at 48 kHz makes 47, Opus and G.711 in 20 ms packets 50). Past its slots a history
/// lets its oldest GOP go, as for video.
pub const PREROLL_AUDIO_FPS_MAX: usize = 100;

/// Audio frame slots of one stream's history, whatever its pre-roll (the longest pre-roll,
/// backdate and GOP at [`PREROLL_AUDIO_FPS_MAX`] take 4,200). Allocated at the stream's first
/// audio frame.
pub const PREROLL_AUDIO_FRAMES_MAX: usize = 8192;

/// Keyframes one stream's history indexes (fixed capacity): 32 s of quarter-second GOPs.
pub const PREROLL_KEYFRAMES_MAX: usize = 128;

/// An event envelope (JSON).
pub const EVENT_ENVELOPE_MAX_BYTES: usize = 16 << 10;

/// An event's snapshot (JPEG): a 4K picture at high quality is under 3 MiB.
pub const EVENT_JPEG_MAX_BYTES: usize = 8 << 20;

/// Room for the multipart framing around an envelope and a snapshot.
pub const EVENT_MULTIPART_OVERHEAD_BYTES: usize = 16 << 10;

/// The largest `POST /api/events` body: an envelope, a snapshot and the framing.
pub const EVENT_INTAKE_BODY_MAX_BYTES: usize =
    EVENT_ENVELOPE_MAX_BYTES + EVENT_JPEG_MAX_BYTES + EVENT_MULTIPART_OVERHEAD_BYTES;

/// Event uploads received at once: each may hold a whole snapshot in memory.
pub const EVENT_UPLOADS_MAX: usize = 4;

/// Bytes event uploads hold together: each takes twice its declared length (the body as
/// read, then split into its parts), or twice the largest body when it declares none; one
/// more is refused at once (503). One largest upload fits beside small ones.
pub const EVENT_UPLOADS_TOTAL_MAX_BYTES: usize = 24 << 20;

/// A snapshot's width or height: JPEG's own ceiling is 65,535; no camera is wider than 16K.
pub const JPEG_SIDE_MAX_PX: u16 = 16_384;

/// Segments walked in a snapshot's header before it is refused.
pub const JPEG_SEGMENTS_MAX: usize = 1024;

/// A sender's event id.
pub const EVENT_ID_MAX_BYTES: usize = 128;

/// An idempotency key.
pub const EVENT_IDEMPOTENCY_KEY_MAX_BYTES: usize = 128;

/// Labels of one event.
pub const EVENT_LABELS_MAX: usize = 16;

/// One label (and one search word).
pub const EVENT_LABEL_MAX_BYTES: usize = 64;

/// Boxes of one event.
pub const EVENT_BOXES_MAX: usize = 64;

/// An event's free text.
pub const EVENT_TEXT_MAX_BYTES: usize = 4096;

/// Search terms indexed per event (labels first, then words of the text).
pub const EVENT_TERMS_MAX: usize = 64;

/// An event's notice to live-view subscribers, at most: its text, its labels and room for
/// the ids, camera and snapshot link (checked by a test against the largest envelope).
pub const EVENT_NOTICE_MAX_BYTES: usize = EVENT_TEXT_MAX_BYTES + EVENT_LABELS_MAX * (EVENT_LABEL_MAX_BYTES + 3) + 512;

/// Events kept; past this the oldest go (with their snapshots).
pub const EVENTS_MAX: u64 = 1_000_000;

/// Events deleted in one commit when trimming to the caps; the rest go with the next.
pub const EVENT_TRIM_BATCH_MAX: usize = 64;

/// Revisions of one event on one page of `GET /api/events/{id}`.
pub const EVENT_REVISIONS_PAGE_MAX: usize = 50;

/// Revisions of one event.
pub const EVENT_REVISIONS_MAX: usize = 1000;

/// Events on one page of search results.
pub const EVENT_SEARCH_RESULTS_MAX: usize = 200;

/// How far before an event its keyframe is looked for (GOPs are at most ~10 s).
pub const EVENT_KEYFRAME_BACK_MS: u64 = 60_000;

/// Index rows counted per condition of a search to choose the index it walks (the fewest).
pub const EVENT_SEARCH_PROBE_ROWS: usize = 1024;

/// Index rows one search looks at before it ends its page early (with where to go on).
pub const EVENT_SEARCH_SCAN_MAX: usize = 10_000;

// ---- firmware and updates ----

/// GRUB's environment block: `grub-editenv` makes it 1024 bytes; a larger file is not one.
pub const GRUBENV_MAX_BYTES: usize = 4096;

/// A root slot's description (`etc/keeppeek/firmware.toml`): five short lines.
pub const FIRMWARE_FILE_MAX_BYTES: usize = 4096;

/// The firmware's records on the data partition (last update, slot versions, a factory reset
/// request): a few hundred bytes each.
pub const SYSTEM_STATE_MAX_BYTES: usize = 16 << 10;

/// An update bundle's manifest: six fields, about 250 bytes.
pub const BUNDLE_MANIFEST_MAX_BYTES: usize = 4096;

/// An update bundle's minisign signature: four lines, about 350 bytes.
pub const BUNDLE_SIGNATURE_MAX_BYTES: usize = 1024;

/// Entries of a GPT partition table the data partition's growth reads: every common tool
/// writes 128; a header that claims more is not one of ours and is left alone.
pub const GPT_PARTITION_ENTRIES_MAX: u32 = 128;

/// The buffer a bundle's slot is streamed through (to the device and back): an install
/// holds this much of the slot in memory, whatever its size.
pub const BUNDLE_WRITE_CHUNK_BYTES: usize = 64 << 10;

/// A new firmware must answer `/healthz` within this many seconds of init starting, or the
/// box restarts into the previous one. keeppeek answers in about a second on a board.
pub const INIT_TRIAL_DEADLINE_S: u64 = 60;

/// Crashes of keeppeek a firmware on trial may have before the box restarts into the
/// previous one.
pub const INIT_CRASHES_ON_TRIAL_MAX: u32 = 3;

/// The longest pause before keeppeek is started again after it ended (1 s, doubling).
pub const INIT_RESTART_BACKOFF_MAX_S: u64 = 30;

/// Seconds between init's health checks of a running keeppeek (every second on trial).
pub const INIT_HEALTH_INTERVAL_S: u64 = 10;

/// Each step of init's health check (connect, write, read) gives up after this long.
pub const INIT_HEALTH_STEP_TIMEOUT_S: u64 = 2;

/// init's main loop waits at most this long for a signal before it feeds the watchdog,
/// reaps children and checks on keeppeek again.
pub const INIT_LOOP_INTERVAL_S: u64 = 1;

/// Failed health checks in a row after which init kills a hung keeppeek and starts it again.
pub const INIT_HEALTH_FAILURES_MAX: u32 = 6;

/// Seconds init waits for a DHCP lease before starting keeppeek anyway (live view binds a
/// later lease's address when the next session opens). A lease on a LAN takes well under a
/// second.
pub const INIT_NETWORK_WAIT_S: u64 = 10;

/// Seconds keeppeek gets to stop (and flush its recordings) at a reboot before it is killed.
pub const INIT_STOP_GRACE_S: u64 = 30;

/// The hardware watchdog's timeout: init feeds it every second; a hung init resets the box.
pub const WATCHDOG_TIMEOUT_S: u64 = 30;

/// keeppeek's log file in RAM (`/run/log/keeppeek.log`): past it the file starts over,
/// keeping one previous file.
pub const INIT_LOG_FILE_MAX_BYTES: u64 = 1 << 20;

/// One log line; longer ones are cut.
pub const INIT_LOG_LINE_MAX_BYTES: usize = 8 << 10;

/// An update upload over HTTP: a bundle is the slot plus a few KiB; slots are at most a
/// few hundred MiB on any board.
pub const UPDATE_BODY_MAX_BYTES: u64 = 256 << 20;

/// Upload chunks queued between the connection and the installer writing the slot: the
/// upload waits for the slot's writes, and memory stays a few chunks.
pub const UPDATE_UPLOAD_CHUNKS_MAX: usize = 4;

/// The support bundle (built in memory): both log files nearly fit; past it files are left
/// out, and the bundle says so.
pub const SUPPORT_BUNDLE_MAX_BYTES: usize = 2 << 20;

// ---- memory budget ----

/// Heap of one camera session besides the buffer of the video frame it is putting together
/// (retina's read buffer, the depacketizers, an audio frame being put together, the
/// stream's state and fanout): 33 sessions measured 125 KiB each more than one; this is
/// twice that.
pub const RTSP_SESSION_OVERHEAD_BYTES: usize = 256 << 10;

/// Stack reserved per OS thread we start (the writer and catalog threads).
pub const THREAD_STACK_BYTES: usize = 256 << 10;

/// The async runtime's thread (the process's main thread): Linux's default stack limit,
/// counted whole.
pub const MAIN_THREAD_STACK_BYTES: usize = 8 << 20;

/// Threads of the runtime's blocking pool (catalog reads, exports, hashing, event storage):
/// work past them waits for one, bounded by the HTTP handlers that ask for it.
pub const BLOCKING_THREADS_MAX: usize = 16;

/// Stack of each blocking-pool thread.
pub const BLOCKING_THREAD_STACK_BYTES: usize = 1 << 20;

/// The ingest thread's stack: it runs every camera session (retina's parsers and
/// depacketizers are polled on it).
pub const INGEST_THREAD_STACK_BYTES: usize = 1 << 20;

/// Threads of the ingest runtime's blocking pool (name lookups of cameras given by name,
/// file sources), each with a stack of [`BLOCKING_THREAD_STACK_BYTES`].
pub const INGEST_BLOCKING_THREADS_MAX: usize = 2;

/// glibc malloc arenas (the host build): one per thread by default, each keeping what its
/// thread freed; two keep the allocator's slack within the process line.
pub const MALLOC_ARENAS_MAX: usize = 2;

/// Fixed overhead of the process: code, runtime, allocator slack.
pub const PROCESS_BASE_BYTES: usize = 24 << 20;

/// The share of the board's RAM KeepPeek may plan to use; the rest is the kernel's page
/// cache (which recording depends on) and the OS.
pub const RAM_SHARE_PERCENT: usize = 50;

/// How often the host (glibc) build hands freed memory back to the kernel.
pub const MEMORY_TRIM_INTERVAL_S: u64 = 5;

// ---- The camera port (`camport`) ----

/// A DHCP message read from the camera port: past it, it is dropped unread (an Ethernet
/// frame's payload).
pub const CAMPORT_DHCP_MESSAGE_MAX_BYTES: usize = 1_500;

/// A client id (option 61) kept: a DUID is at most 130 bytes by RFC 8415, cameras send a MAC
/// or a short name; past it the message is refused.
pub const CAMPORT_CLIENT_ID_MAX_BYTES: usize = 64;

/// A host name (option 12) kept for the UI; a longer one is left out.
pub const CAMPORT_HOSTNAME_MAX_BYTES: usize = 63;

/// Bindings the camera port keeps (bound, offered or ended): a pool may be no larger.
pub const CAMPORT_LEASES_MAX: usize = 256;

/// Offers waiting for their REQUEST at once: past it, DISCOVERs are passed over.
pub const CAMPORT_OFFERS_PENDING_MAX: usize = 64;

/// How long an offer holds its address for the client's REQUEST.
pub const CAMPORT_OFFER_HOLD_MS: u64 = 30_000;

/// How long an address a client declined (or an ARP probe found taken) is not offered.
pub const CAMPORT_DECLINED_HOLD_MS: u64 = 600_000;

/// DHCP packets a client (by MAC) may send in a second: past it they are dropped and counted.
pub const CAMPORT_CLIENT_PACKETS_PER_S: u32 = 10;

/// Clients whose rate is followed at once: past it, new ones are dropped until a second
/// passes.
pub const CAMPORT_RATE_CLIENTS_MAX: usize = 1_024;

/// An SNTP request read: a header, and room for extension fields or a key's MAC after it;
/// past it, dropped unread.
pub const CAMPORT_SNTP_MESSAGE_MAX_BYTES: usize = 512;

/// SNTP requests a client (by address) may send in a second: a camera asks once a minute or
/// so, `ntpdate` a few times in a row; past it they are dropped and counted. The clients
/// followed are at most [`CAMPORT_RATE_CLIENTS_MAX`], as for DHCP.
pub const CAMPORT_SNTP_REQUESTS_PER_S: u32 = 8;

/// ARP probes of an address before it is offered, at once: the offers past them wait their
/// turn.
pub const CAMPORT_PROBES_MAX: usize = 16;

/// How long an ARP probe waits for someone holding the address to answer.
pub const CAMPORT_ARP_PROBE_MS: u64 = 150;

/// ARP packets heard on the port kept for the probes waiting: a probe further behind skips
/// the oldest (at four per probe, a probe is that far behind only in a flood).
pub const CAMPORT_ARP_HEARD_MAX: usize = 64;

/// ACKs waiting for their leases' durable write (one write lets a burst's ACKs go): past it,
/// no further message is read until a write is done.
pub const CAMPORT_ACKS_WAITING_MAX: usize = 64;

/// How long an acknowledged lease may wait for a durable commit: its write does not wait for
/// the disk, and a power cut in between loses at most this much (the camera keeps its
/// address and answers the ARP probe made before that address is offered to another).
pub const CAMPORT_LEASES_SYNC_MS: u64 = 1_000;

/// How long the leases stay unwritten before their durable commit is made sooner than
/// [`CAMPORT_LEASES_SYNC_MS`]: a burst's writes are not held behind a flush.
pub const CAMPORT_LEASES_SYNC_IDLE_MS: u64 = 100;

/// How often the finder of plugged-in cameras looks for leases that ended unrenewed.
pub const CAMPORT_FINDER_TICK_MS: u64 = 5_000;

/// Plugged-in cameras asked at once (an ONVIF probe and an RTSP OPTIONS each).
pub const CAMPORT_CHECKS_MAX: usize = 4;

/// How long a plugged-in camera's ONVIF probe and RTSP OPTIONS wait for an answer.
pub const CAMPORT_CHECK_WAIT_MS: u64 = 2_000;

/// Times a plugged-in camera is asked while its services start, and the wait between.
pub const CAMPORT_CHECK_TRIES: u32 = 12;
pub const CAMPORT_CHECK_AGAIN_MS: u64 = 5_000;

/// How long the camera port waits before it tries again to serve (an interface not there,
/// a socket refused).
pub const CAMPORT_RETRY_MS: u64 = 5_000;

/// The box's network interfaces listed for the camera port's form.
pub const NET_INTERFACES_SHOWN_MAX: usize = 32;

#[cfg(test)]
mod tests {
    //! `docs/limits.md` is generated from this file: the test fails when they differ, and
    //! `KEEPPEEK_BLESS=1 cargo test --lib limits` rewrites the doc.

    /// Renders the doc from this file's source: one row per constant, with its reason.
    fn render() -> String {
        let src = include_str!("limits.rs");
        let mut out = String::from(
            "# Limits\n\nEvery ceiling KeepPeek enforces. Generated from `src/limits.rs` by its unit test \
             (`KEEPPEEK_BLESS=1 cargo test --lib limits`); do not edit by hand.\n",
        );
        let mut doc = Vec::new();
        let mut lines = src.lines().take_while(|l| !l.starts_with("#[cfg(test)]"));
        while let Some(line) = lines.next() {
            let line = line.trim();
            if let Some(section) = line.strip_prefix("// ---- ").and_then(|s| s.strip_suffix(" ----")) {
                out.push_str(&format!("\n## {section}\n\n| constant | value | why |\n| --- | --- | --- |\n"));
            } else if let Some(d) = line.strip_prefix("/// ") {
                doc.push(d.to_string());
            } else if let Some(rest) = line.strip_prefix("pub const ") {
                let (name, rest) = rest.split_once(':').expect("typed const");
                let value = rest.split_once('=').expect("valued const").1.trim();
                // A value too long for its line continues on the next.
                let next = if value.is_empty() { lines.next().unwrap_or("").trim() } else { value };
                let value = next.trim_end_matches(';');
                out.push_str(&format!("| `{name}` | `{value}` | {} |\n", doc.join(" ")));
                doc.clear();
            }
        }
        out
    }

    #[test]
    fn docs_limits_md_is_generated_from_this_file() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/limits.md");
        let want = render();
        if std::env::var_os("KEEPPEEK_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(have == want, "docs/limits.md is stale: run KEEPPEEK_BLESS=1 cargo test --lib limits");
    }
}
