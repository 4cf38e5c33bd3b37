//! The offsite archive against a real S3-compatible server no one here wrote: `s3s-fs` 0.14.1
//! (the s3s project's server on a directory, built by `tools/test.sh` with `cargo install`
//! under `target/peers/s3s-fs`), started with an access key and secret so it checks every
//! request's signature (without them it refuses signed requests). Objects are plain files
//! under its directory, so a test can compare them with what was sent byte for byte.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use keeppeek::archive::s3::{Bucket, Kind, Place, S3Error};
use keeppeek::oidc::fetch::FetchError;
use serde_json::Value;

use crate::common::*;

pub const ACCESS_KEY: &str = "keeppeek-test";
pub const SECRET_KEY: &str = "a-secret-the-server-checks";

/// An `s3s-fs` server on loopback over `dir`, with bucket `bucket` made.
pub struct S3Server {
    child: Child,
    pub port: u16,
    pub dir: PathBuf,
}

pub fn s3s_fs() -> PathBuf {
    let bin = repo().join("target/peers/s3s-fs/bin/s3s-fs");
    assert!(bin.exists(), "{} is missing: tools/test.sh builds it (cargo install s3s-fs)", bin.display());
    bin
}

impl S3Server {
    pub fn start(dir: &Path, bucket: &str) -> S3Server {
        S3Server::start_on(dir, bucket, free_port())
    }

    pub fn start_on(dir: &Path, bucket: &str, port: u16) -> S3Server {
        std::fs::create_dir_all(dir.join(bucket)).unwrap();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.with_extension("log")).unwrap();
        let child = Command::new(s3s_fs())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting s3s-fs");
        let mut child = child;
        // Listening, and this server: another process that took the port makes it exit.
        let up = wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
            && child.try_wait().unwrap().is_none();
        assert!(
            up,
            "s3s-fs did not listen on {port}: {}",
            std::fs::read_to_string(dir.with_extension("log")).unwrap_or_default()
        );
        S3Server { child, port, dir: dir.to_path_buf() }
    }

    pub fn place(&self, bucket: &str, secret: &str) -> Place {
        Place {
            endpoint: url::Url::parse(&format!("http://127.0.0.1:{}", self.port)).unwrap(),
            region: "us-east-1".into(),
            bucket: bucket.into(),
            path_style: true,
            access_key: ACCESS_KEY.into(),
            secret_key: secret.into(),
            ca_pem: None,
        }
    }

    /// A server that is not there yet, to be started on `port` over `dir` later.
    pub fn stand_in(dir: &Path, bucket: &str, port: u16) -> S3Server {
        std::fs::create_dir_all(dir.join(bucket)).unwrap();
        S3Server { child: Command::new("true").spawn().unwrap(), port, dir: dir.to_path_buf() }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Bytes that differ everywhere, so a part out of place shows.
fn pattern(len: usize, seed: u8) -> Bytes {
    Bytes::from((0..len).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed).collect::<Vec<u8>>())
}

#[test]
fn the_client_stores_reads_lists_and_puts_parts_together_on_a_real_server() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let bucket = Bucket::new(server.place("nvr", SECRET_KEY)).unwrap();
    let rt = runtime();
    let now = wall_us;
    rt.block_on(async {
        // A whole object: what the server keeps is what was sent, and it said so.
        let body = pattern(100_000, 1);
        let etag = bucket.put("box-a/porch/main/one.mp4", body.clone(), now()).await.unwrap();
        assert_eq!(etag, keeppeek::archive::s3::md5_hex(&body));
        let stored = std::fs::read(server.dir.join("nvr/box-a/porch/main/one.mp4")).unwrap();
        assert_eq!(stored, body.as_ref(), "the server's file is the bytes sent");
        assert_eq!(bucket.head("box-a/porch/main/one.mp4", now()).await.unwrap(), Some((100_000, etag)));
        assert_eq!(bucket.get("box-a/porch/main/one.mp4", None, 1 << 20, now()).await.unwrap(), body);
        let range = bucket.get("box-a/porch/main/one.mp4", Some((1_000, 1_999)), 4_096, now()).await.unwrap();
        assert_eq!(range, body.slice(1_000..2_000));
        // More than the caller will take is refused, not read whole.
        let over = bucket.get("box-a/porch/main/one.mp4", None, 50_000, now()).await.unwrap_err();
        assert_eq!(over, S3Error::Exchange(FetchError::TooLarge(50_000)));

        // A file sent whole as it is read, with its CRC-32, which the server checked and
        // sent back: of several chunks, the last short, and only the length given.
        let file = tmp.path().join("recording.mp4");
        let chunk = keeppeek::limits::ARCHIVE_STREAM_CHUNK_BYTES;
        let long = pattern(3 * chunk + 5_000, 6);
        std::fs::write(&file, &long).unwrap();
        let len = long.len() as u64 - 1_000;
        let crc32 = crc32fast::hash(&long[..len as usize]);
        let key = "box-a/porch/main/streamed.mp4";
        let etag = bucket.put_file(key, (file.clone(), len), crc32, now()).await.unwrap();
        let stored = std::fs::read(server.dir.join("nvr").join(key)).unwrap();
        assert_eq!(stored, &long[..len as usize], "the server's file is the length given of the file");
        assert_eq!(etag, keeppeek::archive::s3::md5_hex(&stored));
        assert!(bucket.confirms_crc32());
        // A CRC-32 that is not the bytes' (the file changed after it was made) is refused
        // by the server (`s3s-fs` keeps what it got even so, where S3 keeps nothing: the box
        // sends it again).
        let wrong = bucket.put_file("box-a/porch/main/wrong.mp4", (file.clone(), len), crc32 ^ 1, now()).await;
        let wrong = wrong.unwrap_err();
        assert!(matches!(&wrong, S3Error::Refused { code, .. } if code == "BadDigest"), "{wrong}");
        // A file shorter than the length given breaks the request off.
        let short = bucket.put_file("box-a/porch/main/short.mp4", (file, long.len() as u64 + 1), crc32, now()).await;
        assert!(matches!(&short, Err(S3Error::Exchange(FetchError::Broken(_)))), "{short:?}");
        assert_eq!(bucket.head("box-a/porch/main/short.mp4", now()).await.unwrap(), None);

        // Missing things.
        assert_eq!(bucket.head("box-a/none", now()).await.unwrap(), None);
        let missing = bucket.get("box-a/none", None, 1 << 20, now()).await.unwrap_err();
        assert_eq!(missing.kind(), Kind::Missing, "{missing}");

        // A multipart upload of two parts: the first at the part size, the last small.
        let part = keeppeek::limits::ARCHIVE_PART_BYTES;
        let big = pattern(part + 3_000, 2);
        let key = "box-a/porch/main/big.mp4";
        let id = bucket.start_upload(key, now()).await.unwrap();
        let e1 = bucket.upload_part(key, &id, 1, big.slice(..part), now()).await.unwrap();
        let e2 = bucket.upload_part(key, &id, 2, big.slice(part..), now()).await.unwrap();
        let etag = bucket.complete_upload(key, &id, &[e1.clone(), e2.clone()], now()).await.unwrap();
        assert_eq!(etag, keeppeek::archive::s3::multipart_etag(&[e1, e2]).unwrap());
        assert_eq!(std::fs::read(server.dir.join("nvr").join(key)).unwrap(), big.as_ref());
        // Parts under 5 MiB but the last are refused when the upload is put together.
        let id = bucket.start_upload("box-a/small", now()).await.unwrap();
        let s1 = bucket.upload_part("box-a/small", &id, 1, pattern(1_000, 3), now()).await.unwrap();
        let s2 = bucket.upload_part("box-a/small", &id, 2, pattern(1_000, 4), now()).await.unwrap();
        let small = bucket.complete_upload("box-a/small", &id, &[s1, s2], now()).await.unwrap_err();
        assert!(matches!(&small, S3Error::Refused { code, .. } if code == "EntityTooSmall"), "{small}");
        // An upload given up.
        let id = bucket.start_upload("box-a/given-up", now()).await.unwrap();
        bucket.upload_part("box-a/given-up", &id, 1, pattern(1_000, 5), now()).await.unwrap();
        bucket.abort_upload("box-a/given-up", &id, now()).await.unwrap();
        assert_eq!(bucket.head("box-a/given-up", now()).await.unwrap(), None);

        // Lists: by prefix, by delimiter, and page after page past one page's keys.
        for i in 0..keeppeek::limits::ARCHIVE_LIST_KEYS_MAX + 5 {
            bucket.put(&format!("box-b/cam/{i:05}"), Bytes::from_static(b"x"), now()).await.unwrap();
        }
        let top = bucket.list("", Some("/"), None, now()).await.unwrap();
        assert_eq!(top.prefixes, ["box-a/", "box-b/"]);
        let mut keys = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = bucket.list("box-b/", None, after.as_deref(), now()).await.unwrap();
            pages += 1;
            keys.extend(page.objects.into_iter().map(|o| o.key));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!((pages, keys.len()), (2, keeppeek::limits::ARCHIVE_LIST_KEYS_MAX + 5));
        assert_eq!(keys.last().map(String::as_str), Some("box-b/cam/01004"));
        bucket.delete("box-b/cam/00000", now()).await.unwrap();
        assert_eq!(bucket.head("box-b/cam/00000", now()).await.unwrap(), None);
    });
}

