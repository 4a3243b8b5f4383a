//! Lock names: validated once here, for every backend.

use std::fmt;
use std::sync::Arc;

use crate::{Error, Result};

/// A validated lock name: any non-empty UTF-8 string of at most [`LockName::MAX_LEN`] bytes.
///
/// Names are case-sensitive and may contain any character, `/`, spaces and NUL included;
/// each backend encodes a name into a key or path of its store without collisions. A
/// `LockName` is cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// The longest accepted name, in bytes of UTF-8.
    pub const MAX_LEN: usize = 1024;

    /// Validates `name`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] when the name is empty or longer than [`LockName::MAX_LEN`] bytes.
    pub fn new(name: &str) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::InvalidName { name: String::new(), reason: "a lock name must not be empty".into() });
        }
        if name.len() > Self::MAX_LEN {
            return Err(Error::InvalidName {
                name: name.chars().take(64).collect(),
                reason: format!(
                    "a lock name is at most {} bytes of UTF-8, this one has {} bytes",
                    Self::MAX_LEN,
                    name.len()
                ),
            });
        }
        Ok(Self(Arc::from(name)))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as lowercase hex of its UTF-8 bytes: an injective encoding that fits any
    /// store's key or path alphabet. Backends that want readable keys may use their own
    /// escaping instead, as long as distinct names never map to one key.
    pub fn to_hex(&self) -> String {
        use fmt::Write;
        let mut out = String::with_capacity(self.0.len() * 2);
        for byte in self.0.as_bytes() {
            // Writing to a String cannot fail.
            let _ = write!(out, "{byte:02x}");
        }
        out
    }

    /// The name with every character that `keep` refuses, and every `%`, written as `%xx`
    /// per UTF-8 byte (two lowercase hex digits). Injective whatever `keep` allows, so a
    /// backend picks the alphabet its store needs and keeps names readable: with only ASCII
    /// alphanumerics kept, `orders/42` is `orders%2f42`. `keep` sees the UTF-8 bytes of each
    /// character; a character is kept only when all of its bytes are.
    pub fn percent_encoded(&self, keep: impl Fn(u8) -> bool) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(self.0.len());
        let mut buf = [0_u8; 4];
        for c in self.0.chars() {
            let bytes = c.encode_utf8(&mut buf).as_bytes();
            if c != '%' && bytes.iter().all(|&byte| keep(byte)) {
                out.push(c);
            } else {
                for &byte in bytes {
                    out.push('%');
                    out.push(char::from(HEX[usize::from(byte >> 4)]));
                    out.push(char::from(HEX[usize::from(byte & 0x0f)]));
                }
            }
        }
        out
    }
}

/// The name as written, without quotes (error messages quote it).
impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LockName({:?})", &*self.0)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for LockName {
    type Error = Error;
    fn try_from(name: &str) -> Result<Self> {
        Self::new(name)
    }
}

#[cfg(test)]
mod percent_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn percent_encoding_keeps_what_it_is_told_and_never_collides() {
        let enc = |n: &str| LockName::new(n).unwrap().percent_encoded(|b| b.is_ascii_alphanumeric());
        assert_eq!(enc("orders/42 ä"), "orders%2f42%20%c3%a4");
        let all = |n: &str| LockName::new(n).unwrap().percent_encoded(|_| true);
        assert_eq!(all("a%b ä"), "a%25b ä");
        let names = ["a/b", "a%2fb", "a%252fb", "%", "%25"];
        let encoded: std::collections::HashSet<_> = names.iter().map(|n| enc(n)).collect();
        assert_eq!(encoded.len(), names.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_oversized_names_are_rejected() {
        assert!(matches!(LockName::new(""), Err(Error::InvalidName { .. })));
        let long = "é".repeat(513);
        let err = LockName::new(&long).unwrap_err().to_string();
        assert!(err.contains("1024"), "{err}");
        assert!(LockName::new(&"x".repeat(1024)).is_ok());
    }

    #[test]
    fn hex_encoding_is_injective_on_tricky_names() {
        let names = ["a/b", "a%2Fb", "A/B", "a b", "ä", "a\0b"];
        let encoded: std::collections::HashSet<_> = names.iter().map(|n| LockName::new(n).unwrap().to_hex()).collect();
        assert_eq!(encoded.len(), names.len());
    }
}
