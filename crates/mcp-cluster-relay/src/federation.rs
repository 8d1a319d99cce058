//! [`Federation`]: several hosted servers (`[[upstreams]]`, stdio and HTTP
//! alike) behind one endpoint. Each member is a [`RelayService`] of its
//! own, with its children, limits and metrics; the federation opens a
//! session of every member for each client session, routes each request
//! by the name or URI it names, and merges what the members list.
//!
//! - **Names**: a member's tool and prompt names go out as
//!   `{upstream}{separator}{name}` and its resource URIs as
//!   `{upstream}+{uri}` (the `naming` module), unless the member is
//!   configured with `prefix = false`. Two members whose names would meet
//!   are refused at start ([`Federation::check_names`]), naming both.
//! - **Lists**: one page at a time from one member, in the configured
//!   order; the cursor the client gets carries the member and that
//!   member's own cursor, so no page is dropped and none is given twice.
//! - **A member that fails** (it could not start for this session, or
//!   ended) fails only the requests routed to it, with an error that names
//!   it; its entries are left out of lists. The session goes on with the
//!   others; it fails to open only when no member opens.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures_util::future::join_all;
use mcp_cluster_protocol::types::{Implementation, LoggingLevel, ServerCapabilities};
use mcp_cluster_protocol::{ErrorCode, ErrorObject, Notification, Request, methods};
use mcp_cluster_runtime::{
    Caller, McpService, MirroredParam, OpenError, RequestContext, ResourceWatch, SessionAdopt,
    SessionOpen, TaskSupport, Watching,
};
use mcp_cluster_store::SessionId;
use serde_json::{Map, Value, json};

use crate::config::{UpstreamConfig, UpstreamConfigError};
use crate::naming::{self, Naming};
use crate::service::{RelayService, lock};

/// Names of members with `prefix = false` the federation keeps, per kind;
/// past it, new ones are not kept (and such a name, when several members
/// are unprefixed, routes to the first of them).
const MAX_PLAIN_NAMES: usize = 16_384;

/// Pages of one list read per member at start, to check names.
const MAX_START_PAGES: usize = 100;

/// Resource updates of one member waiting for a listen stream.
const UPDATES_QUEUE: usize = 64;

/// The longest cursor the federation decodes, in bytes.
const MAX_CURSOR_BYTES: usize = 8 * 1024;

/// Several hosted servers behind one endpoint.
///
/// Owner: the node's runtime holds it as its service, as it would one
/// [`RelayService`].
#[derive(Debug)]
pub struct Federation {
    members: Vec<Member>,
    /// What the federation calls itself: its members' names joined by `+`.
    name: String,
    /// Names and URIs of unprefixed members, learnt from their lists.
    plain: Mutex<HashMap<(Kind, String), usize>>,
    /// Per session, the members that have no part in it, and why.
    missing: Mutex<HashMap<SessionId, Vec<(usize, String)>>>,
}

#[derive(Debug)]
struct Member {
    naming: Arc<Naming>,
    relay: RelayService,
}

impl Member {
    fn name(&self) -> &str {
        &self.relay.config().name
    }
}

/// What a name names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Tool,
    Prompt,
    Resource,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Prompt => "prompt",
            Self::Resource => "resource",
        }
    }
}

/// A list method: its array, and the field of each entry that names it
/// (with the kind of name, for the lists a client calls by).
struct Listing {
    items: &'static str,
    key: &'static str,
    kind: Option<Kind>,
}

fn listing(method: &str) -> Option<Listing> {
    let (items, key, kind) = match method {
        methods::TOOLS_LIST => ("tools", "name", Some(Kind::Tool)),
        methods::PROMPTS_LIST => ("prompts", "name", Some(Kind::Prompt)),
        methods::RESOURCES_LIST => ("resources", "uri", Some(Kind::Resource)),
        methods::RESOURCES_TEMPLATES_LIST => ("resourceTemplates", "uriTemplate", None),
        _ => return None,
    };
    Some(Listing { items, key, kind })
}

