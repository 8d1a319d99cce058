//! Helpers shared by the hosted-server tests (`relay_*.rs`).
//!
//! Each test binary uses a different subset, hence `dead_code`.
#![allow(dead_code)]

/// How many live (not zombie) processes have `pid` as their parent: a
/// node's children.
pub fn children_of(pid: u32) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                // pid (comm) state ppid ...; comm may hold spaces.
                stat.rsplit_once(") ").is_some_and(|(_, rest)| {
                    let fields: Vec<&str> = rest.split_whitespace().collect();
                    fields.len() > 1 && fields[0] != "Z" && fields[1] == pid.to_string()
                })
            })
        })
        .count()
}

/// A directory removed when dropped.
pub struct Scratch(pub std::path::PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A node configuration file holding `contents`, in a directory of its own
/// (named after `prefix`) removed with the returned guard.
pub fn config_file(prefix: &str, contents: &str) -> (String, Scratch) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("node.toml");
    std::fs::write(&config, contents).unwrap();
    (config.display().to_string(), Scratch(dir))
}

/// `tools/call` of `tool` on `client`: the response, and the messages
/// before it on its stream.
pub async fn call(
    client: &mcp_cluster_client::Client,
    tool: &str,
    arguments: serde_json::Value,
) -> (serde_json::Value, Vec<serde_json::Value>) {
    mcp_cluster_testkit::within(
        tool,
        client.request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": arguments}),
        ),
    )
    .await
    .unwrap()
}
