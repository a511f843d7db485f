//! The control API's routes (the table in the module docs of [`super`]), in front of the
//! engine's [`JobControl`]; who may call them is checked before (`guard`).

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::json;

use super::http::{Request, Response};
use super::router::Router;
use super::{api, assets, metrics};
use crate::prelude::{ControlError, ControlErrorKind, JobControl, SnapshotDone};

/// The body of `POST /savepoint` and `POST /stop`.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct SnapshotBody {
    dir: Option<PathBuf>,
    #[serde(default)]
    drain: bool,
}

/// The router of the control API, `slow_limit` snapshot requests at a time.
pub(crate) fn control_router(control: JobControl, slow_limit: usize) -> Router {
    let (c1, c2, c3, c4) = (control.clone(), control.clone(), control.clone(), control);
    let (job, checkpoints, state, workers) = (c1.clone(), c1.clone(), c1.clone(), c1.clone());
    let registry = metrics::registry(c1.clone());
    assets::routes(Router::new(slow_limit))
        .get("/api/job", Box::new(move |_| api::job(&job)))
        .get(
            "/api/checkpoints",
            Box::new(move |_| api::checkpoints(&checkpoints)),
        )
        .get("/api/state", Box::new(move |_| api::state(&state)))
        .get("/api/workers", Box::new(move |_| api::workers(&workers)))
        .get("/metrics", Box::new(move |_| metrics::scrape(&registry)))
        .get(
            "/status",
            Box::new(move |_| match serde_json::to_value(c1.status()) {
                Ok(v) => Response::json(200, &v),
                Err(e) => Response::error(500, format!("cannot encode the status: {e}")),
            }),
        )
        .post_slow(
            "/checkpoint",
            Box::new(move |r| match checkpoint_body(r) {
                Ok(()) => answer(c2.trigger_checkpoint()),
                Err(e) => e,
            }),
        )
        .post_slow(
            "/savepoint",
            Box::new(move |r| match snapshot_body(r) {
                Ok(b) => answer(c3.trigger_savepoint(b.dir)),
                Err(e) => e,
            }),
        )
        .post_slow(
            "/stop",
            Box::new(move |r| match snapshot_body(r) {
                Ok(b) => answer(c4.stop_with_savepoint(b.dir, b.drain)),
                Err(e) => e,
            }),
        )
}

/// Parses a snapshot request's body (already read whole, its length checked by the
/// server): empty, or `{"dir"?, "drain"?}`.
fn snapshot_body(request: &Request) -> Result<SnapshotBody, Response> {
    let raw = std::str::from_utf8(&request.body)
        .map_err(|_| Response::error(400, "the body is not UTF-8"))?;
    if raw.trim().is_empty() {
        return Ok(SnapshotBody::default());
    }
    serde_json::from_str(raw).map_err(|e| {
        Response::error(
            400,
            format!("the body is not {{\"dir\": \"…\", \"drain\": false}}: {e}"),
        )
    })
}

/// Checks the body of `POST /checkpoint`: a checkpoint takes no options, so the body is
/// empty or `{}`; anything else (a `dir`, which only savepoints take, or a broken body) is
/// refused rather than ignored, so a caller who meant something else hears of it.
fn checkpoint_body(request: &Request) -> Result<(), Response> {
    let raw = std::str::from_utf8(&request.body)
        .map_err(|_| Response::error(400, "the body is not UTF-8"))?;
    if raw.trim().is_empty() {
        return Ok(());
    }
    let found = match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(fields)) if fields.is_empty() => return Ok(()),
        Ok(serde_json::Value::Object(fields)) => {
            let names: Vec<&str> = fields.keys().map(String::as_str).collect();
            format!("fields {names:?}")
        }
        Ok(other) => format!("`{other}`"),
        Err(e) => format!("no JSON ({e})"),
    };
    Err(Response::error(
        400,
        format!(
            "a checkpoint takes no options: send no body or {{}}, not {found}; a folder is \
             for POST /savepoint"
        ),
    ))
}

/// Maps the engine's answer to a status: bad request 400, job not running 409, else 500.
fn answer(r: Result<SnapshotDone, ControlError>) -> Response {
    match r {
        Ok(done) => Response::json(200, &json!({ "id": done.id, "path": done.path })),
        Err(e) => {
            let status = match e.kind {
                ControlErrorKind::BadRequest => 400,
                ControlErrorKind::NotRunning => 409,
                ControlErrorKind::Failed => 500,
            };
            Response::error(status, e.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn post(body: &str, headers: &[(&str, &str)]) -> Request {
        Request {
            method: "POST".into(),
            path: "/savepoint".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn json_of(r: &Response) -> Value {
        serde_json::from_slice(&r.body).unwrap()
    }

    #[test]
    fn bodies_are_empty_or_the_documented_object() {
        assert!(snapshot_body(&post("", &[])).unwrap().dir.is_none());
        let ok = snapshot_body(&post("{\"dir\": \"n\", \"drain\": true}", &[])).unwrap();
        assert!(ok.drain && ok.dir.as_deref() == Some(std::path::Path::new("n")));
        assert_eq!(
            snapshot_body(&post("{\"dir\": 3}", &[]))
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            snapshot_body(&post("{\"x\": 1}", &[])).unwrap_err().status,
            400
        );
        let bad_utf8 = Request {
            body: vec![0xff, 0xfe],
            ..post("", &[])
        };
        assert_eq!(snapshot_body(&bad_utf8).unwrap_err().status, 400);
    }

    #[test]
    fn checkpoint_bodies_are_empty_or_an_empty_object() {
        for ok in ["", "  \n", "{}", " { } "] {
            assert!(checkpoint_body(&post(ok, &[])).is_ok(), "{ok:?}");
        }
        for bad in ["{", "\"x\"", "{\"dir\":\"../x\"}", "[]", "null", "{} {}"] {
            let e = checkpoint_body(&post(bad, &[])).unwrap_err();
            assert_eq!(e.status, 400, "{bad:?}");
            assert!(json_of(&e)["error"]
                .as_str()
                .is_some_and(|m| m.contains("no options")));
        }
    }

    #[test]
    fn answers_map_to_statuses() {
        let err = |kind, message: &str| {
            Err(ControlError {
                kind,
                message: message.into(),
            })
        };
        assert_eq!(
            answer(err(ControlErrorKind::BadRequest, "outside")).status,
            400
        );
        assert_eq!(
            answer(err(ControlErrorKind::NotRunning, "ended")).status,
            409
        );
        assert_eq!(
            answer(err(ControlErrorKind::Failed, "timed out")).status,
            500
        );
        let ok = answer(Ok(SnapshotDone {
            id: 3,
            path: "/sp".into(),
        }));
        assert_eq!(ok.status, 200);
        assert_eq!(json_of(&ok)["path"], "/sp");
    }
}
