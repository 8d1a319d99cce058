//! [`Served`]: what a node serves, a provider's [`McpServer`] or a hosted
//! MCP server ([`RelayService`], the `[[upstreams]]` of the configuration),
//! or several behind one endpoint ([`Federation`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use mcp_cluster_relay::{Federation, RelayService};
use mcp_cluster_runtime::{McpService, Runtime};
use tokio::sync::broadcast::error::RecvError;

use crate::config::ConfigError;
use crate::{McpServer, NodeConfig};

/// What a node serves. Every function that runs a node takes anything that
/// turns into one: an [`McpServer`] or a [`RelayService`].
#[derive(Debug, Clone)]
pub struct Served {
    service: Arc<dyn McpService>,
    /// Where the server's list and resource events come from, which the
    /// node forwards to its sessions and listen streams: the provider's
    /// server, or for a hosted server the relay (its 2026-07-28 children's
    /// list changes; a session's child reaches its session by itself).
    events: Events,
    /// For a federation: its names are checked at start
    /// ([`Self::check_names`]).
    federation: Option<Arc<Federation>>,
}

#[derive(Debug, Clone)]
enum Events {
    Server(McpServer),
    /// Those of each hosted server.
    Relay(Vec<tokio::sync::broadcast::Sender<mcp_cluster_runtime::ServerEvent>>),
}

impl From<McpServer> for Served {
    fn from(server: McpServer) -> Self {
        Self {
            service: Arc::new(server.clone()),
            events: Events::Server(server),
            federation: None,
        }
    }
}

impl From<RelayService> for Served {
    fn from(relay: RelayService) -> Self {
        Self {
            events: Events::Relay(vec![relay.events()]),
            service: Arc::new(relay),
            federation: None,
        }
    }
}

impl From<Federation> for Served {
    fn from(federation: Federation) -> Self {
        let federation = Arc::new(federation);
        Self {
            events: Events::Relay(federation.relays().map(RelayService::events).collect()),
            service: Arc::clone(&federation) as Arc<dyn McpService>,
            federation: Some(federation),
        }
    }
}

impl Served {
    /// The hosted server the configuration names (`[[upstreams]]`), if it
    /// names one; `env`: the node's environment, from which the children
    /// inherit what each upstream's `inherit_env` lists (nothing else).
    ///
    /// Several make a federation behind the one endpoint (names prefixed
    /// with `upstream_separator`).
    ///
    /// # Errors
    /// An upstream's settings cannot work, or several cannot stand side by
    /// side.
    pub fn hosted(
        config: &NodeConfig,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Option<Self>, ConfigError> {
        // Each child gets only what its own upstream lists; the relay
        // filters, given every variable any upstream wants.
        let inherited: BTreeMap<String, String> = env
            .into_iter()
            .filter(|(k, _)| config.upstreams.iter().any(|u| u.inherit_env.contains(k)))
            .collect();
        let refused = |err: mcp_cluster_relay::UpstreamConfigError| ConfigError(err.to_string());
        match config.upstreams.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(
                RelayService::new(one.clone(), &inherited)
                    .map_err(refused)?
                    .into(),
            )),
            several => Ok(Some(
                Federation::new(several.to_vec(), &config.upstream_separator, &inherited)
                    .map_err(refused)?
                    .into(),
            )),
        }
    }

    /// For a federation, reads what every member serves and refuses two
    /// that would expose one name; anything else has nothing to check.
    ///
    /// # Errors
    /// Two upstreams expose one name: the message names both.
    pub async fn check_names(&self) -> Result<(), ConfigError> {
        match &self.federation {
            Some(federation) => federation.check_names().await.map_err(ConfigError),
            None => Ok(()),
        }
    }

    /// The provider's own server, when the node serves it (not a hosted
    /// one).
    pub(crate) fn own_server(&self) -> Option<&McpServer> {
        match &self.events {
            Events::Server(server) => Some(server),
            Events::Relay(_) => None,
        }
    }

    /// The service the runtime calls.
    pub fn service(&self) -> Arc<dyn McpService> {
        Arc::clone(&self.service)
    }

    /// Forwards the provider's server events (list changes, resource
    /// updates) to every session of the node.
    pub(crate) fn forward_events(&self, runtime: &Runtime) {
        let receivers = match &self.events {
            Events::Server(server) => vec![server.subscribe_events()],
            Events::Relay(senders) => senders.iter().map(|s| s.subscribe()).collect(),
        };
        for mut events in receivers {
            let runtime = runtime.clone();
            actix_web::rt::spawn(async move {
                loop {
                    match events.recv().await {
                        Ok(event) => runtime.broadcast(event),
                        Err(RecvError::Lagged(missed)) => {
                            tracing::warn!(missed, "Server events dropped.");
                        }
                        Err(RecvError::Closed) => break,
                    }
                }
            });
        }
    }
}
