//! The standard gRPC health service (grpc.health.v1, `tonic-health`) beside a cluster
//! endpoint's own service on one listener, without the token that service asks for: a
//! Kubernetes `grpc:` probe cannot send one, and a health status reveals nothing.
//!
//! tonic's router (its `router` feature) would bring axum in for what is one comparison of
//! the request's path: [`WithHealth`] makes it.

use std::convert::Infallible;

use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::{BoxFuture, Context, Poll, Service};
use tonic::server::NamedService;
use tonic_health::pb::health_check_response::ServingStatus;

/// The path prefix of the health service's methods (`Check`, `Watch`).
const HEALTH: &str = "/grpc.health.v1.Health/";

/// `service`, and the health service for the requests to its methods; see the module docs.
#[derive(Clone)]
pub(crate) struct WithHealth<S, H> {
    pub(crate) service: S,
    pub(crate) health: H,
}

impl<S, H> Service<Request<Body>> for WithHealth<S, H>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send,
    S::Future: Send + 'static,
    H: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send,
    H::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>, Infallible>;

    /// Always ready: both are tonic's generated servers, which are (each call is a task).
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if req.uri().path().starts_with(HEALTH) {
            Box::pin(self.health.clone().call(req))
        } else {
            Box::pin(self.service.clone().call(req))
        }
    }
}

impl<S: NamedService, H> NamedService for WithHealth<S, H> {
    const NAME: &'static str = S::NAME;
}

/// Asks the health service at `addr` (`host:port`) for `service`'s status (`""`: the
/// process overall), as a probe would: no token; with `tls`, over mutual TLS (the ports of
/// a cluster with TLS accept nothing else, which is why Kubernetes' plaintext `grpc:`
/// probes cannot check them and `weir health` can). At most `timeout` in all. The error
/// says why no status came back — down, out of reach, a TLS mismatch (named as the
/// cluster's own dials name it), or a service the server does not know — and what to do.
pub async fn probe(
    addr: &str,
    service: &str,
    tls: Option<&super::TlsConfig>,
    timeout: std::time::Duration,
) -> Result<ServingStatus, String> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| format!("{addr} is not an address to dial ({e}): give HOST:PORT"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let endpoint = match tls {
        Some(t) => endpoint
            .tls_config(t.client(addr))
            .map_err(|e| format!("the TLS setup cannot dial {addr}: {e}"))?,
        None => endpoint,
    };
    /// Why no status came back.
    enum Failed {
        /// The dial failed (its error chain).
        Dial(String),
        /// The server answered with an error.
        Status(tonic::Status),
    }
    let asked = async {
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| Failed::Dial(super::node::error_chain(&e)))?;
        ask(channel, service).await.map_err(Failed::Status)
    };
    match tokio::time::timeout(timeout, asked).await {
        Err(_) => Err(format!(
            "{addr} gave no answer within {timeout:?}: the process is busy or hung, or the \
             address reaches something else; try again or give a longer --timeout"
        )),
        Ok(Ok(status)) => Ok(status),
        Ok(Err(Failed::Status(status))) if status.code() == tonic::Code::NotFound => Err(format!(
            "{addr} serves no service named {service:?}: ask for \"\" (the process \
                 overall), weir.cluster.v1.Coordinator (a coordinator) or \
                 weir.exchange.v1.Exchange (a worker's exchange)"
        )),
        // A connection that the other side closed (a TLS port dialled in plaintext, a
        // certificate refused) shows only at the call: explained like a failed dial.
        Ok(Err(Failed::Status(status))) => {
            let cause = status.to_string();
            Err(
                match super::tls::refusal(tls, addr, &cause, timeout).await {
                    Some(why) => format!("cannot check {addr}: {why}"),
                    None => format!("{addr} answered the health check with an error: {cause}"),
                },
            )
        }
        Ok(Err(Failed::Dial(cause))) => {
            let why = super::tls::refusal(tls, addr, &cause, timeout).await;
            Err(match why {
                Some(why) => format!("cannot check {addr}: {why}"),
                None => format!(
                    "cannot reach {addr} ({cause}): is the process running, and is this \
                     its cluster port (a coordinator's --cluster-listen, a worker's \
                     exchange)?"
                ),
            })
        }
    }
}

/// The health service's answer for `service` on an open `channel`.
async fn ask(
    channel: tonic::transport::Channel,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let request = HealthCheckRequest {
        service: service.into(),
    };
    let answer = HealthClient::new(channel).check(request).await?;
    Ok(answer.into_inner().status())
}

/// Asks the health service at `addr` for `service`'s status, as a probe would: no token.
#[cfg(test)]
pub(crate) fn check(
    addr: std::net::SocketAddr,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("an address")
            .connect()
            .await
            .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        ask(channel, service).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::exchange::{Exchange, ExchangeConfig};

    /// A probe reads the worker's health without the token: the exchange serves from its
    /// start, the worker overall only once its role says it is ready (registered), and no
    /// longer while it registers again; a peer without the token is still refused.
    #[test]
    fn a_worker_answers_health_checks_without_the_token_and_refuses_peers_without_it() {
        let listen = "127.0.0.1:0".parse().unwrap();
        let exchange = Exchange::start(ExchangeConfig::new(1, listen, "secret")).unwrap();
        let at = exchange.local_addr();
        assert_eq!(
            check(at, "weir.exchange.v1.Exchange").unwrap(),
            ServingStatus::Serving
        );
        assert_eq!(check(at, "").unwrap(), ServingStatus::NotServing);
        exchange.set_ready(true);
        assert_eq!(check(at, "").unwrap(), ServingStatus::Serving);
        exchange.set_ready(false);
        assert_eq!(check(at, "").unwrap(), ServingStatus::NotServing);
        let unknown = check(at, "weir.other").unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown}");
        // The exchange itself still wants the token.
        let stranger = Exchange::start(ExchangeConfig::new(2, listen, "wrong")).unwrap();
        let refused = stranger.connect(1, &at.to_string()).unwrap_err();
        assert!(refused.to_string().contains("refused"), "{refused}");
    }
}
