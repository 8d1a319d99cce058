//! Authorization on one node against a real (test) authorization server
//! over loopback HTTP: protected resource metadata, 401 challenges, every
//! kind of bad token refused, key rotation without restart, the issuer
//! down (503, never an accepted token), per-tool scopes (403 step-up),
//! introspection of opaque tokens, the principal in handlers and the access
//! log, and sessions bound to their principal on both HTTP transports.

mod auth_support;
mod stateless_support;

use std::time::Duration;

use auth_support::*;
use mcp_cluster_testkit::{IssuerOptions, KeyAlg, PublicKeyForm, TestIssuer, within};
use reqwest::{Method, StatusCode};
use serde_json::json;

async fn issuer() -> TestIssuer {
    TestIssuer::start().await.unwrap()
}

#[tokio::test]
async fn metadata_and_challenges_point_clients_to_the_issuer() {
    let issuer = issuer().await;
    let config = config_file(
        "metadata",
        &issuer,
        RESOURCE,
        "required_scopes = [\"mcp:tools\"]\nresource_name = \"Test MCP\"",
        "",
    );
    let node = node(&config);
    let base = node.url().trim_end_matches("/mcp").to_owned();
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let answer = send(Method::GET, &format!("{base}{path}"), None, None, None).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {answer:?}");
        assert_eq!(answer.body["resource"], RESOURCE);
        assert_eq!(
            answer.body["authorization_servers"],
            json!([issuer.issuer()])
        );
        assert_eq!(answer.body["scopes_supported"], json!(["mcp:tools"]));
        assert_eq!(answer.body["bearer_methods_supported"], json!(["header"]));
        assert_eq!(answer.body["resource_name"], "Test MCP");
    }

    // No token, on every route of both transports: 401 pointing at the
    // metadata (RFC 9728 section 5.1), with the scope needed.
    let metadata_url = "http://127.0.0.1:1/.well-known/oauth-protected-resource/mcp";
    let mcp = node.url().to_owned();
    let sse = format!("{base}/sse");
    let messages = format!("{base}/messages?sessionId=x");
    for (method, url) in [
        (Method::POST, mcp.as_str()),
        (Method::GET, mcp.as_str()),
        (Method::DELETE, mcp.as_str()),
        (Method::GET, sse.as_str()),
        (Method::POST, messages.as_str()),
    ] {
        let body = initialize_body();
        let answer = send(method.clone(), url, None, Some("s"), Some(&body)).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{method} {url}: {answer:?}"
        );
        let challenge = answer.challenge();
        assert!(challenge.starts_with("Bearer "), "{challenge}");
        assert_eq!(
            param(challenge, "resource_metadata").as_deref(),
            Some(metadata_url)
        );
        assert_eq!(param(challenge, "scope").as_deref(), Some("mcp:tools"));
        assert_eq!(
            param(challenge, "error"),
            None,
            "no error code without a token"
        );
    }
}

