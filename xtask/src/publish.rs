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
    let target = package_target_dir()?;
    forget_stale_packages(&target)?;
    // `--allow-dirty`: the leg checks the working tree as it is, committed or not.
    proc::run(
        cargo()
            .env("CARGO_TARGET_DIR", &target)
            .args(["package", "--allow-dirty", "--locked"])
            .args(published()),
    )
}

/// Where the `package` leg verifies the packaged crates (see [`forget_stale_packages`]).
fn package_target_dir() -> Result<std::path::PathBuf, String> {
    Ok(crate::ci::target_dir()?.join("package-verify"))
}

/// Removes cargo's unpacked and built copies of this workspace's own packages.
///
/// `cargo package --workspace` verifies each crate against the others through a local
/// registry: it unpacks those `.crate` files under `$CARGO_HOME/registry/src/-<hash>/`, where
/// the hash depends only on the workspace's path, and builds them in the target directory.
/// Cargo treats a registry package of a given version as immutable, both unpacked and built,
/// so a later run from the same path would verify against the code of an earlier one (an API
/// added since then is "not found"). The leg therefore builds in a target directory of its own
/// and removes from it, and from the unpacked local registries (named `-<hash>`), everything
/// of this workspace's crates; third-party dependencies stay cached.
fn forget_stale_packages(target: &std::path::Path) -> Result<(), String> {
    let meta = proc::run_stdout(cargo().args(["metadata", "--format-version", "1", "--no-deps"]))?;
    let meta: serde_json::Value =
        serde_json::from_str(&meta).map_err(|e| format!("`cargo metadata` output: {e}"))?;
    let packages: Vec<(String, String)> = meta["packages"]
        .as_array()
        .ok_or("`cargo metadata` gave no packages")?
        .iter()
        .filter_map(|p| {
            Some((
                p["name"].as_str()?.to_string(),
                p["version"].as_str()?.to_string(),
            ))
        })
        .filter(|(name, _)| !UNPUBLISHED.contains(&name.as_str()))
        .collect();
    let remove = |path: &std::path::Path| -> Result<(), String> {
        let result = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        result.map_err(|e| format!("cannot remove stale {}: {e}", path.display()))
    };
    // Built artifacts: `.fingerprint/<crate>-<hash>`, `deps/lib<crate_>-<hash>.*` and
    // `deps/<crate_>-<hash>.d`.
    for dir in ["debug/.fingerprint", "debug/deps", "debug/build"] {
        let Ok(entries) = std::fs::read_dir(target.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let ours = packages.iter().any(|(name, _)| {
                let snake = name.replace('-', "_");
                [
                    format!("{name}-"),
                    format!("{snake}-"),
                    format!("lib{snake}-"),
                ]
                .iter()
                .any(|prefix| file.starts_with(prefix.as_str()))
            });
            if ours {
                remove(&entry.path())?;
            }
        }
    }
    let cargo_home = match std::env::var_os("CARGO_HOME") {
        Some(home) => std::path::PathBuf::from(home),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::Path::new(&home).join(".cargo"),
            None => return Ok(()),
        },
    };
    let Ok(registries) = std::fs::read_dir(cargo_home.join("registry").join("src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for (name, version) in &packages {
            let dir = registry.path().join(format!("{name}-{version}"));
            if dir.is_dir() {
                remove(&dir)?;
            }
        }
    }
    Ok(())
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
