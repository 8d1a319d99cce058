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
/// `prompts/list`.
pub const PROMPTS_LIST: &str = "prompts/list";
/// `prompts/get`.
pub const PROMPTS_GET: &str = "prompts/get";
/// `completion/complete`.
pub const COMPLETION_COMPLETE: &str = "completion/complete";
/// `logging/setLevel`.
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";

/// `sampling/createMessage` (server → client).
pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
/// `roots/list` (server → client).
pub const ROOTS_LIST: &str = "roots/list";
/// `elicitation/create` (server → client, 2025-06-18 and later).
pub const ELICITATION_CREATE: &str = "elicitation/create";

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

/// Methods whose `params.name` (or `params.uri`) the `Mcp-Name` header
/// mirrors, with the params field it mirrors (standard MCP request headers).
pub fn name_param(method: &str) -> Option<&'static str> {
    match method {
        TOOLS_CALL | PROMPTS_GET => Some("name"),
        RESOURCES_READ => Some("uri"),
        _ => None,
    }
}
