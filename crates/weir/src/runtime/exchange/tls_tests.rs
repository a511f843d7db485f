//! TLS on the exchange, and the checks of its PEM files, with certificates this test makes
//! (rcgen): mutual TLS carries a channel; a peer without TLS, one with TLS facing a
//! plaintext port, a certificate of another CA and one for another name are refused,
//! each naming the cause and the way out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::codec::{RecordCodec, TypeRegistry};
use crate::runtime::event::Event;

use super::tls::TlsConfig;
use super::*;

#[path = "../../../tests/support/test_ca.rs"]
mod test_ca;
use test_ca::Ca;

/// A checked setup with a certificate for `names` signed by `ca`, trusting `trusted`.
fn tls_setup(ca: &Ca, names: &[&str], trusted: &Ca, name: Option<&str>) -> TlsConfig {
    let (cert, key) = ca.issue(names);
    TlsConfig::from_pem(cert, key, trusted.pem(), name.map(String::from)).unwrap()
}

fn codec() -> Arc<dyn RecordCodec<u64>> {
    TypeRegistry::with_common_types().codec::<u64>().unwrap()
}

fn start(worker: WorkerId, tls: Option<TlsConfig>) -> Exchange {
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut config = ExchangeConfig::new(worker, listen, "secret");
    config.keepalive_timeout = Duration::from_secs(600);
    config.tls = tls;
    Exchange::start(config).unwrap()
}

/// `a` dials `b` as worker 2; the refusal's text.
fn refused(a: &Exchange, b: &Exchange) -> String {
    let e = a.connect(2, &b.local_addr().to_string()).unwrap_err();
    assert!(matches!(e, ExchangeError::Refused { .. }), "{e}");
    assert!(!b.is_connected(a.worker()), "{e}");
    e.to_string()
}

#[test]
fn two_workers_exchange_records_over_mutual_tls_with_the_token_on_top() {
    let ca = Ca::new("weir test CA");
    let a = start(1, Some(tls_setup(&ca, &["127.0.0.1"], &ca, None)));
    let b = start(
        2,
        Some(tls_setup(&ca, &["127.0.0.1", "localhost"], &ca, None)),
    );
    a.connect(2, &b.local_addr().to_string()).unwrap();
    let tx = a.output(2, 7, codec());
    let rx = b.input(1, 7, ChannelBound::local(2), codec()).unwrap();
    tx.send(Event::Batch(vec![1, 2, 3])).unwrap();
    match rx.recv().unwrap() {
        Event::Batch(b) => assert_eq!(b, [1, 2, 3]),
        other => panic!("expected a batch, got {other:?}"),
    }
    // The token is still checked over TLS.
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut wrong = ExchangeConfig::new(3, listen, "wrong");
    wrong.tls = Some(tls_setup(&ca, &["127.0.0.1"], &ca, None));
    let wrong = Exchange::start(wrong).unwrap();
    let e = refused(&wrong, &b);
    assert!(e.contains("cluster token"), "{e}");
}

#[test]
fn a_plaintext_peer_and_a_tls_port_refuse_each_other_naming_tls() {
    let ca = Ca::new("weir test CA");
    let tls = start(2, Some(tls_setup(&ca, &["127.0.0.1"], &ca, None)));
    let plain = start(1, None);
    let e = refused(&plain, &tls);
    assert!(
        e.contains("the peer speaks TLS and this process does not")
            && e.contains("--tls-cert, --tls-key and --tls-ca"),
        "{e}"
    );
    // And the other way round: TLS to a plaintext port.
    let plain_port = start(2, None);
    let tls_dialler = start(1, Some(tls_setup(&ca, &["127.0.0.1"], &ca, None)));
    let e = refused(&tls_dialler, &plain_port);
    assert!(
        e.contains("does not speak TLS") && e.contains("started without --tls-cert"),
        "{e}"
    );
}

#[test]
fn a_certificate_of_another_ca_is_refused_on_either_side() {
    let cluster = Ca::new("the cluster's CA");
    let other = Ca::new("another CA");
    let b = start(2, Some(tls_setup(&cluster, &["127.0.0.1"], &cluster, None)));
    // A dialler whose own certificate another CA signed: the acceptor refuses it.
    let stranger = start(1, Some(tls_setup(&other, &["127.0.0.1"], &cluster, None)));
    let e = refused(&stranger, &b);
    assert!(
        e.contains("refused this process's certificate") && e.contains("cluster's CA"),
        "{e}"
    );
    // A dialler that trusts another CA: it refuses the acceptor's certificate.
    let misled = start(1, Some(tls_setup(&cluster, &["127.0.0.1"], &other, None)));
    let e = refused(&misled, &b);
    assert!(e.contains("not signed by the CA of --tls-ca"), "{e}");
}

#[test]
fn a_certificate_for_another_name_is_refused_unless_that_name_is_the_servers_name() {
    let ca = Ca::new("weir test CA");
    // Certificates carry one shared name (pods' addresses come and go), not the IP.
    let b = start(2, Some(tls_setup(&ca, &["weir"], &ca, Some("weir"))));
    let by_ip = start(1, Some(tls_setup(&ca, &["weir"], &ca, None)));
    let e = refused(&by_ip, &b);
    assert!(
        e.contains("not valid for the name") && e.contains("--tls-server-name"),
        "{e}"
    );
    let by_name = start(1, Some(tls_setup(&ca, &["weir"], &ca, Some("weir"))));
    by_name.connect(2, &b.local_addr().to_string()).unwrap();
    assert!(b.is_connected(1));
}

#[test]
fn pem_files_are_checked_naming_the_flag_the_file_and_the_way_out() {
    let ca = Ca::new("weir test CA");
    let (cert, key) = ca.issue(&["127.0.0.1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let (c, k, a) = (
        file("c.pem", &cert),
        file("k.pem", &key),
        file("ca.pem", ca.pem()),
    );
    TlsConfig::load(&c, &k, &a, None).unwrap();
    let load_err = |c: &std::path::Path, k: &std::path::Path, a: &std::path::Path| {
        TlsConfig::load(c, k, a, None).unwrap_err().to_string()
    };
    let missing = dir.path().join("missing.pem");
    let e = load_err(&missing, &k, &a);
    assert!(
        e.contains("cannot read --tls-cert") && e.contains("missing.pem"),
        "{e}"
    );
    // The key given as the certificate, and the certificate as the key.
    let e = load_err(&k, &k, &a);
    assert!(
        e.contains("--tls-cert") && e.contains("k.pem") && e.contains("holds no certificate"),
        "{e}"
    );
    let e = load_err(&c, &c, &a);
    assert!(
        e.contains("--tls-key") && e.contains("holds no private key"),
        "{e}"
    );
    // Not PEM at all.
    let junk = file("junk.pem", "-----BEGIN CERTIFICATE-----\nnot base64!\n");
    let e = load_err(&c, &k, &junk);
    assert!(e.contains("--tls-ca") && e.contains("junk.pem"), "{e}");
    let empty = file("empty.pem", "");
    let e = load_err(&c, &k, &empty);
    assert!(
        e.contains("--tls-ca") && e.contains("holds no certificate"),
        "{e}"
    );
    // A key of another certificate.
    let (_, other_key) = ca.issue(&["127.0.0.1"]);
    let e = load_err(&c, &file("other.pem", &other_key), &a);
    assert!(
        e.contains("do not make a TLS setup") && e.contains("does the key belong"),
        "{e}"
    );
    // A server name that is no name.
    let e = TlsConfig::load(&c, &k, &a, Some("not a name!".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("--tls-server-name"), "{e}");
}
