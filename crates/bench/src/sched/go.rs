//! The `go` row of `skynet_w2`: crates/bench/go/skynet.go, built with the `go` toolchain at
//! bench time and run as a child process. Go is optional: without it the row errors (nothing
//! else, CI included, needs Go).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

use crate::harness::Ctx;

/// The Go source, where this crate was built from.
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/go/skynet.go");

/// `skynet_w<workers>`, `go`: runs the Go program with `GOMAXPROCS=<workers>` and the sample
/// time as its target; it runs a warm-up tree (not with `--quick`, like [`super::per_op`]) and
/// then whole trees for that long, timing each
/// from the root goroutine's spawn to its sum, and prints `ns_per_goroutine=<f64>` (see the
/// program's header). Go's start-up and the build are not timed.
pub fn skynet(ctx: &Ctx, workers: usize) -> Result<f64, String> {
    let bin = binary()?;
    let out = Command::new(&bin)
        .arg(ctx.target.as_millis().to_string())
        .arg(if ctx.quick { "0" } else { "1" })
        .env("GOMAXPROCS", workers.to_string())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} failed ({}): {}",
            bin.display(),
            out.status,
            stderr.trim()
        ));
    }
    let value = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ns_per_goroutine="))
        .ok_or_else(|| format!("the Go program printed no ns_per_goroutine=: {stdout:?}"))?;
    value
        .parse()
        .map_err(|e| format!("the Go program printed ns_per_goroutine={value}: {e}"))
}

/// The built program (`<directory of this executable>/skynet-go`), built once per process,
/// and only when missing or older than the source.
fn binary() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build).clone()
}

fn build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or("this executable has no parent directory")?;
    let bin = dir.join("skynet-go");
    let source = Path::new(SOURCE);
    let source_time = std::fs::metadata(source)
        .and_then(|m| m.modified())
        .map_err(|e| format!("{SOURCE}: {e}"))?;
    if modified(&bin).is_some_and(|t| t >= source_time) {
        return Ok(bin);
    }
    let mut cmd = Command::new("go");
    cmd.arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(source)
        // Never fetch a toolchain; build with the installed one.
        .env("GOTOOLCHAIN", "local");
    if std::env::var_os("GOCACHE").is_none() && std::env::var_os("HOME").is_none() {
        cmd.env("GOCACHE", dir.join("go-build-cache"));
    }
    let out = cmd.output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "the Go toolchain is not installed: install golang-go (e.g. `apt-get install -y \
             golang-go`) for this row"
                .to_string()
        } else {
            format!("cannot run `go build`: {e}")
        }
    })?;
    if !out.status.success() {
        return Err(format!(
            "`go build {SOURCE}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(bin)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
