//! A session from initialize to DELETE over a real socket.

use mcp_cluster_client::Reply;
use mcp_cluster_testkit::{InProcessNode, fixtures};
use serde_json::json;

#[tokio::test]
async fn session_lifecycle_from_initialize_to_delete() {
    let node = InProcessNode::start_default(fixtures::test_server()).unwrap();
    let mut client = node.client();
    let init = client.initialize(json!({})).await.unwrap();
    assert_eq!(init["protocolVersion"], "2025-11-25");
    let (response, notes) = client
        .request(
            "tools/call",
            json!({"name": "echo", "arguments": {"message": "hi"}}),
        )
        .await
        .unwrap();
    assert_eq!(response["result"]["content"][0]["text"], "hi");
    assert!(notes.is_empty());
    assert_eq!(client.delete().await.unwrap(), 200);
    match client
        .post(&json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}))
        .await
        .unwrap()
    {
        Reply::Status(status, _, _) => assert_eq!(status, 404),
        other => panic!("expected 404, got {other:?}"),
    }
}
