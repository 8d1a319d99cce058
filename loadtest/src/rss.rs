//! Resident memory and CPU time from `/proc` (Linux): the server's, by its
//! pid, and the generator's own.

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on
/// every Linux architecture the kernel exports to user space).
const USER_HZ: f64 = 100.0;

/// What the generator itself spent, for the report: a load test whose
/// generator ran out of CPU measured the generator, not the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OwnUsage {
    /// User and system CPU time of every thread, seconds.
    pub(crate) cpu_secs: f64,
    /// Resident memory now, bytes.
    pub(crate) rss_bytes: u64,
    /// Highest resident memory so far (`VmHWM`), bytes.
    pub(crate) peak_rss_bytes: u64,
}

/// The generator's own CPU time and memory so far.
///
/// # Errors
/// `/proc/self` cannot be read (not Linux).
pub(crate) fn own_usage() -> anyhow::Result<OwnUsage> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    Ok(OwnUsage {
        cpu_secs: cpu_secs("self")?,
        rss_bytes: parse_kib(&status, "VmRSS:").context("no VmRSS")?,
        peak_rss_bytes: parse_kib(&status, "VmHWM:").context("no VmHWM")?,
    })
}

/// User and system CPU time of every thread of process `pid` (a number,
/// or `self`) so far, seconds.
///
/// # Errors
/// The process does not exist (or is not readable), or its stat is malformed.
pub(crate) fn cpu_secs(pid: &str) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // Fields after the command name (which ends at the last ')'): state is
    // field 3, utime 14, stime 15.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("malformed {path}"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |n: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(n - 3)
            .with_context(|| format!("{path} is short"))?
            .parse::<f64>()?)
    };
    Ok((ticks(14)? + ticks(15)?) / USER_HZ)
}

/// Resident set size of process `pid`, in bytes (`VmRSS`).
///
/// # Errors
/// The process does not exist (or is not readable), or the file has no `VmRSS` line.
pub(crate) fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_kib(&status, "VmRSS:").with_context(|| format!("no VmRSS line in {path}"))
}

/// The `VmRSS:   1234 kB` line (or another of `key`) of a status file, in
/// bytes.
fn parse_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_rss() {
        let rss = rss_bytes(std::process::id()).unwrap();
        assert!(rss > 1024 * 1024, "{rss}");
        assert_eq!(
            parse_kib("Name:\tx\nVmRSS:\t  2048 kB\n", "VmRSS:"),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(parse_kib("Name:\tx\n", "VmRSS:"), None);
        assert!(rss_bytes(u32::MAX).is_err());
        // Some CPU spent, and a peak at least what is resident.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert_ne!(x, 1);
        let own = own_usage().unwrap();
        assert!(own.cpu_secs > 0.0, "{own:?}");
        assert!(
            own.peak_rss_bytes >= own.rss_bytes && own.rss_bytes > 1 << 20,
            "{own:?}"
        );
    }
}