#[tokio::test]
async fn every_kind_of_bad_token_is_refused_and_a_good_one_accepted() {
    let issuer = issuer().await;
    let config = config_file("hostile", &issuer, RESOURCE, "", "");
    let node = node(&config);
    let url = node.url().to_owned();
    let good = || issuer.token().audience(RESOURCE);

    // A valid token first: the refusals below are not a node that
    // refuses everything.
    let ok = initialize(&url, &good().sign()).await;
    assert_eq!(ok.status, StatusCode::OK, "{ok:?}");

    let other_issuer = issuer_at_path("/other").await;
    let cases: Vec<(&str, String, &str)> = vec![
        ("expired", good().expires_in(-120).sign(), "expired"),
        (
            "not yet valid",
            good().not_before_in(600).sign(),
            "not valid yet",
        ),
        (
            "wrong issuer",
            good().issuer_override("http://127.0.0.1:9/evil").sign(),
            "issuer",
        ),
        (
            "another trusted-looking issuer's token",
            other_issuer.token().audience(RESOURCE).sign(),
            "issuer",
        ),
        (
            "wrong audience",
            good().audience("http://127.0.0.1:1/other").sign(),
            "another resource",
        ),
        ("no audience", good().remove_claim("aud").sign(), "claim"),
        ("no subject", good().remove_claim("sub").sign(), "claim"),
        ("no expiry", good().remove_claim("exp").sign(), "claim"),
        ("unknown kid", good().forge_unknown_key(), "unknown key"),
        (
            "known kid, wrong key",
            good().forge_wrong_key(),
            "signature",
        ),
        ("alg none", good().forge_alg_none(), "algorithm"),
        (
            "HS256 keyed with the public key (PEM)",
            good().forge_key_confusion(PublicKeyForm::Pem),
            "algorithm",
        ),
        (
            "HS256 keyed with the public key (DER)",
            good().forge_key_confusion(PublicKeyForm::Der),
            "algorithm",
        ),
        (
            "tampered payload",
            good().forge_tampered(|claims| {
                claims.insert("sub".into(), json!("mallory"));
            }),
            "signature",
        ),
        ("garbage", "not.a.jwt".to_owned(), "malformed"),
        (
            "opaque without introspection",
            "opaque-token-123".to_owned(),
            "malformed",
        ),
    ];
    for (what, token, description) in &cases {
        let answer = initialize(&url, token).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{what}: {answer:?}"
        );
        let challenge = answer.challenge();
        assert_eq!(
            param(challenge, "error").as_deref(),
            Some("invalid_token"),
            "{what}: {challenge}"
        );
        let text = param(challenge, "error_description").unwrap_or_default();
        assert!(text.contains(description), "{what}: {text}");
        assert!(
            answer.headers.get("mcp-session-id").is_none(),
            "{what}: no session"
        );
    }

    // Malformed Authorization headers: invalid_request.
    for header in [
        "Basic YWxpY2U6cHc=",
        "Bearer",
        "Bearer a b",
        "bearer\ttoken",
        "Token abc",
    ] {
        let body = initialize_body();
        let answer = send(Method::POST, &url, Some(header), None, Some(&body)).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{header}: {answer:?}"
        );
        assert_eq!(
            param(answer.challenge(), "error").as_deref(),
            Some("invalid_request"),
            "{header}"
        );
    }

    // The refusals are counted by reason.
    let metrics = reqwest::get(format!("{}/metrics", url.trim_end_matches("/mcp")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for reason in [
        "expired",
        "not_yet_valid",
        "issuer",
        "audience",
        "unknown_key",
        "algorithm",
        "signature",
        "malformed_header",
    ] {
        let line = format!("mcp_auth_failures_total{{reason=\"{reason}\"}}");
        let count: f64 = metrics
            .lines()
            .find(|l| l.starts_with(&line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(count >= 1.0, "{reason}: {count}");
    }
}

async fn issuer_at_path(path: &str) -> TestIssuer {
    TestIssuer::start_with(IssuerOptions {
        path: path.to_owned(),
        ..IssuerOptions::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn rotated_keys_are_picked_up_without_a_restart() {
    let issuer = issuer().await;
    let config = config_file(
        "rotation",
        &issuer,
        RESOURCE,
        "jwks_refresh_min_secs = 0",
        "",
    );
    let node = node(&config);
    let url = node.url().to_owned();
    let first = issuer.token().audience(RESOURCE).sign();
    assert_eq!(initialize(&url, &first).await.status, StatusCode::OK);
    let es256 = issuer.token().audience(RESOURCE).alg(KeyAlg::Es256).sign();
    assert_eq!(
        initialize(&url, &es256).await.status,
        StatusCode::OK,
        "ES256"
    );

    let fetches = issuer.jwks_fetches();
    let new_kid = issuer.rotate().await.unwrap();
    let rotated = issuer.token().audience(RESOURCE).sign();
    let answer = initialize(&url, &rotated).await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "signed by {new_kid}: {answer:?}"
    );
    assert_eq!(
        issuer.jwks_fetches(),
        fetches + 1,
        "one fetch for the new kid"
    );
    // Known keys are not fetched again per token.
    for _ in 0..5 {
        let again = issuer.token().audience(RESOURCE).sign();
        assert_eq!(initialize(&url, &again).await.status, StatusCode::OK);
    }
    assert_eq!(issuer.jwks_fetches(), fetches + 1);
}

#[tokio::test]
async fn made_up_key_ids_do_not_make_the_node_hammer_the_issuer() {
    let issuer = issuer().await;
    let config = config_file(
        "hammer",
        &issuer,
        RESOURCE,
        "jwks_refresh_min_secs = 60",
        "",
    );
    let node = node(&config);
    let url = node.url().to_owned();
    assert_eq!(
        initialize(&url, &issuer.token().audience(RESOURCE).sign())
            .await
            .status,
        StatusCode::OK
    );
    let fetches = issuer.jwks_fetches();
    for i in 0..30 {
        let token = issuer
            .token()
            .audience(RESOURCE)
            .kid_override(format!("made-up-{i}"))
            .forge_unknown_key();
        assert_eq!(
            initialize(&url, &token).await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    assert!(
        issuer.jwks_fetches() <= fetches + 1,
        "{} fetches for 30 unknown kids",
        issuer.jwks_fetches() - fetches
    );
}

#[tokio::test]
async fn an_unreachable_issuer_means_503_never_an_accepted_token() {
    let issuer = issuer().await;
    issuer.set_down(true);
    let config = config_file("down", &issuer, RESOURCE, "jwks_refresh_min_secs = 1", "");
    let node = node(&config);
    let url = node.url().to_owned();
    let token = issuer.token().audience(RESOURCE).sign();
    for forged in [
        token.clone(),
        issuer.token().audience(RESOURCE).forge_alg_none(),
    ] {
        let answer = initialize(&url, &forged).await;
        if forged == token {
            assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE, "{answer:?}");
            assert!(answer.headers.get("retry-after").is_some());
            // The client is told the server is unavailable, not which
            // server nor how it failed: that is for the log.
            let message = answer.body["error"]["message"].as_str().unwrap_or("");
            assert_eq!(message, "authorization server unavailable", "{answer:?}");
            let text = answer.body.to_string();
            for detail in [
                issuer.base_url().as_str(),
                "127.0.0.1",
                "HTTP 503",
                "connection",
            ] {
                assert!(!text.contains(detail), "{detail} in {text}");
            }
        } else {
            // Refused on its own merits, issuer or not.
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{answer:?}");
        }
        assert!(answer.headers.get("mcp-session-id").is_none());
    }
    // The operator reads which server failed and how.
    let line = node
        .wait_for_log("Fetching the issuer's keys failed")
        .unwrap();
    assert!(line.contains(&issuer.base_url()), "{line}");
    issuer.set_down(false);
    // Fetched again once `jwks_refresh_min_secs` has passed.
    within("issuer back", async {
        loop {
            if initialize(&url, &token).await.status == StatusCode::OK {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn scopes_are_checked_per_request_and_per_tool_with_step_up() {
    let issuer = issuer().await;
    let config = config_file(
        "scopes",
        &issuer,
        RESOURCE,
        "required_scopes = [\"mcp:tools\"]\n[auth.tool_scopes]\nadd = [\"mcp:admin\"]",
        "",
    );
    let node = node(&config);
    let url = node.url().to_owned();

    let none = issuer.token().audience(RESOURCE).sign();
    let answer = initialize(&url, &none).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "{answer:?}");
    assert_eq!(
        param(answer.challenge(), "error").as_deref(),
        Some("insufficient_scope")
    );
    assert_eq!(
        param(answer.challenge(), "scope").as_deref(),
        Some("mcp:tools")
    );

    let tools = issuer
        .token()
        .audience(RESOURCE)
        .scopes(["mcp:tools"])
        .sign();
    let id = session(&url, &tools).await;
    let echo = post(
        &url,
        Some(&tools),
        Some(&id),
        &call(1, "echo", json!({"message": "hi"})),
    )
    .await;
    assert_eq!(echo.status, StatusCode::OK, "{echo:?}");
    assert_eq!(echo.body["result"]["content"][0]["text"], "Echo: hi");

    let add = post(
        &url,
        Some(&tools),
        Some(&id),
        &call(2, "add", json!({"a": 1, "b": 2})),
    )
    .await;
    assert_eq!(add.status, StatusCode::FORBIDDEN, "{add:?}");
    assert_eq!(
        param(add.challenge(), "error").as_deref(),
        Some("insufficient_scope")
    );
    assert_eq!(
        param(add.challenge(), "scope").as_deref(),
        Some("mcp:tools mcp:admin")
    );
    assert_eq!(add.body["id"], 2, "the error answers the request: {add:?}");

    // Step-up: a token with both scopes, same principal, same session.
    let admin = issuer
        .token()
        .audience(RESOURCE)
        .scopes(["mcp:tools", "mcp:admin"])
        .sign();
    let add = post(
        &url,
        Some(&admin),
        Some(&id),
        &call(3, "add", json!({"a": 1, "b": 2})),
    )
    .await;
    assert_eq!(add.status, StatusCode::OK, "{add:?}");
    assert_eq!(add.body["result"]["structuredContent"]["sum"], 3.0);
}

#[tokio::test]
async fn opaque_tokens_are_introspected_and_the_answers_cached() {
    let issuer = issuer().await;
    let tail = format!(
        "[auth.introspection]\nclient_id = \"{}\"\nclient_secret = \"{}\"",
        issuer.client_id(),
        issuer.client_secret()
    );
    let config = config_file("introspection", &issuer, RESOURCE, "", &tail);
    let node = node(&config);
    let url = node.url().to_owned();

    let active = issuer.opaque_token(
        true,
        json!({"aud": RESOURCE, "scope": "mcp:tools", "sub": "carol"}),
    );
    let id = session(&url, &active).await;
    let calls = issuer.introspections();
    for i in 0..5 {
        let who = post(
            &url,
            Some(&active),
            Some(&id),
            &call(i, "whoami", json!({})),
        )
        .await;
        assert_eq!(who.status, StatusCode::OK, "{who:?}");
        assert_eq!(who.body["result"]["structuredContent"]["subject"], "carol");
    }
    assert_eq!(
        issuer.introspections(),
        calls,
        "answers are reused, not asked again"
    );

    for (what, token) in [
        (
            "inactive",
            issuer.opaque_token(false, json!({"aud": RESOURCE})),
        ),
        (
            "another audience",
            issuer.opaque_token(true, json!({"aud": "http://127.0.0.1:1/other"})),
        ),
        ("unknown", "never-issued".to_owned()),
    ] {
        let answer = initialize(&url, &token).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{what}: {answer:?}"
        );
        assert_eq!(
            param(answer.challenge(), "error").as_deref(),
            Some("invalid_token"),
            "{what}"
        );
    }
}

#[tokio::test]
async fn handlers_and_the_access_log_see_the_principal_and_never_the_token() {
    let issuer = issuer().await;
    let config = config_file("principal", &issuer, RESOURCE, "", "");
    let node = node(&config);
    let url = node.url().to_owned();
    let token = issuer
        .token()
        .audience(RESOURCE)
        .subject("dave")
        .client_id("inspector")
        .scopes(["mcp:tools", "mcp:prompts"])
        .sign();
    let id = session(&url, &token).await;
    let who = post(&url, Some(&token), Some(&id), &call(1, "whoami", json!({}))).await;
    let who = &who.body["result"]["structuredContent"];
    assert_eq!(who["authenticated"], true);
    assert_eq!(who["issuer"], issuer.issuer());
    assert_eq!(who["subject"], "dave");
    assert_eq!(who["clientId"], "inspector");
    assert_eq!(who["scopes"], json!(["mcp:tools", "mcp:prompts"]));
    let line = node
        .wait_for_log("rpc_method=\"tools/call\"")
        .unwrap_or_else(|err| panic!("{err:#}: {:?}", node.log()));
    assert!(
        line.contains(&format!("principal=\"{}#dave\"", issuer.issuer())),
        "{line}"
    );
    assert!(
        node.log().iter().all(|l| !l.contains(&token)),
        "the token is never logged"
    );
}

#[tokio::test]
async fn sessions_answer_only_their_principal_on_both_transports() {
    let issuer = issuer().await;
    let config = config_file("binding", &issuer, RESOURCE, "", "");
    let node = node(&config);
    let url = node.url().to_owned();
    let alice = issuer.token().audience(RESOURCE).subject("alice").sign();
    let bob = issuer.token().audience(RESOURCE).subject("bob").sign();

    let id = session(&url, &alice).await;
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let stolen = post(&url, Some(&bob), Some(&id), &list).await;
    assert_eq!(stolen.status, StatusCode::NOT_FOUND, "{stolen:?}");
    let unknown = post(
        &url,
        Some(&bob),
        Some("00000000000000000000000000000000"),
        &list,
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(
        stolen.body["error"], unknown.body["error"],
        "reveals nothing"
    );
    for method in [Method::GET, Method::DELETE] {
        let bearer = format!("Bearer {bob}");
        let answer = send(method.clone(), &url, Some(&bearer), Some(&id), None).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{method}: {answer:?}");
    }
    let bearer = format!("Bearer {bob}");
    let resume = reqwest::Client::new()
        .get(&url)
        .header("Accept", "text/event-stream")
        .header("Authorization", &bearer)
        .header("Mcp-Session-Id", &id)
        .header("Last-Event-ID", "0.1-0")
        .send()
        .await
        .unwrap();
    assert_eq!(resume.status(), StatusCode::NOT_FOUND);
    let mine = post(&url, Some(&alice), Some(&id), &list).await;
    assert_eq!(
        mine.status,
        StatusCode::OK,
        "alice's session lives on: {mine:?}"
    );

    // Legacy HTTP+SSE: alice's stream, bob's POST to it.
    let base = url.trim_end_matches("/mcp");
    let sse = reqwest::Client::new()
        .get(format!("{base}/sse"))
        .header("Accept", "text/event-stream")
        .header("Authorization", format!("Bearer {alice}"))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), StatusCode::OK);
    let mut stream = sse.bytes_stream();
    let first = within("endpoint event", futures_util::StreamExt::next(&mut stream))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&first).to_string();
    let endpoint = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap_or_else(|| panic!("{text}"))
        .trim()
        .to_owned();
    let messages = format!("{base}{endpoint}");
    let by_bob = post(&messages, Some(&bob), None, &initialize_body()).await;
    assert_eq!(by_bob.status, StatusCode::NOT_FOUND, "{by_bob:?}");
    let by_alice = post(&messages, Some(&alice), None, &initialize_body()).await;
    assert_eq!(by_alice.status, StatusCode::ACCEPTED, "{by_alice:?}");
}

#[test]
fn a_node_beyond_loopback_without_authorization_says_so() {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(mcp_cluster_testkit::node_binary())
        .args(["--bind", "0.0.0.0:0", "--log", "warn"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let warned = rx
        .iter()
        .take(50)
        .find(|l| l.contains("AUTHORIZATION IS OFF"));
    let _ = child.kill();
    let _ = child.wait();
    let line = warned.expect("a warning at start");
    assert!(line.contains("WARN"), "{line}");
}

/// 2026-07-28: a request state names the principal it was issued to; another
/// principal's retry with it is refused, the owner's completes.
#[tokio::test]
async fn a_request_state_answers_only_the_principal_it_was_issued_to() {
    use stateless_support as sl;
    let issuer = issuer().await;
    let config = config_file("mrtr-principal", &issuer, RESOURCE, "", "");
    let node = node(&config);
    let url = node.url().to_owned();
    let alice = format!(
        "Bearer {}",
        issuer.token().audience(RESOURCE).subject("alice").sign()
    );
    let bob = format!(
        "Bearer {}",
        issuer.token().audience(RESOURCE).subject("bob").sign()
    );
    let tool = "test_input_required_result_elicitation";
    let first = sl::call(
        &url,
        &sl::tool_call(1, tool, json!({}), json!({}), sl::all_caps()),
        &[("Authorization", Some(&alice))],
    )
    .await;
    let state = first.response["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("{first:?}"))
        .to_owned();
    let retry = |id: u64| {
        sl::tool_call(
            id,
            tool,
            json!({}),
            json!({"inputResponses": {"user_name": sl::accept("name", "Al")}, "requestState": state}),
            sl::all_caps(),
        )
    };
    let stolen = sl::call(&url, &retry(2), &[("Authorization", Some(&bob))]).await;
    assert_eq!(stolen.response["error"]["code"], -32602, "{stolen:?}");
    assert_eq!(stolen.response["error"]["data"]["reason"], "foreign");
    let anonymous = sl::call(&url, &retry(3), &[]).await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
    let own = sl::call(&url, &retry(4), &[("Authorization", Some(&alice))]).await;
    assert_eq!(sl::text(&own.response), "Hello, Al!");
}
