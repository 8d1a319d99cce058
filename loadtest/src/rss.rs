//! The server's resident memory, read from `/proc/<pid>/status` (Linux).

use anyhow::Context;

/// Resident set size of process `pid`, in bytes (`VmRSS`).
///
/// # Errors
/// The process does not exist (or is not readable), or the file has no `VmRSS` line.
pub(crate) fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    parse_vm_rss(&status).with_context(|| format!("no VmRSS line in {path}"))
}

/// The `VmRSS:   1234 kB` line of a status file, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
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
            parse_vm_rss("Name:\tx\nVmRSS:\t  2048 kB\n"),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert!(rss_bytes(u32::MAX).is_err());
    }
}
