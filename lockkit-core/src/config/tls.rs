//! The certificates of a TLS client, as every backend that speaks TLS (Redis, PostgreSQL,
//! etcd) takes them: a root certificate to trust and a client certificate with its key, each
//! given as PEM by a builder method or as the path of a PEM file by a URL option, and read
//! when the provider is built.

use std::fmt;
use std::path::PathBuf;

use super::key::Key;
use super::options::Options;
use super::value::OptionValue;
use crate::Result;

/// PEM given to a certificate setting: the PEM itself (a builder method), or the path of a
/// file that holds it (a URL option), read by `build`.
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    /// The PEM text.
    Text(Vec<u8>),
    /// The path of a PEM file.
    File(PathBuf),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(_) => f.write_str("<PEM>"),
            Self::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

impl OptionValue for Pem {
    const FORM: &'static str = "path of a PEM file";
    type Const = &'static str;

    fn parse(text: &str) -> std::result::Result<Self, String> {
        if text.is_empty() {
            return Err("the path is empty; give the path of a PEM file".to_owned());
        }
        Ok(Self::File(PathBuf::from(text)))
    }

    fn from_const(value: &'static str) -> Self {
        Self::File(PathBuf::from(value))
    }

    fn show(&self) -> String {
        match self {
            Self::Text(_) => "<PEM>".to_owned(),
            Self::File(path) => path.display().to_string(),
        }
    }
}

/// The three settings of a TLS client, under the names a backend gives them: the root
/// certificate to trust instead of the system's, and a client certificate with its key.
#[derive(Clone, Copy, Debug)]
pub struct TlsKeys {
    /// The certificate authority that the server's certificate must chain to.
    pub root: Key<Pem>,
    /// The client certificate (a PEM chain), for servers that authenticate clients.
    pub certificate: Key<Pem>,
    /// The client certificate's private key.
    pub key: Key<Pem>,
}

/// lockkit's names of the TLS settings: `tls_root_certificate`, `tls_client_certificate` and
/// `tls_client_key` (Redis and etcd; PostgreSQL keeps libpq's `sslrootcert`, `sslcert` and
/// `sslkey`).
pub const TLS_KEYS: TlsKeys = TlsKeys {
    root: Key::new(
        "tls_root_certificate",
        "the CA that the server's certificate must chain to, instead of the system's trust store",
    ),
    certificate: Key::new("tls_client_certificate", "a client certificate, for servers that authenticate clients")
        .range_said("with tls_client_key"),
    key: Key::new("tls_client_key", "the client certificate's private key").range_said("with tls_client_certificate"),
};

impl TlsKeys {
    /// Sets the root certificate to `pem` (PEM text): a builder method's value.
    pub fn set_root(&self, options: &mut Options, pem: Vec<u8>) {
        options.set(&self.root, Pem::Text(pem));
    }

    /// Sets the client certificate and its key (PEM text): a builder method's values.
    pub fn set_client(&self, options: &mut Options, certificate: Vec<u8>, key: Vec<u8>) {
        options.set(&self.certificate, Pem::Text(certificate));
        options.set(&self.key, Pem::Text(key));
    }

    /// Whether any of the three was given.
    pub fn any_given(&self, options: &Options) -> bool {
        options.get(&self.root).is_some()
            || options.get(&self.certificate).is_some()
            || options.get(&self.key).is_some()
    }

    /// The certificates given, with their files read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a file that cannot be read,
    /// or a client certificate without its key (or a key without its certificate).
    pub fn load(&self, options: &Options) -> Result<ClientTls> {
        let read = |key: &Key<Pem>| -> Result<Option<Vec<u8>>> {
            match options.get(key) {
                None => Ok(None),
                Some(Pem::Text(pem)) => Ok(Some(pem)),
                Some(Pem::File(path)) => std::fs::read(&path).map(Some).map_err(|error| {
                    options.invalid(format!(
                        "{}={path:?} cannot be read ({error}); give the path of a readable PEM file",
                        key.name()
                    ))
                }),
            }
        };
        if options.get(&self.certificate).is_some() != options.get(&self.key).is_some() {
            return Err(options.invalid(format!(
                "{} and {} go together: a client certificate needs its key; give both, or neither",
                self.certificate.name(),
                self.key.name()
            )));
        }
        let root = read(&self.root)?;
        let client = match (read(&self.certificate)?, read(&self.key)?) {
            (Some(certificate), Some(key)) => Some((certificate, key)),
            _ => None,
        };
        Ok(ClientTls { root, client })
    }
}

impl TlsKeys {
    /// The certificates of a client whose connections use TLS when `enabled` (the URL's
    /// scheme said so): read as [`load`](Self::load) does; `None` when not `enabled`.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load); and certificates given to a client that does not use TLS,
    /// with the message `TLS certificates were given but {plain}` (`plain` says what the
    /// address is and how to turn TLS on).
    pub fn load_when(&self, options: &Options, enabled: bool, plain: &str) -> Result<Option<ClientTls>> {
        if !enabled {
            if self.any_given(options) {
                return Err(options.invalid(format!("TLS certificates were given but {plain}")));
            }
            return Ok(None);
        }
        self.load(options).map(Some)
    }

