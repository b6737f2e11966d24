//! Helpers shared by the command-line tests: run the binary, read its
//! output, make a scratch folder, find Cora.

// Each test file uses some of these.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn fateplan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fateplan"))
        .args(args)
        .output()
        .expect("fateplan runs")
}

/// `fateplan` run with its standard output's reader gone before it
/// writes (a pager quit, `| head`): its status and standard error.
pub fn with_stdout_closed(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fateplan"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("fateplan starts");
    drop(child.stdout.take());
    child.wait_with_output().expect("fateplan ends")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A fresh folder named after the test (and this process).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fateplan-test-{name}-{}", std::process::id()));
    // A process id can come round again: what an earlier run left goes.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The Cora folder, from FATEPLAN_DATA or the shared data folder beside
/// the checkout; `None` (after saying the test skips) when absent.
pub fn cora() -> Option<PathBuf> {
    let root = std::env::var_os("FATEPLAN_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let dir = root.join("cora");
    let found = dir.join("edge_index.npy").exists();
    if !found {
        eprintln!("skipped: Cora not found (set FATEPLAN_DATA to the folder holding cora/)");
    }
    found.then_some(dir)
}
