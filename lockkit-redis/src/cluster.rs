//! Redis Cluster: `redis+cluster://[user:password@]h1:p1,h2:p2` names some nodes of a
//! cluster (any reachable ones: the client learns the others and the slot map from them).
//!
//! The command connection is the redis crate's cluster connection, which routes each script by
//! the hash slot of its keys (every key of a lock shares the `{name}` hash tag, so a script
//! touches one slot) and follows the slot map as it changes. What this module adds: the
//! parsing of the URL, the client with lockkit's settings, and the checks made at connect
//! (`CLUSTER INFO`, and the replicas of every primary for `replicas=N`).

use std::time::Duration;

use lockkit_core::config::ClientTls;
use lockkit_core::{Error, LockName, Result};
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::BACKEND;

/// The port of a cluster node whose URL host names none.
pub(crate) const DEFAULT_PORT: u16 = 6379;

/// The nodes of a `redis+cluster://` URL.
#[derive(Clone, Debug)]
pub(crate) struct ClusterSettings {
    /// Each node as written (`host:port`), and how to connect to it (with the URL's
    /// credentials: they are the nodes').
    pub(crate) nodes: Vec<(String, ConnectionInfo)>,
}

impl ClusterSettings {
    /// Reads the nodes (`hosts`, comma-separated `host[:port]`) of a cluster URL whose path is
    /// `path`; `tls` for `rediss+cluster://`; `user` and `password` are the URL's.
    pub(crate) fn parse(
        hosts: &str,
        path: &str,
        tls: bool,
        user: Option<&str>,
        password: Option<&str>,
        shown: &str,
    ) -> std::result::Result<Self, String> {
        if shown.split_once("://").is_some_and(|(_, rest)| rest.contains("://")) {
            return Err(format!(
                "the URL {shown} mixes schemes: a redis+cluster:// URL lists every node as host:port (redis+cluster://host:port,host:port), with one scheme in front"
            ));
        }
        let path = path.trim_start_matches('/');
        if !path.is_empty() && path != "0" {
            return Err(format!(
                "the URL {shown} names the database {path:?}, but Redis Cluster has only database 0: drop the path (redis+cluster://host:port,host:port), or use key_prefix to keep applications apart"
            ));
        }
        let scheme = if tls { "rediss" } else { "redis" };
        let mut nodes = Vec::new();
        for host in hosts.split(',').map(str::trim) {
            if host.is_empty() {
                return Err(format!("the URL {shown} has an empty node address; list them as host:port,host:port"));
            }
            let has_port = match host.strip_prefix('[') {
                Some(bracketed) => bracketed.contains("]:"),
                None => host.contains(':'),
            };
            let with_port = if has_port { host.to_owned() } else { format!("{host}:{DEFAULT_PORT}") };
            let info = format!("{scheme}://{with_port}/")
                .into_connection_info()
                .map_err(|error| format!("the node address {host:?} in {shown} cannot be used: {error}"))?;
            let mut redis_settings = info.redis_settings().clone();
            if let Some(user) = user {
                redis_settings = redis_settings.set_username(user);
            }
            if let Some(password) = password {
                redis_settings = redis_settings.set_password(password);
            }
            nodes.push((with_port, info.set_redis_settings(redis_settings)));
        }
        if nodes.is_empty() {
            return Err(format!("the URL {shown} names no cluster node"));
        }
        Ok(Self { nodes })
    }

    /// `host:port,host:port` for messages.
    pub(crate) fn shown(&self) -> String {
        let hosts: Vec<&str> = self.nodes.iter().map(|(host, _)| host.as_str()).collect();
        hosts.join(",")
    }
}

