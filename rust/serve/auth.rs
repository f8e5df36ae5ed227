//! One auth decision per request, from the key snapshot the owning process pushes
//! (API.md section 8): the admin secret compared in constant time, an API key by the SHA-256
//! of its secret, open access on loopback when no secret and no key exist.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

/// An API key as the front knows it (the owning process's key table, hashes only).
#[derive(Debug, Clone)]
pub struct Key {
    pub hash: String,
    pub name: String,
    pub home_ns: String,
    pub default_ns: String,
}

/// What the front decides from a request's `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The admin secret.
    Admin,
    /// No credential, on a server in open mode (loopback, no secret, no key).
    Open,
    /// An enabled API key, by its hash.
    Key(String),
    /// No credential where one is needed.
    Missing,
    /// Not `Bearer <secret>`.
    Malformed,
    /// An unknown or disabled secret.
    Unknown,
}

impl Decision {
    /// The value of the principal header a forwarded request carries (read by
    /// `memini.server._auth.Gate.principal`).
    #[must_use]
    pub fn header(&self) -> String {
        match self {
            Self::Admin => "admin".into(),
            Self::Open => "open".into(),
            Self::Key(hash) => format!("key {hash}"),
            Self::Missing => "missing".into(),
            Self::Malformed => "malformed".into(),
            Self::Unknown => "unknown".into(),
        }
    }
}

/// The snapshot auth is decided from: replaced whole whenever a key changes.
#[derive(Debug, Default)]
pub struct Keys {
    admin: Option<Vec<u8>>,
    open: bool,
    /// Enabled keys by hash (a disabled key is as unknown as a missing one).
    enabled: HashMap<String, Key>,
}

impl Keys {
    /// The snapshot of `keys` (with their `disabled` flags), the admin secret and open mode.
    #[must_use]
    pub fn new(admin: Option<&str>, open: bool, keys: Vec<(Key, bool)>) -> Self {
        let enabled = keys
            .into_iter()
            .filter(|(_, disabled)| !disabled)
            .map(|(k, _)| (k.hash.clone(), k))
            .collect();
        Self {
            admin: admin
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec()),
            open,
            enabled,
        }
    }

    /// The enabled key of this hash.
    #[must_use]
    pub fn key(&self, hash: &str) -> Option<&Key> {
        self.enabled.get(hash)
    }

    /// The decision for an `Authorization` header's raw bytes (None: no header). The bytes
    /// are read as Latin-1, as the ASGI server did, and the secret compared and hashed as
    /// that text's UTF-8, so a secret means what it meant to the Python gate.
    #[must_use]
    pub fn decide(&self, authorization: Option<&[u8]>) -> Decision {
        let text: String = match authorization {
            Some(raw) if !raw.is_empty() => raw.iter().map(|&b| char::from(b)).collect(),
            _ => {
                return if self.open {
                    Decision::Open
                } else {
                    Decision::Missing
                }
            }
        };
        let (scheme, secret) = text.split_once(' ').unwrap_or((&text, ""));
        let secret = secret.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || secret.is_empty() {
            return Decision::Malformed;
        }
        if let Some(admin) = &self.admin {
            if same(secret.as_bytes(), admin) {
                return Decision::Admin;
            }
        }
        let hash = hex(&Sha256::digest(secret.as_bytes()));
        if self.enabled.contains_key(&hash) {
            Decision::Key(hash)
        } else {
            Decision::Unknown
        }
    }
}

/// Equal bytes, in time that depends only on the lengths.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Lowercase hex, two digits a byte (written here, not through `fmt`: once per request).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Keys {
        let key = |secret: &str, name: &str| Key {
            hash: hex(&Sha256::digest(secret.as_bytes())),
            name: name.into(),
            home_ns: format!("org/{name}"),
            default_ns: String::new(),
        };
        Keys::new(
            Some("root"),
            false,
            vec![(key("sa", "a"), false), (key("sb", "b"), true)],
        )
    }

    #[test]
    fn hashes_are_lowercase_hex() {
        assert_eq!(
            hex(&Sha256::digest(b"abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&[0x00, 0x0f, 0xf0, 0xff]), "000ff0ff");
    }

    #[test]
    fn decides_each_case() {
        let k = keys();
        assert_eq!(k.decide(None), Decision::Missing);
        assert_eq!(k.decide(Some(b"")), Decision::Missing);
        assert_eq!(k.decide(Some(b"Bearer root")), Decision::Admin);
        assert_eq!(k.decide(Some(b"bearer  root ")), Decision::Admin);
        assert_eq!(k.decide(Some(b"Basic root")), Decision::Malformed);
        assert_eq!(k.decide(Some(b"Bearer ")), Decision::Malformed);
        assert_eq!(k.decide(Some(b"Bearer roo")), Decision::Unknown);
        assert_eq!(k.decide(Some(b"Bearer sb")), Decision::Unknown); // disabled
        let Decision::Key(hash) = k.decide(Some(b"Bearer sa")) else {
            panic!("the key")
        };
        assert_eq!(k.key(&hash).map(|k| k.name.as_str()), Some("a"));
        let open = Keys::new(None, true, vec![]);
        assert_eq!(open.decide(None), Decision::Open);
        assert_eq!(open.decide(Some(b"Bearer x")), Decision::Unknown);
    }
}
