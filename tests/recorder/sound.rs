//! Sound from cameras: AAC, G.711 µ-law and A-law, and Opus recorded as the second track of
//! each segment, in step with the video.
//!
//! The RTSP test camera (gst-rtsp-server) sends its fixtures' sound: a quiet 440 Hz tone with
//! a loud 1 kHz burst at 5.0-5.2 s of every 10 s loop, where video frame 75 (bar-coded in the
//! picture) is. In a recording, ffmpeg finds each burst (its `silencedetect` at -20 dB) and the
//! test finds frame 75 in the decoded picture: they must line up within 100 ms.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::events::{EventsBox, events_box_of, post_event};

/// The camera's paths with sound: the catalog's name of the codec, ffprobe's, and the
/// length of one audio frame (a packet, for G.711 and Opus) in seconds, and how long before
/// its pictures the camera sends a moment's sound. `pcmu-late`'s pictures leave the camera
/// 600 ms after their sound (its sender reports say so): a session that begins gets no
/// sound for the first 600 ms of pictures (it went out before), so the first segment's
/// sound may start that much after its first picture.
const KINDS: [(&str, &str, &str, &str, f64, f64); 5] = [
    ("aac", "/h264-aac", "aac", "aac", 1024.0 / 48_000.0, 0.0),
    ("pcmu", "/h264-pcmu", "pcmu", "pcm_mulaw", 0.020, 0.0),
    ("pcmu-late", "/h264-pcmu-late", "pcmu", "pcm_mulaw", 0.020, 0.6),
    ("pcma", "/h265-pcma", "pcma", "pcm_alaw", 0.020, 0.0),
    ("opus", "/h264-opus", "opus", "opus", 0.020, 0.0),
];

#[test]
fn aac_g711_and_opus_are_recorded_with_the_video_and_the_tone_on_its_frame() {
    let cam = Camera::start();
    let dir = tempfile::tempdir().unwrap();
    let mut config = String::from(
        // Segments of 512 KiB (an eighth of the stream's cap): 10-14 s of these streams, so
        // each run has a segment that ends at a keyframe mid-run.
        "flush_interval_s = 2\n[retention]\nstream_max_bytes = \"4 MiB\"\ntotal_max_bytes = \"64 MiB\"\n",
    );
    for (name, path, ..) in KINDS {
        config += &format!("[[cameras]]\nname = \"{name}\"\nmain = {{ url = \"{}\" }}\n", cam.url(path));
    }
    write_config(dir.path(), &config);
    let mut d = Daemon::start(dir.path());
    for (name, ..) in KINDS {
        d.wait_log(&format!("recording to recordings/{name}/main"), 1, Duration::from_secs(20));
    }
    std::thread::sleep(Duration::from_secs(23));
    d.stop();
    std::fs::copy(&d.log, dir.path().join("run.log")).unwrap();

    let recs = d.recordings();
    for (name, _, codec, ffprobe_codec, frame_s, lead_s) in KINDS {
        let mine = of_stream(&recs, &format!("{name}/main"));
        let secs = seconds(&mine);
        assert!(secs >= 20.0, "{name}: only {secs} s recorded");
        assert!(mine.len() >= 2, "{name}: {} segments", mine.len());
        let (mut bursts, mut worst_burst_s, mut worst_edge_s) = (0, 0.0f64, 0.0f64);
        for (i, r) in mine.iter().enumerate() {
            let path = d.data().join(r["path"].as_str().unwrap());
            assert_eq!(r["audio"], codec, "{name}: {r}");
            assert_recording_matches_file(&d.data(), r);
            assert_decodes(&path);
            assert_eq!(stream_codec(&path, "a:0"), ffprobe_codec, "{}", path.display());
            let late_start_s = if i == 0 { lead_s } else { 0.0 };
            let edge_s = assert_tracks_agree(&path, frame_s, late_start_s, i + 1 == mine.len());
            worst_edge_s = worst_edge_s.max(edge_s);
            let (n, worst) = assert_bursts_on_frame_75(&path);
            (bursts, worst_burst_s) = (bursts + n, worst_burst_s.max(worst));
        }
        eprintln!(
            "{name}: {} segments, {secs:.1} s; audio and video edges apart by at most {:.1} ms (the run's end aside); \
             {bursts} tone bursts, at most {:.1} ms from frame 75",
            mine.len(),
            worst_edge_s * 1e3,
            worst_burst_s * 1e3
        );
        assert!(bursts >= 2, "{name}: {bursts} tone bursts in {secs} s of recording");
    }
    let v = d.check();
    assert!(v["problems"].as_array().unwrap().is_empty(), "{v}");
}

