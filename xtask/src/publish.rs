//! The `package` and `msrv` legs of `cargo xtask ci`: what publishing needs.
//!
//! * `package`: `cargo package` of every published crate, each one built from its `.crate`
//!   file against the others (cargo packages a workspace's path dependencies together), so a
//!   file missing from a package, a path outside it or a dependency without a version fails
//!   here rather than at `cargo publish`.
//! * `msrv`: the published crates' tests built and run with the toolchain named by the
//!   workspace's `rust-version`, installed with rustup (minimal profile) when missing.

use std::process::Command;

use crate::proc::{self, cargo};

/// Workspace members with `publish = false`: tools and test harnesses, never packaged.
pub const UNPUBLISHED: [&str; 4] = ["spindle-bench", "spindle-soak", "spindle-io-tests", "xtask"];

/// `--workspace --exclude <each unpublished crate>`.
fn published() -> Vec<String> {
    let mut args = vec!["--workspace".to_string()];
    for krate in UNPUBLISHED {
        args.push("--exclude".into());
        args.push(krate.into());
    }
    args
}

/// The `package` leg.
pub fn package() -> Result<(), String> {
    // `--allow-dirty`: the leg checks the working tree as it is, committed or not.
    proc::run(
        cargo()
            .args(["package", "--allow-dirty", "--locked"])
            .args(published()),
    )
}

/// The workspace's `rust-version` (`[workspace.package]` in the root `Cargo.toml`).
pub fn rust_version() -> Result<String, String> {
    let path = proc::root().join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("rust-version"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .map(|v| v.trim().trim_matches('"').to_string())
        .next()
        .ok_or_else(|| format!("no rust-version in {}", path.display()))
}

/// The `msrv` leg.
pub fn msrv() -> Result<(), String> {
    let version = rust_version()?;
    if !proc::succeeds(Command::new("rustup").args(["run", &version, "rustc", "--version"])) {
        proc::run(Command::new("rustup").args([
            "toolchain",
            "install",
            &version,
            "--profile",
            "minimal",
        ]))?;
    }
    // Its own target directory: a build by another compiler would replace the main one.
    let target = crate::ci::target_dir()?.join("msrv");
    // The library crates' tests (doctests included), not the tools: those may use newer Rust.
    proc::run(
        Command::new("rustup")
            .current_dir(proc::root())
            .env("CARGO_TARGET_DIR", target)
            .args(["run", &version, "cargo", "test", "--locked"])
            .args(published()),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_workspace_declares_a_rust_version() {
        let v = super::rust_version().unwrap();
        assert!(v.starts_with("1."), "{v}");
    }
}
