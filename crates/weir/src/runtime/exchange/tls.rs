//! TLS for the cluster's two ports (issue 24): the exchange between workers (the data
//! port) and the coordinator's control endpoint, with rustls (its `ring` provider) through
//! tonic, when certificates are given (`--tls-cert`, `--tls-key`, `--tls-ca`).
//!
//! **Mutual TLS, always.** A process given the three files serves with its certificate and
//! asks every client for one signed by the CA of `--tls-ca`; as a client it checks the
//! server's certificate against that CA and presents its own. Why mutual: a worker is both
//! client and server of the exchange, so it holds a certificate anyway, and a port that
//! took any client would leave the token as the only lock; with mutual TLS a peer needs a
//! certificate of the cluster's CA *and* the token. So all three files go together: a
//! certificate without its key, or without the CA to check peers by, is refused at the
//! start, naming the missing flag.
//!
//! **Names.** A server's certificate is checked for the host dialled — the host of
//! `--coordinator`, a worker's IP as it registered — or, with `--tls-server-name NAME`,
//! for NAME: where addresses come and go (pods), give every process a certificate
//! carrying one shared name and that name.
//!
//! **The token stays.** TLS says who holds a certificate of the cluster's CA; the token
//! (`--cluster-token`, or the loopback token on one host) is still presented and checked
//! on every stream, as without TLS.
//!
//! **Clear failures.** The PEM files are read and checked when the process starts (a file
//! missing, not PEM, a key that is not the certificate's). A handshake that fails — a peer
//! without TLS, one with TLS facing a plaintext port, a certificate of another CA or for
//! another name — is turned into a refusal that says which and what to change
//! ([`explain`]), not retried as a peer out of reach.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig};

/// A TLS setup that cannot work: which file or flag, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TlsError(pub String);

/// The cluster's TLS material, read and checked: this process's certificate and key, and
/// the CA its peers' certificates must be signed by. Cheap to clone; its `Debug` never
/// shows the key.
#[derive(Clone)]
pub struct TlsConfig {
    cert: Vec<u8>,
    key: Vec<u8>,
    ca: Vec<u8>,
    server_name: Option<String>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("cert_bytes", &self.cert.len())
            .field("ca_bytes", &self.ca.len())
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// The flags, for messages.
const CERT: &str = "--tls-cert";
const KEY: &str = "--tls-key";
const CA: &str = "--tls-ca";

impl TlsConfig {
    /// Reads and checks the PEM files of `--tls-cert`, `--tls-key` and `--tls-ca`;
    /// `server_name` is `--tls-server-name`. Every error names the flag, the file and the
    /// way out.
    pub fn load(
        cert: &Path,
        key: &Path,
        ca: &Path,
        server_name: Option<String>,
    ) -> Result<TlsConfig, TlsError> {
        let read = |flag: &str, path: &Path, what: &str| {
            std::fs::read(path).map_err(|e| {
                TlsError(format!(
                    "cannot read {flag} {}: {e} (give the PEM file of {what})",
                    path.display()
                ))
            })
        };
        let label = |flag: &str, path: &Path| format!("{flag} {}", path.display());
        Self::check(
            [
                (
                    label(CERT, cert),
                    read(CERT, cert, "this process's certificate")?,
                ),
                (
                    label(KEY, key),
                    read(KEY, key, "this process's private key")?,
                ),
                (
                    label(CA, ca),
                    read(CA, ca, "the CA that signs the cluster's certificates")?,
                ),
            ],
            server_name,
        )
    }

    /// [`load`](TlsConfig::load) from PEM text already in memory.
    pub fn from_pem(
        cert: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
        ca: impl Into<Vec<u8>>,
        server_name: Option<String>,
    ) -> Result<TlsConfig, TlsError> {
        Self::check(
            [
                (CERT.to_string(), cert.into()),
                (KEY.to_string(), key.into()),
                (CA.to_string(), ca.into()),
            ],
            server_name,
        )
    }