/// An event recording from a camera with sound (G.711, 1 s GOPs; 5 s of pre-roll, 6 s of
/// post-roll) has its sound from its first keyframe, to its end, with the tone on its frame.
#[test]
fn an_event_recording_has_its_sound_from_its_first_keyframe() {
    let cam = Camera::start();
    let cameras = format!(
        "[[cameras]]\nname = \"door\"\nrecord = \"events\"\npre_roll_s = 5\npost_roll_s = 6\nmain = {{ url = \"{}\" }}\n",
        cam.url("/h264-pcmu")
    );
    let EventsBox { dir: _dir, port, daemon: mut d, writer, metrics, .. } =
        events_box_of("flush_interval_s = 1\n", &cameras);
    let stream = |name: &str| sample(port, &metrics, &format!("{name}{{stream=\"door/main\"}}"));
    let up = wait_until(Duration::from_secs(20), || stream("keeppeek_stream_connected") == Some(1));
    assert!(up, "the camera connects: {}", d.log_text());
    // The history fills: 5 s of pre-roll and the GOP it starts in.
    std::thread::sleep(Duration::from_secs(8));
    let e = format!(r#"{{"camera":"door","time_us":{},"labels":["person"]}}"#, wall_us());
    let (code, answer) = post_event(port, &writer, &e, None);
    assert_eq!(code, 201, "{answer}");
    let done = wait_until(Duration::from_secs(20), || stream("keeppeek_event_recordings_finished_total") == Some(1));
    assert!(done, "an event recording: {}", d.log_text());
    d.stop();
    let recs = d.recordings();
    assert_eq!(recs.len(), 1, "{recs:?}");
    let rec = &recs[0];
    assert_eq!(rec["audio"], "pcmu", "{rec}");
    let path = d.data().join(rec["path"].as_str().unwrap());
    assert_decodes(&path);
    let numbers = frame_numbers(&path, 1);
    assert!(numbers[0].is_multiple_of(15), "starts at a keyframe: frame {}", numbers[0]);
    // It ends at the keyframe after the post-roll, mid-run: both ends within one packet.
    let edges = assert_tracks_agree(&path, 0.020, 0.0, false);
    let (bursts, worst) = assert_bursts_on_frame_75(&path);
    assert!(bursts >= 1, "{bursts} tone bursts in {} s", rec["media_duration_90k"].as_f64().unwrap() / 90_000.0);
    eprintln!(
        "event recording: starts at frame {}, audio and video edges {:.1} ms apart, {bursts} bursts at most {:.1} ms from frame 75",
        numbers[0],
        edges * 1e3,
        worst * 1e3
    );
}

/// ffprobe's name of the codec of `stream` (`a:0`) in the file.
fn stream_codec(path: &Path, stream: &str) -> String {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", stream, "-show_entries", "stream=codec_name", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe");
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The audio track starts and ends with the video, each within one audio frame, and its
/// timestamps increase. A run's last segment (`last`: the daemon stopped) ends with its
/// last video frame given the duration of the one before, a guess, and without the sound
/// the camera had not sent yet: there its audio may end up to a video frame earlier. Its
/// audio may start up to `late_start_s` after its video (sound sent before the session).
/// Returns how far apart the edges were (the run's end aside).
fn assert_tracks_agree(path: &Path, frame_s: f64, late_start_s: f64, last: bool) -> f64 {
    let audio = ffprobe_stream_packets(path, "a:0");
    let video = ffprobe_packets(path);
    assert!(!audio.is_empty(), "{} has no audio", path.display());
    for w in audio.windows(2) {
        assert!(w[1].pts_s > w[0].pts_s, "{}: audio timestamps do not increase: {w:?}", path.display());
    }
    let (a0, v0) = (audio[0].pts_s, video[0].pts_s);
    let a_end = audio.last().map(|p| p.pts_s + p.duration_s).unwrap();
    // ffprobe gives FLAC packets in MP4 no duration: the last one's is its decoded samples.
    let a_end = if audio.last().unwrap().duration_s > 0.0 { a_end } else { last_audio_frame_end_s(path) };
    let v_end = video.last().map(|p| p.pts_s + p.duration_s).unwrap();
    // A frame, and 5 ms: the test camera's Opus encoder, starved on a loaded machine, may
    // step its timestamps by a few ms, and the recording follows the camera's clock.
    let slack = frame_s + 5e-3;
    let end_slack = if last { slack + 1.0 / 15.0 } else { slack };
    let starts_in_step = (a0 - v0).abs() <= slack || (a0 >= v0 && a0 - v0 <= late_start_s + slack);
    if !(starts_in_step && (a_end - v_end).abs() <= end_slack) {
        fail(
            path,
            &format!("audio {a0:.4}..{a_end:.4} s, video {v0:.4}..{v_end:.4} s (one audio frame is {frame_s:.4} s)"),
        );
    }
    let start_apart = if late_start_s > 0.0 { 0.0 } else { (a0 - v0).abs() };
    if last { start_apart } else { start_apart.max((a_end - v_end).abs()) }
}

/// Fails the test on `path`: keeps the file and the daemon's logs (the test's directory's
/// `*.log`) for whoever reads the failure, and prints what the logs say of sound.
fn fail(path: &Path, why: &str) -> ! {
    let dir = path.ancestors().find(|d| d.join("keeppeek.toml").exists()).unwrap_or(Path::new("."));
    let kept = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("failed-{}", wall_us()));
    let _ = std::fs::create_dir_all(&kept);
    // The whole recording (the test's cameras' few MB), for the segments around `path`.
    let _ = Command::new("cp").arg("-a").arg(dir).arg(kept.join("dir")).status();
    let _ = std::fs::copy(path, kept.join(path.file_name().unwrap()));
    let mut said = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().extension().is_some_and(|e| e == "log") {
            let _ = std::fs::copy(entry.path(), kept.join(entry.file_name()));
            let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
            said += &format!("--- {}:\n", entry.file_name().to_string_lossy());
            for line in log.lines().filter(|l| l.contains("sound") || l.contains("audio") || l.contains("segment")) {
                said += line;
                said.push('\n');
            }
        }
    }
    panic!("{}: {why}\nkept in {}\n{said}", path.display(), kept.display());
}