impl Federation {
    /// A federation of `upstreams`, in this order; `separator` goes
    /// between a prefixed member's name and its tools' and prompts' names.
    /// `inherited`: the node's environment, of which each member's
    /// children get what its `inherit_env` lists.
    ///
    /// # Errors
    /// A member's settings cannot work, two members share a name or would
    /// share prefixes, or the members do not all speak 2026-07-28
    /// themselves (`stateless`) or all not.
    pub fn new(
        upstreams: Vec<UpstreamConfig>,
        separator: &str,
        inherited: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, UpstreamConfigError> {
        let refuse = |name: &str, problem: String| UpstreamConfigError {
            name: name.to_owned(),
            problem,
        };
        let mut members: Vec<Member> = Vec::with_capacity(upstreams.len());
        for config in upstreams {
            let naming = Naming::new(&config.name, separator, config.prefix);
            if !naming.is_plain() && !naming::has_uri_scheme(&config.name) {
                return Err(refuse(
                    &config.name,
                    "a prefixed member's name starts with a letter (it begins its resource URIs' scheme)".into(),
                ));
            }
            for other in &members {
                let clash = if other.name() == config.name {
                    Some("the same name")
                } else if naming.is_plain() || other.naming.is_plain() {
                    None
                } else if naming.prefix().starts_with(other.naming.prefix())
                    || other.naming.prefix().starts_with(naming.prefix())
                {
                    Some("tool name prefixes that overlap")
                } else if naming.uri_prefix() == other.naming.uri_prefix() {
                    Some("the same resource URI scheme")
                } else {
                    None
                };
                if let Some(clash) = clash {
                    return Err(refuse(
                        &config.name,
                        format!("it and upstream {:?} have {clash}", other.name()),
                    ));
                }
                if config.stateless != other.relay.config().stateless {
                    return Err(refuse(
                        &config.name,
                        format!(
                            "stateless differs from upstream {:?}'s; a federation's members all speak 2026-07-28 themselves, or none does",
                            other.name()
                        ),
                    ));
                }
            }
            let naming = Arc::new(naming);
            let relay =
                RelayService::new(config, inherited)?.member_of_federation(Arc::clone(&naming));
            members.push(Member { naming, relay });
        }
        let name = members
            .iter()
            .map(Member::name)
            .collect::<Vec<_>>()
            .join("+");
        Ok(Self {
            members,
            name,
            plain: Mutex::new(HashMap::new()),
            missing: Mutex::new(HashMap::new()),
        })
    }

    /// The members' relays, in the configured order.
    pub fn relays(&self) -> impl Iterator<Item = &RelayService> {
        self.members.iter().map(|m| &m.relay)
    }

    /// Reads every member's tools, prompts and resources once (a server
    /// started for that alone, all members at once) and refuses names that two members would
    /// both expose. A member that cannot be read now is named in the log
    /// and checked no further: its names are learnt as clients list them.
    ///
    /// # Errors
    /// Two members expose one name: the message names both.
    pub async fn check_names(&self) -> Result<(), String> {
        let mut seen: HashMap<(Kind, String), (usize, String)> = HashMap::new();
        // Read side by side: a start waits for the slowest upstream, not
        // for all of them in turn.
        let read = join_all(self.members.iter().map(|m| m.relay.names(MAX_START_PAGES))).await;
        for ((at, member), names) in self.members.iter().enumerate().zip(read) {
            let names = match names {
                Ok(names) => names,
                Err(err) => {
                    tracing::warn!(upstream = member.name(), error = %err.message, "A federated upstream could not be read at start; its names are not checked against the others'.");
                    continue;
                }
            };
            for (method, inner) in names {
                let Some(kind) = listing(&method).and_then(|l| l.kind) else {
                    continue;
                };
                let exposed = match kind {
                    Kind::Resource => member.naming.expose_uri(&inner),
                    Kind::Tool | Kind::Prompt => member.naming.expose_name(&inner),
                };
                if let Some((first, first_inner)) = seen.get(&(kind, exposed.clone())) {
                    // The same upstream listing a name twice is its own
                    // affair.
                    if *first != at {
                        return Err(format!(
                            "{} {exposed:?} would be served by upstream {:?} (its {} {first_inner:?}) and by upstream {:?} (its {} {inner:?}); give one of them prefix = true, or rename",
                            kind.label(),
                            self.members[*first].name(),
                            kind.label(),
                            member.name(),
                            kind.label(),
                        ));
                    }
                    continue;
                }
                if member.naming.is_plain() {
                    self.learn_plain(kind, &exposed, at);
                }
                seen.insert((kind, exposed), (at, inner));
            }
        }
        Ok(())
    }

    fn learn_plain(&self, kind: Kind, exposed: &str, at: usize) {
        let mut plain = lock(&self.plain);
        let key = (kind, exposed.to_owned());
        if plain.len() < MAX_PLAIN_NAMES || plain.contains_key(&key) {
            plain.entry(key).or_insert(at);
        }
    }

    /// The member serving `exposed` and its own name for it: an
    /// unprefixed member's name as learnt, a prefixed member's by its
    /// prefix, or else the first unprefixed member.
    fn route(&self, kind: Kind, exposed: &str) -> Result<(usize, String), ErrorObject> {
        if let Some(&at) = lock(&self.plain).get(&(kind, exposed.to_owned())) {
            return Ok((at, exposed.to_owned()));
        }
        let inner = |m: &Member| match kind {
            Kind::Resource => m.naming.inner_uri(exposed),
            Kind::Tool | Kind::Prompt => m.naming.inner_name(exposed),
        };
        let prefixed = self
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| !m.naming.is_plain())
            .find_map(|(at, m)| inner(m).map(|n| (at, n.to_owned())));
        let plain = || {
            self.members
                .iter()
                .position(|m| m.naming.is_plain())
                .map(|at| (at, exposed.to_owned()))
        };
        prefixed.or_else(plain).ok_or_else(|| {
            ErrorObject::invalid_params(format!(
                "no upstream serves the {} {exposed:?}",
                kind.label()
            ))
        })
    }