    fn check(
        [(cert_label, cert), (key_label, key), (ca_label, ca)]: [(String, Vec<u8>); 3],
        server_name: Option<String>,
    ) -> Result<TlsConfig, TlsError> {
        certificates(&cert_label, &cert, "this process's certificate")?;
        if let Err(e) = PrivateKeyDer::from_pem_slice(&key) {
            return Err(TlsError(match e {
                pem::Error::NoItemsFound => format!(
                    "{key_label} holds no private key (-----BEGIN PRIVATE KEY-----, or RSA / EC \
                     PRIVATE KEY): is it the certificate? give the key of {cert_label}"
                ),
                e => format!("{key_label} is not a PEM private key ({e})"),
            }));
        }
        certificates(&ca_label, &ca, "the CA's certificate")?;
        if let Some(name) = &server_name {
            if rustls_pki_types::ServerName::try_from(name.as_str()).is_err() {
                return Err(TlsError(format!(
                    "--tls-server-name {name:?} is neither a DNS name nor an IP address"
                )));
            }
        }
        let config = TlsConfig {
            cert,
            key,
            ca,
            server_name,
        };
        // Build both ends once, so that a key of another certificate, or a CA file of no
        // usable certificate, fails here and not at the first handshake.
        let unusable = |e: tonic::transport::Error| {
            TlsError(format!(
                "{cert_label}, {key_label} and {ca_label} do not make a TLS setup: {} (does \
                 the key belong to the certificate, and is the CA a CA certificate?)",
                super::node::error_chain(&e)
            ))
        };
        Server::builder()
            .tls_config(config.server())
            .map_err(unusable)?;
        Endpoint::from_static("https://localhost")
            .tls_config(config.client("localhost:1"))
            .map_err(unusable)?;
        Ok(config)
    }

    /// The server side: this certificate, and a client certificate signed by the CA
    /// required of every client.
    pub fn server(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(Identity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
    }

    /// The client side for dialling `addr` (`host:port`): the server's certificate is
    /// checked against the CA for `--tls-server-name`, else the host dialled; this
    /// certificate is presented.
    pub fn client(&self, addr: &str) -> ClientTlsConfig {
        let name = self.server_name.clone().unwrap_or_else(|| host_of(addr));
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(Identity::from_pem(&self.cert, &self.key))
            .domain_name(name)
    }

    /// The name a server's certificate must carry when dialled at `addr`.
    pub fn name_for(&self, addr: &str) -> String {
        self.server_name.clone().unwrap_or_else(|| host_of(addr))
    }

    /// A server that cannot start with this setup, as an error's text.
    pub(crate) fn unusable(&self, cause: &str) -> String {
        format!("the TLS certificate, key and CA cannot serve: {cause}")
    }
}

/// The certificates of a PEM file (at least one), or why there are none.
fn certificates(label: &str, pem: &[u8], what: &str) -> Result<(), TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("{label} is not PEM ({e}): give {what} as PEM")))?;
    if certs.is_empty() {
        return Err(TlsError(format!(
            "{label} holds no certificate (-----BEGIN CERTIFICATE-----): give {what} as PEM \
             (a DER file converts with `openssl x509 -inform der -in FILE -out FILE.pem`)"
        )));
    }
    Ok(())
}

/// The host of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> String {
    if let Some(rest) = addr.strip_prefix('[') {
        if let Some((host, _)) = rest.split_once(']') {
            return host.to_string();
        }
    }
    addr.rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .to_string()
}

/// Explains a dial or handshake with TLS (this process's setup `tls`; `None`: it dialled in
/// plaintext, and nothing here is about TLS) that failed with `cause` (its error chain) for
/// a reason the error itself names — a peer without TLS, a certificate one side does not
/// accept — naming the cause and the way out; `None` otherwise ([`refusal`] probes then).
pub fn explain(tls: Option<&TlsConfig>, cause: &str) -> Option<String> {
    tls?;
    let c = cause.to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| c.contains(n));
    // A plaintext HTTP/2 server reads the ClientHello as a bad preface: it answers with
    // HTTP/2 bytes (not a TLS record) or closes the connection in the handshake.
    if has(&[
        "invalidcontenttype",
        "corrupt message",
        "invalid content type",
        "handshake eof",
    ]) {
        return Some(not_tls(cause));
    }
    if has(&["unknownissuer", "unknown issuer", "badsignature"]) {
        return Some(format!(
            "its certificate is not signed by the CA of --tls-ca ({cause}); give it a \
             certificate signed by the cluster's CA, or this process the CA that signed it"
        ));
    }
    if has(&["notvalidforname", "not valid for name"]) {
        return Some(format!(
            "its certificate is not valid for the name dialled ({cause}); give it a \
             certificate carrying that name, or every process --tls-server-name NAME with \
             certificates that carry NAME"
        ));
    }
    if has(&["expired", "notvalidyet", "not valid yet"]) {
        return Some(format!(
            "a certificate is outside its validity period ({cause}); renew the cluster's \
             certificates (or check the clocks)"
        ));
    }
    if has(&[
        "unknownca",
        "unknown ca",
        "badcertificate",
        "bad certificate",
        "certificaterequired",
        "certificate required",
        "decrypterror",
        "received fatal alert",
    ]) {
        return Some(format!(
            "the peer refused this process's certificate ({cause}): it is not signed by the \
             CA the peer trusts (its --tls-ca); give every process a certificate of the \
             cluster's CA"
        ));
    }
    None
}

