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
        /// Where the web face will listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
    },
    /// Validate a config file and exit.
    CheckConfig { config: PathBuf },
    /// Print the static memory budget of a config.
    Budget { config: PathBuf },
    /// Recover the catalog as a start would, then check every recording against its file
    /// (the recorder must be stopped). Prints JSON; fails on any disagreement.
    Check { config: PathBuf },
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
    use tracing_subscriber::EnvFilter;
    // retina logs through `log`; bridge it into tracing.
    let _ = tracing_log::LogTracer::init();
    let filter = EnvFilter::try_from_env("KEEPPEEK_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn dispatch(command: Command) -> Result<(), String> {
    match command {
        Command::Run { config } => {
            let config = Config::load(&config).map_err(|e| e.to_string())?;
            run_daemon(config)
        }
        Command::Demo { data_dir, listen } => {
            let data_dir = match data_dir {
                Some(d) => d,
                None => make_temp_dir()?,
            };
            println!(
                "KeepPeek demo: recording the built-in camera into {}",
                data_dir.display()
            );
            println!("(the web face for {listen} comes with the HTTP server; stop with Ctrl-C)");
            run_daemon(Config::demo(data_dir))
        }
        Command::CheckConfig { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            println!(
                "{}: ok, {} cameras, data in {}",
                config.display(),
                c.cameras.len(),
                c.data_dir.display()
            );
            Ok(())
        }
        Command::Budget { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let b = budget::compute(&c);
            println!("{b}");
            if b.fits() {
                Ok(())
            } else {
                Err("the budget does not fit this board".into())
            }
        }
        Command::Check { config } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            let catalog = open_catalog(&c.data_dir)?;
            let v = keeppeek::record::verify::check(&catalog, &c.data_dir)
                .map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
            if v.problems.is_empty() {
                Ok(())
            } else {
                Err(format!("{} problems", v.problems.len()))
            }
        }
        Command::Recordings { config, json } => {
            let c = Config::load(&config).map_err(|e| e.to_string())?;
            print_recordings(&c.data_dir, json)
        }
    }
}

fn run_daemon(config: Config) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
        println!(
            "{}",
            serde_json::to_string_pretty(&dump).map_err(|e| e.to_string())?
        );
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
            println!(
                "  gap {:.1} s from {from} to {to}",
                (to - from) as f64 / 1e6
            );
        }
    }
    Ok(())
}

fn make_temp_dir() -> Result<PathBuf, String> {
    let base = std::env::temp_dir().join(format!("keeppeek-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    Ok(base)
}
