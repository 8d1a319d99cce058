//! Method names, written once.

/// `initialize` (client → server).
pub const INITIALIZE: &str = "initialize";
/// `ping` (either direction).
pub const PING: &str = "ping";
/// `tools/list`.
pub const TOOLS_LIST: &str = "tools/list";
/// `tools/call`.
pub const TOOLS_CALL: &str = "tools/call";
/// `resources/list`.
pub const RESOURCES_LIST: &str = "resources/list";
/// `resources/templates/list`.
pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
/// `resources/read`.
pub const RESOURCES_READ: &str = "resources/read";
/// `resources/subscribe`.
pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
/// `resources/unsubscribe`.
pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
/// `skills/list` (the Skills extension).
pub const SKILLS_LIST: &str = "skills/list";
/// `skills/get` (the Skills extension).
pub const SKILLS_GET: &str = "skills/get";
/// `resources/directory/read` (the Skills extension, `directoryRead`).
pub const RESOURCES_DIRECTORY_READ: &str = "resources/directory/read";
/// `prompts/list`.
pub const PROMPTS_LIST: &str = "prompts/list";
/// `prompts/get`.
pub const PROMPTS_GET: &str = "prompts/get";
/// `completion/complete`.
pub const COMPLETION_COMPLETE: &str = "completion/complete";
/// `logging/setLevel`.
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
/// `server/discover` (2026-07-28): versions, capabilities, identity.
pub const SERVER_DISCOVER: &str = "server/discover";
/// `subscriptions/listen` (2026-07-28): the long-lived change stream.
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// `tasks/get` (the `io.modelcontextprotocol/tasks` extension; a
/// 2025-11-25 session's tasks).
pub const TASKS_GET: &str = "tasks/get";
/// `tasks/update` (the tasks extension).
pub const TASKS_UPDATE: &str = "tasks/update";
/// `tasks/cancel` (the tasks extension; a 2025-11-25 session's tasks).
pub const TASKS_CANCEL: &str = "tasks/cancel";
/// `tasks/result` (a 2025-11-25 session's tasks): waits for a task's end
/// and answers with its underlying request's answer.
pub const TASKS_RESULT: &str = "tasks/result";
/// `tasks/list` (a 2025-11-25 session's tasks; not served).
pub const TASKS_LIST: &str = "tasks/list";

/// `sampling/createMessage` (server → client).
pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
/// `roots/list` (server → client).
pub const ROOTS_LIST: &str = "roots/list";
/// `elicitation/create` (server → client, 2025-06-18 and later).
pub const ELICITATION_CREATE: &str = "elicitation/create";

/// `notifications/elicitation/complete` (server → client, 2025-11-25 and
/// later): a URL-mode elicitation finished.
pub const NOTIFICATION_ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// `notifications/tasks` (server → client, the tasks extension): a task's
/// state, on a `subscriptions/listen` stream that follows it.
pub const NOTIFICATION_TASKS: &str = "notifications/tasks";

/// `notifications/initialized` (client → server).
pub const NOTIFICATION_INITIALIZED: &str = "notifications/initialized";
/// `notifications/cancelled` (either direction).
pub const NOTIFICATION_CANCELLED: &str = "notifications/cancelled";
/// `$/cancelRequest`, accepted from clients as an alias of
/// `notifications/cancelled` (params `{id}`).
pub const CANCEL_REQUEST_ALIAS: &str = "$/cancelRequest";
/// `notifications/progress`.
pub const NOTIFICATION_PROGRESS: &str = "notifications/progress";
/// `notifications/message` (server → client log message).
pub const NOTIFICATION_MESSAGE: &str = "notifications/message";
/// `notifications/roots/list_changed` (client → server).
pub const NOTIFICATION_ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
/// `notifications/tools/list_changed`.
pub const NOTIFICATION_TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
/// `notifications/resources/list_changed`.
pub const NOTIFICATION_RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
/// `notifications/resources/updated`.
pub const NOTIFICATION_RESOURCES_UPDATED: &str = "notifications/resources/updated";
/// `notifications/prompts/list_changed`.
pub const NOTIFICATION_PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
/// `notifications/subscriptions/acknowledged` (2026-07-28): the first
/// message of a `subscriptions/listen` stream.
pub const NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED: &str =
    "notifications/subscriptions/acknowledged";

/// `_meta` keys of the 2026-07-28 revision.
pub mod meta {
    /// The request's protocol version.
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// The client's name and version.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// The client's capabilities for this request.
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// The lowest level of `notifications/message` the client wants.
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    /// The server's name and version, on results.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    /// The `subscriptions/listen` request a notification belongs to.
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    /// The task a message belongs to (2025-11-25): `{"taskId": …}`.
    pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
}

/// Methods whose `params.name` (or `params.uri`) the `Mcp-Name` header
/// mirrors, with the params field it mirrors (standard MCP request headers).
pub fn name_param(method: &str) -> Option<&'static str> {
    match method {
        TOOLS_CALL | PROMPTS_GET => Some("name"),
        RESOURCES_READ => Some("uri"),
        TASKS_GET | TASKS_UPDATE | TASKS_CANCEL => Some("taskId"),
        _ => None,
    }
}