    /// Whether the member at `at` has a part in `ctx`'s session (a
    /// 2026-07-28 request has none to lack); the error that names it when
    /// not.
    fn part(&self, at: usize, ctx: &RequestContext) -> Result<(), ErrorObject> {
        let Some(session) = ctx.session_id() else {
            return Ok(());
        };
        let member = &self.members[at];
        if member.relay.hosts_session(session) {
            return Ok(());
        }
        let why = lock(&self.missing)
            .get(session)
            .and_then(|m| m.iter().find(|(i, _)| *i == at).map(|(_, why)| why.clone()))
            .unwrap_or_else(|| "it no longer runs for this session".to_owned());
        Err(ErrorObject::internal(format!(
            "upstream {} is unavailable in this session: {why}",
            member.name()
        )))
    }

    /// Carries `request` to the member at `at`, with `params` in its own
    /// names, and its result back in the client's.
    async fn forward(
        &self,
        at: usize,
        request: Request,
        params: Map<String, Value>,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        self.part(at, &ctx)?;
        let member = &self.members[at];
        let method = request.method.clone();
        let request = Request {
            params: Some(params),
            ..request
        };
        let mut result = member.relay.handle(request, ctx).await?;
        member.naming.expose_result(&method, &mut result);
        Ok(result)
    }

    /// A request naming one tool, prompt or resource, routed to its member.
    async fn routed(
        &self,
        request: Request,
        ctx: RequestContext,
        kind: Kind,
        key: &str,
    ) -> Result<Value, ErrorObject> {
        let mut params = request.params.clone().unwrap_or_default();
        let Some(exposed) = params.get(key).and_then(Value::as_str) else {
            return Err(ErrorObject::invalid_params(format!(
                "{} needs params.{key}",
                request.method
            )));
        };
        let (at, inner) = self.route(kind, exposed)?;
        params.insert(key.to_owned(), json!(inner));
        self.forward(at, request, params, ctx).await
    }

