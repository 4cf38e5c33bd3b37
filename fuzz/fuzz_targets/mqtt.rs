//! What a broker sends reaches the box as bytes on its connection: MQTT packets read with
//! rumqttc's codec under the box's packet ceiling, and the commands on the topics the box
//! subscribes to (`mqtt::discovery::parse_command`). Each must be read or refused with an
//! error, never panic; a command names a camera by an object id only.
//!
//! Input: a byte that picks what the rest is (a stream of packets, or a topic and a payload
//! separated by a NUL).

#![no_main]

use bytes::BytesMut;
use keeppeek::mqtt::discovery::{Command, parse_command};
use keeppeek::mqtt::link::take_packet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    if pick % 2 == 0 {
        let mut buf = BytesMut::from(rest);
        // Packets until the bytes run out or one is refused.
        for _ in 0..64 {
            match take_packet(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    } else {
        let (topic, payload) = match rest.iter().position(|b| *b == 0) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        let Ok(topic) = std::str::from_utf8(topic) else { return };
        if let Ok(Some(Command::Continuous { camera, .. } | Command::Mark { camera })) =
            parse_command("keeppeek", "homeassistant", topic, payload)
        {
            assert!(!camera.is_empty() && camera.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        }
    }
});
