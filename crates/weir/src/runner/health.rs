//! `PROGRAM health HOST:PORT`: asks a coordinator's cluster endpoint or a worker's
//! exchange for its gRPC health status (`grpc.health.v1`) and exits 0 only if it is
//! `SERVING` — a health check for the places that can only run a command: a compose
//! file's `healthcheck` (Weir's image is FROM scratch with the `weir` binary only, so no
//! other tool could check it) and a Kubernetes `exec` probe of a cluster with TLS, whose
//! ports Kubernetes' own `grpc:` probes cannot speak (they dial in plaintext).
//!
//! Exit codes: 0 `SERVING`; 1 any other status, or no answer (the error says why: down,
//! out of reach, a TLS mismatch, an unknown service); 2 flags that cannot work.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::cluster::{parse_positive_duration, TlsArgs};
use crate::runtime::exchange::health::probe;

/// The health check's flags; see the module docs.
#[derive(Args, Debug, Clone)]
pub struct HealthArgs {
    /// Where to ask (HOST:PORT): a coordinator's --cluster-listen port or a worker's
    /// exchange (its --listen port).
    pub address: String,
    /// The service whose status to ask for: "" (the default) is the process overall — a
    /// coordinator running its job, a worker registered and deployed;
    /// `weir.cluster.v1.Coordinator` or `weir.exchange.v1.Exchange` ask for the endpoint
    /// alone.
    #[arg(long, default_value = "")]
    pub service: String,
    /// Give up after this long.
    #[arg(long, default_value = "5s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// The cluster's TLS flags, when its ports speak TLS: the check presents this
    /// certificate (the ports ask every client for one of the cluster's CA).
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// Runs the check: prints the status (or the error) and returns the exit code.
pub fn check_health(args: &HealthArgs) -> ExitCode {
    let tls = match args.tls.load() {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime for the check: {e}");
            return ExitCode::FAILURE;
        }
    };
    let found = rt.block_on(probe(
        &args.address,
        &args.service,
        tls.as_ref(),
        args.timeout,
    ));
    match found {
        Ok(status) => {
            println!("{}", status.as_str_name());
            if status == tonic_health::pb::health_check_response::ServingStatus::Serving {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(why) => {
            eprintln!("error: {why}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::exchange::{Exchange, ExchangeConfig};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        health: HealthArgs,
    }

    fn parse(args: &[&str]) -> Result<HealthArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("health").chain(args.iter().copied())).map(|c| c.health)
    }

    fn ask(addr: &str, service: &str) -> Result<&'static str, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(probe(addr, service, None, Duration::from_secs(10)))
            .map(|s| s.as_str_name())
    }

    #[test]
    fn the_flags_parse_and_a_zero_timeout_is_refused() {
        let a = parse(&["10.0.0.7:6123"]).unwrap();
        assert_eq!(
            (a.address.as_str(), a.service.as_str()),
            ("10.0.0.7:6123", "")
        );
        assert_eq!(a.timeout, Duration::from_secs(5));
        let e = parse(&["x:1", "--timeout", "0s"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("longer than 0"), "{e}");
        assert!(parse(&[]).is_err(), "the address is required");
    }

    /// A worker's exchange: serving as an endpoint at once, overall once ready; an unknown
    /// service and a closed port are errors that say so.
    #[test]
    fn a_probe_reads_a_status_and_explains_what_gives_none() {
        let exchange =
            Exchange::start(ExchangeConfig::new(1, "127.0.0.1:0".parse().unwrap(), "t")).unwrap();
        let at = exchange.local_addr().to_string();
        assert_eq!(ask(&at, "weir.exchange.v1.Exchange").unwrap(), "SERVING");
        assert_eq!(ask(&at, "").unwrap(), "NOT_SERVING");
        exchange.set_ready(true);
        assert_eq!(ask(&at, "").unwrap(), "SERVING");
        let e = ask(&at, "weir.nope").unwrap_err();
        assert!(e.contains("no service named \"weir.nope\""), "{e}");
        drop(exchange);
        // A port nothing listens on (bound, then let go).
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = free.local_addr().unwrap().to_string();
        drop(free);
        let e = ask(&closed, "").unwrap_err();
        assert!(e.contains(&format!("cannot reach {closed}")), "{e}");
        let e = ask("not an address", "").unwrap_err();
        assert!(
            e.contains("not an address to dial") || e.contains("cannot reach"),
            "{e}"
        );
    }
}
