//! The keeper: a small process between the node and each hosted server,
//! so that a node killed with SIGKILL leaves nothing of its servers
//! running, grandchildren included.
//!
//! A child's parent-death signal reaches the child alone: a launcher such
//! as `npx` or `uvx` dies with the node, and the server it started, which
//! may ignore the end of its input, runs on, orphaned. So the node starts
//! each server through a keeper: its own executable again
//! (`/proc/self/exe`, the very file it runs even after a deploy replaced
//! it on disk), as `<exe> --relay-keeper <node pid> -- <command>`. The
//! keeper leads the server's process group (the node made it), starts the
//! command without a shell in that group, and waits for it, exiting with
//! its status. Once a second it asks whether the node is still its parent;
//! when not (the node died, however), it kills the whole group, itself
//! included. The server gets SIGKILL should the keeper die first.
//!
//! A program is a keeper only when its `main` hands over to
//! [`run_if_asked`] first and says so with [`enable`]
//! (`mcp_cluster::cli::run` does both); otherwise the relay starts each
//! command directly, with a parent-death signal on the command alone.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use rustix::process::{Pid, Signal};

/// The keeper's first argument.
pub const FLAG: &str = "--relay-keeper";

/// How often the keeper looks for its node.
const PARENT_CHECK: Duration = Duration::from_secs(1);

/// Exit status of a keeper whose command could not start (a shell's
/// "command not found").
const NOT_STARTED: i32 = 127;

/// The keeper's program, and the name it goes by (`argv[0]`), once
/// [`enable`]d.
static KEEPER: OnceLock<(PathBuf, OsString)> = OnceLock::new();

/// This program serves as its servers' keeper ([`run_if_asked`] runs first
/// in its `main`): the relay starts every hosted server through it.
pub fn enable() {
    let name = std::env::args_os()
        .next()
        .unwrap_or_else(|| OsString::from("mcp-node"));
    let _ = KEEPER.set((PathBuf::from("/proc/self/exe"), name));
}

/// The keeper's program and its `argv[0]` (the node's own, so the process
/// table names it), when enabled.
pub(crate) fn program() -> Option<&'static (PathBuf, OsString)> {
    KEEPER.get()
}

/// Runs the keeper when this process was started as one
/// (`<exe> --relay-keeper <node pid> -- <command>`), and never returns
/// then; otherwise returns at once. Call it first in `main`, before any
/// thread or runtime starts.
pub fn run_if_asked() {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_none_or(|a| a != FLAG) {
        return;
    }
    std::process::exit(keep(&args[2..]));
}

/// The keeper: starts `<command>` of `<node pid> -- <command>` and waits
/// for it; returns its exit status.
fn keep(args: &[OsString]) -> i32 {
    let node = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| a.parse::<i32>().ok())
        .and_then(Pid::from_raw);
    let (Some(node), Some("--"), Some((program, rest))) = (
        node,
        args.get(1).and_then(|a| a.to_str()),
        args.get(2..).and_then(<[OsString]>::split_first),
    ) else {
        eprintln!("usage: {FLAG} <node pid> -- <program> [args...]");
        return NOT_STARTED;
    };
    // The node may have died before this process looked.
    if rustix::process::getppid() != Some(node) {
        end_group();
    }
    let keeper = rustix::process::getpid();
    let mut command = std::process::Command::new(program);
    command.args(rest);
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (prctl, getppid), allocating
    // nothing and taking no lock.
    #[allow(unsafe_code)]
    unsafe {
        use std::os::unix::process::CommandExt as _;
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            if rustix::process::getppid() != Some(keeper) {
                return Err(std::io::Error::other("the keeper ended while starting"));
            }
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!("{}: {err}", program.to_string_lossy());
            return NOT_STARTED;
        }
    };
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(PARENT_CHECK);
            if rustix::process::getppid() != Some(node) {
                end_group();
            }
        }
    });
    match child.wait() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt as _;
            status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(1)
        }
        Err(err) => {
            eprintln!("{}: {err}", program.to_string_lossy());
            1
        }
    }
}

/// Kills the keeper's process group (the server, what it started, and the
/// keeper), then exits should the signal somehow not reach it.
fn end_group() -> ! {
    let group = rustix::process::getpgrp();
    // Only a group it leads (the node made it so): a keeper started by hand
    // from a shell must not kill the shell's.
    if group == rustix::process::getpid() {
        let _ = rustix::process::kill_process_group(group, Signal::KILL);
    }
    std::process::exit(1)
}
