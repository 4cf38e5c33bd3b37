//! The `keeppeek` command line: parse, then hand over to the library.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use keeppeek::catalog::Catalog;
use keeppeek::config::Config;
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
    /// Summarize the recordings in a config's catalog (the recorder must be stopped).
    Recordings {
        config: PathBuf,
        /// Every recording and fragment, as JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
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
        Command::Run { config } => {
            let config = Config::load(&config).map_err(|e| e.to_string())?;
            run_daemon(config)
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
            run_daemon(config)
        }
        Command::CheckConfig { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            println!("{}: ok, {} cameras, data in {}", config.display(), c.cameras.len(), c.data_dir.display());
            Ok(())
        }
        Command::Budget { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let b = budget::compute(&c);
            println!("{b}");
            if b.fits() { Ok(()) } else { Err("the budget does not fit this board".into()) }
        }
        Command::Check { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let catalog = open_catalog(&c.data_dir)?;
            let v = keeppeek::record::verify::check(&catalog, &c.data_dir).map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
            if v.problems.is_empty() { Ok(()) } else { Err(format!("{} problems", v.problems.len())) }
        }
        Command::Export { config, stream, from, to, out } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let catalog = open_catalog(&c.data_dir)?;
            let (from_us, to_us) = ((from * 1e6) as i64, (to * 1e6) as i64);
            let ex = keeppeek::export::Export::plan(&catalog, &c.data_dir, &stream, from_us, to_us)
                .map_err(|e| e.to_string())?;
            let out = out.unwrap_or_else(|| PathBuf::from(ex.file_name(&stream)));
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
    }
}

fn run_daemon(config: Config) -> Result<(), String> {
    // One thread runs every camera session: ingest is light I/O, and a multi-threaded
    // runtime spends more CPU waking its workers than the sessions spend working. Disk I/O
    // has threads of its own (the recorder).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    rt.block_on(daemon::run(config)).map_err(|e| e.to_string())
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
