//! A change set from the web face is refused with the field it is about, never a panic;
//! one that plans leaves a config that parses again to the same thing, and its answer
//! never carries a camera's password.

#![no_main]

use keeppeek::config::Config;
use keeppeek::config::change::ChangeSet;
use keeppeek::config::plan;
use libfuzzer_sys::fuzz_target;

const FILE: &str = r#"# A box with three cameras.
data_dir = "data"
listen = "0.0.0.0:8080"
[retention]
stream_max_bytes = "8 GiB"
total_max_bytes = "64 GiB"
[[cameras]]
name = "porch"
record = "events"
username = "admin"
password = "pw-porch"
main = { url = "rtsp://192.0.2.1/main" }
sub = { url = "rtsp://192.0.2.1/sub", transport = "udp" }
[[cameras]]
name = "yard"
main = { url = "rtsp://192.0.2.2/main" }
[[cameras]]
name = "gate"
username = "u"
password = "pw-gate"
main = { url = "rtsp://192.0.2.3/main", record = "off" }
"#;

/// The base config, parsed once: most inputs are refused before they reach it.
static CURRENT: std::sync::LazyLock<Config> = std::sync::LazyLock::new(|| {
    Config::parse(FILE, "keeppeek.toml", std::path::Path::new("/")).expect("the base config is valid")
});

fuzz_target!(|data: &[u8]| {
    let base = std::path::Path::new("/");
    let current = &*CURRENT;
    let Ok(set) = ChangeSet::decode(data) else {
        return;
    };
    let earlier = |rev| (rev == 1).then(|| FILE.to_string());
    let Ok(p) = plan::plan(current, FILE, &set, earlier, "keeppeek.toml", base) else {
        return;
    };
    let again = Config::parse(&p.text, "keeppeek.toml", base).expect("a planned file parses");
    assert_eq!(again, p.config);
    let answer = p.answer().to_string();
    for c in &p.config.cameras {
        if let Some(pw) = c.password.as_deref().filter(|pw| pw.len() >= 4) {
            assert!(!answer.contains(&format!("\"{pw}\"")), "a password in the answer");
        }
    }
});
