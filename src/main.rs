//! The `keeppeek` command line: parse, then hand over to the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use keeppeek::base::StreamKey;
use keeppeek::catalog::Catalog;
use keeppeek::config::Config;
use keeppeek::system::bundle::UpdateError;
use keeppeek::system::{Slot, SystemApi};
use keeppeek::{budget, daemon, report};

#[derive(Parser)]
#[command(name = "keeppeek", version, about = "Network video recorder firmware")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Record the cameras of a config until SIGTERM or SIGINT.
    Run {
        #[arg(long)]
        config: PathBuf,
        /// Where the box's own files are (`/`; another folder in tests).
        #[arg(long, default_value = "/", hide = true)]
        system_root: PathBuf,
    },
    /// Record the built-in camera, no setup needed.
    Demo {
        /// Where to record (a new temporary directory by default).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Where the web face listens.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// The UDP port of live view (WebRTC); 0 turns it off.
        #[arg(long, default_value_t = keeppeek::config::WEBRTC_PORT_DEFAULT)]
        webrtc_port: u16,
    },
    /// Validate a config file and exit.
    CheckConfig { config: PathBuf },
    /// Print the static memory budget of a config.
    Budget { config: PathBuf },
    /// Recover the catalog as a start would, then check every recording against its file
    /// (the recorder must be stopped). Prints JSON; fails on any disagreement.
    Check { config: PathBuf },
    /// Write a stream's time range as one MP4 file (the recorder must be stopped).
    Export {
        config: PathBuf,
        /// The stream, `camera/main` or `camera/sub`.
        #[arg(long)]
        stream: String,
        /// Start, in seconds since the Unix epoch (UTC).
        #[arg(long)]
        from: f64,
        /// End, in seconds since the Unix epoch (UTC).
        #[arg(long)]
        to: f64,
        /// The file to write (default: a name from the stream and start time).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// PID 1 on a KeepPeek image (started by its initramfs).
    Init {
        /// The root slot GRUB booted.
        #[arg(long)]
        slot: String,
    },
    /// Firmware updates on a KeepPeek box.
    Update {
        #[command(subcommand)]
        command: UpdateCommand,
    },
    /// Ask for a factory reset at the next boot (and reboot): the data partition keeps only
    /// what is named.
    FactoryReset {
        /// What to keep: `config`, `recordings` (the catalog with recordings, events and
        /// accounts), comma-separated; nothing by default.
        #[arg(long, value_delimiter = ',')]
        keep: Vec<String>,
        /// Do not reboot now; the reset happens at the next boot.
        #[arg(long)]
        no_reboot: bool,
        #[arg(long, default_value = "/", hide = true)]
        system_root: PathBuf,
    },
    /// Write a support bundle (a tar of the firmware's state, the config with its secrets
    /// replaced, and the logs).
    SupportBundle {
        /// The config (default: the box's).
        #[arg(long, default_value = keeppeek::system::init::CONFIG_PATH)]
        config: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value = "/", hide = true)]
        system_root: PathBuf,
    },
    /// Summarize the recordings in a config's catalog (the recorder must be stopped).
    Recordings {
        config: PathBuf,
        /// Every recording and fragment, as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The offsite archive's buckets: what they hold (the recorder may be running).
    Archive {
        #[command(subcommand)]
        command: ArchiveCommand,
    },
}

