//! The runner's cluster forms (issue 24, feature `cluster`), the same for the `weir`
//! command and a user's own binary:
//!
//! * **Coordinator:** `PROGRAM [job flags] --workers N --cluster-listen HOST:PORT
//!   [--cluster-token T] [--heartbeat-timeout D]` waits for N workers, deploys the job on
//!   them and runs its checkpoint coordinator ([`ClusterArgs`]).
//! * **Worker:** `PROGRAM worker --coordinator HOST:PORT [--slots S] [--listen HOST:PORT]
//!   [--cluster-token T] [--connect-timeout D]` runs whatever its coordinator deploys: the
//!   deploy carries the job's arguments and the worker builds the same graph from the same
//!   binary ([`WorkerArgs`], [`serve_worker`]). It keeps trying to reach its coordinator,
//!   at the start and after losing it, for up to `--connect-timeout`.
//!
//! The token may be left out only when every address is on loopback (a cluster on one
//! host, as the tests run it): then both sides use [`LOOPBACK_TOKEN`].
//!
//! **TLS** ([`TlsArgs`]): `--tls-cert FILE --tls-key FILE --tls-ca FILE
//! [--tls-server-name NAME]`, all three files or none, on the coordinator and every
//! worker alike. Given, both ports (the control endpoint and the exchange) speak mutual
//! TLS (`runtime::exchange::tls`); the token is still required as without TLS.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::{describe, BoxError, UsageError};
use crate::api::stream::StreamEnvironment;
use crate::cluster::coordinator::run::ClusterRun;
use crate::cluster::fingerprint::binary_version;
use crate::cluster::worker::{serve, WorkerConfig};
use crate::error::Error;
use crate::runtime::exchange::TlsConfig;

/// The token of a cluster whose every address is on loopback, when none is given: nothing
/// beyond this host can reach such a cluster.
pub const LOOPBACK_TOKEN: &str = "weir-loopback-cluster";

/// The heartbeat timeout when `--heartbeat-timeout` is not given.
pub const DEFAULT_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a coordinator waits for its workers to register, at the start and after losing
/// one.
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(300);

/// The coordinator's flags; see the module docs.
#[derive(Args, Debug, Clone, Default)]
#[command(next_help_heading = "Cluster options")]
pub struct ClusterArgs {
    /// Run the job on this many worker processes (`PROGRAM worker --coordinator ADDR`),
    /// with this process as their coordinator.
    #[arg(long, value_parser = at_least_one)]
    pub workers: Option<usize>,
    /// With --workers: where workers dial the coordinator (IP:PORT; port 0 picks one, and
    /// the address is printed).
    #[arg(long, value_parser = parse_addr)]
    pub cluster_listen: Option<SocketAddr>,
    /// The cluster's shared secret: workers must present it. Needed unless every address
    /// is on loopback.
    #[arg(long)]
    pub cluster_token: Option<String>,
    /// With --workers: a worker silent this long (no heartbeat, no message) counts as lost,
    /// and the job restarts from its latest checkpoint [default: 10s].
    #[arg(long, value_parser = parse_positive_duration)]
    pub heartbeat_timeout: Option<Duration>,
    /// TLS on the control endpoint and the exchange.
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The TLS flags, the same on the coordinator and every worker: all three files or none.
/// Given, the cluster's two ports speak mutual TLS (each process presents its certificate
/// and checks its peer's against the CA), and the token is still checked on top.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// This process's TLS certificate (PEM), signed by the --tls-ca CA; it serves the
    /// control endpoint or the exchange and is presented when dialling. Needs --tls-key and
    /// --tls-ca.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs every certificate of the cluster: peers whose certificate
    /// it did not sign are refused.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// The name every peer's certificate must carry [default: the host dialled]; for
    /// clusters whose addresses change (pods), with one shared name in every certificate.
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    /// Whether any TLS flag is given.
    pub fn given(&self) -> bool {
        self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_ca.is_some()
            || self.tls_server_name.is_some()
    }

