//! The config keeppeek runs with, and the data partition's layout around it: where the
//! user's config and the board's preset live, what a first boot (or a factory reset asked
//! for at the last boot) writes to `/data` before keeppeek starts, and which of the two
//! configs each start of keeppeek gets.
//!
//! The preset is copied only where there is no config (a first boot, or a factory reset that
//! did not keep it): the user's is never overwritten. [`CONFIG_PROBLEM_PATH`] is written,
//! saying why, at each start of the preset in the user's config's place, and removed at each
//! start of the user's.

use std::path::{Path, PathBuf};

use tracing::{error, info};

/// The user's config, on the data partition.
pub const CONFIG_PATH: &str = "/data/keeppeek.toml";
/// The board's config preset in the root slot (copied to [`CONFIG_PATH`] on first boot).
pub(super) const PRESET_PATH: &str = "/etc/keeppeek/keeppeek.toml";
/// Where init says why the user's config is not the one running (shown by `GET /api/system`).
pub const CONFIG_PROBLEM_PATH: &str = "/run/config-problem";

/// First boot, and factory reset: what `/data` holds before keeppeek starts.
pub fn prepare_data(data: &Path, preset: &Path) -> std::io::Result<()> {
    crate::system::support::apply_factory_reset(data)?;
    std::fs::create_dir_all(data.join("system"))?;
    let config = data.join("keeppeek.toml");
    if !config.exists() {
        let text = std::fs::read(preset)?;
        crate::base::fs::write_synced(&config, &text)?;
        info!("first boot: the board's config written to {}", config.display());
    }
    Ok(())
}

/// The config keeppeek runs with: the user's, unless it does not load or its memory budget
/// does not fit, in which case (outside a trial) the board's preset, so that the web face
/// stays reachable and says what is wrong. A firmware on trial gets no such help: failing
/// with the user's config must roll it back, not mark it good.
/// Why the preset runs is written to `problem_file` (removed when the user's config runs).
pub fn config_to_run(user: &Path, preset: &Path, on_trial: bool, problem_file: &Path) -> PathBuf {
    let problem = match crate::config::Config::load(user) {
        Ok(c) => {
            let b = crate::budget::compute(&c);
            (!b.fits()).then(|| format!("its memory budget does not fit this board:\n{b}"))
        }
        Err(e) => Some(e.to_string()),
    };
    match problem {
        Some(why) if !on_trial && preset.exists() => {
            error!(config = %user.display(), "the config cannot run ({why}); running the board's preset instead until it is fixed");
            let note = format!("{} cannot run, so the board's preset runs instead: {why}\n", user.display());
            let _ = std::fs::write(problem_file, note);
            preset.to_owned()
        }
        _ => {
            let _ = std::fs::remove_file(problem_file);
            user.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::init::health::health_addr;

    #[test]
    fn a_config_that_cannot_run_falls_back_to_the_preset_except_on_trial() {
        let dir = tempfile::tempdir().unwrap();
        let (user, preset) = (dir.path().join("user.toml"), dir.path().join("preset.toml"));
        let problem = dir.path().join("config-problem");
        let good = "data_dir = \"k\"\nlisten = \"127.0.0.1:9\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"1 GiB\"\n";
        std::fs::write(&preset, good).unwrap();
        std::fs::write(&user, good).unwrap();
        assert_eq!(config_to_run(&user, &preset, false, &problem), user);
        std::fs::write(&user, "data_dir = \"k\"\nbogus = 1\n").unwrap();
        assert_eq!(config_to_run(&user, &preset, false, &problem), preset, "a mistake: the preset runs");
        assert!(std::fs::read_to_string(&problem).unwrap().contains("bogus"), "and says why");
        assert_eq!(config_to_run(&user, &preset, true, &problem), user, "on trial: fail and roll back");
        // It loads, but needs more memory than a 64 MiB board has.
        std::fs::write(&user, format!("ram_class = \"64 MiB\"\n{good}")).unwrap();
        assert!(!crate::budget::compute(&crate::config::Config::load(&user).unwrap()).fits());
        assert_eq!(config_to_run(&user, &preset, false, &problem), preset, "over budget: the preset runs");
        std::fs::write(&user, good).unwrap();
        assert_eq!(config_to_run(&user, &preset, false, &problem), user);
        assert!(!problem.exists(), "fixed: the note goes");
    }

    #[test]
    fn first_boot_writes_the_preset_and_leaves_a_users_config_alone() {
        let dir = tempfile::tempdir().unwrap();
        let preset = dir.path().join("preset.toml");
        std::fs::write(&preset, "listen = \"0.0.0.0:8080\"\n").unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        prepare_data(&data, &preset).unwrap();
        assert_eq!(std::fs::read_to_string(data.join("keeppeek.toml")).unwrap(), "listen = \"0.0.0.0:8080\"\n");
        assert!(data.join("system").is_dir());
        let mine = "data_dir = \"keeppeek\"\nlisten = \"0.0.0.0:9000\"\n[retention]\nstream_max_bytes = \"1 GiB\"\ntotal_max_bytes = \"2 GiB\"\n";
        std::fs::write(data.join("keeppeek.toml"), mine).unwrap();
        prepare_data(&data, &preset).unwrap();
        assert_eq!(std::fs::read_to_string(data.join("keeppeek.toml")).unwrap(), mine);
        assert_eq!(health_addr(&data.join("keeppeek.toml")), Some("127.0.0.1:9000".parse().unwrap()));
    }
}
