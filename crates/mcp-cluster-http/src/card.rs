//! The server card and the catalog that lists it (the experimental Server
//! Card extension, SEP-2127): public metadata a registry or a client reads
//! before it connects. Served as built at start, the same bytes on every
//! node of a deployment configured alike, with a strong `ETag` (the bytes'
//! SHA-256), `304 Not Modified` for an `If-None-Match` that names it,
//! `Cache-Control: public, max-age=3600` and CORS open to every origin (a
//! preflight `OPTIONS` included). No authorization: nothing in them is
//! secret.

use actix_web::http::header::{
    ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS, ACCESS_CONTROL_ALLOW_ORIGIN,
    ACCESS_CONTROL_EXPOSE_HEADERS, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH,
};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::HttpState;

/// The server card's media type.
pub const CARD_MEDIA_TYPE: &str = "application/mcp-server-card+json";
/// The AI Catalog's media type.
pub const CATALOG_MEDIA_TYPE: &str = "application/ai-catalog+json";
/// The card's path below the MCP endpoint.
pub const CARD_SUFFIX: &str = "/server-card";
/// Where a domain's catalog is looked for: the AI Catalog's path, and the
/// MCP Catalog's of earlier drafts (the same document at both).
pub const CATALOG_PATHS: [&str; 2] = [
    "/.well-known/ai-catalog.json",
    "/.well-known/mcp/catalog.json",
];
/// How long clients and caches may keep a copy without asking again.
const CACHE_CONTROL_VALUE: &str = "public, max-age=3600";

/// One document served as it is.
#[derive(Debug)]
pub struct Published {
    body: Bytes,
    /// `"<hex SHA-256 of body>"`: strong, the same on every node that
    /// serves the same bytes.
    etag: String,
    media_type: &'static str,
}

impl Published {
    /// `body`, served as `media_type`.
    pub fn new(body: Vec<u8>, media_type: &'static str) -> Self {
        let etag = format!("\"{:x}\"", Sha256::digest(&body));
        Self {
            body: body.into(),
            etag,
            media_type,
        }
    }

    /// Its entity tag, quotes included.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The answer to a GET: 304 when `If-None-Match` names the tag (or is
    /// `*`), else the document.
    fn answer(&self, req: &HttpRequest) -> HttpResponse {
        let matched = req
            .headers()
            .get_all(IF_NONE_MATCH)
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|tag| tag.trim().trim_start_matches("W/"))
            .any(|tag| tag == "*" || tag == self.etag);
        let mut answer = if matched {
            HttpResponse::NotModified()
        } else {
            HttpResponse::Ok()
        };
        answer
            .insert_header((ETAG, self.etag.as_str()))
            .insert_header((CACHE_CONTROL, CACHE_CONTROL_VALUE));
        cors(&mut answer);
        if matched {
            answer.finish()
        } else {
            answer
                .insert_header((CONTENT_TYPE, self.media_type))
                .body(self.body.clone())
        }
    }
}

/// The documents of a node that publishes a card.
#[derive(Debug)]
pub struct Discovery {
    /// The server card, at `<endpoint>/server-card`.
    pub card: Published,
    /// The catalog, at each of [`CATALOG_PATHS`].
    pub catalog: Published,
}

fn cors(answer: &mut actix_web::HttpResponseBuilder) {
    answer
        .insert_header((ACCESS_CONTROL_ALLOW_ORIGIN, "*"))
        .insert_header((ACCESS_CONTROL_ALLOW_METHODS, "GET"))
        .insert_header((ACCESS_CONTROL_ALLOW_HEADERS, "Content-Type, If-None-Match"))
        .insert_header((ACCESS_CONTROL_EXPOSE_HEADERS, "ETag"));
}

async fn card(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    match &state.discovery {
        Some(discovery) => discovery.card.answer(&req),
        None => HttpResponse::NotFound().finish(),
    }
}

async fn catalog(req: HttpRequest, state: web::Data<HttpState>) -> HttpResponse {
    match &state.discovery {
        Some(discovery) => discovery.catalog.answer(&req),
        None => HttpResponse::NotFound().finish(),
    }
}

/// A browser's preflight (`If-None-Match` is not a simple header).
async fn preflight() -> HttpResponse {
    let mut answer = HttpResponse::NoContent();
    cors(&mut answer);
    answer.insert_header(("Access-Control-Max-Age", "86400"));
    answer.finish()
}

/// Registers the card and catalog routes, when the node publishes a card.
pub(crate) fn configure(cfg: &mut web::ServiceConfig, endpoint: &str, publishes: bool) {
    if !publishes {
        return;
    }
    cfg.service(
        web::resource(format!("{}{CARD_SUFFIX}", endpoint.trim_end_matches('/')))
            .route(web::get().to(card))
            .route(web::head().to(card))
            .route(web::method(actix_web::http::Method::OPTIONS).to(preflight)),
    );
    for path in CATALOG_PATHS {
        cfg.service(
            web::resource(path)
                .route(web::get().to(catalog))
                .route(web::head().to(catalog))
                .route(web::method(actix_web::http::Method::OPTIONS).to(preflight)),
        );
    }
}

#[cfg(test)]
mod tests {
    use actix_web::test::TestRequest;

    use super::*;

    #[test]
    fn the_tag_is_the_bytes_hash_and_a_match_is_not_modified() {
        let doc = Published::new(b"{}".to_vec(), CARD_MEDIA_TYPE);
        assert_eq!(
            doc.etag(),
            "\"44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\""
        );
        let plain = doc.answer(&TestRequest::get().to_http_request());
        assert_eq!(plain.status(), 200);
        assert_eq!(plain.headers().get(ETAG).unwrap(), doc.etag());
        assert_eq!(plain.headers().get(CONTENT_TYPE).unwrap(), CARD_MEDIA_TYPE);
        assert_eq!(
            plain.headers().get(ACCESS_CONTROL_ALLOW_ORIGIN).unwrap(),
            "*"
        );
        for names in [
            doc.etag().to_owned(),
            format!("\"x\", W/{}", doc.etag()),
            "*".into(),
        ] {
            let req = TestRequest::get()
                .insert_header((IF_NONE_MATCH, names.as_str()))
                .to_http_request();
            let answer = doc.answer(&req);
            assert_eq!(answer.status(), 304, "{names}");
            assert_eq!(answer.headers().get(ETAG).unwrap(), doc.etag());
        }
        let other = TestRequest::get()
            .insert_header((IF_NONE_MATCH, "\"other\""))
            .to_http_request();
        assert_eq!(doc.answer(&other).status(), 200);
    }
}