#[test]
fn failures_are_sorted_into_what_the_box_does_next() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let rt = runtime();
    let hour_us = 3_600_000_000;
    rt.block_on(async {
        let wrong = Bucket::new(server.place("nvr", "not-the-secret")).unwrap();
        let e = wrong.put("k", Bytes::from_static(b"x"), wall_us()).await.unwrap_err();
        assert_eq!(e.kind(), Kind::Credentials, "{e}");
        assert!(std::fs::read_dir(server.dir.join("nvr")).unwrap().next().is_none(), "nothing was stored");

        let right = Bucket::new(server.place("nvr", SECRET_KEY)).unwrap();
        // The box's clock an hour ahead, and an hour behind: both said to be the clock, with
        // how far off it is.
        for off_us in [hour_us, -hour_us] {
            let e = right.put("k", Bytes::from_static(b"x"), wall_us() + off_us).await.unwrap_err();
            let S3Error::Clock { off_s } = e else { panic!("the clock {off_us} µs off: {e}") };
            assert!((off_s - off_us / 1_000_000).abs() < 60, "off by {off_s} s, the clock {off_us} µs off");
        }
        assert!(std::fs::read_dir(server.dir.join("nvr")).unwrap().next().is_none(), "nothing was stored");
        right.put("k", Bytes::from_static(b"x"), wall_us()).await.unwrap();

        server.kill();
        let e = right.put("k", Bytes::from_static(b"x"), wall_us()).await.unwrap_err();
        assert!(matches!(e, S3Error::Exchange(FetchError::Unreachable(_) | FetchError::Broken(_))), "{e}");
        assert_eq!(e.kind(), Kind::Later);
    });
}

/// The objects under `dir` (a server's bucket directory), by key.
pub fn objects(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.file_name().unwrap().to_string_lossy().starts_with('.') {
                out.push((p.strip_prefix(dir).unwrap().to_string_lossy().into_owned(), p));
            }
        }
    }
    out.sort();
    out
}

/// A daemon's config for `cameras` (each the looping file `clip` of the fixtures), whose
/// segments are an eighth of `stream_max`, archived to `server`'s bucket `nvr` under
/// `prefix`; `extra` goes into the target's table. Its web face's port.
pub fn archived_config(
    dir: &Path,
    server: &S3Server,
    (prefix, extra): (&str, &str),
    cameras: &[&str],
    (clip, stream_max): (&str, &str),
) -> u16 {
    let clip = fixtures().join(clip);
    let port = free_port();
    let mut body = format!(
        "listen = \"127.0.0.1:{port}\"\nflush_interval_s = 1\n[retention]\nstream_max_bytes = \"{stream_max}\"
total_max_bytes = \"1 GiB\"\n\
         [archive.offsite]\nendpoint = \"http://127.0.0.1:{}\"\nbucket = \"nvr\"\nprefix = \"{prefix}\"\n\
         access_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n{extra}\n",
        server.port
    );
    for c in cameras {
        body.push_str(&format!("[[cameras]]\nname = \"{c}\"\nmain = {{ url = \"file://{}\" }}\n", clip.display()));
    }
    write_config(dir, &body);
    port
}

#[test]
fn recordings_of_two_cameras_are_archived_as_they_close_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    // The 332 kbit/s clip in segments of 256 KiB: one every 6 s.
    let port = archived_config(&dir, &server, ("house", ""), &["porch", "yard"], ("h264.mp4", "2 MiB"));
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin", "metrics""#);
    let bucket = server.dir.join("nvr");
    // Two recordings of each camera archived and described by their manifests.
    let enough = wait_until(Duration::from_secs(60), || {
        let described = described(&bucket);
        ["porch", "yard"].iter().all(|c| {
            described.iter().filter(|e| e.key.starts_with(&format!("house/recordings/{c}/main/"))).count() >= 2
        })
    });
    assert!(enough, "two recordings of each camera archived within 60 s: {:?}\n{}", objects(&bucket), d.log_text());
    // The API and /metrics say what the target did.
    let bearer = format!("Bearer {token}");
    let (code, _, body) = request(port, "GET", "/api/system/archive", &[("authorization", &bearer)], "");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let t = &v["targets"][0];
    assert_eq!(t["id"], "offsite", "{v}");
    assert!(t["uploaded_objects"].as_u64().unwrap() >= 4 && t["error"].is_null(), "{v}");
    assert_eq!(t["place"], format!("http://127.0.0.1:{}/nvr/house", server.port), "{v}");
    let (_, _, metrics) = request(port, "GET", "/metrics", &[("authorization", &bearer)], "");
    let uploaded: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("keeppeek_archive_uploaded_objects_total{target=\"offsite\"} "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(uploaded >= 4, "{metrics}");
    assert!(metrics.contains("keeppeek_archive_backlog_bytes{target=\"offsite\"}"), "{metrics}");
    d.stop();
    let recs = d.recordings();
    let archived: Vec<_> = objects(&bucket).into_iter().filter(|(k, _)| !k.contains("/manifests/")).collect();
    for (key, file) in &archived {
        let id: u64 = key.rsplit('/').next().unwrap().trim_end_matches(".mp4").parse().unwrap();
        let rec =
            recs.iter().find(|r| r["id"].as_u64() == Some(id)).unwrap_or_else(|| panic!("{key}: no recording {id}"));
        let stream = rec["stream"].as_str().unwrap();
        assert!(key.starts_with(&format!("house/recordings/{stream}/")), "{key} is under its stream {stream}");
        assert!(!rec["open"].as_bool().unwrap(), "{key}: only closed recordings are archived");
        let local = std::fs::read(d.data().join(rec["path"].as_str().unwrap())).unwrap();
        let bytes = rec["bytes"].as_u64().unwrap() as usize;
        assert_eq!(std::fs::read(file).unwrap(), &local[..bytes], "{key} is the local file's committed bytes");
    }
    let log = d.log_text();
    assert!(log.matches("archived").count() >= archived.len(), "each upload is logged:\n{log}");
    // Every recording a manifest names is there, as the manifest says, with its fragments
    // as the catalog had them.
    for e in described(&bucket) {
        let stored = std::fs::read(bucket.join(&e.key)).unwrap_or_else(|_| panic!("{} is named but not there", e.key));
        assert_eq!((stored.len() as u64, etag_of(&stored, &e.etag)), (e.bytes, e.etag.clone()), "{}", e.key);
        let rec = recs.iter().find(|r| r["id"].as_u64() == Some(e.id)).unwrap();
        let fragments: Vec<Value> = rec["fragments"].as_array().unwrap().clone();
        let rows = e.fragment_rows();
        assert_eq!(rows.len(), fragments.len(), "{}", e.key);
        for (r, f) in rows.iter().zip(&fragments) {
            assert_eq!(serde_json::to_value(r).unwrap(), *f, "{}", e.key);
        }
        assert_eq!(
            (e.wall_start_us, e.frames),
            (rec["wall_start_us"].as_i64().unwrap(), rec["frames"].as_u64().unwrap())
        );
    }
}

/// Every recording the manifests under `bucket` name, each manifest read as the box reads it.
pub fn described(bucket: &Path) -> Vec<keeppeek::archive::manifest::Entry> {
    objects(bucket)
        .into_iter()
        .filter(|(k, _)| k.contains("/manifests/"))
        .flat_map(|(k, p)| {
            let m =
                keeppeek::archive::manifest::decode(&std::fs::read(&p).unwrap()).unwrap_or_else(|e| panic!("{k}: {e}"));
            assert!(
                k.ends_with(&format!("/{}/{}/{:03}.json", m.stream, m.day, m.part)),
                "{k} names its stream, day and part"
            );
            m.recordings
        })
        .collect()
}

/// The events the bucket's events manifests describe.
pub fn events_described(bucket: &Path) -> Vec<keeppeek::archive::manifest::EventEntry> {
    objects(bucket)
        .into_iter()
        .filter(|(k, _)| k.contains("/manifests/") && k.contains("/events/"))
        .flat_map(|(k, p)| {
            let m =
                keeppeek::archive::manifest::decode(&std::fs::read(&p).unwrap()).unwrap_or_else(|e| panic!("{k}: {e}"));
            m.events
        })
        .collect()
}

