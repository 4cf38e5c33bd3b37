//! Build steps:
//! - stamps the build time into the binary: a wall clock earlier than the firmware's own build
//!   cannot be right, which is how KeepPeek tells an unset clock on a board without an RTC;
//! - gzips every file of `ui-static/` once, here, and writes the table `src/http/ui.rs`
//!   serves from, so the box never compresses at run time and adding a file needs no code.

use std::io::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-changed=build.rs");
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0));
    println!("cargo:rustc-env=KEEPPEEK_BUILD_UNIX_S={secs}");
    ui_table();
}

/// The content type of a UI file, by extension; a file of another kind fails the build.
fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => panic!("ui-static/{name}: add its content type to build.rs"),
    }
}

fn ui_table() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui-static");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("ui");
    std::fs::create_dir_all(&out).expect("create OUT_DIR/ui");
    println!("cargo:rerun-if-changed={}", src.display());
    let mut names: Vec<String> = std::fs::read_dir(&src)
        .expect("read ui-static/")
        .map(|e| e.expect("read ui-static/").file_name().into_string().expect("UTF-8 file names in ui-static/"))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    let mut table = String::from("&[\n");
    for name in &names {
        let raw = src.join(name);
        println!("cargo:rerun-if-changed={}", raw.display());
        let bytes = std::fs::read(&raw).expect("read a UI file");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&bytes).expect("gzip in memory");
        let gz_path = out.join(format!("{name}.gz"));
        std::fs::write(&gz_path, gz.finish().expect("gzip in memory")).expect("write OUT_DIR/ui");
        let path = if name == "index.html" { "/".to_string() } else { format!("/{name}") };
        table.push_str(&format!(
            "    UiFile {{ path: {path:?}, raw: include_bytes!({raw:?}), gzip: include_bytes!({gz:?}), content_type: {ct:?} }},\n",
            raw = raw.display().to_string(),
            gz = gz_path.display().to_string(),
            ct = content_type(name),
        ));
    }
    table.push(']');
    std::fs::write(out.join("files.rs"), table).expect("write OUT_DIR/ui/files.rs");
}
