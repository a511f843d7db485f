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

/// Asks the health service at `addr` for `service`'s status, as a probe would: no token.
#[cfg(test)]
pub(crate) fn check(
    addr: std::net::SocketAddr,
    service: &str,
) -> Result<tonic_health::pb::health_check_response::ServingStatus, tonic::Status> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
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
        let request = HealthCheckRequest {
            service: service.into(),
        };
        let answer = HealthClient::new(channel).check(request).await?;
        Ok(answer.into_inner().status())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::exchange::{Exchange, ExchangeConfig};
    use tonic_health::pb::health_check_response::ServingStatus;

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