/// A GET with a bearer token answered 200 with JSON.
fn get_json_with(port: u16, token: &str, path: &str) -> Value {
    let (code, head, body) = request(port, "GET", path, &[("authorization", &format!("Bearer {token}"))], "");
    assert_eq!(code, 200, "{path}: {head}\n{body}");
    serde_json::from_str(&body).unwrap()
}

/// The ETag of `bytes` sent the way `etag` says: whole, its MD5; in parts (`-` their count),
/// the MD5 of its parts' MD5s.
pub fn etag_of(bytes: &[u8], etag: &str) -> String {
    use keeppeek::archive::s3::{md5_hex, multipart_etag};
    if !etag.contains('-') {
        return md5_hex(bytes);
    }
    let part = keeppeek::limits::ARCHIVE_PART_BYTES;
    multipart_etag(&bytes.chunks(part).map(md5_hex).collect::<Vec<_>>()).unwrap()
}

/// The objects of a bucket, its manifests left out.
fn recordings_in(bucket: &Path) -> Vec<(String, PathBuf)> {
    objects(bucket).into_iter().filter(|(k, _)| !k.contains("/manifests/")).collect()
}

/// `kill -9` of keeppeek twenty times while it uploads recordings in parts: each restart
/// goes on from the first part not noted (a part is sent again only when the kill came
/// between its answer and its note), every object is its recording's bytes, no manifest
/// names an object that is not there, and once keeppeek runs on the backlog drains.
#[test]
fn kill_9_during_uploads_resumes_at_the_first_part_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    // The server is not there yet: recordings of 24 MiB (three parts, the 8 Mbit/s clip)
    // wait for it.
    let s3_port = free_port();
    let s3_dir = tmp.path().join("s3");
    std::fs::create_dir_all(s3_dir.join("nvr")).unwrap();
    let place = S3Server { child: Command::new("true").spawn().unwrap(), port: s3_port, dir: s3_dir.clone() };
    // 8 Mbit/s: a recording over 9.5 MiB goes in parts (over `ARCHIVE_WHOLE_MAX_MS` at the
    // cap), and the cap holds each part 8 s after the one before, so most runs (1 to 5 s)
    // store a part and are killed before the next: each start goes on from a kill.
    let port = archived_config(&dir, &place, ("site", "max_kbit_s = 8000"), &["gate"], ("h264-heavy.mp4", "192 MiB"));
    drop(place);
    let mut d = Daemon::start(&dir);
    d.wait_log("recording to", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(40));
    d.stop();
    let mut logs = vec![d.log_text()];
    let server = S3Server::start_on(&s3_dir, "nvr", s3_port);
    let mut seed = wall_us() as u64 | 1;
    for _ in 0..20 {
        let mut d = Daemon::start(&dir);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(1_000 + seed % 4_000));
        d.kill9();
        logs.push(d.log_text());
    }
    // Once more, left to drain what waits: without the cap, which only made the kills fall
    // within parts (at it, what waits would drain at the cap less what is recorded meanwhile,
    // 1 MB/s, minutes beside the other tests).
    let config = dir.join("keeppeek.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("max_kbit_s = 8000", "")).unwrap();
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin""#);
    let drained = wait_until(Duration::from_secs(120), || {
        let (_, _, body) =
            request(port, "GET", "/api/system/archive", &[("authorization", &format!("Bearer {token}"))], "");
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        v["targets"][0]["backlog"]["objects"] == 0 && v["targets"][0]["state"] == "idle"
    });
    assert!(drained, "the backlog drained within 120 s:\n{}", d.log_text());
    d.stop();
    logs.push(d.log_text());

    // Parts: a part stored again only when the run that stored it before was killed right
    // after (its answer came, its note did not); an upload resumed goes on from its next part.
    let runs: Vec<Vec<(String, u64)>> = logs
        .iter()
        .map(|log| {
            log.lines()
                .filter(|l| l.contains("archive part stored"))
                .map(|line| {
                    let field = |name: &str| {
                        let v = line.split(&format!("{name}=")).nth(1).unwrap().split_whitespace().next().unwrap();
                        v.trim_matches('"').to_string()
                    };
                    (field("key"), field("part").parse().unwrap())
                })
                .collect()
        })
        .collect();
    let last_in_run = |run: usize, key: &str| runs[run].iter().rev().find(|(k, _)| k == key).map(|(_, p)| *p);
    let mut stored: std::collections::BTreeMap<(String, u64), usize> = Default::default();
    let (mut resumed, mut again) = (0, 0);
    for (run, parts) in runs.iter().enumerate() {
        let mut seen_in_run = std::collections::BTreeSet::new();
        for (key, part) in parts {
            if let Some(before) = stored.get(&(key.clone(), *part)) {
                assert!(
                    last_in_run(*before, key) == Some(*part) && *before > 0 && *before < runs.len() - 1,
                    "{key} part {part} stored again in run {run}, though run {before} went on past it"
                );
                again += 1;
            }
            if *part > 1 && seen_in_run.insert(key.clone()) && stored.contains_key(&(key.clone(), part - 1)) {
                resumed += 1;
            }
            seen_in_run.insert(key.clone());
            stored.insert((key.clone(), *part), run);
        }
    }
    let kills = 20;
    eprintln!(
        "parts stored: {} distinct, {again} again after a kill; uploads that went on after a kill: {resumed}",
        stored.len()
    );
    assert!(resumed >= 1, "at least one upload went on after a kill from where it was");
    assert!(again <= kills, "{again} parts stored again over {kills} kills");
    assert!(stored.len() >= 6, "uploads in parts happened: {stored:?}");
    // What the bucket holds.
    let recs = Daemon::start_stopped(&dir).recordings();
    let bucket = server.dir.join("nvr");
    let held = recordings_in(&bucket);
    let mut ids = std::collections::BTreeSet::new();
    for (key, file) in &held {
        let id: u64 = key.rsplit('/').next().unwrap().trim_end_matches(".mp4").parse().unwrap();
        assert!(ids.insert(id), "recording {id} is one object");
        let rec =
            recs.iter().find(|r| r["id"].as_u64() == Some(id)).unwrap_or_else(|| panic!("{key}: no recording {id}"));
        let local = std::fs::read(dir.join("data").join(rec["path"].as_str().unwrap())).unwrap();
        let bytes = rec["bytes"].as_u64().unwrap() as usize;
        assert!(std::fs::read(file).unwrap() == local[..bytes], "{key} is its recording's bytes");
    }
    let closed = recs.iter().filter(|r| !r["open"].as_bool().unwrap()).count();
    assert!(held.len() + 1 >= closed, "{} of {closed} closed recordings archived", held.len());
    for e in described(&bucket) {
        let stored = std::fs::read(bucket.join(&e.key)).unwrap_or_else(|_| panic!("{} is named but not there", e.key));
        assert_eq!(etag_of(&stored, &e.etag), e.etag, "{}", e.key);
    }
    assert!(described(&bucket).len() >= held.len().saturating_sub(1), "the manifests name what was archived");
}