/// Whether a dial's failure (`cause`) may come from TLS on one side only, and so is worth a
/// probe: anything but a port that refused the connection or was out of reach.
pub fn worth_probing(cause: &str) -> bool {
    let c = cause.to_ascii_lowercase();
    ![
        "tcp connect error",
        "connection refused",
        "timed out",
        "dns error",
    ]
    .iter()
    .any(|n| c.contains(n))
}

/// What a probe found at a port ([`speaks_tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// It answered a TLS handshake with its certificate.
    Tls,
    /// It accepted the connection but not as TLS.
    Plain,
    /// It could not be reached (down, or out of reach).
    Unknown,
}

/// What the port at `addr` (`host:port`) speaks: a handshake that trusts no CA reaches the
/// peer's certificate (and refuses it) only if it speaks TLS. Asked after a dial failed
/// with a bare "connection closed", so that the error can say why. At most `timeout`.
pub async fn speaks_tls(addr: &str, timeout: Duration) -> Port {
    let probe = ClientTlsConfig::new()
        .domain_name(host_of(addr))
        .timeout(timeout);
    let Ok(endpoint) = Endpoint::from_shared(format!("https://{addr}")) else {
        return Port::Unknown;
    };
    let Ok(endpoint) = endpoint.connect_timeout(timeout).tls_config(probe) else {
        return Port::Unknown;
    };
    match endpoint.connect().await {
        Ok(_) => Port::Tls, // it trusted nothing and still connected: TLS, whatever else
        Err(e) => {
            let cause = super::node::error_chain(&e);
            if cause
                .to_ascii_lowercase()
                .contains("invalid peer certificate")
            {
                Port::Tls
            } else if worth_probing(&cause) {
                Port::Plain
            } else {
                Port::Unknown
            }
        }
    }
}

/// Why a dial to `addr` with this process's TLS setup `tls` (`None`: plaintext) that failed
/// with `cause` (its error chain) failed for a reason of TLS — one side without it, a
/// certificate one side does not accept — naming the cause and the way out; `None` when it
/// is something else (a peer out of reach). A refusal the error names is read from it
/// ([`explain`]); a bare "connection closed" is probed ([`speaks_tls`]): a plaintext dial
/// that reached a TLS port, TLS that reached a plaintext one, or a TLS port that closed the
/// connection after the handshake (it refused this process's certificate).
pub async fn refusal(
    tls: Option<&TlsConfig>,
    addr: &str,
    cause: &str,
    timeout: Duration,
) -> Option<String> {
    if let Some(why) = explain(tls, cause) {
        return Some(why);
    }
    if !worth_probing(cause) {
        return None;
    }
    match (tls.is_some(), speaks_tls(addr, timeout).await) {
        (false, Port::Tls) => Some(format!(
            "the peer speaks TLS and this process does not ({cause}); give this process the \
             cluster's --tls-cert, --tls-key and --tls-ca"
        )),
        (true, Port::Plain) => Some(not_tls(cause)),
        (true, Port::Tls) => Some(format!(
            "the peer closed the connection after the TLS handshake ({cause}): it refused \
             this process's certificate, which is not signed by the CA the peer trusts (its \
             --tls-ca); give every process a certificate of the cluster's CA"
        )),
        _ => None,
    }
}

fn not_tls(cause: &str) -> String {
    format!(
        "the peer does not speak TLS ({cause}): it was started without --tls-cert, --tls-key \
         and --tls-ca; give every process of the cluster the same TLS flags"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(host_of("10.0.0.7:6124"), "10.0.0.7");
        assert_eq!(host_of("weir-coordinator:6123"), "weir-coordinator");
        assert_eq!(host_of("[::1]:6124"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }

    #[test]
    fn tls_failures_are_explained_and_others_are_not() {
        assert!(explain(None, "invalid peer certificate: UnknownIssuer").is_none());
        assert!(!worth_probing(
            "tcp connect error: Connection refused (os error 111)"
        ));
        assert!(worth_probing("transport error: connection closed"));
        assert!(not_tls("closed").contains("started without --tls-cert"));
    }
}