/// The cluster client of the nodes `cluster` names, with the settings' TLS certificates `tls`:
/// no retries of its own (a script whose reply was lost must not be sent again blindly, and a
/// redirection is resolved by lockkit's own retry, by owner id), connections bounded by
/// `connect_timeout`, replies by `reply_timeout`.
pub(crate) fn client(
    cluster: &ClusterSettings,
    tls_settings: &ClientTls,
    connect_timeout: Duration,
    reply_timeout: Duration,
    resp3: bool,
) -> redis::RedisResult<redis::cluster::ClusterClient> {
    let nodes: Vec<ConnectionInfo> = cluster
        .nodes
        .iter()
        .map(|(_, info)| {
            if resp3 {
                let protocol = info.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
                info.clone().set_redis_settings(protocol)
            } else {
                info.clone()
            }
        })
        .collect();
    let tls = nodes.iter().any(|info| matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
    let mut builder = redis::cluster::ClusterClientBuilder::new(nodes)
        .retries(0)
        .connection_timeout(connect_timeout)
        .response_timeout(reply_timeout);
    if resp3 {
        builder = builder.use_protocol(redis::ProtocolVersion::RESP3);
    }
    #[cfg(feature = "tls")]
    {
        if tls {
            crate::client::install_crypto_provider();
            builder = builder.tls(redis::TlsMode::Secure);
        }
        if let Some(certificates) = crate::client::certificates(tls_settings) {
            builder = builder.certs(certificates);
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = (tls, tls_settings);
    builder.build()
}

/// Whether `error`, from making a cluster connection, says that the server is no cluster node.
pub(crate) fn is_not_a_cluster(error: &redis::RedisError) -> bool {
    let text = error.to_string();
    text.contains("cluster support disabled") || text.contains("This instance has cluster support disabled")
}

/// The error for a `redis+cluster://` URL whose nodes are not cluster nodes.
pub(crate) fn not_a_cluster(address: &str) -> Error {
    Error::invalid_config(
        BACKEND,
        format!(
            "{address} is not a Redis Cluster (the server has cluster support disabled): use redis://host:port for a single server, or point redis+cluster:// at nodes started with cluster-enabled yes"
        ),
    )
}

/// Checks `CLUSTER INFO` (`cluster_state:ok`); a cluster that is not ok (a failover under
/// way, slots without a node) is a retryable connection error.
pub(crate) fn check_state(info: &str, address: &str, lock: Option<&LockName>) -> Result<()> {
    let field = |name: &str| info.lines().find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'));
    match field("cluster_state") {
        Some("ok") => Ok(()),
        state => Err(Error::connection(
            BACKEND,
            lock,
            std::io::Error::other(format!(
                "the cluster {address} reports cluster_state:{} (a failover or a reconfiguration is under way, or slots have no node)",
                state.unwrap_or("unknown")
            )),
        )),
    }
}

/// Checks, from `CLUSTER NODES`, that every primary that owns slots has at least `wanted`
/// replicas connected; else an [`Error::InvalidConfig`] naming the primary and the setting.
pub(crate) fn check_replicas(nodes: &str, wanted: u32, address: &str) -> Result<()> {
    let lines: Vec<Vec<&str>> = nodes.lines().map(|line| line.split_whitespace().collect()).collect();
    let mut fewest: Option<(u32, String)> = None;
    for primary in &lines {
        let [id, addr, flags, _, _, _, _, _, slots @ ..] = primary.as_slice() else { continue };
        if !flags.split(',').any(|flag| flag == "master") || slots.is_empty() {
            continue;
        }
        let replicas = lines
            .iter()
            .filter(|node| {
                node.get(3) == Some(id)
                    && node.get(2).is_some_and(|flags| !flags.contains("fail"))
                    && node.get(7) == Some(&"connected")
            })
            .count();
        let replicas = u32::try_from(replicas).unwrap_or(u32::MAX);
        let shown = addr.split('@').next().unwrap_or(addr).to_owned();
        if fewest.as_ref().is_none_or(|(count, _)| replicas < *count) {
            fewest = Some((replicas, shown));
        }
    }
    match fewest {
        Some((count, primary)) if count < wanted => Err(Error::invalid_config(
            BACKEND,
            format!(
                "replicas={wanted}, but the primary {primary} of the cluster {address} has {count} replica(s) connected; lower replicas to {count} or fewer, or attach more replicas to every primary"
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn nodes_take_the_default_port_and_the_credentials() {
        let cluster = ClusterSettings::parse("a:7000,b,[::1]:7001", "", false, Some("app"), Some("pw"), "x").unwrap();
        assert_eq!(cluster.shown(), "a:7000,b:6379,[::1]:7001");
        assert!(cluster.nodes.iter().all(|(_, info)| info.redis_settings().password() == Some("pw")));
        assert!(cluster.nodes.iter().all(|(_, info)| info.redis_settings().username() == Some("app")));
        assert!(
            ClusterSettings::parse("a:7000", "/3", false, None, None, "x").unwrap_err().contains("only database 0")
        );
        assert!(ClusterSettings::parse("a:7000,", "", false, None, None, "x").unwrap_err().contains("empty node"));
    }

    #[test]
    fn replicas_are_counted_per_primary() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-16383
b1 127.0.0.1:7003@17003 slave a1 0 0 1 connected
b2 127.0.0.1:7004@17004 slave a2 0 0 2 connected
b3 127.0.0.1:7005@17005 slave,fail a2 0 0 2 disconnected
";
        assert!(check_replicas(nodes, 1, "c").is_ok());
        let error = check_replicas(nodes, 2, "c").unwrap_err().to_string();
        assert!(error.contains("127.0.0.1:7000") && error.contains("lower replicas to 1"), "{error}");
        assert!(check_state("cluster_state:ok\r\n", "c", None).is_ok());
        assert!(check_state("cluster_state:fail\r\n", "c", None).is_err());
    }
}
