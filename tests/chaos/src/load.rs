//! The load generator (`mcp-loadtest run`) as a child process, and its
//! JSON report.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use mcp_cluster_testkit::{loadtest_binary, loadtest_scenario};
use serde_json::Value;

/// A run of the load generator in the background; killed on drop.
#[derive(Debug)]
pub(crate) struct Load {
    child: Child,
    dir: PathBuf,
}

impl Load {
    /// Starts `scenario` (a file of `loadtest/scenarios/`) against `url`:
    /// `sessions` virtual clients ramped up over 2 s, for `duration_secs`.
    /// Its summary goes to this process's stderr.
    pub(crate) fn start(
        url: &str,
        scenario: &str,
        sessions: u32,
        duration_secs: u32,
    ) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "mcp-chaos-load-{}-{}",
            std::process::id(),
            crate::now_unix_ms()
        ));
        std::fs::create_dir_all(&dir).context("a directory for the load report")?;
        let child = Command::new(loadtest_binary())
            .args([
                "run",
                "--url",
                url,
                "--scenario",
                &loadtest_scenario(scenario),
            ])
            .args(["--sessions", &sessions.to_string(), "--ramp-up", "2"])
            .args(["--duration", &duration_secs.to_string(), "--report"])
            .arg(dir.join("report.json"))
            // Every error is counted, none ends the run early.
            .args(["--max-errors", &u32::MAX.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .context("running mcp-loadtest")?;
        Ok(Self { child, dir })
    }

    /// Waits for the run to end and reads its report.
    pub(crate) fn finish(mut self) -> anyhow::Result<Value> {
        self.child.wait().context("waiting for mcp-loadtest")?;
        let report =
            std::fs::read(self.dir.join("report.json")).context("mcp-loadtest wrote no report")?;
        serde_json::from_slice(&report).context("the load report is not JSON")
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
