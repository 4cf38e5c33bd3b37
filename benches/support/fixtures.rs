//! The test fixtures a benchmark reads, made (once, cached under `target/fixtures`) by
//! `tools/make-fixtures.sh`.

use std::path::Path;

/// The bytes of fixture `name`, made first if it is missing.
pub fn fixture(name: &str) -> Vec<u8> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = repo.join("target/fixtures");
    let ok = std::process::Command::new("bash")
        .arg(repo.join("tools/make-fixtures.sh"))
        .arg(&dir)
        .status()
        .expect("running tools/make-fixtures.sh")
        .success();
    assert!(ok, "tools/make-fixtures.sh failed");
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}