/// Where the file's last decoded audio frame ends, s.
fn last_audio_frame_end_s(path: &Path) -> f64 {
    let probe = |entries: &str| {
        let out = Command::new("ffprobe")
            .args(["-v", "error", "-select_streams", "a:0", "-show_entries", entries, "-of", "csv=p=0"])
            .arg(path)
            .output()
            .expect("ffprobe runs");
        assert!(out.status.success(), "ffprobe {}", path.display());
        String::from_utf8(out.stdout).unwrap()
    };
    let rate: f64 = probe("stream=sample_rate").trim().parse().expect("the audio's sample rate");
    let frames = probe("frame=pts_time,nb_samples");
    let last = frames.lines().rfind(|l| !l.trim().is_empty()).expect("decoded audio frames");
    let (pts, samples) = last.split_once(',').expect("pts_time,nb_samples");
    pts.parse::<f64>().unwrap() + samples.trim().parse::<f64>().unwrap() / rate
}

/// Each tone burst in the file starts within 100 ms of a picture of frame 75 (mod 150: the
/// clip is 10 s at 15 fps); returns how many there were and the farthest.
fn assert_bursts_on_frame_75(path: &Path) -> (usize, f64) {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-nostdin", "-i"])
        .arg(path)
        .args(["-map", "0:a:0", "-af", "silencedetect=n=-20dB:d=0.1", "-f", "null", "-"])
        .output()
        .expect("ffmpeg");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let log = String::from_utf8_lossy(&out.stderr);
    let onsets: Vec<f64> = log
        .lines()
        .filter_map(|l| l.split("silence_end: ").nth(1))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    let video = ffprobe_packets(path);
    let numbers = frame_numbers(path, video.len());
    assert_eq!(numbers.len(), video.len(), "{}: every frame decoded", path.display());
    let marked: Vec<f64> = video.iter().zip(&numbers).filter(|(_, n)| *n % 150 == 75).map(|(p, _)| p.pts_s).collect();
    let last_pts = video.last().map_or(0.0, |p| p.pts_s);
    let (mut bursts, mut worst) = (0, 0.0f64);
    for onset in onsets {
        // The end of silence at the file's end is no burst.
        if onset > last_pts {
            continue;
        }
        let nearest = marked.iter().map(|m| (m - onset).abs()).fold(f64::INFINITY, f64::min);
        if nearest > 0.100 {
            // What is around it, and the file itself, for whoever reads the failure.
            let near = |p: &&Packet| (p.pts_s - onset).abs() < 0.3;
            let audio: Vec<_> =
                ffprobe_stream_packets(path, "a:0").iter().filter(near).map(|p| (p.pts_s, p.duration_s)).collect();
            let video: Vec<_> =
                video.iter().zip(&numbers).filter(|(p, _)| near(p)).map(|(p, n)| (p.pts_s, *n)).collect();
            fail(
                path,
                &format!(
                    "a tone burst at {onset:.3} s, the nearest frame 75 {nearest:.3} s away (frames 75 at {marked:?}); \
                     audio packets near (pts, duration) {audio:?}; video near (pts, frame) {video:?}"
                ),
            );
        }
        bursts += 1;
        worst = worst.max(nearest);
    }
    (bursts, worst)
}

