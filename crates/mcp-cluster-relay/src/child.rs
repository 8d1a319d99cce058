//! The hosted server's process: started without a shell in a process group
//! of its own, with a parent-death signal, and ended as a group.

use std::collections::BTreeMap;
use std::io;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

use crate::config::UpstreamConfig;

/// A started child and its three pipes.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) child: Child,
    /// Its process id, which is also its process group's id.
    pub(crate) group: Pid,
    pub(crate) stdin: ChildStdin,
    pub(crate) stdout: ChildStdout,
    pub(crate) stderr: ChildStderr,
}

/// Starts the upstream's program. `env`: the child's whole environment.
///
/// The child leads a process group of its own (so that it and whatever it
/// starts are ended together). Through the keeper (`keeper`), the group
/// is killed whole when this process ends, however it ends (SIGKILL
/// included); without it, the command alone gets SIGKILL then: when the
/// thread that started it ends, which is when this process ends. Must run
/// on a thread that lives as long as the node (a worker of the relay's
/// runtime): the parent-death signal follows the thread.
pub(crate) fn spawn(
    config: &UpstreamConfig,
    env: &BTreeMap<String, String>,
) -> io::Result<Spawned> {
    let (program, args) = config
        .command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no program"))?;
    // Through the keeper when this program is one: it ends the whole group
    // should the node die (see `keeper`); otherwise the command itself.
    let keeper = crate::keeper::program();
    let parent = rustix::process::getpid();
    let mut command = match keeper {
        Some((keeper, name)) => {
            let mut command = Command::new(keeper);
            command
                .arg0(name)
                .arg(crate::keeper::FLAG)
                .arg(parent.as_raw_nonzero().get().to_string())
                .arg("--")
                .arg(program);
            command
        }
        None => Command::new(program),
    };
    command
        .args(args)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Ended by `end`, which takes its time; dropped without it (a
        // panic), the child must not outlive its handle.
        .kill_on_drop(true);
    if let Some(dir) = &config.cwd {
        command.current_dir(dir);
    }
    // SAFETY: the closure runs in the forked child before exec and makes
    // only async-signal-safe system calls (prctl, getppid), allocating
    // nothing and taking no lock.
    #[allow(unsafe_code)]
    if keeper.is_none() {
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                // The parent may have died between fork and prctl: then no
                // signal comes, and the child must not run on orphaned.
                if rustix::process::getppid() != Some(parent) {
                    return Err(io::Error::other("the node ended while starting the child"));
                }
                Ok(())
            });
        }
    }
    let mut child = command.spawn()?;
    let (Some(stdin), Some(stdout), Some(stderr), Some(pid)) = (
        child.stdin.take(),
        child.stdout.take(),
        child.stderr.take(),
        child.id(),
    ) else {
        return Err(io::Error::other("the child's pipes were not set up"));
    };
    let group = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::other("the child has no valid process id"))?;
    Ok(Spawned {
        child,
        group,
        stdin,
        stdout,
        stderr,
    })
}

/// Ends a child whose stdin was just closed (the polite request a stdio
/// server understands): it gets `grace` to exit, then its group gets
/// SIGTERM and `grace` again, then SIGKILL. Whatever of its group is still
/// there once it exited gets SIGKILL too (a grandchild it left behind).
pub(crate) async fn end(child: &mut Child, group: Pid, grace: Duration) -> io::Result<ExitStatus> {
    let status = match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            signal_group(group, Signal::TERM);
            match tokio::time::timeout(grace, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(group, Signal::KILL);
                    child.wait().await
                }
            }
        }
    };
    signal_group(group, Signal::KILL);
    status
}

/// Sends `signal` to every process of `group`; a group already gone is no
/// error.
pub(crate) fn signal_group(group: Pid, signal: Signal) {
    match rustix::process::kill_process_group(group, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(err) => {
            tracing::warn!(group = group.as_raw_nonzero().get(), error = %err, "Signal to a hosted server's process group failed.");
        }
    }
}

/// What reading one line gave.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// A whole line (without its newline) in the buffer.
    Whole,
    /// A line longer than the limit: the buffer holds its first `limit`
    /// bytes, and the rest of it up to its newline was read and dropped.
    TooLong,
    /// The end of the stream, nothing read.
    End,
}

/// Reads one line into `buf` (cleared first), keeping at most `limit`
/// bytes of it: a child cannot make the node hold more than that for one
/// line, however long the line.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    let mut read_any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (read_any, too_long) {
                (false, _) => Line::End,
                (true, true) => Line::TooLong,
                (true, false) => Line::Whole,
            });
        }
        read_any = true;
        let (chunk, found) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => (&available[..at], Some(at + 1)),
            None => (available, None),
        };
        let room = limit.saturating_sub(buf.len());
        if chunk.len() > room {
            too_long = true;
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = found.unwrap_or(available.len());
        reader.consume(used);
        if found.is_some() {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(if too_long { Line::TooLong } else { Line::Whole });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_is_kept_up_to_its_limit_and_the_rest_dropped() {
        let input = b"short\r\nthis line is too long\nnext\nlast".to_vec();
        let mut reader = tokio::io::BufReader::with_capacity(4, &input[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_line(&mut reader, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line(&mut reader, &mut buf, 8).await.unwrap(),
            Line::TooLong
        );
        assert_eq!(buf, b"this lin");
        assert_eq!(
            read_line(&mut reader, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"next");
        assert_eq!(
            read_line(&mut reader, &mut buf, 8).await.unwrap(),
            Line::Whole
        );
        assert_eq!(buf, b"last");
        assert_eq!(
            read_line(&mut reader, &mut buf, 8).await.unwrap(),
            Line::End
        );
    }
}
