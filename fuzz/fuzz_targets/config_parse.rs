//! A config KeepPeek cannot run is refused with a reason, never a panic.

#![no_main]

use keeppeek::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // `Config::load` reads the file as UTF-8 and refuses anything else before parsing.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Config::parse(text, "fuzz.toml", std::path::Path::new("/"));
});
