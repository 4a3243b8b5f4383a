//! Redis Sentinel: `redis+sentinel://[user:password@]s1:p1,s2:p2/MASTER_NAME` names the
//! sentinels and the master they monitor; the connections ask the sentinels for the current
//! primary whenever they are made (see `Store::connection` and `Subscriber::link`).

use std::time::Duration;

use lockkit_core::config::ClientTls;
use lockkit_core::{Error, LockName, Result};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::BACKEND;

/// The port of a sentinel whose URL host names none.
pub(crate) const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The sentinels and the master name of a `redis+sentinel://` URL.
#[derive(Clone, Debug)]
pub(crate) struct SentinelSettings {
    /// The name the sentinels know the primary by (the URL's path).
    pub(crate) master: String,
    /// Each sentinel as written (`host:port`), and how to connect to it (no credentials:
    /// those of the URL are the Redis servers').
    pub(crate) sentinels: Vec<(String, ConnectionInfo)>,
}

impl SentinelSettings {
    /// Reads the sentinels (`hosts`, comma-separated `host[:port]`) and the master name
    /// (`path`, with its leading slash) of a sentinel URL; `tls` for `rediss+sentinel://`.
    pub(crate) fn parse(hosts: &str, path: &str, tls: bool, shown: &str) -> std::result::Result<Self, String> {
        let master = path.trim_start_matches('/');
        if master.is_empty() || master.contains('/') {
            return Err(format!(
                "the URL {shown} names no master: write redis+sentinel://host:26379,host:26379/MASTER_NAME with the name the sentinels monitor (`sentinel monitor NAME …` in their configuration)"
            ));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        let mut sentinels = Vec::new();
        for host in hosts.split(',').map(str::trim) {
            if host.is_empty() {
                return Err(format!("the URL {shown} has an empty sentinel address; list them as host:port,host:port"));
            }
            let has_port = match host.strip_prefix('[') {
                Some(bracketed) => bracketed.contains("]:"),
                None => host.contains(':'),
            };
            let with_port = if has_port { host.to_owned() } else { format!("{host}:{DEFAULT_SENTINEL_PORT}") };
            let info = format!("{scheme}://{with_port}/")
                .into_connection_info()
                .map_err(|error| format!("the sentinel address {host:?} in {shown} cannot be used: {error}"))?;
            sentinels.push((with_port, info));
        }
        Ok(Self { master: master.to_owned(), sentinels })
    }

    /// `host:port,host:port/MASTER` for messages.
    pub(crate) fn shown(&self) -> String {
        let hosts: Vec<&str> = self.sentinels.iter().map(|(host, _)| host.as_str()).collect();
        format!("{}/{}", hosts.join(","), self.master)
    }
}

/// What one sentinel said.
enum Answer {
    /// It names the primary.
    Primary(String, u16),
    /// It monitors no master of that name.
    UnknownMaster,
    /// It answered, but not as a sentinel (an error to the `SENTINEL` command).
    NotSentinel(String),
    /// It could not be reached or did not answer in time.
    Unreachable(String),
}

/// Asks the sentinels, in the order written, for the address of the primary, and returns the
/// settings' `connection` info pointed at it (same credentials, database and TLS).
///
/// # Errors
///
/// [`Error::InvalidConfig`] when every sentinel that answered monitors no master of that
/// name, or when none of the hosts is a sentinel; a retryable [`Error::Connection`] when no
/// sentinel could be reached.
pub(crate) async fn discover(
    connection: &ConnectionInfo,
    tls: &ClientTls,
    sentinel: &SentinelSettings,
    timeout: Duration,
    lock: Option<&LockName>,
) -> Result<ConnectionInfo> {
    let mut answers = Vec::new();
    for (host, info) in &sentinel.sentinels {
        let answer = ask(tls, info, &sentinel.master, timeout).await;
        if let Answer::Primary(primary, port) = answer {
            tracing::debug!(sentinel = %host, primary = %format!("{primary}:{port}"), "the sentinels name the primary");
            return Ok(connection.clone().set_addr(pointed_at(connection.addr(), primary, port)));
        }
        answers.push((host.as_str(), answer));
    }
    let unknown: Vec<&str> =
        answers.iter().filter(|(_, a)| matches!(a, Answer::UnknownMaster)).map(|(host, _)| *host).collect();
    if !unknown.is_empty() {
        return Err(Error::invalid_config(
            BACKEND,
            format!(
                "the sentinels {} monitor no master named {:?}: correct the name after the slash in the redis+sentinel:// URL (`SENTINEL MASTERS` on a sentinel lists the names it monitors)",
                unknown.join(", "),
                sentinel.master
            ),
        ));
    }
    let not_sentinels: Vec<String> = answers
        .iter()
        .filter_map(|(host, a)| match a {
            Answer::NotSentinel(reply) => Some(format!("{host} ({reply})")),
            _ => None,
        })
        .collect();
    if !not_sentinels.is_empty() && not_sentinels.len() == answers.len() {
        return Err(Error::invalid_config(
            BACKEND,
            format!(
                "the hosts of the redis+sentinel:// URL are not sentinels: {}; list the sentinels' addresses (port 26379 by default), or use redis:// for a Redis server",
                not_sentinels.join(", ")
            ),
        ));
    }
    let failures: Vec<String> = answers
        .iter()
        .map(|(host, a)| match a {
            Answer::Unreachable(why) | Answer::NotSentinel(why) => format!("{host}: {why}"),
            Answer::UnknownMaster | Answer::Primary(..) => format!("{host}: no answer"),
        })
        .collect();
    Err(Error::connection(
        BACKEND,
        lock,
        std::io::Error::other(format!(
            "no sentinel of {} named the primary ({})",
            sentinel.shown(),
            failures.join("; ")
        )),
    ))
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME master` on one sentinel, within `timeout`.
async fn ask(tls: &ClientTls, info: &ConnectionInfo, master: &str, timeout: Duration) -> Answer {
    let attempt = async {
        let client = crate::client::open(tls, info.clone())?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(master)
            .query_async::<Option<(String, u16)>>(&mut connection)
            .await
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(Some((host, port)))) => Answer::Primary(host, port),
        Ok(Ok(None)) => Answer::UnknownMaster,
        Ok(Err(error)) if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) => {
            Answer::NotSentinel(error.to_string())
        }
        Ok(Err(error)) if error.code().is_some() => Answer::NotSentinel(error.to_string()),
        Ok(Err(error)) => Answer::Unreachable(error.to_string()),
        Err(_) => Answer::Unreachable(format!("no answer within {timeout:?}")),
    }
}

/// `template`'s kind of address (plain or TLS, with its TLS settings) for `host:port`.
fn pointed_at(template: &ConnectionAddr, host: String, port: u16) -> ConnectionAddr {
    match template {
        ConnectionAddr::TcpTls { insecure, tls_params, .. } => {
            ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: tls_params.clone() }
        }
        _ => ConnectionAddr::Tcp(host, port),
    }
}

/// Whether `error` suggests that the server is no longer the primary (it went away, or now
/// refuses writes as a replica), so that a sentinel-discovered connection must be made again.
pub(crate) fn is_failover_sign(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown)
        )
        || error.to_string().contains("READONLY")
}