    /// The TLS setup, read and checked (`None` without TLS flags); half the flags, a file
    /// unreadable or not PEM, or a key not the certificate's is an error naming it.
    pub fn load(&self) -> Result<Option<TlsConfig>, UsageError> {
        match (&self.tls_cert, &self.tls_key, &self.tls_ca) {
            (None, None, None) => match &self.tls_server_name {
                Some(_) => Err(UsageError::new(
                    "--tls-server-name applies with TLS: add --tls-cert, --tls-key and \
                     --tls-ca (or drop --tls-server-name)",
                )),
                None => Ok(None),
            },
            (Some(cert), Some(key), Some(ca)) => {
                TlsConfig::load(cert, key, ca, self.tls_server_name.clone())
                    .map(Some)
                    .map_err(|e| UsageError::new(e.to_string()))
            }
            (cert, key, ca) => {
                let missing: Vec<&str> = [
                    (cert.is_none(), "--tls-cert"),
                    (key.is_none(), "--tls-key"),
                    (ca.is_none(), "--tls-ca"),
                ]
                .into_iter()
                .filter_map(|(m, flag)| m.then_some(flag))
                .collect();
                Err(UsageError::new(format!(
                    "TLS needs --tls-cert, --tls-key and --tls-ca together, and {} is \
                     missing: give all three PEM files (or none, for plaintext on a private \
                     network)",
                    missing.join(" and ")
                )))
            }
        }
    }
}

impl ClusterArgs {
    /// Refuses combinations that make no sense, naming the flags (unaligned and incremental
    /// checkpoints run on a cluster as in one process).
    pub fn check(&self) -> Result<(), UsageError> {
        let Some(_) = self.workers else {
            for (given, flag) in [
                (self.cluster_listen.is_some(), "--cluster-listen"),
                (self.cluster_token.is_some(), "--cluster-token"),
                (self.heartbeat_timeout.is_some(), "--heartbeat-timeout"),
                (self.tls.given(), "--tls-cert/--tls-key/--tls-ca"),
            ] {
                if given {
                    return Err(UsageError::new(format!(
                        "{flag} applies to a job run on a cluster: add --workers N (or drop \
                         {flag} to run in this process)"
                    )));
                }
            }
            return Ok(());
        };
        let Some(listen) = self.cluster_listen else {
            return Err(UsageError::new(
                "--workers needs --cluster-listen IP:PORT, where the workers dial this \
                 coordinator (e.g. 127.0.0.1:0 on one host, 0.0.0.0:6123 across hosts)",
            ));
        };
        token_for(self.cluster_token.as_deref(), &[listen], "--cluster-listen")?;
        self.tls.load()?;
        Ok(())
    }

    /// The run of a checked coordinator (`None` without --workers); `args` is the
    /// program's whole command line, from which the workers' job arguments are taken. An
    /// error when the flags no longer hold (a TLS file gone since the check).
    pub(crate) fn run(&self, args: &[OsString]) -> Result<Option<ClusterRun>, UsageError> {
        let (Some(workers), Some(listen)) = (self.workers, self.cluster_listen) else {
            return Ok(None);
        };
        let token = token_for(self.cluster_token.as_deref(), &[listen], "--cluster-listen")?;
        Ok(Some(ClusterRun {
            workers,
            listen,
            token,
            heartbeat_timeout: self.heartbeat_timeout.unwrap_or(DEFAULT_HEARTBEAT_TIMEOUT),
            registration_timeout: REGISTRATION_TIMEOUT,
            job_args: job_args(args),
            tls: self.tls.load()?,
        }))
    }
}

