//! [`Served`]: what a node serves, a provider's [`McpServer`] or a hosted
//! MCP server ([`RelayService`], the `[[upstreams]]` of the configuration).

use std::collections::BTreeMap;
use std::sync::Arc;

use mcp_cluster_relay::RelayService;
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
}

#[derive(Debug, Clone)]
enum Events {
    Server(McpServer),
    Relay(tokio::sync::broadcast::Sender<mcp_cluster_runtime::ServerEvent>),
}

impl From<McpServer> for Served {
    fn from(server: McpServer) -> Self {
        Self {
            service: Arc::new(server.clone()),
            events: Events::Server(server),
        }
    }
}

impl From<RelayService> for Served {
    fn from(relay: RelayService) -> Self {
        Self {
            events: Events::Relay(relay.events()),
            service: Arc::new(relay),
        }
    }
}

impl Served {
    /// The hosted server the configuration names (`[[upstreams]]`), if it
    /// names one; `env`: the node's environment, from which the children
    /// inherit what each upstream's `inherit_env` lists (nothing else).
    ///
    /// # Errors
    /// An upstream's settings cannot work, or several are configured (one
    /// endpoint serves one server).
    pub fn hosted(
        config: &NodeConfig,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Option<Self>, ConfigError> {
        let upstream = match config.upstreams.as_slice() {
            [] => return Ok(None),
            [one] => one.clone(),
            _ => {
                return Err(ConfigError(
                    "several [[upstreams]] are configured; a node serves one hosted server at its endpoint"
                        .into(),
                ));
            }
        };
        let wanted = &upstream.inherit_env;
        let inherited: BTreeMap<String, String> = env
            .into_iter()
            .filter(|(k, _)| wanted.contains(k))
            .collect();
        let relay =
            RelayService::new(upstream, &inherited).map_err(|err| ConfigError(err.to_string()))?;
        Ok(Some(relay.into()))
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
        let mut events = match &self.events {
            Events::Server(server) => server.subscribe_events(),
            Events::Relay(sender) => sender.subscribe(),
        };
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