/// The window `kill -9` seldom hits, made on purpose: an upload the server put together
/// whose note the box never wrote (its answer came, the box was killed), and an upload the
/// server never knew (or dropped); and one whose first part was noted at another size, as a
/// firmware of another `ARCHIVE_PART_BYTES` would have cut it. `s3s-fs` answers a request of
/// either of the first two with 403
/// `AccessDenied` (S3 says 404 `NoSuchUpload`): the box tells that from refused keys (a HEAD
/// with them passes), takes the first as stored without sending it again, and starts the
/// second afresh; the object the third's parts make is not the file's size, so it is deleted
/// and the recording goes again.
#[test]
fn an_upload_the_server_no_longer_knows_is_taken_as_stored_or_started_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    let s3_dir = tmp.path().join("s3");
    let place = S3Server::stand_in(&s3_dir, "nvr", free_port());
    // Recordings of about 24 MiB (three or four parts): the 8 Mbit/s clip.
    let port = archived_config(&dir, &place, ("site", ""), &["gate"], ("h264-heavy.mp4", "192 MiB"));
    let mut d = Daemon::start(&dir);
    let closed = wait_until(Duration::from_secs(120), || d.log_text().matches("recording to").count() >= 4);
    assert!(closed, "three recordings closed: {}", d.log_text());
    d.stop();
    let recs: Vec<Value> = d.recordings().into_iter().filter(|r| !r["open"].as_bool().unwrap()).collect();
    assert!(recs.len() >= 3, "{recs:?}");
    let server = S3Server::start_on(&s3_dir, "nvr", place.port);
    drop(place);
    let bucket = Bucket::new(server.place("nvr", SECRET_KEY)).unwrap();
    let stream = keeppeek::base::StreamKey::new("gate", keeppeek::base::StreamKind::Main);
    let key_of = |r: &Value| {
        keeppeek::archive::object_key("site", &stream, r["id"].as_u64().unwrap(), r["wall_start_us"].as_i64().unwrap())
    };
    let bytes_of = |r: &Value| {
        let local = std::fs::read(d.data().join(r["path"].as_str().unwrap())).unwrap();
        Bytes::from(local[..r["bytes"].as_u64().unwrap() as usize].to_vec())
    };
    let (done, dropped) = (&recs[0], &recs[1]);
    // The first: uploaded and put together by the server, its note left at its parts.
    let parts = runtime().block_on(async {
        let key = key_of(done);
        let id = bucket.start_upload(&key, wall_us()).await.unwrap();
        let body = bytes_of(done);
        let mut parts = Vec::new();
        for (n, chunk) in body.chunks(keeppeek::limits::ARCHIVE_PART_BYTES).enumerate() {
            let part = Bytes::copy_from_slice(chunk);
            parts.push(bucket.upload_part(&key, &id, n as u16 + 1, part, wall_us()).await.unwrap());
        }
        bucket.complete_upload(&key, &id, &parts, wall_us()).await.unwrap();
        (id, parts)
    });
    assert!(parts.1.len() >= 2, "a multipart upload");
    let catalog = keeppeek::catalog::Catalog::open(&d.data().join("catalog.redb")).unwrap();
    let upload =
        |key: String, id: &str, parts: Vec<String>| keeppeek::catalog::archive::Upload { key, id: id.into(), parts };
    let id_of = |r: &Value| r["id"].as_u64().unwrap();
    catalog.set_archive_upload("offsite", id_of(done), Some(&upload(key_of(done), &parts.0, parts.1))).unwrap();
    // The second: an upload id the server never gave.
    let unknown = "0b2cd7a4-5a4e-4a43-9d1c-1d7e3f7b2a10";
    catalog.set_archive_upload("offsite", id_of(dropped), Some(&upload(key_of(dropped), unknown, vec![]))).unwrap();
    // The third: its first part noted at another size (as a firmware of another
    // ARCHIVE_PART_BYTES would have cut it): the parts sent after it would make another
    // object, which is not kept.
    let recut = &recs[2];
    let (recut_id, recut_part) = runtime().block_on(async {
        let key = key_of(recut);
        let id = bucket.start_upload(&key, wall_us()).await.unwrap();
        let first = bytes_of(recut).slice(..5 << 20);
        (id.clone(), bucket.upload_part(&key, &id, 1, first, wall_us()).await.unwrap())
    });
    catalog
        .set_archive_upload("offsite", id_of(recut), Some(&upload(key_of(recut), &recut_id, vec![recut_part])))
        .unwrap();
    drop(catalog);

    let mut d = Daemon::start(&dir);
    let stored = server.dir.join("nvr");
    let all = wait_until(Duration::from_secs(120), || {
        [done, dropped, recut].iter().all(|r| std::fs::read(stored.join(key_of(r))).is_ok_and(|b| b == bytes_of(r)))
    });
    let log = d.log_text();
    assert!(all, "all three stored, byte for byte:\n{log}");
    assert!(log.contains("the server no longer knows the upload"), "the unknown upload started again:\n{log}");
    assert!(log.contains("not the file's size; it goes again"), "the recut one started again:\n{log}");
    let key = key_of(done);
    assert!(
        !log.lines().any(|l| l.contains("archive part stored") && l.contains(&key)),
        "{key} was not sent again:\n{log}"
    );
    assert!(!log.contains("refused: HTTP 403"), "never taken for refused keys:\n{log}");
    d.stop();
    let _ = port;
}

