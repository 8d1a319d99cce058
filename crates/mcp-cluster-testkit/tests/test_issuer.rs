//! The test authorization server behaves as a real identity provider does
//! for a resource server: metadata at the RFC 8414 and OpenID paths (issuer
//! path inserted), a JWKS that verifies its tokens and follows rotation,
//! 503 and refused connections on demand, RFC 7662 introspection behind
//! client authentication, client credentials tokens for a resource; and
//! its forgeries fail verification.

use anyhow::Context as _;
use jsonwebtoken::jwk::{JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mcp_cluster_testkit::{
    Discovery, IssuerOptions, KeyAlg, PublicKeyForm, TestIssuer, raw_http, within,
};
use serde_json::{Map, Value, json};

const RESOURCE: &str = "http://127.0.0.1:8080/mcp";

async fn get(url: &str) -> anyhow::Result<reqwest::Response> {
    Ok(within(url, reqwest::get(url)).await?)
}

async fn get_json(url: &str) -> anyhow::Result<Value> {
    let response = get(url).await?;
    anyhow::ensure!(response.status() == 200, "{url}: {}", response.status());
    Ok(response.json().await?)
}

async fn jwks(issuer: &TestIssuer) -> anyhow::Result<JwkSet> {
    let metadata = get_json(&issuer.oauth_metadata_url()).await?;
    let uri = metadata["jwks_uri"].as_str().context("no jwks_uri")?;
    Ok(serde_json::from_value(get_json(uri).await?)?)
}

/// Verifies `token` as a resource server would: the key named by the
/// header's `kid` in the served JWKS, the JWK's `alg`, this audience.
fn verify(
    set: &JwkSet,
    issuer: &TestIssuer,
    token: &str,
) -> jsonwebtoken::errors::Result<Map<String, Value>> {
    let header = jsonwebtoken::decode_header(token)?;
    let kid = header.kid.expect("a kid");
    let jwk = set.find(&kid).expect("the kid is in the JWKS");
    let alg = match jwk.common.key_algorithm {
        Some(KeyAlgorithm::RS256) => Algorithm::RS256,
        Some(KeyAlgorithm::ES256) => Algorithm::ES256,
        other => panic!("unexpected alg {other:?}"),
    };
    let mut validation = Validation::new(alg);
    validation.set_audience(&[RESOURCE]);
    validation.set_issuer(&[issuer.issuer()]);
    let key = DecodingKey::from_jwk(jwk)?;
    Ok(jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)?.claims)
}

async fn introspect(
    issuer: &TestIssuer,
    credentials: Option<(&str, &str)>,
    token: &str,
) -> anyhow::Result<(u16, Value)> {
    let mut request = reqwest::Client::new()
        .post(issuer.introspection_endpoint())
        .form(&[("token", token)]);
    if let Some((id, secret)) = credentials {
        request = request.basic_auth(id, Some(secret));
    }
    let response = within("introspect", request.send()).await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

#[tokio::test]
async fn a_root_issuer_serves_both_metadata_documents_naming_itself() {
    let issuer = TestIssuer::start().await.unwrap();
    let base = issuer.base_url();
    assert_eq!(issuer.issuer(), base);
    for url in [
        format!("{base}/.well-known/oauth-authorization-server"),
        format!("{base}/.well-known/openid-configuration"),
    ] {
        let doc = get_json(&url).await.unwrap();
        assert_eq!(doc["issuer"], issuer.issuer());
        assert_eq!(doc["jwks_uri"], issuer.jwks_uri());
        assert_eq!(
            doc["introspection_endpoint"],
            issuer.introspection_endpoint()
        );
        assert_eq!(doc["token_endpoint"], issuer.token_endpoint());
        assert_eq!(doc["response_types_supported"], json!(["code"]));
        assert_eq!(
            doc["scopes_supported"],
            json!(["mcp:tools", "mcp:resources", "mcp:prompts"])
        );
    }
    let openid = get_json(&issuer.openid_metadata_url()).await.unwrap();
    assert_eq!(openid["subject_types_supported"], json!(["public"]));
    assert_eq!(issuer.metadata_fetches(), 3);
}

#[tokio::test]
async fn an_issuer_path_is_inserted_after_the_well_known_part() {
    let options = IssuerOptions {
        path: "/realms/test".into(),
        ..IssuerOptions::default()
    };
    let issuer = TestIssuer::start_with(options).await.unwrap();
    let base = issuer.base_url();
    assert_eq!(issuer.issuer(), format!("{base}/realms/test"));
    assert_eq!(
        issuer.oauth_metadata_url(),
        format!("{base}/.well-known/oauth-authorization-server/realms/test")
    );
    for url in [
        issuer.oauth_metadata_url(),
        issuer.openid_metadata_url(),
        issuer.openid_appended_metadata_url(),
    ] {
        assert_eq!(
            get_json(&url).await.unwrap()["issuer"],
            issuer.issuer(),
            "{url}"
        );
    }
    assert_eq!(issuer.jwks_uri(), format!("{base}/realms/test/jwks"));
    assert_eq!(jwks(&issuer).await.unwrap().keys.len(), 2);
    // Not at the root: that would be another issuer's metadata.
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/jwks",
    ] {
        assert_eq!(
            get(&format!("{base}{path}")).await.unwrap().status(),
            404,
            "{path}"
        );
    }
}

