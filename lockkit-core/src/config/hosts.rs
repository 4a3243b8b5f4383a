//! A list of servers, `host[:port][,host[:port]…]` (an IPv6 address in brackets), as the
//! URLs and connect strings of the clustered stores write it: read once, with the same
//! messages for every backend.

use std::fmt;

use crate::{Error, Result};

/// One server of a list: its host (an IPv6 address kept in brackets) and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// The host as written: a name, an IPv4 address, or `[IPv6]`.
    pub host: String,
    /// The port, or the default one.
    pub port: u16,
}

impl HostPort {
    /// The host without an IPv6 address's brackets, as a driver takes it.
    pub fn name(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl fmt::Display for HostPort {
    /// `host:port`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// Reads the comma-separated servers of `list`, each with `default_port` unless it names
/// its own.
///
/// # Errors
///
/// [`Error::InvalidConfig`] of `backend` for an empty list or entry, a host name that is
/// empty or holds a space, `/`, `?` or `@`, a scheme, an unclosed IPv6 bracket, or a port
/// that is not a number from 1 to 65535.
pub fn parse_hosts(backend: &'static str, list: &str, default_port: u16) -> Result<Vec<HostPort>> {
    let invalid = |message: String| Error::invalid_config(backend, message);
    if list.trim().is_empty() {
        return Err(invalid(format!("{list:?} names no server: give at least one host, as in host1:{default_port}")));
    }
    list.split(',').map(|host| parse_host(host.trim(), list, default_port).map_err(invalid)).collect()
}

fn parse_host(host: &str, list: &str, default_port: u16) -> std::result::Result<HostPort, String> {
    if host.is_empty() {
        return Err(format!("{list:?} has an empty host between commas: remove the extra comma"));
    }
    if host.contains("://") {
        return Err(format!(
            "{host:?} in {list:?} carries its own scheme: write host:port only (every server uses the URL's scheme)"
        ));
    }
    let (name, port) = match host.strip_prefix('[') {
        Some(v6) => {
            let Some((name, after)) = v6.split_once(']') else {
                return Err(format!("the IPv6 host {host:?} in {list:?} lacks its closing ']'"));
            };
            match after {
                "" => (format!("[{name}]"), None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (format!("[{name}]"), Some(port)),
                    None => return Err(format!("unexpected {after:?} after the IPv6 host in {host:?}")),
                },
            }
        }
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name.to_owned(), Some(port)),
            None => (host.to_owned(), None),
        },
    };
    if name.is_empty() || name == "[]" {
        return Err(format!("the server {host:?} in {list:?} has no host name"));
    }
    if name.contains(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '@')) {
        return Err(format!("the host name {name:?} in {list:?} is not valid"));
    }
    let port =
        match port {
            None => default_port,
            Some(text) => text.parse::<u16>().ok().filter(|port| *port > 0).ok_or_else(|| {
                format!("the port {text:?} of {name} in {list:?} is not a number between 1 and 65535")
            })?,
        };
    Ok(HostPort { host: name, port })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn shown(list: &str) -> Vec<String> {
        parse_hosts("test", list, 2181).unwrap().iter().map(ToString::to_string).collect()
    }

    fn refused(list: &str) -> String {
        parse_hosts("test", list, 2181).unwrap_err().to_string()
    }

    #[test]
    fn hosts_take_the_default_port_and_ipv6_keeps_its_brackets() {
        assert_eq!(shown(" a:1, b ,[::1]:3,[::2]"), ["a:1", "b:2181", "[::1]:3", "[::2]:2181"]);
        assert_eq!(parse_hosts("test", "[::1]:3", 1).unwrap()[0].name(), "::1");
    }

    #[test]
    fn bad_lists_say_what_to_change() {
        for (list, says) in [
            ("", "names no server"),
            ("a,,b", "empty host"),
            ("a:0", "port"),
            ("a:99999", "port"),
            ("a:x", "port"),
            ("[::1", "closing"),
            ("[::1]x", "unexpected"),
            (":1", "no host name"),
            ("a b", "not valid"),
            ("http://a", "scheme"),
        ] {
            let message = refused(list);
            assert!(message.contains(says), "{list}: {message}");
        }
    }
}
