//! What a client can make a session hold is bounded: `initialize` refuses
//! oversized client info and capabilities (no session state is kept), and
//! `resources/subscribe` refuses over-long URIs, URIs of no resource and
//! subscriptions beyond the per-session maximum.

#![allow(clippy::unwrap_used)]

mod support;

use mcp_protocol::ErrorCode;
use mcp_runtime::RuntimeConfig;
use serde_json::json;
use support::*;

fn config() -> RuntimeConfig {
    RuntimeConfig {
        max_client_info_bytes: 256,
        max_client_capabilities_bytes: 1024,
        max_subscriptions_per_session: 3,
        max_uri_bytes: 64,
        ..RuntimeConfig::default()
    }
}

#[actix_rt::test]
async fn initialize_refuses_oversized_client_state_and_keeps_nothing() {
    let runtime = runtime(config());
    let big = "x".repeat(2000);
    let cases = [
        (
            json!({"experimental": {"blob": big}}),
            json!({"name": "c", "version": "1"}),
            "capabilities",
        ),
        (
            json!({}),
            json!({"name": big, "version": "1"}),
            "clientInfo",
        ),
    ];
    for (capabilities, info, what) in cases {
        let session = runtime.create_session(None).await.unwrap();
        let params = initialize_params(capabilities, info);
        let r = call(&runtime, &session, 1, "initialize", params).await;
        assert_eq!(
            code(&r),
            i64::from(ErrorCode::INVALID_PARAMS.0),
            "{what}: {r:?}"
        );
        let message = &r.outcome.as_ref().unwrap_err().message;
        assert!(message.contains(what), "{message}");
        assert!(message.contains("at most"), "{message}");
        // Nothing negotiated, nothing stored: the session is not initialized.
        assert_eq!(session.protocol_version(), None);
        let record = runtime
            .store()
            .sessions
            .load(session.id())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.protocol_version, None);
        assert!(
            record.client_capabilities.get().len() < 16,
            "{:?}",
            record.client_capabilities
        );
        assert!(
            record.client_info.get().len() < 16,
            "{:?}",
            record.client_info
        );
        // The client may try again within the limits.
        let params = initialize_params(json!({"roots": {}}), json!({"name": "c", "version": "1"}));
        let r = call(&runtime, &session, 2, "initialize", params).await;
        assert!(r.outcome.is_ok(), "{r:?}");
    }
}

#[actix_rt::test]
async fn subscriptions_are_bounded_in_length_count_and_to_known_resources() {
    let runtime = runtime(config());
    let session = initialized(&runtime).await;
    let subscribe = |uri: String| json!({ "uri": uri });

    let long = format!("test://{}", "u".repeat(100));
    let r = call(
        &runtime,
        &session,
        1,
        "resources/subscribe",
        subscribe(long),
    )
    .await;
    assert_eq!(code(&r), i64::from(ErrorCode::INVALID_PARAMS.0), "{r:?}");
    assert!(
        r.outcome
            .as_ref()
            .unwrap_err()
            .message
            .contains("at most 64"),
        "{r:?}"
    );

    // 2025-11-25 resources: an unknown resource is -32002, with its URI.
    let r = call(
        &runtime,
        &session,
        2,
        "resources/subscribe",
        subscribe("nope://x".into()),
    )
    .await;
    let err = r.outcome.as_ref().unwrap_err();
    assert_eq!(err.code, ErrorCode::RESOURCE_NOT_FOUND, "{r:?}");
    assert_eq!(err.data.as_ref().unwrap()["uri"], "nope://x");

    for (i, uri) in ["test://a", "test://b", "test://c"].into_iter().enumerate() {
        let r = call(
            &runtime,
            &session,
            10 + i as i64,
            "resources/subscribe",
            subscribe(uri.into()),
        )
        .await;
        assert!(r.outcome.is_ok(), "{uri}: {r:?}");
    }
    // Again: already held, no room needed.
    let r = call(
        &runtime,
        &session,
        20,
        "resources/subscribe",
        subscribe("test://a".into()),
    )
    .await;
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = call(
        &runtime,
        &session,
        21,
        "resources/subscribe",
        subscribe("test://d".into()),
    )
    .await;
    assert_eq!(code(&r), i64::from(ErrorCode::INVALID_PARAMS.0), "{r:?}");
    assert!(
        r.outcome
            .as_ref()
            .unwrap_err()
            .message
            .contains("unsubscribe"),
        "{r:?}"
    );

    let held = runtime
        .store()
        .sessions
        .load(session.id())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(held.subscriptions.len(), 3, "{:?}", held.subscriptions);
    assert!(!held.subscriptions.contains("test://d"));

    let r = call(
        &runtime,
        &session,
        22,
        "resources/unsubscribe",
        subscribe("test://b".into()),
    )
    .await;
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = call(
        &runtime,
        &session,
        23,
        "resources/subscribe",
        subscribe("test://d".into()),
    )
    .await;
    assert!(r.outcome.is_ok(), "{r:?}");
    let held = runtime
        .store()
        .sessions
        .load(session.id())
        .await
        .unwrap()
        .unwrap();
    let uris: Vec<&str> = held.subscriptions.iter().map(String::as_str).collect();
    assert_eq!(uris, ["test://a", "test://c", "test://d"]);
}
