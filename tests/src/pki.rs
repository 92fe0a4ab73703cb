//! A throwaway PKI for TLS tests, generated at test time (nothing is
//! committed): a CA, a server certificate for `localhost` and `127.0.0.1`,
//! and a client certificate, as PEM files in a temp dir.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// The PEM files of a test PKI.
pub struct TestPki {
    dir: tempfile::TempDir,
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The server's certificate chain and key.
    pub server_cert: PathBuf,
    /// See `server_cert`.
    pub server_key: PathBuf,
    /// A client certificate (for mTLS) and its key.
    pub client_cert: PathBuf,
    /// See `client_cert`.
    pub client_key: PathBuf,
}

impl TestPki {
    /// Generates a CA (named `name`) and certificates it issued.
    pub fn generate(name: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf =
            |cn: &str, purpose: ExtendedKeyUsagePurpose| -> anyhow::Result<(String, String)> {
                let key = KeyPair::generate()?;
                let mut params =
                    CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
                params.distinguished_name.push(DnType::CommonName, cn);
                params.extended_key_usages = vec![purpose];
                let cert = params.signed_by(&key, &issuer)?;
                Ok((cert.pem(), key.serialize_pem()))
            };
        let (server_pem, server_key) = leaf("server", ExtendedKeyUsagePurpose::ServerAuth)?;
        let (client_pem, client_key) = leaf("client", ExtendedKeyUsagePurpose::ClientAuth)?;
        let write = |file: &str, text: &str| -> anyhow::Result<PathBuf> {
            let path = dir.path().join(file);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Self {
            ca: write("ca.pem", &ca_cert.pem())?,
            server_cert: write("server.pem", &server_pem)?,
            server_key: write("server.key", &server_key)?,
            client_cert: write("client.pem", &client_pem)?,
            client_key: write("client.key", &client_key)?,
            dir,
        })
    }

    /// The directory of the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A server's TLS of `pki` (its server certificate; requiring client
/// certificates of its CA when `mtls`), as the services load it.
pub fn server_tls(
    pki: &TestPki,
    mtls: bool,
) -> anyhow::Result<std::sync::Arc<baton_common::tls::ServerTls>> {
    let config = baton_common::tls::TlsConfig {
        cert_file: pki.server_cert.clone(),
        key_file: pki.server_key.clone(),
        client_ca_file: if mtls {
            pki.ca.clone()
        } else {
            Default::default()
        },
        ..Default::default()
    };
    baton_common::tls::ServerTls::load(&config)
        .map_err(|e| anyhow::anyhow!(e))?
        .ok_or_else(|| anyhow::anyhow!("TLS is configured"))
}
