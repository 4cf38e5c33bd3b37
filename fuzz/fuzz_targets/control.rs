//! The live-view control channel takes whatever a browser sends: a run of messages, each
//! decoded and checked, then applied to its track's play state. Decoding must answer or
//! refuse (never panic), and the state must stay sane whatever the order: a rate within
//! 0.5 to 8, live tracks never paused, a step only while paused.

#![no_main]

use keeppeek::webrtc::control::{self, Command, PlayState};
use libfuzzer_sys::fuzz_target;

const TRACKS: usize = 4;

fuzz_target!(|data: &[u8]| {
    let mut tracks: Vec<PlayState> = (0..TRACKS).map(|_| PlayState::live("a/main".into())).collect();
    let mut rest = data;
    // Messages: a 2-byte length, then that many bytes.
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let (msg, tail) = rest[2..].split_at(len);
        rest = tail;
        let Ok(request) = control::decode(msg, TRACKS) else { continue };
        assert!(request.track < TRACKS);
        let t = &mut tracks[request.track];
        match &request.command {
            Command::PlayLive { stream } => *t = PlayState::live(stream.clone()),
            Command::PlayStored { stream, wall_us } => {
                assert!(*wall_us >= 0);
                *t = PlayState { stored: true, stream: stream.clone(), paused: false, rate: 1.0, step: false };
            }
            Command::Timeline { from_us, to_us, .. } => assert!(from_us < to_us),
            _ => {
                let before = t.clone();
                if t.apply(&request.command).is_err() {
                    assert_eq!(*t, before, "a refused command changes nothing");
                }
            }
        }
        let _ = control::answer(request.id, request.track, Ok(control::Answer::State(t.clone())));
        assert!((0.5..=8.0).contains(&t.rate), "rate {}", t.rate);
        assert!(t.stored || !t.paused, "live video never pauses");
        assert!(!t.step || t.paused, "a step only while paused");
    }
    // The generated decoder itself, on the raw input.
    let _ = control::decode(data, TRACKS);
});
