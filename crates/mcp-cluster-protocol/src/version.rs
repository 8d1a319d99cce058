//! Protocol revisions, negotiation and the rules that differ between them.

use std::fmt;
use std::str::FromStr;

/// A protocol revision this project serves.
///
/// Ordered by release date, so `v >= ProtocolVersion::V2025_06_18` reads as
/// "this revision or a later one".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2024-11-05: HTTP+SSE transport, no batches rule, no structured content.
    V2024_11_05,
    /// 2025-03-26: Streamable HTTP, JSON-RPC batches, audio content.
    V2025_03_26,
    /// 2025-06-18: `MCP-Protocol-Version` header, structured content,
    /// elicitation, resource links; batches removed.
    V2025_06_18,
    /// 2025-11-25: SSE priming events and polling, icons, URL elicitation.
    V2025_11_25,
    /// 2026-07-28: stateless. No `initialize` and no sessions: every request
    /// carries its version, client info and capabilities in `_meta`;
    /// `server/discover`, input-required round trips, `subscriptions/listen`.
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every session-era revision (opened by `initialize`), oldest first.
    pub const ALL: [Self; 4] = [
        Self::V2024_11_05,
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
    ];

    /// The newest session-era revision, offered when an `initialize` asks
    /// for one we do not know (lifecycle, version negotiation).
    pub const LATEST: Self = Self::V2025_11_25;

    /// The stateless revision: requests carry their own `_meta`.
    pub const STATELESS: Self = Self::V2026_07_28;

    /// Every revision served, newest first, as `server/discover` and
    /// `UnsupportedProtocolVersionError` list them.
    pub const SUPPORTED: [Self; 5] = [
        Self::V2026_07_28,
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];

    /// The revision a server assumes when a Streamable HTTP request carries no
    /// `MCP-Protocol-Version` header and nothing else tells (2025-06-18
    /// transports, protocol version header).
    pub const HTTP_DEFAULT: Self = Self::V2025_03_26;

    /// The wire spelling, e.g. `"2025-06-18"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// The revision the server answers `initialize` with: the requested one
    /// when served, otherwise the latest (lifecycle, version negotiation).
    pub fn negotiate(requested: &str) -> Self {
        requested
            .parse()
            .ok()
            .filter(|v: &Self| !v.is_stateless())
            .unwrap_or(Self::LATEST)
    }

    /// Whether requests of this revision carry their own `_meta` and open
    /// no session (2026-07-28 and later).
    pub fn is_stateless(self) -> bool {
        self >= Self::V2026_07_28
    }

    /// JSON-RPC batches are part of 2025-03-26 only (added there, removed in
    /// 2025-06-18).
    pub fn allows_batches(self) -> bool {
        self == Self::V2025_03_26
    }

    /// SSE streams open with a priming event (event ID, empty data) from
    /// 2025-11-25 on; older clients may fail to parse an empty `data`.
    pub fn primes_sse(self) -> bool {
        self >= Self::V2025_11_25
    }

    /// Tool input validation failures are tool execution errors
    /// (`isError: true`) from 2025-11-25 on (SEP-1303); before, -32602.
    pub fn input_errors_are_tool_errors(self) -> bool {
        self >= Self::V2025_11_25
    }

    /// `elicitation/create` exists from 2025-06-18 on.
    pub fn has_elicitation(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// URL-mode elicitation, sampling with tools and icons exist from
    /// 2025-11-25 on.
    pub fn has_2025_11_25_features(self) -> bool {
        self >= Self::V2025_11_25
    }

    /// Task-augmented requests with `tasks/get`, `tasks/result` and
    /// `tasks/cancel` in the session: 2025-11-25 only (2026-07-28 has the
    /// tasks extension instead).
    pub fn has_session_tasks(self) -> bool {
        self == Self::V2025_11_25
    }

    /// A server may `ping` the client: in the session era only (2026-07-28
    /// has no server-to-client request outside input rounds, and no ping).
    pub fn has_server_ping(self) -> bool {
        self <= Self::V2025_11_25
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A protocol version string this project does not serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported protocol version")]
pub struct UnsupportedVersion;

impl FromStr for ProtocolVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::SUPPORTED
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or(UnsupportedVersion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_served_versions_and_offers_latest_otherwise() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::negotiate(v.as_str()), v);
        }
        assert_eq!(
            ProtocolVersion::negotiate("1999-01-01"),
            ProtocolVersion::LATEST
        );
        // initialize never opens a stateless-era session.
        assert_eq!(
            ProtocolVersion::negotiate("2026-07-28"),
            ProtocolVersion::LATEST
        );
        assert_eq!(
            "2026-07-28".parse::<ProtocolVersion>(),
            Ok(ProtocolVersion::STATELESS)
        );
    }

    #[test]
    fn batches_only_in_2025_03_26() {
        let allowed: Vec<_> = ProtocolVersion::ALL
            .into_iter()
            .filter(|v| v.allows_batches())
            .collect();
        assert_eq!(allowed, vec![ProtocolVersion::V2025_03_26]);
    }
}
