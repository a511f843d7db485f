//! Who may use the control endpoint, checked before any route acts (issue 14, security):
//!
//! * **Token.** When the endpoint has one (always, bound beyond loopback), every request —
//!   pages, API, metrics, actions — must carry it: `Authorization: Bearer <token>` (the
//!   `weir` command, a Prometheus scraper), or the `weir_token` cookie a browser gets by
//!   opening `/?token=<token>` once (`HttpOnly`, `SameSite=Strict`: no other site's page
//!   makes the browser send it).
//! * **Cross-site requests.** An action (every `POST`) must carry the header
//!   `X-Weir-Action`, which a page on another origin cannot add without a CORS preflight
//!   that this endpoint never approves (it sends no CORS headers); and a request whose
//!   `Origin` is not the endpoint's own is refused outright.
//! * **DNS rebinding.** Without a token (loopback), a request must name a loopback host
//!   (`127.0.0.1`, `[::1]`, `localhost`): a page whose own name was made to resolve to
//!   127.0.0.1 is refused, since its browser sends that name.

use super::http::{Request, Response};

/// The cookie a browser keeps the token in.
pub(crate) const COOKIE: &str = "weir_token";

/// The header every `POST` must carry.
pub(crate) const ACTION_HEADER: &str = "x-weir-action";

/// How a request proved it knows the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// No token is needed, or it came in a header or cookie.
    Granted,
    /// It came in the query (`/?token=…`): the answer should set the cookie.
    GrantedByQuery,
    /// Missing or wrong.
    Denied,
}

/// Whether `request` carries `token` (header, cookie, or the query of a `GET`).
pub(crate) fn access(request: &Request, token: Option<&str>) -> Access {
    let Some(token) = token else {
        return Access::Granted;
    };
    let matches = |t: &str| constant_time_eq(t.trim().as_bytes(), token.as_bytes());
    let by_header = request
        .headers
        .iter()
        .filter(|(n, _)| n == "authorization")
        .any(|(_, v)| v.strip_prefix("Bearer ").is_some_and(matches));
    let by_cookie = request
        .headers
        .iter()
        .filter(|(n, _)| n == "cookie")
        .flat_map(|(_, v)| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .any(|(name, value)| name == COOKIE && matches(value));
    if by_header || by_cookie {
        return Access::Granted;
    }
    let by_query = request.method == "GET"
        && request
            .query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .any(|(name, value)| name == "token" && matches(value));
    if by_query {
        Access::GrantedByQuery
    } else {
        Access::Denied
    }
}

/// The answer to a request without the right token.
pub(crate) fn unauthorized() -> Response {
    Response::error(
        401,
        "missing or wrong token: send `Authorization: Bearer <token>` (weir … --token-file \
         FILE), or open /?token=<token> in a browser",
    )
}

/// The `Set-Cookie` value that keeps `token` for the browser's next requests.
pub(crate) fn cookie(token: &str) -> String {
    format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
}

/// Refuses what another site could have made a browser send: a request from a foreign
/// `Origin`, a `POST` without [`ACTION_HEADER`], and (without a token) a request naming
/// a host other than loopback.
pub(crate) fn same_site(request: &Request, has_token: bool) -> Result<(), Response> {
    let host = request.header("host").unwrap_or("");
    if !has_token && !host.is_empty() && !is_loopback_host(host) {
        return Err(Response::error(
            403,
            format!(
                "this endpoint answers only requests to a loopback address, not to {host}; \
                 open it as 127.0.0.1 or localhost"
            ),
        ));
    }
    if let Some(origin) = request.header("origin") {
        let own = origin
            .strip_prefix("http://")
            .is_some_and(|o| !host.is_empty() && o == host);
        if !own {
            return Err(Response::error(
                403,
                format!("requests from the page {origin} are refused (cross-origin)"),
            ));
        }
    }
    if request.method == "POST" && request.header(ACTION_HEADER).is_none() {
        return Err(Response::error(
            403,
            "an action must carry the header `X-Weir-Action: 1` (which a page on another \
             site cannot send)",
        ));
    }
    Ok(())
}

/// Whether a `Host` header names loopback: `localhost`, `127.x.y.z` or `[::1]`, any port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Compares without an early exit, so response times do not leak the token's prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, query: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: method.into(),
            path: "/".into(),
            query: query.into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: Vec::new(),
        }
    }

    #[test]
    fn the_token_comes_by_header_cookie_or_query() {
        let t = Some("s3cret");
        assert_eq!(access(&req("GET", "", &[]), None), Access::Granted);
        assert_eq!(access(&req("GET", "", &[]), t), Access::Denied);
        let bearer = [("authorization", "Bearer s3cret")];
        assert_eq!(access(&req("POST", "", &bearer), t), Access::Granted);
        let wrong = [("authorization", "Bearer s3cre")];
        assert_eq!(access(&req("GET", "", &wrong), t), Access::Denied);
        let cookie = [("cookie", "a=b; weir_token=s3cret")];
        assert_eq!(access(&req("GET", "", &cookie), t), Access::Granted);
        let other_cookie = [("cookie", "weir_token2=s3cret")];
        assert_eq!(access(&req("GET", "", &other_cookie), t), Access::Denied);
        assert_eq!(
            access(&req("GET", "x=1&token=s3cret", &[]), t),
            Access::GrantedByQuery
        );
        // A query token does not authorize an action.
        assert_eq!(access(&req("POST", "token=s3cret", &[]), t), Access::Denied);
        assert_eq!(access(&req("GET", "token=nope", &[]), t), Access::Denied);
        assert!(cookie_line_is_strict());
        assert_eq!(unauthorized().status, 401);
    }

    fn cookie_line_is_strict() -> bool {
        let c = cookie("s3cret");
        c.starts_with("weir_token=s3cret;") && c.contains("HttpOnly") && c.contains("Strict")
    }

    #[test]
    fn cross_site_requests_are_refused() {
        let host = ("host", "127.0.0.1:8081");
        let action = ("x-weir-action", "1");
        assert!(same_site(&req("POST", "", &[host, action]), false).is_ok());
        assert!(same_site(&req("GET", "", &[host]), false).is_ok());
        // No custom header: a form or a simple fetch from any page.
        let e = same_site(&req("POST", "", &[host]), false).unwrap_err();
        assert_eq!(e.status, 403);
        // Another origin, even with the header (it would need a preflight).
        let evil = ("origin", "http://evil.example");
        assert_eq!(
            same_site(&req("POST", "", &[host, action, evil]), false)
                .unwrap_err()
                .status,
            403
        );
        assert_eq!(
            same_site(&req("GET", "", &[host, evil]), true)
                .unwrap_err()
                .status,
            403
        );
        let own = ("origin", "http://127.0.0.1:8081");
        assert!(same_site(&req("POST", "", &[host, action, own]), false).is_ok());
        // DNS rebinding: a foreign name that resolves to loopback.
        let rebound = ("host", "evil.example:8081");
        assert_eq!(
            same_site(&req("GET", "", &[rebound]), false)
                .unwrap_err()
                .status,
            403
        );
        // With a token, any host name (the endpoint is bound beyond loopback).
        assert!(same_site(&req("GET", "", &[rebound]), true).is_ok());
        for ok in ["localhost:1", "[::1]:80", "127.0.0.2", "LOCALHOST"] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["10.0.0.1:80", "localhost.evil:80", "[::2]:1"] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