    /// `completion/complete`: routed by the prompt or resource its `ref`
    /// names.
    async fn complete(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        let mut params = request.params.clone().unwrap_or_default();
        let reference = params.get_mut("ref").and_then(Value::as_object_mut);
        let (kind, key) = match reference.as_ref().and_then(|r| r.get("type")?.as_str()) {
            Some("ref/prompt") => (Kind::Prompt, "name"),
            Some("ref/resource") => (Kind::Resource, "uri"),
            _ => {
                return Err(ErrorObject::invalid_params(
                    "completion/complete needs a ref of type ref/prompt or ref/resource",
                ));
            }
        };
        let Some(reference) = reference else {
            return Err(ErrorObject::invalid_params(
                "completion/complete needs a ref",
            ));
        };
        let Some(exposed) = reference.get(key).and_then(Value::as_str) else {
            return Err(ErrorObject::invalid_params(format!(
                "completion/complete needs ref.{key}"
            )));
        };
        let (at, inner) = self.route(kind, exposed)?;
        reference.insert(key.to_owned(), json!(inner));
        self.forward(at, request, params, ctx).await
    }

    /// One page of a merged list: from the member the cursor names, at
    /// that member's own cursor; the next cursor names the same member
    /// while it has more, then the next member. A member without a part
    /// in the session, or whose list fails, is left out (named in the
    /// log); an empty last page of one member goes on to the next at once.
    async fn list(
        &self,
        listing: &Listing,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let mut params = request.params.clone().unwrap_or_default();
        let (mut at, mut cursor) = match params.remove("cursor") {
            None | Some(Value::Null) => (0, None),
            Some(Value::String(cursor)) => self.decode_cursor(&cursor)?,
            Some(_) => return Err(ErrorObject::invalid_params("cursor must be a string")),
        };
        while at < self.members.len() {
            let member = &self.members[at];
            if self.part(at, &ctx).is_err() {
                (at, cursor) = (at + 1, None);
                continue;
            }
            let mut own = params.clone();
            if let Some(cursor) = cursor.take() {
                own.insert("cursor".into(), Value::String(cursor));
            }
            let asked = Request {
                params: Some(own),
                ..request.clone()
            };
            let mut result = match member.relay.handle(asked, ctx.clone()).await {
                Ok(result) => result,
                Err(err) if err.code == ErrorCode::INVALID_PARAMS => return Err(err),
                Err(err) => {
                    tracing::warn!(upstream = member.name(), method = %request.method, error = %err.message, "A federated upstream's list failed; its entries are left out of this page.");
                    (at, cursor) = (at + 1, None);
                    continue;
                }
            };
            if member.naming.is_plain()
                && let Some(kind) = listing.kind
            {
                self.learn_listed(kind, at, listing, &result);
            }
            member.naming.expose_result(&request.method, &mut result);
            let next = match result.get("nextCursor").and_then(Value::as_str) {
                Some(own) => Some(encode_cursor(member.name(), Some(own))),
                None => self
                    .members
                    .get(at + 1)
                    .map(|m| encode_cursor(m.name(), None)),
            };
            let empty = result
                .get(listing.items)
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
            let Some(object) = result.as_object_mut() else {
                return Err(ErrorObject::internal(format!(
                    "upstream {} answered {} with no object",
                    member.name(),
                    request.method
                )));
            };
            if empty && object.get("nextCursor").is_none() {
                (at, cursor) = (at + 1, None);
                continue;
            }
            match next {
                Some(next) => object.insert("nextCursor".into(), Value::String(next)),
                None => object.remove("nextCursor"),
            };
            return Ok(result);
        }
        let mut last = Map::new();
        last.insert(listing.items.into(), json!([]));
        Ok(Value::Object(last))
    }

    fn learn_listed(&self, kind: Kind, at: usize, listing: &Listing, result: &Value) {
        let Some(items) = result.get(listing.items).and_then(Value::as_array) else {
            return;
        };
        for name in items.iter().filter_map(|i| i.get(listing.key)?.as_str()) {
            self.learn_plain(kind, name, at);
        }
    }

    /// The member and its own cursor a client's cursor names.
    fn decode_cursor(&self, cursor: &str) -> Result<(usize, Option<String>), ErrorObject> {
        let invalid = || ErrorObject::invalid_params("invalid cursor");
        if cursor.len() > MAX_CURSOR_BYTES {
            return Err(invalid());
        }
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| invalid())?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        let member = value.get("u").and_then(Value::as_str).ok_or_else(invalid)?;
        let at = self
            .members
            .iter()
            .position(|m| m.name() == member)
            .ok_or_else(invalid)?;
        let own = match value.get("c") {
            None | Some(Value::Null) => None,
            Some(Value::String(own)) => Some(own.clone()),
            Some(_) => return Err(invalid()),
        };
        Ok((at, own))
    }

    /// Every member's session part, each on its own (a notification, a log
    /// level).
    fn hosting<'a>(&'a self, session: &'a SessionId) -> impl Iterator<Item = &'a Member> + 'a {
        self.members
            .iter()
            .filter(move |m| m.relay.hosts_session(session))
    }
}