/// The worker's flags; see the module docs.
#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// The coordinator's --cluster-listen address, as this host reaches it (HOST:PORT).
    #[arg(long)]
    pub coordinator: String,
    /// Subtask slots this worker offers: it runs at most this many parallel slices of the
    /// job.
    #[arg(long, default_value_t = 1, value_parser = at_least_one)]
    pub slots: usize,
    /// Where this worker's exchange listens, as the other workers reach it (IP:PORT; port 0
    /// picks one). It binds there too, unless --bind-host says otherwise.
    #[arg(long, default_value = "127.0.0.1:0", value_parser = parse_addr)]
    pub listen: SocketAddr,
    /// Where the exchange accepts connections, when not only on --listen's IP (Flink's
    /// `taskmanager.bind-host`): `0.0.0.0` also accepts them on loopback, where a probe
    /// inside the worker's pod or container can dial it (`weir health 127.0.0.1:PORT`)
    /// without knowing the pod's IP. The other workers still dial --listen.
    #[arg(long, value_parser = parse_ip)]
    pub bind_host: Option<IpAddr>,
    /// The cluster's shared secret (the coordinator's --cluster-token). Needed unless every
    /// address is on loopback.
    #[arg(long)]
    pub cluster_token: Option<String>,
    /// A name for messages and the dashboard [default: worker-PID].
    #[arg(long)]
    pub name: Option<String>,
    /// How long to keep trying to reach the coordinator — at the start, and after losing
    /// it — before giving up with exit code 1 (exponential backoff from 100 ms up to 5 s
    /// between tries; 0s: one try). 60 s covers a coordinator that starts after its workers
    /// or is restarted (a pod rescheduled by Kubernetes, a process restarted by hand), even
    /// one that must first wait out its killed predecessor's 30 s lease of an S3 checkpoint
    /// folder, while a worker given a wrong address still fails within a minute instead of
    /// waiting for ever.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// Testing: while this file exists, wait before dialing the peers of an attempt (a test
    /// stops the worker there: hung before it opened the attempt's exchange streams).
    #[arg(long, hide = true)]
    pub pause_before_dial: Option<std::path::PathBuf>,
    /// TLS to the coordinator and on the exchange (the coordinator's flags, this worker's
    /// certificate).
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The token of a cluster with these addresses: the one given, else [`LOOPBACK_TOKEN`]
/// when every address is on loopback; `flag` names the address that is not.
fn token_for(given: Option<&str>, addrs: &[SocketAddr], flag: &str) -> Result<String, UsageError> {
    match given {
        Some("") => Err(UsageError::new(
            "--cluster-token is empty, which would let anyone who reaches the port in: give \
             a secret",
        )),
        Some(t) => Ok(t.to_string()),
        None if addrs.iter().all(|a| a.ip().is_loopback()) => Ok(LOOPBACK_TOKEN.into()),
        None => Err(UsageError::new(format!(
            "--cluster-token is needed when {flag} is not on loopback: give the coordinator \
             and every worker the same secret"
        ))),
    }
}

/// The program's arguments less its cluster flags: what every worker builds the job from.
fn job_args(args: &[OsString]) -> Vec<String> {
    const WITH_VALUE: [&str; 8] = [
        "--workers",
        "--cluster-listen",
        "--cluster-token",
        "--heartbeat-timeout",
        "--tls-cert",
        "--tls-key",
        "--tls-ca",
        "--tls-server-name",
    ];
    let mut out = Vec::with_capacity(args.len());
    let mut skip = false;
    for a in args {
        let a = a.to_string_lossy().into_owned();
        if std::mem::take(&mut skip) {
            continue;
        }
        if WITH_VALUE.contains(&a.as_str()) {
            skip = true;
        } else if !WITH_VALUE.iter().any(|f| a.starts_with(&format!("{f}="))) {
            out.push(a);
        }
    }
    out
}