/// The target's state as `/api/system/archive` says it.
fn target_state(port: u16, token: &str) -> Value {
    let (code, _, body) =
        request(port, "GET", "/api/system/archive", &[("authorization", &format!("Bearer {token}"))], "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["targets"][0].clone()
}

/// The server away for 60 s, then keys it refuses: recording goes on in one run with no gap,
/// the backlog grows and is shown with why, and drains once the server (or the key) is back;
/// every closed recording ends up archived, once.
#[test]
fn a_server_away_for_a_minute_or_refusing_the_keys_never_stops_recording_and_the_backlog_drains() {
    let tmp = tempfile::tempdir().unwrap();
    let s3_dir = tmp.path().join("s3");
    let mut server = S3Server::start(&s3_dir, "nvr");
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    // Segments of 448 KiB (11 s of the clip); retention keeps eight, longer than the minute
    // away (retention that waits for the archive is `before_delete`).
    let port = archived_config(&dir, &server, ("house", ""), &["porch"], ("h264.mp4", "3.5 MiB"));
    let started_us = wall_us();
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin""#);
    let bucket = server.dir.join("nvr");
    assert!(wait_until(Duration::from_secs(30), || !recordings_in(&bucket).is_empty()), "a first upload");

    server.kill();
    let away = std::time::Instant::now();
    let away_from_us = wall_us();
    let mut peak = 0;
    while away.elapsed() < Duration::from_secs(60) {
        let t = target_state(port, &token);
        peak = peak.max(t["backlog"]["objects"].as_u64().unwrap());
        std::thread::sleep(Duration::from_secs(2));
    }
    let t = target_state(port, &token);
    assert_eq!((t["state"].as_str(), t["error_kind"].as_str()), (Some("waiting"), Some("later")), "{t}");
    assert!(t["backlog"]["oldest_us"].as_i64().unwrap() < wall_us() - 40_000_000, "{t}");
    assert!(peak >= 2, "the backlog grew while the server was away: {peak}");
    let away_us = (away_from_us, wall_us());
    let server = S3Server::start_on(&s3_dir, "nvr", server.port);
    let drained = wait_until(Duration::from_secs(90), || {
        let t = target_state(port, &token);
        t["backlog"]["objects"] == 0 && t["error"].is_null()
    });
    assert!(drained, "the backlog drained: {}\n{}", target_state(port, &token), d.log_text());
    d.stop();
    let stopped_us = wall_us();

    // Keys the server refuses: shown as such, nothing stored, recording goes on.
    let config = dir.join("keeppeek.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace(SECRET_KEY, "a-secret-it-refuses")).unwrap();
    let stored_before = recordings_in(&bucket).len();
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let refused = wait_until(Duration::from_secs(40), || target_state(port, &token)["error_kind"] == "credentials");
    assert!(refused, "the refusal is shown: {}", target_state(port, &token));
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(recordings_in(&bucket).len(), stored_before, "nothing is stored with keys refused");
    d.stop();
    std::fs::write(&config, text).unwrap();
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let drained = wait_until(Duration::from_secs(60), || {
        let t = target_state(port, &token);
        t["backlog"]["objects"] == 0 && t["error"].is_null() && t["uploaded_objects"].as_u64().unwrap() > 0
    });
    assert!(drained, "the backlog drained once the keys were right: {}", target_state(port, &token));
    d.stop();

    let recs = d.recordings();
    let held = recordings_in(&bucket);
    let closed: Vec<&Value> = recs.iter().filter(|r| !r["open"].as_bool().unwrap()).collect();
    for r in &closed[..closed.len() - 1] {
        let id = r["id"].as_u64().unwrap();
        assert!(held.iter().any(|(k, _)| k.ends_with(&format!("/{id:010}.mp4"))), "recording {id} is archived");
    }
    // The first daemon's recordings, as the archive holds them: across the minute away, no
    // gap.
    let mut first: Vec<_> =
        described(&bucket).into_iter().filter(|e| (started_us..stopped_us).contains(&e.wall_start_us)).collect();
    first.sort_by_key(|e| e.wall_start_us);
    assert!(
        first[0].wall_start_us < away_us.0 && first.last().unwrap().wall_end_us > away_us.1,
        "it covers the minute away"
    );
    for w in first.windows(2) {
        let gap = w[1].wall_start_us - w[0].wall_end_us;
        assert!(gap.abs() < 250_000, "a gap of {gap} µs between recordings {} and {}", w[0].id, w[1].id);
    }
    drop(server);
}

/// `what = "events"`: only the recordings around an event are archived; the others wait
/// (an event may still come for them) and are not sent.
/// Events only: recordings without an event stay home; an event is archived as its latest
/// revision, its snapshot byte for byte, in its camera's events manifest, and is read back
/// (its list and its snapshot) through the API as another box would.
#[test]
fn a_target_of_events_only_archives_the_footage_around_an_event_and_the_event() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    let port = archived_config(&dir, &server, ("house", "what = \"events\""), &["porch"], ("h264.mp4", "2 MiB"));
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""events:write", "admin""#);
    // Three recordings close with no event.
    d.wait_log("recording to", 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(20));
    let bucket = server.dir.join("nvr");
    assert!(recordings_in(&bucket).is_empty(), "nothing without an event: {:?}", recordings_in(&bucket));
    let at_us = wall_us();
    // The event, then a revision of it with another snapshot and label.
    let mut id = 0;
    for (n, labels) in [(1, r#"["person"]"#), (2, r#"["person","car"]"#)] {
        let envelope = format!(
            r#"{{"id":"gate-1","camera":"porch","time_us":{at_us},"labels":{labels},"text":"at the gate","record":false}}"#
        );
        let (code, body) = crate::events::post_event(port, &token, &envelope, Some(&crate::events::snapshot(n)));
        assert_eq!(code, 201, "{body}");
        id = body["id"].as_u64().unwrap();
    }
    let archived = wait_until(Duration::from_secs(40), || {
        !described(&bucket).is_empty() && events_described(&bucket).iter().any(|e| e.rev == 2)
    });
    assert!(archived, "the event and its recording are archived: {}", d.log_text());
    let events = events_described(&bucket);
    let e = events.iter().find(|e| e.rev == 2).unwrap();
    assert_eq!(
        (e.id, e.time_us, &e.labels[..], e.text.as_str()),
        (id, at_us, &["person".to_string(), "car".into()][..], "at the gate")
    );
    let snap = e.snapshot.clone().expect("its snapshot");
    let day = keeppeek::archive::utc_day(at_us);
    assert_eq!(snap.key, format!("house/events/porch/{day}/{id:010}.jpg"));
    let stored = std::fs::read(bucket.join(&snap.key)).unwrap();
    let (code, local) = get_bytes(port, &token, &format!("/api/events/{id}/snapshot"));
    assert_eq!(code, 200);
    assert!(stored == local && stored == crate::events::snapshot(2), "the latest revision's snapshot, byte for byte");
    assert_eq!((snap.bytes, snap.etag.trim_matches('"')), (stored.len() as u64, etag_of(&stored, &snap.etag).as_str()));
    // Read back through the API, as another box reads it.
    let q = format!("camera=porch&from_us={}&to_us={}", at_us - 1_000_000, at_us + 1_000_000);
    let listed = get_json_with(port, &token, &format!("/api/archive/offsite/events?{q}"));
    assert_eq!(listed["events"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["events"][0]["rev"].as_u64(), Some(2), "{listed}");
    let path = |event: u64| format!("/api/archive/offsite/snapshot.jpg?box=house&camera=porch&day={day}&event={event}");
    assert_eq!(get_bytes(port, &token, &path(id)), (200, stored.clone()));
    assert_eq!(get_bytes(port, &token, &path(id + 1)).0, 404, "no such event in the bucket");
    let bad = format!("/api/archive/offsite/snapshot.jpg?camera=../x&day={day}&event={id}");
    assert_eq!(get_bytes(port, &token, &bad).0, 400);
    let bad = format!("/api/archive/offsite/recordings?stream=../x/main&{q}");
    assert_eq!(get_bytes(port, &token, &bad).0, 400, "a camera's name names no other place");
    assert!(target_state(port, &token)["uploaded_events"].as_u64().unwrap() >= 1);

    // A snapshot that cannot be read (a bad sector; here a directory where its file was)
    // holds nothing back: after ARCHIVE_SNAPSHOT_TRIES reads the event goes without it.
    server.kill();
    let envelope = format!(
        r#"{{"id":"gate-2","camera":"porch","time_us":{},"labels":["cat"],"text":"unreadable","record":false}}"#,
        wall_us()
    );
    let (code, body) = crate::events::post_event(port, &token, &envelope, Some(&crate::events::snapshot(3)));
    assert_eq!(code, 201, "{body}");
    let unread = body["id"].as_u64().unwrap();
    let file = d.data().join(keeppeek::events::snapshot_path(unread, 1));
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    let server = S3Server::start_on(&server.dir, "nvr", server.port);
    let without = wait_until(Duration::from_secs(60), || {
        events_described(&bucket).iter().any(|e| e.id == unread && e.snapshot.is_none())
    });
    let log = d.log_text();
    assert!(without, "the event archived without its snapshot:\n{log}");
    let said = format!("goes without its snapshot, unread {} times", keeppeek::limits::ARCHIVE_SNAPSHOT_TRIES);
    assert!(log.contains(&said), "{said}:\n{log}");
    drop(server);
    d.stop();
    let recs = d.recordings();
    let closed_before = recs.iter().filter(|r| r["wall_end_us"].as_i64().unwrap() < at_us - 10_000_000).count();
    assert!(closed_before >= 1, "recordings without an event closed: {closed_before}");
    for e in described(&bucket) {
        // The camera's default pre- and post-roll around the event's moment.
        assert!(
            e.wall_start_us <= at_us + 60_000_000 && e.wall_end_us >= at_us - 60_000_000,
            "{} is the event's",
            e.key
        );
    }
    let held = recordings_in(&bucket);
    assert!(held.len() < recs.len(), "not every recording is archived: {} of {}", held.len(), recs.len());
}

/// `before_delete`: local retention waits for the archive, past the stream's cap, until the
/// backlog reaches `backlog_max`; then the oldest go anyway, counted in the API and
/// `/metrics`. Once the server is there the backlog drains and retention catches up: every
/// recording ever made is then local, in the bucket, or one of those counted. `keep_days`
/// deletes the bucket's older days (1,001 objects: more than one pass's ceiling) and keeps
/// today's.
#[test]
fn retention_waits_for_the_archive_up_to_its_backlog_ceiling_and_old_days_leave_the_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    let s3_dir = tmp.path().join("s3");
    let place = S3Server::stand_in(&s3_dir, "nvr", free_port());
    // The 332 kbit/s clip (41 kB/s) in segments of 128 KiB: the cap is 25 s of it, the
    // backlog's ceiling 38 s.
    let extra = "before_delete = true\nbacklog_max = \"1.5 MiB\"\nkeep_days = 1";
    let port = archived_config(&dir, &place, ("house", extra), &["porch"], ("h264.mp4", "1 MiB"));
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin", "metrics""#);
    let segments = |d: &Daemon| dir_bytes(&d.data().join("recordings"));
    let over_cap = wait_until(Duration::from_secs(60), || segments(&d) > 1_300_000);
    assert!(over_cap, "the stream grew past its cap: {} bytes\n{}", segments(&d), d.log_text());
    assert!(!d.log_text().contains("retention deleted"), "nothing deleted below the backlog's ceiling");
    let counted = wait_until(Duration::from_secs(40), || {
        target_state(port, &token)["deleted_unarchived"].as_u64().unwrap_or(0) >= 1
    });
    assert!(counted, "past the ceiling the oldest go, counted: {}\n{}", target_state(port, &token), d.log_text());
    let (_, _, metrics) = request(port, "GET", "/metrics", &[("authorization", &format!("Bearer {token}"))], "");
    assert!(metrics.contains("keeppeek_archive_deleted_unarchived_total{target=\"offsite\"} "), "{metrics}");
    assert!(segments(&d) < 2_200_000, "the backlog past its ceiling is not kept: {}", segments(&d));

    // An old day in the bucket: 1,000 recordings, a manifest part and an event's snapshot.
    let server = S3Server::start_on(&s3_dir, "nvr", place.port);
    drop(place);
    let bucket = Bucket::new(server.place("nvr", SECRET_KEY)).unwrap();
    runtime().block_on(async {
        let old = "house/recordings/porch/main/2020-01-01";
        for i in 0..1_000 {
            bucket.put(&format!("{old}/{i:010}.mp4"), Bytes::from_static(b"old"), wall_us()).await.unwrap();
        }
        let manifest = "house/manifests/porch/main/2020-01-01/000.json";
        bucket.put(manifest, Bytes::from_static(b"{}"), wall_us()).await.unwrap();
        let snapshot = "house/events/porch/2020-01-01/0000000001.jpg";
        bucket.put(snapshot, Bytes::from_static(b"old"), wall_us()).await.unwrap();
    });
    let stored = server.dir.join("nvr");
    let drained = wait_until(Duration::from_secs(120), || {
        // Drained: what waits closed in the last few seconds (one recording every 3 s, the
        // backlog counted every 5 s).
        let t = target_state(port, &token);
        let recent = t["backlog"]["oldest_us"].as_i64().is_none_or(|o| o > wall_us() - 12_000_000);
        recent && t["error"].is_null() && !objects(&stored).iter().any(|(k, _)| k.contains("2020-01-01"))
    });
    assert!(drained, "the backlog drained and the old day went: {}\n{}", target_state(port, &token), d.log_text());
    let caught_up = wait_until(Duration::from_secs(20), || segments(&d) < 1_300_000);
    assert!(caught_up, "retention caught up with the cap: {} bytes", segments(&d));
    let counted = target_state(port, &token)["deleted_unarchived"].as_u64().unwrap();
    d.stop();
    let log = d.log_text();
    assert!(log.contains("old days' deletion goes on in another pass"), "the pass's ceiling was reached:\n{log}");

    let recs = d.recordings();
    let local: std::collections::BTreeSet<u64> = recs.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    let archived: std::collections::BTreeSet<u64> = recordings_in(&stored)
        .iter()
        .map(|(k, _)| k.rsplit('/').next().unwrap().trim_end_matches(".mp4").parse().unwrap())
        .collect();
    let newest = *local.last().unwrap();
    let lost = (1..=newest).filter(|id| !local.contains(id) && !archived.contains(id)).count() as u64;
    assert_eq!(
        lost, counted,
        "every recording is local, archived, or counted (local {local:?}, archived {archived:?})"
    );
    assert!(archived.len() >= 4, "{archived:?}");
    for e in described(&stored) {
        assert!(stored.join(&e.key).exists(), "{} is named but not there", e.key);
    }
}

/// The ids of the recordings a daemon's log says retention deleted.
fn deleted_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("retention deleted"))
        .filter_map(|l| l.split("recording=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect()
}

/// Two boxes (two daemons, two data dirs) archive into one bucket under their own prefixes.
/// Each lists both (`/api/archive` and `keeppeek archive list`); a range one box deleted
/// locally plays from the bucket on that box and on the other (read-only), the same bytes,
/// decoded whole by ffmpeg, with byte ranges.
#[test]
fn two_boxes_in_one_bucket_list_both_and_play_each_others_archived_footage() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let boxes: Vec<_> = [("site/a", "porch"), ("site/b", "yard")]
        .iter()
        .map(|(prefix, camera)| {
            let dir = tmp.path().join(prefix.replace('/', "-"));
            std::fs::create_dir_all(&dir).unwrap();
            // Segments of 128 KiB (3 s); retention keeps 25 s, once archived.
            let port =
                archived_config(&dir, &server, (prefix, "before_delete = true"), &[camera], ("h264.mp4", "1 MiB"));
            (dir, port)
        })
        .collect();
    let mut daemons: Vec<_> = boxes.iter().map(|(dir, _)| Daemon::start(dir)).collect();
    let mut tokens = Vec::new();
    for (d, (_, port)) in daemons.iter().zip(&boxes) {
        d.wait_log("web face listening", 1, Duration::from_secs(20));
        let admin = setup_admin(*port);
        tokens.push(make_token(*port, &admin, r#""view", "admin""#));
    }
    let ((dir_a, port_a), (_, port_b)) = (&boxes[0], &boxes[1]);
    // Box a deletes a recording it archived.
    let bucket = server.dir.join("nvr");
    let mut gone = None;
    let found = wait_until(Duration::from_secs(90), || {
        let described = described(&bucket);
        gone = deleted_ids(&daemons[0].log_text())
            .into_iter()
            .find_map(|id| described.iter().find(|e| e.id == id && e.key.starts_with("site/a/")).cloned());
        gone.is_some() && described.iter().any(|e| e.key.starts_with("site/b/"))
    });
    assert!(found, "box a deleted a recording it archived, box b archived one:\n{}", daemons[0].log_text());
    let gone = gone.unwrap();
    let (from, to) = (gone.wall_start_us, gone.wall_end_us);

    // Each box lists both.
    for (port, token) in [(*port_a, &tokens[0]), (*port_b, &tokens[1])] {
        let (code, _, body) =
            request(port, "GET", "/api/archive", &[("authorization", &format!("Bearer {token}"))], "");
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let listed: Vec<(String, Vec<String>)> = v["targets"][0]["boxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                let streams =
                    b["streams"].as_array().unwrap().iter().map(|s| s["stream"].as_str().unwrap().to_string());
                (b["prefix"].as_str().unwrap().to_string(), streams.collect())
            })
            .collect();
        assert_eq!(
            listed,
            vec![("site/a".into(), vec!["porch/main".into()]), ("site/b".into(), vec!["yard/main".into()])],
            "{v}"
        );
    }
    let out = succeed(keeppeek().args(["archive", "list", "--json"]).arg(dir_a.join("keeppeek.toml")));
    let v: Value = serde_json::from_slice(&out).unwrap();
    let prefixes: Vec<&str> = v[0]["boxes"].as_array().unwrap().iter().map(|b| b["prefix"].as_str().unwrap()).collect();
    assert_eq!(prefixes, ["site/a", "site/b"], "{v}");
    let text =
        String::from_utf8(succeed(keeppeek().args(["archive", "list"]).arg(dir_a.join("keeppeek.toml")))).unwrap();
    assert!(text.contains("site/a (this box)") && text.contains("yard/main: 1 days"), "{text}");

    // The range is gone locally, and plays from the bucket: on box a, and on box b reading
    // box a's archive.
    let range = format!("from_us={from}&to_us={to}");
    let (code, _) = get_bytes(*port_a, &tokens[0], &format!("/api/streams/porch/main/export.mp4?{range}"));
    assert_eq!(code, 404, "the range is no longer on box a's disk");
    let (code, body) =
        get_bytes(*port_a, &tokens[0], &format!("/api/archive/offsite/recordings?stream=porch/main&{range}"));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((code, v["box"].as_str()), (200, Some("site/a")), "{v}");
    assert!(v["recordings"].as_array().unwrap().iter().any(|r| r["id"] == gone.id), "{v}");
    let (code, own) =
        get_bytes(*port_a, &tokens[0], &format!("/api/archive/offsite/export.mp4?stream=porch/main&{range}"));
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&own));
    let path = format!("/api/archive/offsite/export.mp4?box=site%2Fa&stream=porch%2Fmain&{range}");
    let (code, other) = get_bytes(*port_b, &tokens[1], &path);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&other));
    assert!(own == other, "box b reads box a's archive as box a does ({} and {} bytes)", own.len(), other.len());
    let file = tmp.path().join("archived.mp4");
    std::fs::write(&file, &own).unwrap();
    assert_decodes(&file);
    let packets = ffprobe_packets(&file);
    let seconds = packets.last().map_or(0.0, |p| p.pts_s + p.duration_s) - packets[0].pts_s;
    let want = (to - from) as f64 / 1e6;
    assert!((seconds - want).abs() < 1.5, "the export is the recording's {want:.1} s: {seconds:.1} s");
    assert!(packets[0].key, "it starts on a keyframe");
    // A byte range of it, as a <video> asks.
    let (code, head, part) = request(
        *port_b,
        "GET",
        &path,
        &[("authorization", &format!("Bearer {}", tokens[1])), ("range", "bytes=1000-1999")],
        "",
    );
    assert_eq!(code, 206, "{head}");
    assert!(head.to_lowercase().contains(&format!("content-range: bytes 1000-1999/{}", own.len())), "{head}");
    assert!(!part.is_empty());
    // A box it does not know, and a stream it does not have.
    let (code, _) = get_bytes(
        *port_b,
        &tokens[1],
        &format!("/api/archive/offsite/export.mp4?box=site%2Fc&stream=porch%2Fmain&{range}"),
    );
    assert_eq!(code, 404);
    let (code, _) =
        get_bytes(*port_b, &tokens[1], &format!("/api/archive/nowhere/recordings?stream=porch%2Fmain&{range}"));
    assert_eq!(code, 404);
    for d in &mut daemons {
        d.stop();
    }
}

