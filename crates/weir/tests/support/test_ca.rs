//! [`Ca`]: a certificate authority a test makes (rcgen), and the certificates it signs,
//! written once for the exchange's TLS unit tests (`src/runtime/exchange/tls_tests.rs`) and
//! the CLI's cluster TLS tests (`crates/weir-cli/tests/cluster_tls.rs`), both of which
//! `#[path]`-include this file.
//!
//! A file rather than a `weir::testing` item behind a feature: rcgen stays a dev-dependency
//! of both crates, and nothing a user builds against changes. It names only rcgen and std,
//! so that it compiles inside either crate.

#![allow(dead_code)]

use std::path::Path;

/// A certificate authority made for a test.
pub struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// The CA's certificate (what `--tls-ca` holds).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this CA, and its
    /// key, as PEM.
    pub fn issue(&self, names: &[&str]) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// Writes `<name>.crt` and `<name>.key` (for 127.0.0.1 and localhost, signed by this
    /// CA) and `<name>-ca.pem` (the CA `trusted` that `name` checks its peers by) into
    /// `dir`: the three files a process's `--tls-*` flags name.
    pub fn issue_files(&self, dir: &Path, name: &str, trusted: &Ca) {
        let (cert, key) = self.issue(&["127.0.0.1", "localhost"]);
        std::fs::write(dir.join(format!("{name}.crt")), cert).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), trusted.pem()).unwrap();
    }
}
