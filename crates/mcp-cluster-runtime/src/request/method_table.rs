//! The one table of client-to-server request methods, for both eras: who
//! answers each in a session and in a stateless (2026-07-28) request, and
//! what the stateless era may add to it. The session actor, the stateless
//! era and the measuring of calls all read it; a method added here is
//! known to all three.

use mcp_cluster_protocol::methods;

/// Who answers a method in one era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    /// The provider's service, the same handler in both eras.
    Service,
    /// The era itself: the session actor (lifecycle, ping, log level,
    /// subscriptions), or the stateless era (discovery, listen streams,
    /// tasks).
    Era,
    /// Not in this era. A session hands it to the service like any method
    /// it does not know (the service refuses it); a stateless request is
    /// refused with -32601.
    Neither,
}

/// One request method.
#[derive(Debug)]
pub(crate) struct Method {
    pub(crate) name: &'static str,
    /// Who answers it in a session (2024-11-05 … 2025-11-25).
    pub(crate) session: By,
    /// Who answers it in a stateless request (2026-07-28).
    pub(crate) stateless: By,
    /// A stateless handler of it may ask the client (an input-required
    /// round trip).
    pub(crate) asks: bool,
    /// Its stateless result carries caching hints (`ttlMs`, `cacheScope`).
    pub(crate) cacheable: bool,
}

const fn method(name: &'static str, session: By, stateless: By) -> Method {
    Method {
        name,
        session,
        stateless,
        asks: false,
        cacheable: false,
    }
}

const fn service(name: &'static str) -> Method {
    method(name, By::Service, By::Service)
}

const fn asks(m: Method) -> Method {
    Method { asks: true, ..m }
}

const fn cacheable(m: Method) -> Method {
    Method {
        cacheable: true,
        ..m
    }
}

/// Every request method this runtime knows.
pub(crate) const METHODS: &[Method] = &[
    method(methods::INITIALIZE, By::Era, By::Neither),
    method(methods::PING, By::Era, By::Neither),
    cacheable(service(methods::TOOLS_LIST)),
    asks(service(methods::TOOLS_CALL)),
    cacheable(service(methods::RESOURCES_LIST)),
    cacheable(service(methods::RESOURCES_TEMPLATES_LIST)),
    cacheable(asks(service(methods::RESOURCES_READ))),
    method(methods::RESOURCES_SUBSCRIBE, By::Era, By::Neither),
    method(methods::RESOURCES_UNSUBSCRIBE, By::Era, By::Neither),
    cacheable(service(methods::PROMPTS_LIST)),
    asks(service(methods::PROMPTS_GET)),
    service(methods::COMPLETION_COMPLETE),
    method(methods::LOGGING_SET_LEVEL, By::Era, By::Neither),
    cacheable(method(methods::SERVER_DISCOVER, By::Neither, By::Era)),
    method(methods::SUBSCRIPTIONS_LISTEN, By::Neither, By::Era),
    method(methods::TASKS_GET, By::Neither, By::Era),
    method(methods::TASKS_UPDATE, By::Neither, By::Era),
    method(methods::TASKS_CANCEL, By::Neither, By::Era),
];

/// The entry of `name`; `None` for a method this runtime does not know.
pub(crate) fn find(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

/// Who answers `name` in a session.
pub(crate) fn session(name: &str) -> By {
    find(name).map_or(By::Neither, |m| m.session)
}

/// Who answers `name` in a stateless request.
pub(crate) fn stateless(name: &str) -> By {
    find(name).map_or(By::Neither, |m| m.stateless)
}

/// Whether a stateless handler of `name` may ask the client.
pub(crate) fn asks_client(name: &str) -> bool {
    find(name).is_some_and(|m| m.asks)
}

/// Whether the stateless result of `name` carries caching hints.
pub(crate) fn is_cacheable(name: &str) -> bool {
    find(name).is_some_and(|m| m.cacheable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_once_and_answered_in_some_era() {
        for (i, m) in METHODS.iter().enumerate() {
            assert!(
                METHODS[i + 1..].iter().all(|o| o.name != m.name),
                "{} twice",
                m.name
            );
            assert!(
                m.session != By::Neither || m.stateless != By::Neither,
                "{} in no era",
                m.name
            );
            // What the service answers, it answers in both eras.
            assert_eq!(
                m.session == By::Service,
                m.stateless == By::Service,
                "{}",
                m.name
            );
            // Only a handler (of the service) asks the client.
            assert!(!m.asks || m.stateless == By::Service, "{}", m.name);
        }
    }
}