/// A proxy in front of an S3 server that, while `slow` is set, answers every request as a
/// busy S3 does (`503 SlowDown`, the error AWS documents), and otherwise passes the
/// connection through untouched.
struct SlowDownProxy {
    port: u16,
    slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl SlowDownProxy {
    fn start(upstream: u16) -> SlowDownProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, a) = (slow.clone(), answered.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (slow, answered) = (s.clone(), a.clone());
                std::thread::spawn(move || {
                    let mut conn = conn;
                    // The request's head, and its body when it has one.
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if conn.read(&mut byte).unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    if slow.load(Ordering::SeqCst) {
                        let text = String::from_utf8_lossy(&head).to_lowercase();
                        let len: usize = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        let mut body = vec![0u8; len];
                        let _ = conn.read_exact(&mut body);
                        let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
                                   <Message>Please reduce your request rate.</Message></Error>";
                        let answer = format!(
                            "HTTP/1.1 503 Slow Down\r\ncontent-type: application/xml\r\ncontent-length: {}\r\n\
                             connection: close\r\n\r\n{xml}",
                            xml.len()
                        );
                        let _ = conn.write_all(answer.as_bytes());
                        answered.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    let Ok(mut up) = std::net::TcpStream::connect(("127.0.0.1", upstream)) else { return };
                    if up.write_all(&head).is_err() {
                        return;
                    }
                    let (mut up2, mut conn2) = (up.try_clone().unwrap(), conn.try_clone().unwrap());
                    let back = std::thread::spawn(move || {
                        let _ = std::io::copy(&mut up2, &mut conn2);
                        let _ = conn2.shutdown(std::net::Shutdown::Both);
                    });
                    let _ = std::io::copy(&mut conn, &mut up);
                    let _ = up.shutdown(std::net::Shutdown::Both);
                    let _ = back.join();
                });
            }
        });
        SlowDownProxy { port, slow, answered }
    }
}