#[tokio::test]
async fn discovery_chooses_the_documents_served() {
    let oauth = TestIssuer::start_with(IssuerOptions {
        path: "/t".into(),
        discovery: Discovery::OAuth,
        ..IssuerOptions::default()
    })
    .await
    .unwrap();
    assert_eq!(
        get(&oauth.oauth_metadata_url()).await.unwrap().status(),
        200
    );
    assert_eq!(
        get(&oauth.openid_metadata_url()).await.unwrap().status(),
        404
    );
    assert_eq!(
        get(&oauth.openid_appended_metadata_url())
            .await
            .unwrap()
            .status(),
        404
    );

    let appended = TestIssuer::start_with(IssuerOptions {
        path: "/t".into(),
        discovery: Discovery::OpenIdAppended,
        ..IssuerOptions::default()
    })
    .await
    .unwrap();
    assert_eq!(
        get(&appended.oauth_metadata_url()).await.unwrap().status(),
        404
    );
    assert_eq!(
        get(&appended.openid_metadata_url()).await.unwrap().status(),
        404
    );
    assert_eq!(
        get(&appended.openid_appended_metadata_url())
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn rs256_and_es256_tokens_verify_against_the_served_jwks() {
    let issuer = TestIssuer::start().await.unwrap();
    let set = jwks(&issuer).await.unwrap();
    assert_eq!(issuer.jwks_fetches(), 1);
    for jwk in &set.keys {
        assert_eq!(jwk.common.public_key_use, Some(PublicKeyUse::Signature));
        assert!(jwk.common.key_id.is_some());
    }
    for alg in [KeyAlg::Rs256, KeyAlg::Es256] {
        let token = issuer
            .token()
            .subject("bob")
            .audience(RESOURCE)
            .scopes(["mcp:tools", "mcp:prompts"])
            .client_id("c1")
            .claim("tenant", json!("t1"))
            .alg(alg)
            .sign();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        assert_eq!(
            header.kid.as_deref(),
            Some(issuer.current_kid(alg).as_str())
        );
        assert_eq!(header.typ.as_deref(), Some("at+jwt"));
        let claims = verify(&set, &issuer, &token).unwrap();
        assert_eq!(claims["sub"], "bob");
        assert_eq!(claims["scope"], "mcp:tools mcp:prompts");
        assert_eq!(claims["client_id"], "c1");
        assert_eq!(claims["tenant"], "t1");
        assert_eq!(claims["iss"], issuer.issuer());
    }
    let expired = issuer.token().audience(RESOURCE).expires_in(-120).sign();
    let err = verify(&set, &issuer, &expired).unwrap_err();
    assert_eq!(
        *err.kind(),
        jsonwebtoken::errors::ErrorKind::ExpiredSignature
    );
}

#[tokio::test]
async fn rotation_adds_a_signing_key_and_retire_removes_the_old_one() {
    let issuer = TestIssuer::start().await.unwrap();
    let old_kid = issuer.current_kid(KeyAlg::Rs256);
    let old_token = issuer.token().audience(RESOURCE).sign();
    let new_kid = issuer.rotate().await.unwrap();
    assert_ne!(new_kid, old_kid);
    assert_eq!(issuer.current_kid(KeyAlg::Rs256), new_kid);
    let new_token = issuer.token().audience(RESOURCE).sign();
    let header = jsonwebtoken::decode_header(&new_token).unwrap();
    assert_eq!(header.kid.as_deref(), Some(new_kid.as_str()));

    let set = jwks(&issuer).await.unwrap();
    assert_eq!(set.keys.len(), 3);
    verify(&set, &issuer, &old_token).unwrap();
    verify(&set, &issuer, &new_token).unwrap();

    assert!(issuer.retire(&old_kid));
    assert!(!issuer.retire(&old_kid));
    let set = jwks(&issuer).await.unwrap();
    assert!(set.find(&old_kid).is_none());
    assert!(set.find(&new_kid).is_some());
    assert_eq!(issuer.jwks_fetches(), 2);
}

#[tokio::test]
async fn down_answers_503_until_up_again() {
    let issuer = TestIssuer::start().await.unwrap();
    issuer.set_down(true);
    for url in [issuer.oauth_metadata_url(), issuer.jwks_uri()] {
        let response = get(&url).await.unwrap();
        assert_eq!(response.status(), 503, "{url}");
        assert_eq!(response.headers()["retry-after"], "1");
    }
    let token = issuer.opaque_token(true, json!({}));
    let (status, _) = introspect(&issuer, Some(("mcp-node", "mcp-node-secret")), &token)
        .await
        .unwrap();
    assert_eq!(status, 503);
    issuer.set_down(false);
    get_json(&issuer.oauth_metadata_url()).await.unwrap();
    get_json(&issuer.jwks_uri()).await.unwrap();
    assert_eq!(issuer.jwks_fetches(), 2);
    assert_eq!(issuer.metadata_fetches(), 2);
}

#[tokio::test]
async fn not_listening_refuses_connections_until_it_listens_again_on_the_same_port() {
    let issuer = TestIssuer::start().await.unwrap();
    let addr = issuer.addr();
    let head = format!(
        "GET /.well-known/oauth-authorization-server HTTP/1.1\r\nHost: {addr}\r\nConnection: close"
    );
    let probe = |head: String| tokio::task::spawn_blocking(move || raw_http(addr, &head, ""));
    assert_eq!(probe(head.clone()).await.unwrap().unwrap().0, 200);
    let pooled = reqwest::Client::new();
    let url = issuer.jwks_uri();
    assert_eq!(pooled.get(&url).send().await.unwrap().status(), 200);
    issuer.set_listening(false).await.unwrap();
    assert!(probe(head.clone()).await.unwrap().is_err());
    // The kept-alive connection is closed too: a stopped server's workers
    // let go of their connections a moment after the listener, so within
    // two seconds the pooled client gets no answer any more.
    let mut closed = false;
    for _ in 0..20 {
        if within("jwks", pooled.get(&url).send()).await.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(closed, "the kept-alive connection still answers");
    issuer.set_listening(true).await.unwrap();
    assert_eq!(issuer.addr(), addr);
    assert_eq!(probe(head).await.unwrap().unwrap().0, 200);
}

#[tokio::test]
async fn introspection_wants_client_auth_and_answers_active_or_inactive() {
    let issuer = TestIssuer::start().await.unwrap();
    let client = (issuer.client_id(), issuer.client_secret());
    let opaque = issuer.opaque_token(
        true,
        json!({"scope": "mcp:tools", "client_id": "c1", "aud": RESOURCE}),
    );

    let (status, _) = introspect(&issuer, None, &opaque).await.unwrap();
    assert_eq!(status, 401);
    let (status, body) = introspect(&issuer, Some((client.0, "wrong")), &opaque)
        .await
        .unwrap();
    assert_eq!(status, 401);
    assert_eq!(body["error"], "invalid_client");

    let (status, body) = introspect(&issuer, Some(client), &opaque).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["active"], true);
    assert_eq!(body["sub"], "alice");
    assert_eq!(body["scope"], "mcp:tools");
    assert_eq!(body["client_id"], "c1");
    assert_eq!(body["aud"], RESOURCE);
    assert_eq!(body["iss"], issuer.issuer());
    assert!(body["exp"].as_i64().is_some());

    for inactive in [
        "never-issued".to_owned(),
        issuer.opaque_token(false, json!({})),
        issuer.opaque_token(true, json!({"exp": 1})),
        issuer.token().expires_in(-10).opaque(),
    ] {
        let (status, body) = introspect(&issuer, Some(client), &inactive).await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(body, json!({"active": false}), "{inactive}");
    }
    assert!(issuer.revoke(&opaque));
    let (_, body) = introspect(&issuer, Some(client), &opaque).await.unwrap();
    assert_eq!(body, json!({"active": false}));

    // Its own JWTs introspect too, while valid and signed by a published key.
    let jwt = issuer.token().subject("carol").audience(RESOURCE).sign();
    let (_, body) = introspect(&issuer, Some(client), &jwt).await.unwrap();
    assert_eq!(body["active"], true);
    assert_eq!(body["sub"], "carol");
    let (_, body) = introspect(&issuer, Some(client), &issuer.token().forge_wrong_key())
        .await
        .unwrap();
    assert_eq!(body, json!({"active": false}));

    assert_eq!(issuer.introspections(), 10);
}

#[tokio::test]
async fn the_token_endpoint_issues_client_credentials_tokens_for_the_resource() {
    let issuer = TestIssuer::start().await.unwrap();
    let http = reqwest::Client::new();
    let response = http
        .post(issuer.token_endpoint())
        .basic_auth(issuer.client_id(), Some(issuer.client_secret()))
        .form(&[
            ("grant_type", "client_credentials"),
            ("resource", RESOURCE),
            ("scope", "mcp:tools"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["scope"], "mcp:tools");
    let claims = verify(
        &jwks(&issuer).await.unwrap(),
        &issuer,
        body["access_token"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(claims["aud"], RESOURCE);
    assert_eq!(claims["sub"], issuer.client_id());
    assert_eq!(claims["client_id"], issuer.client_id());

    // client_secret_post works too; a wrong secret, another grant or an
    // unknown scope do not.
    let post =
        |form: Vec<(&'static str, String)>| http.post(issuer.token_endpoint()).form(&form).send();
    let id = issuer.client_id().to_owned();
    let secret = issuer.client_secret().to_owned();
    let grant = ("grant_type", "client_credentials".to_owned());
    let cases = [
        (
            vec![
                grant.clone(),
                ("client_id", id.clone()),
                ("client_secret", secret.clone()),
            ],
            200,
            None,
        ),
        (
            vec![
                grant.clone(),
                ("client_id", id.clone()),
                ("client_secret", "x".into()),
            ],
            401,
            Some("invalid_client"),
        ),
        (
            vec![
                ("grant_type", "password".into()),
                ("client_id", id.clone()),
                ("client_secret", secret.clone()),
            ],
            400,
            Some("unsupported_grant_type"),
        ),
        (
            vec![
                grant,
                ("client_id", id),
                ("client_secret", secret),
                ("scope", "admin".into()),
            ],
            400,
            Some("invalid_scope"),
        ),
    ];
    for (form, status, error) in cases {
        let response = post(form).await.unwrap();
        assert_eq!(response.status(), status);
        let body: Value = response.json().await.unwrap();
        if let Some(error) = error {
            assert_eq!(body["error"], error);
        }
    }
    assert_eq!(issuer.token_requests(), 5);
}

#[tokio::test]
async fn forged_tokens_fail_verification() {
    let issuer = TestIssuer::start().await.unwrap();
    let set = jwks(&issuer).await.unwrap();
    let builder = issuer.token().audience(RESOURCE).scopes(["mcp:tools"]);

    // alg none: no signature at all.
    let none = builder.forge_alg_none();
    assert!(none.ends_with('.'));
    assert!(verify(&set, &issuer, &none).is_err());

    // Key confusion: HS256 over the RSA public key; it is a real HMAC with
    // those bytes, refused by a verifier that keeps to the JWK's alg.
    let rsa = set.find(&issuer.current_kid(KeyAlg::Rs256)).unwrap();
    for form in [PublicKeyForm::Pem, PublicKeyForm::Der] {
        let confused = builder.forge_key_confusion(form);
        let header = jsonwebtoken::decode_header(&confused).unwrap();
        assert_eq!(header.alg, Algorithm::HS256);
        assert_eq!(header.kid.as_deref(), rsa.common.key_id.as_deref());
        assert!(verify(&set, &issuer, &confused).is_err());
    }

    // Tampered payload: the signature no longer matches.
    let tampered = builder.forge_tampered(|claims| {
        claims.insert("scope".into(), json!("mcp:tools admin"));
    });
    let err = verify(&set, &issuer, &tampered).unwrap_err();
    assert_eq!(
        *err.kind(),
        jsonwebtoken::errors::ErrorKind::InvalidSignature
    );

    // A key outside the JWKS: its kid unknown, or a known kid.
    for alg in [KeyAlg::Rs256, KeyAlg::Es256] {
        let unknown = builder.clone().alg(alg).forge_unknown_key();
        let kid = jsonwebtoken::decode_header(&unknown).unwrap().kid.unwrap();
        assert!(set.find(&kid).is_none());
        let wrong = builder.clone().alg(alg).forge_wrong_key();
        let header = jsonwebtoken::decode_header(&wrong).unwrap();
        assert_eq!(header.kid, Some(issuer.current_kid(alg)));
        let err = verify(&set, &issuer, &wrong).unwrap_err();
        assert_eq!(
            *err.kind(),
            jsonwebtoken::errors::ErrorKind::InvalidSignature
        );
    }

    // The honest token from the same builder verifies.
    verify(&set, &issuer, &builder.sign()).unwrap();
}

#[tokio::test]
async fn key_confusion_is_an_hmac_keyed_with_the_published_public_key() {
    let issuer = TestIssuer::start().await.unwrap();
    let kid = issuer.current_kid(KeyAlg::Rs256);
    let pem = issuer.public_key(&kid, PublicKeyForm::Pem).unwrap();
    let der = issuer.public_key(&kid, PublicKeyForm::Der).unwrap();
    // The PEM is the key the JWKS publishes under that kid.
    let mut validation = Validation::new(Algorithm::RS256);
    validation.validate_aud = false;
    let honest = issuer.token().sign();
    jsonwebtoken::decode::<Value>(
        &honest,
        &DecodingKey::from_rsa_pem(&pem).unwrap(),
        &validation,
    )
    .unwrap();
    // A naive verifier that takes the alg from the token and a key file
    // as the HMAC secret accepts the forgeries.
    let mut validation = Validation::new(Algorithm::HS256);
    validation.validate_aud = false;
    for (form, secret) in [(PublicKeyForm::Pem, pem), (PublicKeyForm::Der, der)] {
        let forged = issuer.token().forge_key_confusion(form);
        jsonwebtoken::decode::<Value>(&forged, &DecodingKey::from_secret(&secret), &validation)
            .unwrap();
    }
}