/// The cursor a client gets: the member, and that member's own cursor
/// (none: its first page).
fn encode_cursor(member: &str, own: Option<&str>) -> String {
    URL_SAFE_NO_PAD.encode(json!({ "u": member, "c": own }).to_string())
}

/// The members' `initialize` answers as one: the oldest revision any of
/// them speaks, every capability any declares, each one's instructions
/// under its name.
fn merge_answers(name: &str, answers: &[(&str, Value)]) -> Value {
    let version = answers
        .iter()
        .filter_map(|(_, a)| a.get("protocolVersion")?.as_str())
        .min()
        .unwrap_or_default()
        .to_owned();
    let mut capabilities = Value::Object(Map::new());
    for (_, answer) in answers {
        if let Some(declared) = answer.get("capabilities") {
            merge_capabilities(&mut capabilities, declared);
        }
    }
    let mut merged = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": { "name": name, "version": env!("CARGO_PKG_VERSION") },
    });
    let instructions = answers
        .iter()
        .filter_map(|(member, a)| {
            let text = a.get("instructions")?.as_str()?;
            Some(format!("{member}: {text}"))
        })
        .collect::<Vec<_>>();
    if !instructions.is_empty() {
        merged["instructions"] = json!(instructions.join("\n\n"));
    }
    merged
}