/// A tmpfs of `bytes` mounted at `dir`, unmounted when dropped: a bucket that really fills.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, bytes: u64) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mounting a tmpfs at {} (the tests run as root)", dir.display());
        SmallDisk(dir.to_path_buf())
    }

    fn grow(&self, bytes: u64) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={bytes}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "growing the tmpfs at {}", self.0.display());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A server that answers `503 SlowDown`, then a bucket whose disk is full (s3s-fs on a
/// 1 MiB tmpfs): each is shown, recording goes on with no gap, and once the server takes
/// requests and has room again the backlog drains; every closed recording is then archived
/// once, as its bytes, and every manifest names objects that are there.
#[test]
fn a_server_answering_slow_down_then_a_full_bucket_never_stop_recording_and_the_backlog_drains() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let s3_dir = tmp.path().join("s3");
    let disk = SmallDisk::mount(&s3_dir, 1 << 20);
    let server = S3Server::start(&s3_dir, "nvr");
    let proxy = SlowDownProxy::start(server.port);
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    // Segments of 256 KiB (6 s of the clip); retention keeps 16 of them.
    let place = S3Server::stand_in(&tmp.path().join("unused"), "nvr", proxy.port);
    let port = archived_config(&dir, &place, ("house", ""), &["porch"], ("h264.mp4", "4 MiB"));
    drop(place);
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin""#);
    let bucket = server.dir.join("nvr");

    let busy = wait_until(Duration::from_secs(40), || {
        let t = target_state(port, &token);
        t["error_kind"] == "later" && t["error"].as_str().is_some_and(|e| e.contains("SlowDown"))
    });
    assert!(busy, "SlowDown is shown: {}\n{}", target_state(port, &token), d.log_text());
    assert!(recordings_in(&bucket).is_empty(), "nothing stored while the server is busy");
    let slowed = proxy.answered.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(10));
    let retried = proxy.answered.load(Ordering::SeqCst) - slowed;
    assert!((1..=8).contains(&retried), "the target waits between tries (backing off): {retried} in 10 s");

    // The server takes requests: the 1 MiB disk fills.
    proxy.slow.store(false, Ordering::SeqCst);
    let full = wait_until(Duration::from_secs(60), || {
        let t = target_state(port, &token);
        !recordings_in(&bucket).is_empty() && t["state"] == "waiting" && t["backlog"]["objects"].as_u64() >= Some(2)
    });
    assert!(full, "the full bucket stops the uploads and is shown: {}\n{}", target_state(port, &token), d.log_text());
    eprintln!("a full bucket shows as: {}", target_state(port, &token));

    // Room again: the backlog drains.
    disk.grow(256 << 20);
    let drained = wait_until(Duration::from_secs(90), || {
        let t = target_state(port, &token);
        t["error"].is_null() && t["backlog"]["oldest_us"].as_i64().is_none_or(|o| o > wall_us() - 15_000_000)
    });
    assert!(drained, "the backlog drained: {}\n{}", target_state(port, &token), d.log_text());
    d.stop();
    let recs = d.recordings();
    let porch: Vec<_> = recs.iter().filter(|r| !r["open"].as_bool().unwrap()).collect();
    for pair in porch.windows(2) {
        let gap = pair[1]["wall_start_us"].as_i64().unwrap() - pair[0]["wall_end_us"].as_i64().unwrap();
        assert!(gap.abs() < 1_000_000, "recording went on with no gap: {gap} µs between two recordings");
    }
    let held = recordings_in(&bucket);
    let mut ids = std::collections::BTreeSet::new();
    for (key, file) in &held {
        let id: u64 = key.rsplit('/').next().unwrap().trim_end_matches(".mp4").parse().unwrap();
        assert!(ids.insert(id), "recording {id} is one object");
        let rec = recs.iter().find(|r| r["id"].as_u64() == Some(id)).unwrap();
        let local = std::fs::read(d.data().join(rec["path"].as_str().unwrap())).unwrap();
        assert!(std::fs::read(file).unwrap() == local[..rec["bytes"].as_u64().unwrap() as usize], "{key}");
    }
    assert!(held.len() + 1 >= porch.len(), "{} of {} closed recordings archived", held.len(), porch.len());
    for e in described(&bucket) {
        assert!(bucket.join(&e.key).exists(), "{} is named but not there", e.key);
    }
}

/// The box's clock an hour ahead (keeppeek under libfaketime; the server's is right): the
/// target says it is the box's clock and by how much, and stores nothing, rather than
/// failing on signatures without end; recording goes on. With the clock right again the
/// backlog drains.
#[test]
fn a_box_clock_an_hour_off_is_reported_as_the_clock_and_the_backlog_drains_once_it_is_right() {
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    let port = archived_config(&dir, &server, ("house", ""), &["porch"], ("h264.mp4", "2 MiB"));
    // libfaketime preloaded into keeppeek itself (its `faketime` wrapper would take the
    // signals meant for keeppeek); only the wall clock is moved.
    let files = Command::new("dpkg").args(["-L", "libfaketime"]).output().expect("dpkg -L libfaketime");
    let lib = String::from_utf8_lossy(&files.stdout)
        .lines()
        .find(|l| l.ends_with("/libfaketime.so.1"))
        .expect("libfaketime is installed (tools/test.sh installs the faketime package)")
        .to_string();
    let mut ahead = keeppeek();
    ahead.env("LD_PRELOAD", lib).env("FAKETIME", "+1h").env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    let mut d = Daemon::start_program(ahead, &dir, &[]);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin""#);
    let clock = wait_until(Duration::from_secs(40), || target_state(port, &token)["error_kind"] == "clock");
    let t = target_state(port, &token);
    assert!(clock, "the box's clock is named: {t}\n{}", d.log_text());
    let off = t["clock_off_s"].as_i64().unwrap();
    assert!((off - 3600).abs() < 120, "an hour off: {off} s");
    d.wait_log("recording to", 2, Duration::from_secs(30));
    let bucket = server.dir.join("nvr");
    assert!(recordings_in(&bucket).is_empty(), "nothing stored with the clock off");
    let failures = t["failures"].as_u64().unwrap();
    assert!(failures <= 3, "it waits rather than failing on and on: {failures} failures");
    d.stop();

    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let drained = wait_until(Duration::from_secs(60), || {
        let t = target_state(port, &token);
        t["error"].is_null() && t["uploaded_objects"].as_u64() >= Some(2)
    });
    assert!(drained, "with the clock right the backlog drains: {}\n{}", target_state(port, &token), d.log_text());
    d.stop();
}

/// A manifest part of `stream` on `day` (which starts at `day_us`) under `prefix` naming `n`
/// recordings from id `from`, each 1 µs long, `id` µs into the day.
fn manifest_of(prefix: &str, stream: &str, (day, day_us): (&str, i64), part: u32, from: u64, n: u64) -> Bytes {
    use keeppeek::archive::manifest::{Entry, Manifest, VERSION, encode};
    let recordings = (from..from + n)
        .map(|id| Entry {
            id,
            key: format!("{prefix}/recordings/{stream}/{day}/{id:010}.mp4"),
            bytes: 10,
            etag: "e".into(),
            codec: "h264".into(),
            width: 1,
            height: 1,
            audio: None,
            wall_start_us: day_us + id as i64,
            wall_end_us: day_us + id as i64 + 1,
            media_duration_90k: 1,
            init_bytes: 1,
            frames: 1,
            fragments: vec![],
        })
        .collect();
    let m = Manifest {
        version: VERSION,
        box_id: "b".into(),
        prefix: prefix.into(),
        stream: stream.into(),
        day: day.into(),
        part,
        recordings,
        events: Vec::new(),
    };
    Bytes::from(encode(&m))
}