/// Exports of cameras with sound, over two runs: AAC and Opus as stored, G.711 as FLAC (which
/// browsers play); each file's sound at its place against its video, so the tone is still on
/// frame 75 across the runs; any byte range of a rebuilt export reads as the whole does.
#[test]
fn exports_over_two_runs_carry_the_sound_at_its_place_and_g711_as_flac() {
    let cam = Camera::start();
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        String::from("flush_interval_s = 2\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n");
    let kinds = [("pcmu", "/h264-pcmu", "flac"), ("aac", "/h264-aac", "aac"), ("opus", "/h264-opus", "opus")];
    for (name, path, _) in kinds {
        config += &format!("[[cameras]]\nname = \"{name}\"\nmain = {{ url = \"{}\" }}\n", cam.url(path));
    }
    write_config(dir.path(), &config);
    let from_s = wall_us() as f64 / 1e6;
    // Two runs of 12 s: each holds a tone burst.
    for run in 0..2 {
        let mut d = Daemon::start(dir.path());
        for (name, ..) in kinds {
            d.wait_log(&format!("recording to recordings/{name}/main"), 1, Duration::from_secs(20));
        }
        std::thread::sleep(Duration::from_secs(12));
        d.stop();
        std::fs::copy(&d.log, dir.path().join(format!("run{run}.log"))).unwrap();
    }
    let to_s = wall_us() as f64 / 1e6;
    let d = Daemon::start_stopped(dir.path());
    for (name, _, codec) in kinds {
        let out = dir.path().join(format!("{name}.mp4"));
        succeed(
            keeppeek()
                .arg("export")
                .arg(&d.config)
                .args(["--stream", &format!("{name}/main"), "--from", &from_s.to_string(), "--to", &to_s.to_string()])
                .arg("--out")
                .arg(&out),
        );
        assert_eq!(stream_codec(&out, "a:0"), codec, "{name}");
        assert_decodes(&out);
        assert_tracks_agree(&out, 0.022, 0.0, true);
        let (bursts, worst) = assert_bursts_on_frame_75(&out);
        assert!(bursts >= 2, "{name}: {bursts} tone bursts in the export");
        eprintln!("{name} export: {codec} audio, {bursts} tone bursts, at most {:.1} ms from frame 75", worst * 1e3);
        if codec != "flac" {
            continue;
        }
        // The rebuilt fragments, read in pieces that start and end anywhere.
        let whole = std::fs::read(&out).unwrap();
        let catalog = keeppeek::catalog::Catalog::open(&d.data().join("catalog.redb")).unwrap();
        let key = keeppeek::base::StreamKey::parse(&format!("{name}/main")).unwrap();
        let ex = keeppeek::export::Export::plan(&catalog, &d.data(), &key, (from_s * 1e6) as i64, (to_s * 1e6) as i64)
            .unwrap();
        assert_eq!(ex.len_bytes, whole.len() as u64);
        let mut at = 0u64;
        let mut got = Vec::new();
        let mut step = 1usize;
        while at < ex.len_bytes {
            let mut buf = vec![0u8; step];
            let n = ex.read_at(at, &mut buf).unwrap();
            assert!(n > 0, "stuck at {at}");
            got.extend_from_slice(&buf[..n]);
            at += n as u64;
            step = step % 997 + 13;
        }
        assert!(got == whole, "pieces read as the whole");
    }
}
