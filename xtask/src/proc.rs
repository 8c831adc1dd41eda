//! Running commands: every command is printed (`$ ...`) before it runs.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;

/// The workspace root (xtask lives in `<root>/xtask`).
pub fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let xtask = Path::new(env!("CARGO_MANIFEST_DIR"));
        xtask.parent().unwrap_or(xtask).to_path_buf()
    })
}

/// `cargo` (the one that runs xtask, from `$CARGO`), in the workspace root.
pub fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.current_dir(root());
    cmd
}

fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The command as a shell line, with the environment it sets. `$CARGO` shows as `cargo`.
pub fn show(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), quote(v))))
        .collect();
    let program = cmd.get_program();
    let is_cargo = std::env::var_os("CARGO").is_some_and(|c| c.as_os_str() == program);
    parts.push(if is_cargo {
        "cargo".to_string()
    } else {
        quote(program)
    });
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

/// Prints the command line.
pub fn announce(cmd: &Command) {
    println!("$ {}", show(cmd));
    let _ = std::io::stdout().flush();
}

fn spawn_error(cmd: &Command, e: &std::io::Error) -> String {
    let program = cmd.get_program().to_string_lossy();
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("`{program}` not found: is it installed and on PATH?")
    } else {
        format!("cannot run `{program}`: {e}")
    }
}

fn status_error(cmd: &Command, status: ExitStatus) -> String {
    format!("`{}` failed ({status})", show(cmd))
}

/// Prints and runs a command with inherited stdio; `Err` unless it exits with status 0.
pub fn run(cmd: &mut Command) -> Result<(), String> {
    announce(cmd);
    let status = cmd.status().map_err(|e| spawn_error(cmd, &e))?;
    if status.success() {
        Ok(())
    } else {
        Err(status_error(cmd, status))
    }
}

/// Prints and runs a command, capturing its stdout (stderr is inherited). `Err` unless it
/// exits with status 0.
pub fn run_stdout(cmd: &mut Command) -> Result<String, String> {
    announce(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = cmd.output().map_err(|e| spawn_error(cmd, &e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(status_error(cmd, out.status))
    }
}

/// Prints and runs a command, passing its stderr through while also collecting it. Returns the
/// exit status and the collected stderr.
pub fn run_tee_stderr(cmd: &mut Command) -> Result<(ExitStatus, String), String> {
    announce(cmd);
    cmd.stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| spawn_error(cmd, &e))?;
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let reader = std::thread::spawn(move || {
        let mut collected = String::new();
        let mut err = std::io::stderr();
        for line in BufReader::new(stderr).split(b'\n') {
            let Ok(line) = line else { break };
            let _ = err.write_all(&line);
            let _ = err.write_all(b"\n");
            collected.push_str(&String::from_utf8_lossy(&line));
            collected.push('\n');
        }
        collected
    });
    let status = child
        .wait()
        .map_err(|e| format!("waiting for `{}`: {e}", show(cmd)))?;
    let collected = reader.join().unwrap_or_default();
    Ok((status, collected))
}

/// Runs a command quietly (nothing printed) and says whether it could start and exited with 0.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
