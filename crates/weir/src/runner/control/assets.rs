//! The dashboard's files, embedded in the binary (issue 14): the page, its script and
//! style, and the vendored uPlot charting library (`assets/vendor`, MIT, with its license).
//! Nothing is loaded from the network, and nothing is read from disk.
//!
//! Each file is one exact route of the router, so no other path can ever be served: a
//! request for `/assets/../x`, an encoded `%2e%2e`, or any name not in [`ASSETS`] matches
//! no route and is answered 404 before anything is looked up.

use super::http::Response;
use super::router::Router;

/// The page: one document for the four pages, which the script tells apart by path.
const INDEX: &str = include_str!("assets/index.html");

/// What the page may load: only this endpoint's own files, never another site's, and it
/// may not be framed.
const CSP: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; \
                   base-uri 'none'; form-action 'none'";

/// The files besides the page: (path, content type, bytes).
pub(crate) const ASSETS: [(&str, &str, &[u8]); 5] = [
    (
        "/assets/app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/app.js"),
    ),
    (
        "/assets/app.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/app.css"),
    ),
    (
        "/assets/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("assets/vendor/uPlot.iife.min.js"),
    ),
    (
        "/assets/uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("assets/vendor/uPlot.min.css"),
    ),
    (
        "/assets/uPlot-LICENSE",
        "text/plain; charset=utf-8",
        include_bytes!("assets/vendor/uPlot-LICENSE"),
    ),
];

/// The paths that show the page: overview, checkpoints, workers, actions.
pub(crate) const PAGES: [&str; 4] = ["/", "/checkpoints", "/workers", "/actions"];

/// Adds a `GET` route for every page and file.
pub(crate) fn routes(mut router: Router) -> Router {
    for page in PAGES {
        router = router.get(
            page,
            Box::new(|_| {
                Response::bytes(200, "text/html; charset=utf-8", INDEX.as_bytes().to_vec())
                    .with_header("Content-Security-Policy", CSP)
            }),
        );
    }
    for (path, content_type, bytes) in ASSETS {
        router = router.get(
            path,
            Box::new(move |_| Response::bytes(200, content_type, bytes.to_vec())),
        );
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::control::http::Request;

    fn get(router: &Router, path: &str) -> Response {
        let request = Request {
            method: "GET".into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        match router.find("GET", path) {
            Ok(route) => router.call(route, &request),
            Err(answer) => answer,
        }
    }

    #[test]
    fn every_page_and_file_is_served_and_nothing_else() {
        let router = routes(Router::new(1));
        for page in PAGES {
            let r = get(&router, page);
            assert_eq!(r.status, 200, "{page}");
            assert!(String::from_utf8_lossy(&r.body).contains("/assets/app.js"));
            assert!(r
                .headers
                .iter()
                .any(|(n, _)| *n == "Content-Security-Policy"));
        }
        for (path, content_type, bytes) in ASSETS {
            let r = get(&router, path);
            assert_eq!((r.status, r.content_type), (200, content_type), "{path}");
            assert_eq!(r.body, bytes);
        }
        for bad in [
            "/assets/../Cargo.toml",
            "/assets/..%2fCargo.toml",
            "/assets/%2e%2e/%2e%2e/etc/passwd",
            "/../../etc/passwd",
            "//etc/passwd",
            "/assets/",
            "/assets/app.js/..",
            "/assets/vendor/uPlot.min.css",
            "/index.html",
        ] {
            assert_eq!(get(&router, bad).status, 404, "{bad}");
        }
    }

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        let page = INDEX.to_lowercase();
        assert!(!page.contains("http://") && !page.contains("https://"));
        let script = String::from_utf8_lossy(ASSETS[0].2).to_lowercase();
        assert!(!script.contains("http://") && !script.contains("https://"));
        assert!(!script.contains("innerhtml"), "data goes in as text only");
    }
}