/// Serves as a worker with `args` until the job ends; `build` builds the job from the
/// arguments its coordinator deploys. The exit code: 0 when the job succeeded, 1 when it
/// failed or this worker could not run (the cause on stderr), 2 for bad flags.
pub fn serve_worker(
    args: &WorkerArgs,
    build: &dyn Fn(&[String]) -> Result<StreamEnvironment, BoxError>,
) -> ExitCode {
    super::quiet_panics();
    let token = worker_token(args);
    let (token, tls) = match token.and_then(|t| Ok((t, args.tls.load()?))) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.listen.ip().is_unspecified() {
        eprintln!(
            "error: --listen {}: the other workers need this worker's own address (e.g. \
             10.0.0.7:0), not the unspecified one; to accept connections on every \
             interface too, add --bind-host 0.0.0.0",
            args.listen
        );
        return ExitCode::from(2);
    }
    let (listener, address) = match bind_exchange(args.listen, args.bind_host) {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let config = WorkerConfig {
        coordinator: args.coordinator.clone(),
        token,
        exchange_address: address.to_string(),
        slots: u32::try_from(args.slots).unwrap_or(u32::MAX),
        name: args
            .name
            .clone()
            .unwrap_or_else(|| format!("worker-{}", std::process::id())),
        binary_version: binary_version().into(),
        timeout: Duration::from_secs(30),
        connect_timeout: args.connect_timeout,
        pause_before_dial: args.pause_before_dial.clone(),
        heartbeat_interval: Duration::ZERO,
        tls,
    };
    let builder = |job_args: &[String]| {
        build(job_args).map_err(|e| {
            Error::InvalidJob(format!(
                "cannot build the job from the coordinator's arguments {job_args:?}: {}",
                describe(&*e)
            ))
        })
    };
    eprintln!(
        "weir: worker {} (exchange {}, {} slot(s){}) dials the coordinator at {}",
        config.name,
        config.exchange_address,
        config.slots,
        if config.tls.is_some() { ", TLS" } else { "" },
        config.coordinator
    );
    match serve(&config, listener, &builder) {
        Ok(end) if end.succeeded => {
            eprintln!("weir: {}: {}", config.name, end.message);
            ExitCode::SUCCESS
        }
        Ok(end) => {
            eprintln!("error: {}: {}", config.name, end.message);
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A worker's cluster token: the one given, else the loopback token when the coordinator,
/// the advertised address and the bound one are all on loopback (an exchange bound on
/// every interface is reachable from the network, so it needs the secret).
fn worker_token(args: &WorkerArgs) -> Result<String, UsageError> {
    match (args.cluster_token.as_deref(), args.coordinator.parse()) {
        (Some(given), _) => token_for(Some(given), &[], ""),
        (None, Ok(at)) => {
            let bind = SocketAddr::new(args.bind_host.unwrap_or(args.listen.ip()), 0);
            let addrs = [at, args.listen, bind];
            token_for(None, &addrs, "--coordinator, --listen or --bind-host")
        }
        (None, Err(_)) => Err(UsageError::new(
            "--cluster-token is needed when --coordinator is a host name: give the \
             coordinator's token",
        )),
    }
}

/// Binds the worker's exchange on `bind_host` (else `listen`'s IP) at `listen`'s port (0:
/// one the system picks), and returns the listener with the address the other workers are
/// told to dial: `listen`'s IP at the port bound.
fn bind_exchange(
    listen: SocketAddr,
    bind_host: Option<IpAddr>,
) -> Result<(TcpListener, SocketAddr), String> {
    let (at, flag) = match bind_host {
        Some(ip) => (SocketAddr::new(ip, listen.port()), "--bind-host"),
        None => (listen, "--listen"),
    };
    let listener = TcpListener::bind(at).map_err(|e| {
        format!(
            "the worker cannot listen on {at} ({flag}): {e} (is the port taken, or the \
             address not this host's?)"
        )
    })?;
    let port = listener.local_addr().map_or(listen.port(), |a| a.port());
    Ok((listener, SocketAddr::new(listen.ip(), port)))
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a count (1, 2, …)")),
    }
}

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse()
        .map_err(|_| format!("'{s}' is not IP:PORT (e.g. 127.0.0.1:0, 10.0.0.7:6123)"))
}

fn parse_ip(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("'{s}' is not an IP address (e.g. 0.0.0.0, 10.0.0.7)"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration like 0s, 30s or 2m ({e})"))
}

pub(super) fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err("must be longer than 0 (e.g. 2s, 10s)".into()),
        Err(e) => Err(format!("'{s}' is not a duration like 2s or 10s ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> ClusterArgs {
        use clap::FromArgMatches;
        let cmd = ClusterArgs::augment_args(clap::Command::new("t"));
        let m = cmd.try_get_matches_from(std::iter::once("t").chain(a.iter().copied()));
        ClusterArgs::from_arg_matches(&m.unwrap()).unwrap()
    }

    fn worker_args(a: &[&str]) -> WorkerArgs {
        use clap::FromArgMatches;
        let cmd = WorkerArgs::augment_args(clap::Command::new("worker"));
        let m = cmd.try_get_matches_from(std::iter::once("worker").chain(a.iter().copied()));
        WorkerArgs::from_arg_matches(&m.unwrap()).unwrap()
    }

    #[test]
    fn an_exchange_bound_on_every_interface_is_told_by_its_listen_address_and_needs_the_token() {
        let local = worker_args(&["--coordinator", "127.0.0.1:6123"]);
        assert_eq!(worker_token(&local).unwrap(), LOOPBACK_TOKEN);
        let open = ["--coordinator", "127.0.0.1:6123", "--bind-host", "0.0.0.0"];
        let e = worker_token(&worker_args(&open)).unwrap_err();
        assert!(e.to_string().contains("--bind-host"), "{e}");
        let mut given = open.to_vec();
        given.extend(["--cluster-token", "s3cret"]);
        assert_eq!(worker_token(&worker_args(&given)).unwrap(), "s3cret");
        let bad = WorkerArgs::augment_args(clap::Command::new("worker"))
            .try_get_matches_from(["worker", "--coordinator", "x:1", "--bind-host", "any"])
            .unwrap_err();
        assert!(bad.to_string().contains("is not an IP address"), "{bad}");
    }

    #[test]
    fn bind_host_accepts_on_loopback_while_the_peers_are_told_the_listen_address() {
        use std::net::TcpStream;
        let listen: SocketAddr = "127.0.0.2:0".parse().unwrap();
        let (_l, told) = bind_exchange(listen, Some("0.0.0.0".parse().unwrap())).unwrap();
        assert_eq!(told.ip(), listen.ip());
        assert_ne!(told.port(), 0, "the port bound, not 0");
        TcpStream::connect(("127.0.0.1", told.port())).expect("bound on every interface");
        TcpStream::connect(told).expect("and on the address told");
        // Without it the exchange binds only the listen address.
        let (_l, told) = bind_exchange(listen, None).unwrap();
        assert!(TcpStream::connect(("127.0.0.1", told.port())).is_err());
        TcpStream::connect(told).unwrap();
        // A port taken names the flag that chose the address.
        let e = bind_exchange(told, Some("127.0.0.2".parse().unwrap())).unwrap_err();
        assert!(
            e.contains("(--bind-host)") && e.contains("is the port taken"),
            "{e}"
        );
    }

    #[test]
    fn cluster_flags_need_workers_and_workers_need_an_address() {
        let e = args(&["--cluster-listen", "127.0.0.1:0"])
            .check()
            .unwrap_err();
        assert!(e.to_string().contains("--cluster-listen applies"), "{e}");
        let e = args(&["--heartbeat-timeout", "2s"]).check().unwrap_err();
        assert!(e.to_string().contains("add --workers N"), "{e}");
        let e = args(&["--workers", "2"]).check().unwrap_err();
        assert!(e.to_string().contains("needs --cluster-listen"), "{e}");
        let ok = args(&["--workers", "2", "--cluster-listen", "127.0.0.1:0"]);
        ok.check().unwrap();
        assert!(args(&[]).check().is_ok());
    }

    #[test]
    fn beyond_loopback_the_token_is_required() {
        let open = args(&["--workers", "2", "--cluster-listen", "0.0.0.0:6123"]);
        let e = open.check().unwrap_err();
        assert!(e.to_string().contains("--cluster-token is needed"), "{e}");
        let given = args(&[
            "--workers",
            "2",
            "--cluster-listen",
            "0.0.0.0:6123",
            "--cluster-token",
            "s3cret",
        ]);
        given.check().unwrap();
        let run = given.run(&[]).unwrap().unwrap();
        assert_eq!(run.token, "s3cret");
        let local = args(&["--workers", "1", "--cluster-listen", "127.0.0.1:0"]);
        assert_eq!(local.run(&[]).unwrap().unwrap().token, LOOPBACK_TOKEN);
        let empty = args(&["--workers", "1", "--cluster-listen", "127.0.0.1:0"]);
        let e = token_for(Some(""), &[empty.cluster_listen.unwrap()], "x").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
    }

    #[test]
    fn tls_flags_go_together_and_only_with_a_cluster() {
        let with = |extra: &[&str]| {
            let mut a = vec!["--workers", "2", "--cluster-listen", "127.0.0.1:0"];
            a.extend_from_slice(extra);
            args(&a)
        };
        let e = with(&["--tls-cert", "c.pem"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tls-key and --tls-ca is missing"), "{e}");
        let e = with(&["--tls-cert", "c.pem", "--tls-ca", "ca.pem"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tls-key is missing"), "{e}");
        let e = with(&["--tls-server-name", "weir"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--tls-server-name applies with TLS"), "{e}");
        // All three, but unreadable: the file is named.
        let e = with(&[
            "--tls-cert",
            "/nonexistent/c.pem",
            "--tls-key",
            "k",
            "--tls-ca",
            "a",
        ])
        .check()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("cannot read --tls-cert /nonexistent/c.pem"),
            "{e}"
        );
        // Without --workers, TLS flags are refused like the other cluster flags.
        let e = args(&["--tls-ca", "ca.pem"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("applies to a job run on a cluster"), "{e}");
        // None: plaintext.
        assert!(with(&[]).tls.load().unwrap().is_none());
    }

    #[test]
    fn the_workers_get_the_job_arguments_without_the_cluster_flags() {
        let argv: Vec<OsString> = [
            "weir run keyed-count",
            "--events",
            "100",
            "--workers",
            "2",
            "--cluster-listen=127.0.0.1:0",
            "--cluster-token",
            "t",
            "--heartbeat-timeout",
            "3s",
            "--tls-cert",
            "c.pem",
            "--tls-key=k.pem",
            "--tls-ca",
            "ca.pem",
            "--tls-server-name",
            "weir",
            "--verify",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(
            job_args(&argv),
            ["weir run keyed-count", "--events", "100", "--verify"]
        );
    }
}
