//! `cargo xtask soak [--minutes N] [--backend auto|epoll|uring|polling] [...]`: builds
//! `spindle-soak` (crates/soak) in release and runs it; the arguments go to it unchanged (see
//! its crate docs: the load mix, the checks and their bounds). `cargo xtask ci`'s `soak` leg
//! runs [`ci`].

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use crate::ci::target_dir;
use crate::proc::{self, cargo};

/// The Linux backends the CI leg soaks, one after the other.
pub const CI_BACKENDS: [&str; 2] = ["epoll", "uring"];
/// Minutes of load per backend in the CI leg.
pub const CI_MINUTES: &str = "1";

/// Builds the soak binary; returns its path.
fn build() -> Result<PathBuf, String> {
    proc::run(cargo().args(["build", "--release", "-p", "spindle-soak"]))?;
    Ok(target_dir()?.join("release").join("spindle-soak"))
}

/// Runs the soak binary with `args`; `Ok(true)` if every check passed.
fn soak(exe: &PathBuf, args: &[&str]) -> Result<bool, String> {
    let mut cmd = Command::new(exe);
    cmd.args(args).current_dir(proc::root());
    proc::announce(&cmd);
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {}: {e}", exe.display()))?;
    Ok(status.success())
}

pub fn main(args: &[String]) -> Result<ExitCode, String> {
    let exe = build()?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(if soak(&exe, &args)? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The CI leg: a [`CI_MINUTES`]-minute soak on each of [`CI_BACKENDS`].
pub fn ci() -> Result<(), String> {
    let exe = build()?;
    let mut failed = Vec::new();
    for backend in CI_BACKENDS {
        if !soak(&exe, &["--minutes", CI_MINUTES, "--backend", backend])? {
            failed.push(backend);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the soak failed on {}", failed.join(", ")))
    }
}
