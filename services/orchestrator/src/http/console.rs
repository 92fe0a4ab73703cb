//! The web console, served by the orchestrator itself: `/` is its page and
//! each of its files is `/{name}`, from the copy compiled into the binary
//! (`build.rs`); `GET /v1/console/config` tells it what the operator set
//! (`console.trace_url`, the link of a trace id).

use axum::{
    Router,
    body::Body,
    http::{HeaderValue, header},
    response::Response,
    routing::get,
};

include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// The content type of a console file, by its extension.
fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

fn asset(name: &'static str, bytes: &'static [u8]) -> Response {
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(name)),
    );
    // The page and its scripts change with the binary: revalidate.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    // Everything the console loads is its own; it calls only this origin.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'",
        ),
    );
    response
}

/// The console's routes: `/` and one per file.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut router = Router::new();
    for &(name, bytes) in ASSETS {
        let path = format!("/{name}");
        router = router.route(&path, get(move || async move { asset(name, bytes) }));
        if name == "index.html" {
            router = router.route("/", get(move || async move { asset(name, bytes) }));
        }
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_files_are_in_the_binary() {
        let names: Vec<&str> = ASSETS.iter().map(|(n, _)| *n).collect();
        for needed in ["index.html", "app.js", "app.css"] {
            assert!(names.contains(&needed), "{names:?}");
        }
        assert_eq!(content_type("app.js"), "text/javascript; charset=utf-8");
    }
}