#[derive(Subcommand)]
enum ArchiveCommand {
    /// Every box that writes into each target's bucket, with its streams and their days.
    List {
        config: PathBuf,
        /// Only this target (`[archive.<id>]`).
        #[arg(long)]
        target: Option<String>,
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum UpdateCommand {
    /// Install a bundle into the inactive slot; it boots once at the next restart.
    Install {
        file: PathBuf,
        /// Install an older or the same version.
        #[arg(long)]
        force: bool,
        /// Restart into it at once.
        #[arg(long)]
        reboot: bool,
        #[arg(long, default_value = "/", hide = true)]
        system_root: PathBuf,
    },
    /// Print the running slot, both slots' versions and the last update (JSON).
    Status {
        #[arg(long, default_value = "/", hide = true)]
        system_root: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    // One crypto provider for every TLS use in the process (HTTPS, and the clients to come).
    keeppeek::tls::install_provider();
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keeppeek: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    // retina logs through `log`; bridge it into tracing.
    // Its per-packet debug logs stop at `log`'s own level check unless asked for.
    let max =
        if std::env::var_os("KEEPPEEK_LOG").is_some() { log_level_max() } else { tracing_log::log::LevelFilter::Info };
    let _ = tracing_log::LogTracer::builder().with_max_level(max).init();
    // KEEPPEEK_LOG takes `level` or `target=level,...` (e.g. `info,retina=debug`). The
    // targets filter needs no regex engine, which keeps the binary (and so its resident
    // code) small.
    let filter = std::env::var("KEEPPEEK_LOG")
        .ok()
        .and_then(|s| s.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let ansi = std::env::var_os("NO_COLOR").is_none();
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let _ = tracing_subscriber::registry().with(fmt).with(filter).try_init();
}

/// The most verbose `log` level any directive of KEEPPEEK_LOG could want.
fn log_level_max() -> tracing_log::log::LevelFilter {
    let v = std::env::var("KEEPPEEK_LOG").unwrap_or_default().to_ascii_lowercase();
    use tracing_log::log::LevelFilter as L;
    [("trace", L::Trace), ("debug", L::Debug), ("info", L::Info), ("warn", L::Warn), ("error", L::Error)]
        .into_iter()
        .find(|(name, _)| v.contains(name))
        .map_or(L::Info, |(_, l)| l)
}

fn dispatch(command: Command) -> Result<(), String> {
    match command {
        Command::Run { config: path, system_root } => {
            let (config, text) = Config::load_with_text(&path).map_err(|e| e.to_string())?;
            let system = SystemApi::new(system_root, Some(path.clone()));
            let source = daemon::ConfigSource { path, text };
            if run_daemon(config, Some(source), system)? == daemon::Exit::Restart {
                return restart();
            }
            Ok(())
        }
        Command::Init { slot } => {
            let slot = Slot::parse(&slot).ok_or_else(|| format!("--slot is a or b, not `{slot}`"))?;
            keeppeek::system::init::main(slot)
        }
        Command::Update { command: UpdateCommand::Install { file, force, reboot, system_root } } => {
            let api = SystemApi::new(system_root, None);
            let system = api.system.as_ref().ok_or_else(|| UpdateError::NotFirmware.to_string())?;
            let mut f =
                std::io::BufReader::new(std::fs::File::open(&file).map_err(|e| format!("{}: {e}", file.display()))?);
            let done = keeppeek::system::bundle::install(system, &mut f, force).map_err(|e| e.to_string())?;
            println!(
                "installed {} into slot {} ({} bytes): it boots once at the next restart",
                done.version,
                done.slot.name(),
                done.bytes
            );
            if reboot {
                api.reboot()?;
                println!("restarting");
            }
            Ok(())
        }
        Command::Update { command: UpdateCommand::Status { system_root } } => {
            let api = SystemApi::new(system_root, None);
            println!("{}", serde_json::to_string_pretty(&api.status()).map_err(|e| e.to_string())?);
            Ok(())
        }
        Command::FactoryReset { keep, no_reboot, system_root } => {
            let api = SystemApi::new(system_root, None);
            let system = api.system.as_ref().ok_or("a factory reset is for a KeepPeek box")?;
            let req = keeppeek::system::support::ResetRequest { keep };
            keeppeek::system::support::request_factory_reset(&system.data_dir(), &req)?;
            println!(
                "factory reset at the next boot, keeping: {}",
                if req.keep.is_empty() { "nothing".into() } else { req.keep.join(", ") }
            );
            if !no_reboot {
                api.reboot()?;
            }
            Ok(())
        }
        Command::SupportBundle { config, out, system_root } => {
            let api = SystemApi::new(system_root.clone(), Some(config.clone()));
            let bytes = keeppeek::system::support::support_bundle(&system_root, &config, &api.status());
            std::fs::write(&out, &bytes).map_err(|e| format!("{}: {e}", out.display()))?;
            println!("{}: {} bytes", out.display(), bytes.len());
            Ok(())
        }
        Command::Demo { data_dir, listen, webrtc_port } => {
            let data_dir = match data_dir {
                Some(d) => d,
                None => make_temp_dir()?,
            };
            println!("KeepPeek demo: recording the built-in camera into {}", data_dir.display());
            println!("KeepPeek demo: web face on http://{listen}/ (health at /healthz); stop with Ctrl-C");
            let mut config = Config::demo(data_dir, listen);
            config.webrtc.port = webrtc_port;
            run_daemon(config, None, SystemApi::new(PathBuf::from("/"), None)).map(|_| ())
        }
        Command::CheckConfig { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let b = budget::compute(&c);
            if !b.fits() {
                return Err(format!(
                    "{}: the memory budget does not fit this board: {} MiB of {} MiB allowed (see keeppeek budget)",
                    config.display(),
                    b.total_bytes() >> 20,
                    b.allowed_bytes >> 20
                ));
            }
            println!(
                "{}: ok, {} cameras, data in {}, memory budget {} MiB of {} MiB",
                config.display(),
                c.cameras.len(),
                c.data_dir.display(),
                b.total_bytes() >> 20,
                b.allowed_bytes >> 20
            );
            Ok(())
        }
        Command::Budget { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let b = budget::compute(&c);
            println!("{b}");
            if !b.fits() {
                return Err("the budget does not fit this board".into());
            }
            let room = budget::room_for_more(&c);
            match c.cameras.last() {
                Some(last) => println!("room for {room} more {} like {}", cameras(room), last.name),
                None => println!("room for {room} {} with a main and a sub stream, both recorded", cameras(room)),
            }
            Ok(())
        }
        Command::Check { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let catalog = open_catalog(&c.data_dir)?;
            let v = keeppeek::record::verify::check(
                &catalog,
                &c.data_dir,
                keeppeek::clock::Clocks::wall_us(&keeppeek::clock::RealClocks),
            )
            .map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
            if v.problems.is_empty() { Ok(()) } else { Err(format!("{} problems", v.problems.len())) }
        }
        Command::Export { config, stream, from, to, out } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let catalog = open_catalog(&c.data_dir)?;
            let (from_us, to_us) = ((from * 1e6) as i64, (to * 1e6) as i64);
            let key = StreamKey::parse(&stream)
                .ok_or_else(|| format!("{stream}: name a stream as camera/main or camera/sub"))?;
            let ex = keeppeek::export::Export::plan(&catalog, &c.data_dir, &key, from_us, to_us)
                .map_err(|e| e.to_string())?;
            let out = out.unwrap_or_else(|| PathBuf::from(ex.file_name(&key)));
            let mut file =
                std::io::BufWriter::new(std::fs::File::create(&out).map_err(|e| format!("{}: {e}", out.display()))?);
            let n = ex.write_to(&mut file).map_err(|e| e.to_string())?;
            std::io::Write::flush(&mut file).map_err(|e| format!("{}: {e}", out.display()))?;
            println!("{}: {n} bytes, {:.1} s", out.display(), ex.duration_90k as f64 / 90_000.0);
            if ex.cut_at_new_parameters {
                println!("(cut short where the camera changed its codec parameters)");
            }
            Ok(())
        }
        Command::Recordings { config, json } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            print_recordings(&c.data_dir, json)
        }
        Command::Archive { command: ArchiveCommand::List { config, target, json } } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            archive_list(&c, target.as_deref(), json)
        }
    }
}

/// `keeppeek archive list`: reads each target's bucket.
fn archive_list(c: &Config, only: Option<&str>, json: bool) -> Result<(), String> {
    let targets: Vec<_> = c.archive.iter().filter(|t| only.is_none_or(|o| o == t.id)).collect();
    if targets.is_empty() {
        return Err(match only {
            Some(o) => format!("no archive target {o} in the config"),
            None => "the config has no archive target ([archive.<id>])".into(),
        });
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for t in targets {
        let bucket = keeppeek::archive::s3::Bucket::new(t.place.clone()).map_err(|e| format!("{}: {e}", t.id))?;
        let reader =
            keeppeek::archive::read::Reader::new(std::sync::Arc::new(bucket), keeppeek::clock::RealClocks::shared());
        let boxes = rt.block_on(reader.boxes()).map_err(|e| format!("{}: {e}", t.id))?;
        out.push((t, boxes));
    }
    if json {
        let v: Vec<_> = out
            .iter()
            .map(|(t, boxes)| serde_json::json!({ "id": t.id, "prefix": t.prefix, "boxes": boxes }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
        return Ok(());
    }
    for (t, boxes) in out {
        println!(
            "{} ({}/{}): {} boxes",
            t.id,
            t.place.endpoint.as_str().trim_end_matches('/'),
            t.place.bucket,
            boxes.len()
        );
        for b in boxes {
            let own = if b.prefix == t.prefix { " (this box)" } else { "" };
            println!("  {}{own}", b.prefix);
            for s in b.streams {
                let span = match (s.days.first(), s.days.last()) {
                    (Some(first), Some(last)) if first != last => format!("{first} to {last}"),
                    (Some(first), _) => first.clone(),
                    _ => "no days".into(),
                };
                println!("    {}: {} days, {span}", s.stream, s.days.len());
            }
        }
    }
    Ok(())
}

/// Starts keeppeek anew in this process (same PID, same arguments) to apply a config change
/// that cannot be made while it runs; under init on the image and anywhere else alike.
fn restart() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().map_err(|e| format!("restarting: {e}"))?;
    let e = std::process::Command::new(exe).args(std::env::args_os().skip(1)).exec();
    Err(format!("restarting: {e}"))
}

fn run_daemon(config: Config, source: Option<daemon::ConfigSource>, system: SystemApi) -> Result<daemon::Exit, String> {
    if !daemon::limit_malloc_arenas() {
        tracing::warn!("the allocator did not take its arena ceiling (MALLOC_ARENAS_MAX)");
    }
    let rt = daemon::runtime().map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(daemon::run(config, source, std::sync::Arc::new(system))).map_err(|e| e.to_string())
}

fn open_catalog(data_dir: &Path) -> Result<Catalog, String> {
    let path = data_dir.join(daemon::CATALOG_FILE);
    if !path.exists() {
        return Err(format!("no catalog at {}", path.display()));
    }
    Catalog::open(&path).map_err(|e| format!("{}: {e}", path.display()))
}

fn print_recordings(data_dir: &Path, json: bool) -> Result<(), String> {
    let catalog = open_catalog(data_dir)?;
    if json {
        let dump = report::dump(&catalog).map_err(|e| e.to_string())?;
        println!("{}", serde_json::to_string_pretty(&dump).map_err(|e| e.to_string())?);
        return Ok(());
    }
    for s in report::summarize(&catalog).map_err(|e| e.to_string())? {
        println!(
            "{}: {} runs, {} recordings, {} fragments, {} frames, {:.1} MiB, {:.1} s from {} to {}, {} gaps",
            s.stream,
            s.runs,
            s.recordings,
            s.fragments,
            s.frames,
            s.bytes as f64 / 1048576.0,
            (s.end_us - s.start_us) as f64 / 1e6,
            s.start_us,
            s.end_us,
            s.gaps.len()
        );
        for (from, to) in &s.gaps {
            println!("  gap {:.1} s from {from} to {to}", (to - from) as f64 / 1e6);
        }
    }
    Ok(())
}

fn make_temp_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir().join(format!("keeppeek-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    Ok(base)
}

/// "camera" or "cameras", for `n` of them.
fn cameras(n: usize) -> &'static str {
    if n == 1 { "camera" } else { "cameras" }
}