    /// As [`load_when`](Self::load_when), for a backend whose TLS is a cargo feature: TLS
    /// asked for without it (`built`: `cfg!(feature = "tls")`) is an error saying which
    /// feature to enable ([`tls_not_built`]), and the certificates read are checked to be PEM
    /// ([`ClientTls::check_pem`]) before any connection.
    ///
    /// # Errors
    ///
    /// As for [`load_when`](Self::load_when) and [`ClientTls::check_pem`], and
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for TLS without the feature.
    pub fn load_checked(
        &self,
        options: &Options,
        enabled: bool,
        built: bool,
        plain: &str,
    ) -> Result<Option<ClientTls>> {
        if enabled && !built {
            return Err(options.invalid(tls_not_built(options.backend())));
        }
        let tls = self.load_when(options, enabled, plain)?;
        if let Some(tls) = &tls {
            tls.check_pem(options.backend(), self)?;
        }
        Ok(tls)
    }
}

/// What a backend built without its `tls` feature says of a URL or a setting that needs TLS:
/// which feature to enable, of the backend's crate (`lockkit-BACKEND`) and of the facade
/// (`BACKEND-tls`).
pub fn tls_not_built(backend: &str) -> String {
    format!(
        "TLS is not built in: enable the `tls` feature of lockkit-{backend} (the `{backend}-tls` feature of the \
         lockkit crate) in your Cargo.toml"
    )
}

/// The certificates of a TLS client, read: PEM contents. `Debug` shows none of them.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// The root certificate(s) to trust instead of the system's.
    pub root: Option<Vec<u8>>,
    /// The client certificate chain and its private key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl ClientTls {
    /// Whether no certificate was given.
    pub fn is_empty(&self) -> bool {
        self.root.is_none() && self.client.is_none()
    }
}

impl ClientTls {
    /// Checks that each certificate given looks like PEM of its kind (`-----BEGIN
    /// …CERTIFICATE-----`, `-----BEGIN …PRIVATE KEY-----`), for clients whose TLS library
    /// would only refuse it at the first connection, with a vaguer message.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) of `backend` naming the
    /// setting (its name in `keys`) that is not PEM of its kind.
    pub fn check_pem(&self, backend: &'static str, keys: &TlsKeys) -> Result<()> {
        let is_pem = |pem: &[u8], what: &str| {
            let text = String::from_utf8_lossy(pem);
            text.contains("-----BEGIN ") && text.contains(what)
        };
        let refuse = |message: String| Err(crate::Error::invalid_config(backend, message));
        if let Some(root) = &self.root
            && !is_pem(root, "CERTIFICATE-----")
        {
            return refuse(format!(
                "{} is not a PEM certificate: give the CA's certificate (a file starting with -----BEGIN CERTIFICATE-----)",
                keys.root.name()
            ));
        }
        if let Some((certificate, key)) = &self.client {
            if !is_pem(certificate, "CERTIFICATE-----") {
                return refuse(format!(
                    "{} is not a PEM certificate (a file starting with -----BEGIN CERTIFICATE-----)",
                    keys.certificate.name()
                ));
            }
            if !is_pem(key, "PRIVATE KEY-----") {
                return refuse(format!(
                    "{} is not a PEM private key (a file starting with -----BEGIN PRIVATE KEY-----)",
                    keys.key.name()
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("root", &self.root.as_ref().map(|_| "<certificate>"))
            .field("client", &self.client.as_ref().map(|_| "<certificate and key>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::config::OptionKey;

    const KEYS: &[&dyn OptionKey] = &[&TLS_KEYS.root, &TLS_KEYS.certificate, &TLS_KEYS.key];

    #[test]
    fn files_are_read_and_a_certificate_needs_its_key() {
        let dir = std::env::temp_dir().join(format!("lockkit-core-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let root = dir.join("root.pem");
        std::fs::write(&root, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let mut options = Options::new("test", KEYS);
        options.parse("tls_root_certificate", &root.display().to_string()).unwrap();
        TLS_KEYS.set_client(&mut options, b"cert".to_vec(), b"key".to_vec());
        let tls = TLS_KEYS.load(&options).unwrap();
        assert_eq!(tls.root.as_deref(), Some(&b"-----BEGIN CERTIFICATE-----\n"[..]));
        assert_eq!(tls.client, Some((b"cert".to_vec(), b"key".to_vec())));
        assert!(!format!("{tls:?}").contains("BEGIN"));
        let mut half = Options::new("test", KEYS);
        half.parse("tls_client_certificate", &root.display().to_string()).unwrap();
        assert!(TLS_KEYS.load(&half).unwrap_err().to_string().contains("needs its key"));
        let mut missing = Options::new("test", KEYS);
        missing.parse("tls_root_certificate", "/nonexistent/ca.pem").unwrap();
        assert!(TLS_KEYS.load(&missing).unwrap_err().to_string().contains("cannot be read"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
