//! What a client can make a session hold is bounded: `initialize` refuses
//! oversized client info and capabilities (no session state is kept), and
//! `resources/subscribe` refuses over-long URIs, URIs of no resource and
//! subscriptions beyond the per-session maximum.

#![allow(clippy::unwrap_used)]

mod support;

use mcp_cluster_protocol::ErrorCode;
use mcp_cluster_runtime::RuntimeConfig;
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
        let kept = record(&runtime, &session).await;
        assert_eq!(kept.protocol_version, None);
        assert!(
            kept.client_capabilities.get().len() < 16,
            "{:?}",
            kept.client_capabilities
        );
        assert!(kept.client_info.get().len() < 16, "{:?}", kept.client_info);
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
    let subscribe = |id: i64, uri: String| {
        call(
            &runtime,
            &session,
            id,
            "resources/subscribe",
            json!({ "uri": uri }),
        )
    };
    let message =
        |r: &mcp_cluster_protocol::Response| r.outcome.as_ref().unwrap_err().message.clone();

    let r = subscribe(1, format!("test://{}", "u".repeat(100))).await;
    assert_eq!(code(&r), i64::from(ErrorCode::INVALID_PARAMS.0), "{r:?}");
    assert!(message(&r).contains("at most 64"), "{r:?}");

    // 2025-11-25 resources: an unknown resource is -32002, with its URI.
    let r = subscribe(2, "nope://x".into()).await;
    let err = r.outcome.as_ref().unwrap_err();
    assert_eq!(err.code, ErrorCode::RESOURCE_NOT_FOUND, "{r:?}");
    assert_eq!(err.data.as_ref().unwrap()["uri"], "nope://x");

    for (id, uri) in [(10, "test://a"), (11, "test://b"), (12, "test://c")] {
        let r = subscribe(id, uri.into()).await;
        assert!(r.outcome.is_ok(), "{uri}: {r:?}");
    }
    // Again: already held, no room needed.
    let r = subscribe(20, "test://a".into()).await;
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = subscribe(21, "test://d".into()).await;
    assert_eq!(code(&r), i64::from(ErrorCode::INVALID_PARAMS.0), "{r:?}");
    assert!(message(&r).contains("unsubscribe"), "{r:?}");
    assert_eq!(
        held(&runtime, &session).await,
        ["test://a", "test://b", "test://c"]
    );

    let unsubscribe = json!({"uri": "test://b"});
    let r = call(&runtime, &session, 22, "resources/unsubscribe", unsubscribe).await;
    assert!(r.outcome.is_ok(), "{r:?}");
    let r = subscribe(23, "test://d".into()).await;
    assert!(r.outcome.is_ok(), "{r:?}");
    assert_eq!(
        held(&runtime, &session).await,
        ["test://a", "test://c", "test://d"]
    );
}

/// The subscriptions the store holds for `session`, in order.
async fn held(
    runtime: &mcp_cluster_runtime::Runtime,
    session: &mcp_cluster_runtime::SessionHandle,
) -> Vec<String> {
    record(runtime, session)
        .await
        .subscriptions
        .into_iter()
        .collect()
}