/// Adds `declared` to `into`: objects merged key by key, a flag true when
/// either is.
fn merge_capabilities(into: &mut Value, declared: &Value) {
    match (into, declared) {
        (Value::Object(into), Value::Object(declared)) => {
            for (key, value) in declared {
                match into.get_mut(key) {
                    Some(existing) => merge_capabilities(existing, value),
                    None => {
                        into.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (Value::Bool(into), Value::Bool(declared)) => *into |= *declared,
        _ => {}
    }
}

#[async_trait]
impl McpService for Federation {
    fn server_info(&self) -> Implementation {
        Implementation {
            name: self.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            title: None,
            ..Default::default()
        }
    }

    fn capabilities(&self) -> ServerCapabilities {
        let mut merged = Value::Object(Map::new());
        for member in &self.members {
            if let Ok(declared) = serde_json::to_value(member.relay.capabilities()) {
                merge_capabilities(&mut merged, &declared);
            }
        }
        serde_json::from_value(merged).unwrap_or_default()
    }

    /// Those every member serves (the intersection of the members that
    /// name theirs).
    fn supported_versions(&self) -> Option<Vec<String>> {
        self.members
            .iter()
            .filter_map(|m| m.relay.supported_versions())
            .reduce(|mut both, next| {
                both.retain(|v| next.contains(v));
                both
            })
    }

    fn instructions(&self) -> Option<String> {
        let answers: Vec<(&str, Value)> = self
            .members
            .iter()
            .filter_map(|m| Some((m.name(), json!({ "instructions": m.relay.instructions()? }))))
            .collect();
        merge_answers(&self.name, &answers)
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    async fn handle(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        if let Some(listing) = listing(&request.method) {
            return self.list(&listing, request, ctx).await;
        }
        match request.method.as_str() {
            methods::TOOLS_CALL => self.routed(request, ctx, Kind::Tool, "name").await,
            methods::PROMPTS_GET => self.routed(request, ctx, Kind::Prompt, "name").await,
            methods::RESOURCES_READ
            | methods::RESOURCES_SUBSCRIBE
            | methods::RESOURCES_UNSUBSCRIBE => {
                self.routed(request, ctx, Kind::Resource, "uri").await
            }
            methods::COMPLETION_COMPLETE => self.complete(request, ctx).await,
            methods::LOGGING_SET_LEVEL => {
                let params = request.params.clone().unwrap_or_default();
                let all = (0..self.members.len())
                    .filter(|at| self.part(*at, &ctx).is_ok())
                    .map(|at| self.forward(at, request.clone(), params.clone(), ctx.clone()));
                join_all(all).await;
                Ok(json!({}))
            }
            methods::PING => Ok(json!({})),
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    /// The member a request naming a tool, prompt or resource goes to; a
    /// list or a request of all of them names none.
    fn upstream_of(&self, request: &Request) -> Option<String> {
        let params = request.params.as_ref()?;
        let (kind, exposed) = match request.method.as_str() {
            methods::TOOLS_CALL => (Kind::Tool, params.get("name")?),
            methods::PROMPTS_GET => (Kind::Prompt, params.get("name")?),
            methods::RESOURCES_READ
            | methods::RESOURCES_SUBSCRIBE
            | methods::RESOURCES_UNSUBSCRIBE => (Kind::Resource, params.get("uri")?),
            _ => return None,
        };
        let (at, _) = self.route(kind, exposed.as_str()?).ok()?;
        Some(self.members[at].name().to_owned())
    }

    fn has_resource(&self, uri: &str) -> bool {
        self.route(Kind::Resource, uri)
            .is_ok_and(|(at, inner)| self.members[at].relay.has_resource(&inner))
    }

    fn has_tool(&self, name: &str) -> bool {
        self.route(Kind::Tool, name)
            .is_ok_and(|(at, inner)| self.members[at].relay.has_tool(&inner))
    }

    fn has_prompt(&self, name: &str) -> bool {
        self.route(Kind::Prompt, name)
            .is_ok_and(|(at, inner)| self.members[at].relay.has_prompt(&inner))
    }

    fn task_support(&self, name: &str) -> TaskSupport {
        self.route(Kind::Tool, name)
            .map_or(TaskSupport::Forbidden, |(at, inner)| {
                self.members[at].relay.task_support(&inner)
            })
    }

    fn runs_tasks(&self) -> bool {
        self.members.iter().any(|m| m.relay.runs_tasks())
    }

    fn task_starts_in_handler(&self, name: &str) -> bool {
        self.route(Kind::Tool, name)
            .is_ok_and(|(at, inner)| self.members[at].relay.task_starts_in_handler(&inner))
    }

    fn mirrored_params(&self, tool: &str) -> Vec<MirroredParam> {
        self.route(Kind::Tool, tool)
            .map(|(at, inner)| self.members[at].relay.mirrored_params(&inner))
            .unwrap_or_default()
    }

    /// Every member learns what it says of itself; one that cannot leaves
    /// the others serving.
    async fn prepare_stateless(&self, caller: &Caller) -> Result<(), ErrorObject> {
        let prepared = join_all(
            self.members
                .iter()
                .map(|m| m.relay.prepare_stateless(caller)),
        )
        .await;
        if prepared.iter().any(Result::is_ok) {
            return Ok(());
        }
        prepared
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    fn keeps_running_on_input(&self) -> bool {
        true
    }

    fn answers_input_rounds(&self) -> bool {
        self.members.iter().all(|m| m.relay.answers_input_rounds())
    }

    fn runs_server_per_session(&self) -> bool {
        true
    }

    async fn shutdown(&self) {
        join_all(self.members.iter().map(|m| m.relay.shutdown())).await;
    }

    /// A session of every member at once. A refusal for the node's limits
    /// refuses the session (the members that opened are closed); a member
    /// that fails to start leaves the session to the others, and fails
    /// the requests routed to it.
    async fn open_session(&self, open: SessionOpen) -> Result<Option<Value>, OpenError> {
        let opened = join_all(
            self.members
                .iter()
                .map(|m| m.relay.open_session(open.clone())),
        )
        .await;
        let mut answers = Vec::new();
        let mut failed = Vec::new();
        let mut refused = None;
        for (at, outcome) in opened.into_iter().enumerate() {
            match outcome {
                Ok(Some(answer)) => answers.push((self.members[at].name(), answer)),
                Ok(None) => failed.push((at, "it opened no session".to_owned())),
                Err(OpenError::Failed(err)) => {
                    tracing::warn!(upstream = self.members[at].name(), error = %err.message, "A federated upstream could not open its part of a session; the others serve it.");
                    failed.push((at, err.message));
                }
                Err(err) => {
                    refused.get_or_insert(err);
                }
            }
        }
        if let Some(err) = refused {
            self.close_session(&open.session).await;
            return Err(err);
        }
        if answers.is_empty() {
            let why = failed
                .iter()
                .map(|(at, why)| format!("{}: {why}", self.members[*at].name()))
                .collect::<Vec<_>>()
                .join("; ");
            return Err(OpenError::Failed(ErrorObject::internal(format!(
                "no upstream could open a session ({why})"
            ))));
        }
        let merged = merge_answers(&self.name, &answers);
        if !failed.is_empty() {
            lock(&self.missing).insert(open.session, failed);
        }
        Ok(Some(merged))
    }

    /// Each member's part, by name, when every part can be taken over (a
    /// session with a child in it ends with its node).
    fn session_handover(&self, session: &SessionId) -> Option<Value> {
        let mut parts = Map::new();
        for member in self.hosting(session) {
            let part = member.relay.session_handover(session)?;
            parts.insert(member.name().to_owned(), part);
        }
        (!parts.is_empty()).then_some(Value::Object(parts))
    }

    /// Every part taken over, or none: a member that cannot take its part
    /// over ends the session (the parts taken are closed).
    async fn adopt_session(&self, adopt: SessionAdopt) -> Result<(), OpenError> {
        let Value::Object(parts) = &adopt.handover else {
            return Err(ErrorObject::internal("the session's handover names no upstreams").into());
        };
        let mut adopting = Vec::new();
        for (name, part) in parts {
            let member = self
                .members
                .iter()
                .find(|m| m.name() == name.as_str())
                .ok_or_else(|| {
                    ErrorObject::internal(format!(
                        "upstream {name} of this session is no longer configured"
                    ))
                })?;
            let mut one = adopt.clone();
            one.handover = part.clone();
            adopting.push(member.relay.adopt_session(one));
        }
        if let Some(err) = join_all(adopting).await.into_iter().find_map(Result::err) {
            self.close_session(&adopt.session).await;
            return Err(err);
        }
        Ok(())
    }

    fn hosts_session(&self, session: &SessionId) -> bool {
        self.hosting(session).next().is_some()
    }

    async fn release_session(&self, session: &SessionId) {
        lock(&self.missing).remove(session);
        join_all(
            self.members
                .iter()
                .map(|m| m.relay.release_session(session)),
        )
        .await;
    }

    async fn close_session(&self, session: &SessionId) {
        lock(&self.missing).remove(session);
        join_all(self.members.iter().map(|m| m.relay.close_session(session))).await;
    }

    async fn session_notification(&self, session: &SessionId, notification: Notification) {
        join_all(
            self.hosting(session)
                .map(|m| m.relay.session_notification(session, notification.clone())),
        )
        .await;
    }

    async fn session_log_level(&self, session: &SessionId, level: LoggingLevel) {
        join_all(
            self.hosting(session)
                .map(|m| m.relay.session_log_level(session, level)),
        )
        .await;
    }

    async fn session_subscription(
        &self,
        session: &SessionId,
        uri: &str,
        subscribe: bool,
    ) -> Result<(), ErrorObject> {
        let (at, inner) = self.route(Kind::Resource, uri)?;
        self.members[at]
            .relay
            .session_subscription(session, &inner, subscribe)
            .await
    }

    /// Each member watches the URIs that are its own (and the lists, when
    /// the stream wants them); the URIs it reports go out as the client
    /// named them.
    async fn watch_resources(&self, watch: ResourceWatch) -> Result<Option<Watching>, OpenError> {
        let mut uris = BTreeSet::new();
        let mut guards: Vec<Box<dyn std::any::Any + Send + Sync>> = Vec::new();
        for (at, member) in self.members.iter().enumerate() {
            let own: BTreeSet<String> = watch
                .uris
                .iter()
                .filter_map(|uri| match self.route(Kind::Resource, uri) {
                    Ok((routed, inner)) if routed == at => Some(inner),
                    _ => None,
                })
                .collect();
            if own.is_empty() && !watch.lists {
                continue;
            }
            let (updates, mut reported) = tokio::sync::mpsc::channel::<String>(UPDATES_QUEUE);
            let asked = ResourceWatch::new(watch.principal.clone(), own, updates)
                .with_lists(watch.lists)
                .with_caller(watch.caller.clone());
            let Some(watching) = member.relay.watch_resources(asked).await? else {
                continue;
            };
            let naming = Arc::clone(&member.naming);
            let to = watch.updates.clone();
            tokio::spawn(async move {
                while let Some(uri) = reported.recv().await {
                    if to.send(naming.expose_uri(&uri)).await.is_err() {
                        break;
                    }
                }
            });
            uris.extend(watching.uris.iter().map(|u| member.naming.expose_uri(u)));
            guards.push(watching.guard);
        }
        Ok(Some(Watching::new(uris, Box::new(guards))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn federation(members: &[(&str, bool)]) -> Result<Federation, UpstreamConfigError> {
        let configs = members
            .iter()
            .map(|(name, prefix)| UpstreamConfig {
                prefix: *prefix,
                ..UpstreamConfig::new(name, &["true"])
            })
            .collect();
        Federation::new(configs, "_", &std::collections::BTreeMap::new())
    }

    #[test]
    fn names_route_to_the_member_whose_prefix_they_carry() {
        let f = federation(&[("files", true), ("db", true), ("plain", false)]).unwrap();
        assert_eq!(
            f.route(Kind::Tool, "db_query").unwrap(),
            (1, "query".into())
        );
        assert_eq!(
            f.route(Kind::Resource, "files+file:///a").unwrap(),
            (0, "file:///a".into())
        );
        // Anything else is the unprefixed member's.
        assert_eq!(f.route(Kind::Prompt, "hello").unwrap(), (2, "hello".into()));
        let only_prefixed = federation(&[("a", true), ("b", true)]).unwrap();
        let err = only_prefixed.route(Kind::Tool, "c_x").unwrap_err();
        assert!(
            err.message.contains("no upstream serves the tool"),
            "{}",
            err.message
        );
    }

    #[test]
    fn members_whose_names_would_meet_are_refused_naming_both() {
        let err = federation(&[("a", true), ("a_b", true)]).unwrap_err();
        assert_eq!(err.name, "a_b");
        assert!(
            err.problem.contains("\"a\"") && err.problem.contains("prefixes"),
            "{err}"
        );
        let err = federation(&[("x", true), ("x", true)]).unwrap_err();
        assert!(err.problem.contains("the same name"), "{err}");
        let err = federation(&[("Db", true), ("db", true)]).unwrap_err();
        assert!(err.problem.contains("URI scheme"), "{err}");
        let err = federation(&[("1st", true)]).unwrap_err();
        assert!(err.problem.contains("starts with a letter"), "{err}");
        assert!(federation(&[("1st", false), ("db", true)]).is_ok());
    }

    #[test]
    fn a_cursor_names_its_member_and_that_members_own_cursor() {
        let f = federation(&[("a", true), ("b", true)]).unwrap();
        let cursor = encode_cursor("b", Some("page-3"));
        assert_eq!(
            f.decode_cursor(&cursor).unwrap(),
            (1, Some("page-3".into()))
        );
        assert_eq!(
            f.decode_cursor(&encode_cursor("a", None)).unwrap(),
            (0, None)
        );
        for bad in [encode_cursor("gone", None), "%%".into(), "e30".into()] {
            let err = f.decode_cursor(&bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
        }
    }

    #[test]
    fn answers_merge_into_the_oldest_revision_and_every_capability() {
        let merged = merge_answers(
            "a+b",
            &[
                (
                    "a",
                    json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": false}},
                             "instructions": "Files."}),
                ),
                (
                    "b",
                    json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}, "prompts": {}}}),
                ),
            ],
        );
        assert_eq!(merged["protocolVersion"], "2025-06-18");
        assert_eq!(
            merged["capabilities"],
            json!({"tools": {"listChanged": true}, "prompts": {}})
        );
        assert_eq!(merged["serverInfo"]["name"], "a+b");
        assert_eq!(merged["instructions"], "a: Files.");
    }
}
