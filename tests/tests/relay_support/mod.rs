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