/// Reading a bucket stops at its ceilings, each refused with what to do: more boxes than
/// `ARCHIVE_BOXES_MAX`, more list requests than `ARCHIVE_READ_LISTS_MAX`, a prefix deeper
/// than `ARCHIVE_PREFIX_LEVELS_MAX` (not a box), a range over `ARCHIVE_READ_DAYS_MAX` days,
/// more recordings than `ARCHIVE_READ_ENTRIES_MAX`.
#[test]
fn reading_a_bucket_stops_at_its_ceilings() {
    use keeppeek::archive::read::Reader;
    use keeppeek::limits;
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let bucket = std::sync::Arc::new(Bucket::new(server.place("nvr", SECRET_KEY)).unwrap());
    let reader = Reader::new(bucket.clone(), keeppeek::clock::RealClocks::shared());
    let day = "2026-12-06";
    let day_us = 1_796_515_200_000_000;
    let rt = runtime();
    rt.block_on(async {
        let put = |key: String, body: Bytes| {
            let bucket = bucket.clone();
            async move { bucket.put(&key, body, wall_us()).await.unwrap() }
        };
        // Four levels deep is a box; five is not looked for.
        put(
            format!("a/b/c/d/manifests/cam/main/{day}/000.json"),
            manifest_of("a/b/c/d", "cam/main", (day, day_us), 0, 1, 1),
        )
        .await;
        put(
            format!("a/b/c/d/e/manifests/cam/main/{day}/000.json"),
            manifest_of("a/b/c/d/e", "cam/main", (day, day_us), 0, 1, 1),
        )
        .await;
        let boxes = reader.boxes().await.unwrap();
        let prefixes: Vec<_> = boxes.iter().map(|b| b.prefix.as_str()).collect();
        assert_eq!(prefixes, ["a/b/c/d"], "ARCHIVE_PREFIX_LEVELS_MAX levels at most");
        assert_eq!(boxes[0].streams[0].days, [day]);
        // A range across midnight reads both days: from 23:00 to 01:00 finds what started
        // on the second.
        let next_us = day_us + 86_400_000_000;
        let next = manifest_of("a/b/c/d", "cam/main", ("2026-12-07", next_us), 0, 1_800_000_000, 1);
        put("a/b/c/d/manifests/cam/main/2026-12-07/000.json".into(), next).await;
        let runs = reader.runs("a/b/c/d", "cam/main", next_us - 3_600_000_000, next_us + 3_600_000_000).await.unwrap();
        assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [1_800_000_000]);

        // More recordings in a range than a read returns.
        let per_part = 7_000;
        let parts = (limits::ARCHIVE_READ_ENTRIES_MAX as u64).div_ceil(per_part);
        for part in 0..=parts as u32 {
            let from = 1 + u64::from(part) * per_part;
            put(
                format!("big/manifests/cam/main/{day}/{part:03}.json"),
                manifest_of("big", "cam/main", (day, day_us), part, from, per_part),
            )
            .await;
        }
        let e = reader.runs("big", "cam/main", day_us, day_us + 86_400_000_000).await.unwrap_err();
        assert!(e.to_string().contains("more than 20000 recordings"), "{e}");
        let few = reader.runs("big", "cam/main", day_us, day_us + 100).await.unwrap();
        assert_eq!(few.len(), 99, "a shorter range is read");
        // A range of more days than a read covers.
        let days_us = |n: i64| n * 86_400_000_000;
        let longest = limits::ARCHIVE_READ_DAYS_MAX as i64 - 1;
        assert!(reader.runs("a/b/c/d", "cam/main", day_us, day_us + days_us(longest)).await.is_ok());
        let e = reader.runs("a/b/c/d", "cam/main", day_us, day_us + days_us(longest + 1)).await.unwrap_err();
        assert!(e.to_string().contains("days"), "{e}");

        // More directories than a walk lists (in a bucket of their own).
        std::fs::create_dir_all(server.dir.join("junk")).unwrap();
        let junk = std::sync::Arc::new(Bucket::new(server.place("junk", SECRET_KEY)).unwrap());
        // Two levels, so no page holds more than a page's keys.
        for i in 0..limits::ARCHIVE_READ_LISTS_MAX {
            let key = format!("junk-{}/{:04}/x", i % 2, i / 2);
            junk.put(&key, Bytes::from_static(b"x"), wall_us()).await.unwrap();
        }
        let e = Reader::new(junk, keeppeek::clock::RealClocks::shared()).boxes().await.unwrap_err();
        assert!(e.to_string().contains("list requests"), "{e}");
        // More boxes than a listing names (two are there already).
        for i in 0..limits::ARCHIVE_BOXES_MAX - 2 {
            put(format!("box-{i:03}/manifests/cam/main/{day}/000.json"), Bytes::from_static(b"{}")).await;
        }
        assert_eq!(reader.boxes().await.unwrap().len(), limits::ARCHIVE_BOXES_MAX);
        put(format!("box-999/manifests/cam/main/{day}/000.json"), Bytes::from_static(b"{}")).await;
        let e = reader.boxes().await.unwrap_err();
        assert!(e.to_string().contains("more than 64 boxes"), "{e}");
    });
}

/// Archive targets set from the web face (the config API the Settings page uses): added,
/// changed and removed while the box runs, each taken at once with no camera stopped; the
/// secret never comes back; a removed target stops.
#[test]
fn targets_set_from_the_web_face_start_change_and_stop_while_the_cameras_record_on() {
    use crate::config_apply::call;
    use serde_json::json;
    let tmp = tempfile::tempdir().unwrap();
    let server = S3Server::start(&tmp.path().join("s3"), "nvr");
    let dir = tmp.path().join("box");
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let clip = fixtures().join("h264.mp4");
    write_config(
        &dir,
        &format!(
            "listen = \"127.0.0.1:{port}\"\nflush_interval_s = 1\n[retention]\nstream_max_bytes = \"2 MiB\"\n\
             total_max_bytes = \"1 GiB\"\n[[cameras]]\nname = \"porch\"\nmain = {{ url = \"file://{}\" }}\n",
            clip.display()
        ),
    );
    let mut d = Daemon::start(&dir);
    d.wait_log("web face listening", 1, Duration::from_secs(20));
    let admin = setup_admin(port);
    let token = make_token(port, &admin, r#""admin""#);
    let apply = |changes: Value| {
        let (_, snap) = call(port, &admin, "GET", "/api/config", &Value::Null);
        let set = json!({ "base": snap["rev"], "changes": changes });
        let (code, plan) = call(port, &admin, "POST", "/api/config/plan", &set);
        assert_eq!(code, 200, "{plan}");
        let (code, answer) = call(port, &admin, "POST", "/api/config/apply", &set);
        assert_eq!(code, 200, "{answer}");
        plan
    };
    let set =
        |field: &str, value: Value| json!({ "op": "set", "key": format!("archive.offsite.{field}"), "value": value });
    let plan = apply(json!([
        set("endpoint", json!(format!("http://127.0.0.1:{}", server.port))),
        set("bucket", json!("nvr")),
        set("prefix", json!("house")),
        set("access_key", json!(ACCESS_KEY)),
        set("secret_key", json!(SECRET_KEY)),
        set("cameras", json!(["porch"])),
    ]));
    assert_eq!(plan["effect"]["restart_box"], json!([]), "{plan}");
    assert_eq!((plan["effect"]["restart"].clone(), plan["effect"]["stop"].clone()), (json!([]), json!([])), "{plan}");
    assert!(plan["effect"]["live"].to_string().contains("archive.offsite.bucket"), "{plan}");
    assert!(!plan.to_string().contains(SECRET_KEY), "the secret is not shown: {plan}");
    let (_, snap) = call(port, &admin, "GET", "/api/config", &Value::Null);
    let t = &snap["settings"]["archive"][0];
    assert_eq!(
        (t["id"].as_str(), t["secret_key"].as_str(), t["cameras"].clone()),
        (Some("offsite"), Some("set"), json!(["porch"]))
    );
    assert!(!snap.to_string().contains(SECRET_KEY));
    let bucket = server.dir.join("nvr");
    let stored =
        |prefix: &str| recordings_in(&bucket).iter().filter(|(k, _)| k.starts_with(&format!("{prefix}/"))).count();
    assert!(wait_until(Duration::from_secs(40), || stored("house") >= 1), "the new target archives:\n{}", d.log_text());

    // Changed: the target starts again under its new prefix.
    apply(json!([set("prefix", json!("house-2"))]));
    assert!(
        wait_until(Duration::from_secs(40), || stored("house-2") >= 1),
        "the changed target archives:\n{}",
        d.log_text()
    );

    // Removed: it stops.
    apply(json!([{ "op": "set", "key": "archive.offsite", "value": null }]));
    let gone = wait_until(Duration::from_secs(5), || target_state(port, &token).is_null());
    assert!(gone, "no target is left: {}", target_state(port, &token));
    let before = recordings_in(&bucket).len();
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(recordings_in(&bucket).len(), before, "a removed target uploads no more");
    let log = d.log_text();
    assert!(!log.contains("camera stopped"), "no camera stopped for the archive's changes:\n{log}");
    assert_eq!(log.matches("archive target stopped").count(), 2, "{log}");
    d.stop();
    let text = std::fs::read_to_string(dir.join("keeppeek.toml")).unwrap();
    assert!(!text.contains("[archive"), "the file no longer has the target:\n{text}");
}
