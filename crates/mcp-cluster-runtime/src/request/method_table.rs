//! The method tables of both eras. [`METHODS`]: every client-to-server
//! request method, who answers each in a session and in a stateless
//! (2026-07-28) request, and what the stateless era may add to it; the
//! session actor, the stateless era and the measuring of calls all read
//! it. [`ASKS`]: every question a handler may ask the client, the
//! capability it needs and the shape of its answer; the request context
//! (both eras), input rounds and tasks read it.

use mcp_cluster_protocol::methods;
use mcp_cluster_protocol::types::ClientCapabilities;
use serde_json::Value;

/// Who answers a method in one era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum By {
    /// The provider's service, the same handler in both eras.
    Service,
    /// The era itself: the session actor (lifecycle, ping, log level,
    /// subscriptions; a 2025-11-25 session's tasks, handed to the service
    /// by a session that runs none), or the stateless era (discovery,
    /// listen streams, tasks).
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
    cacheable(service(methods::SKILLS_LIST)),
    cacheable(service(methods::SKILLS_GET)),
    service(methods::RESOURCES_DIRECTORY_READ),
    method(methods::LOGGING_SET_LEVEL, By::Era, By::Neither),
    cacheable(method(methods::SERVER_DISCOVER, By::Neither, By::Era)),
    method(methods::SUBSCRIPTIONS_LISTEN, By::Neither, By::Era),
    method(methods::TASKS_GET, By::Era, By::Era),
    method(methods::TASKS_UPDATE, By::Neither, By::Era),
    method(methods::TASKS_CANCEL, By::Era, By::Era),
    method(methods::TASKS_RESULT, By::Era, By::Neither),
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

/// A question a handler may ask the client: a server-to-client request.
#[derive(Debug)]
pub(crate) struct Ask {
    pub(crate) name: &'static str,
    /// The client capability it needs; it also names the n-th unnamed
    /// question of its kind in an input round (`elicitation-1`).
    pub(crate) capability: &'static str,
    /// Whether the client declared that capability.
    pub(crate) declared: fn(&ClientCapabilities) -> bool,
    /// Whether an answer has the shape of its result.
    pub(crate) well_formed: fn(&Value) -> bool,
}

/// Every question a handler may ask the client.
pub(crate) const ASKS: &[Ask] = &[
    Ask {
        name: methods::ELICITATION_CREATE,
        capability: "elicitation",
        declared: |c| c.elicitation.is_some(),
        well_formed: |a| {
            a.get("action")
                .and_then(Value::as_str)
                .is_some_and(|a| matches!(a, "accept" | "decline" | "cancel"))
        },
    },
    Ask {
        name: methods::SAMPLING_CREATE_MESSAGE,
        capability: "sampling",
        declared: |c| c.sampling.is_some(),
        well_formed: |a| a.get("role").is_some() && a.get("content").is_some(),
    },
    Ask {
        name: methods::ROOTS_LIST,
        capability: "roots",
        declared: |c| c.roots.is_some(),
        well_formed: |a| a.get("roots").is_some_and(Value::is_array),
    },
];

/// Whether a client declared any capability a question needs: without
/// one, no handler can ask it anything.
pub(crate) fn may_be_asked(capabilities: &ClientCapabilities) -> bool {
    ASKS.iter().any(|ask| (ask.declared)(capabilities))
}

/// The entry of the question `name`; `None` for one this runtime does not
/// know.
pub(crate) fn ask(name: &str) -> Option<&'static Ask> {
    ASKS.iter().find(|a| a.name == name)
}

/// Whether a client's answer has the shape of the result `method` asks
/// for (an elicitation's `action`, a sampled message's `role` and
/// `content`, the `roots` list).
pub(crate) fn well_formed(method: &str, answer: &Value) -> bool {
    ask(method).is_some_and(|a| (a.well_formed)(answer))
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

    #[test]
    fn answers_are_checked_by_the_shape_of_their_question() {
        use serde_json::json;
        assert!(well_formed(
            methods::ELICITATION_CREATE,
            &json!({"action": "accept"})
        ));
        assert!(!well_formed(
            methods::ELICITATION_CREATE,
            &json!({"action": "maybe"})
        ));
        assert!(well_formed(
            methods::SAMPLING_CREATE_MESSAGE,
            &json!({"role": "assistant", "content": {}})
        ));
        assert!(!well_formed(methods::ROOTS_LIST, &json!({"roots": {}})));
        assert!(!well_formed("ping", &json!({})));
        let caps: ClientCapabilities = serde_json::from_value(json!({"roots": {}})).unwrap();
        let declared: Vec<_> = ASKS.iter().filter(|a| (a.declared)(&caps)).collect();
        assert_eq!(declared.len(), 1);
        assert_eq!(declared[0].capability, "roots");
    }
}
