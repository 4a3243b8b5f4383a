//! A loopback port where nothing listens, for tests of unreachable stores.

#![allow(clippy::expect_used)] // a test helper: a failure to bind loopback is the test failing

/// A loopback port that refuses connections and that nothing else can take while the returned
/// socket lives: the socket is bound to it but does not listen (a connection is answered with
/// a reset), and without `SO_REUSEADDR` no server started beside the test can bind the port.
/// A port merely found free (bound, then closed) can be taken by another test's server
/// between the pick and the connect.
pub(crate) fn refused_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind a loopback port");
    let port = socket.local_addr().expect("the bound port").port();
    (socket, port)
}

/// The error of `lockkit::connect` to the URL `url` makes of a port where nothing listens
/// ([`refused_port`]), which must come within ten seconds (no connect may wait for a timeout
/// longer than that).
pub(crate) async fn unreachable(url: impl FnOnce(u16) -> String) -> lockkit::Error {
    let (_bound, port) = refused_port();
    let url = url(port);
    match tokio::time::timeout(std::time::Duration::from_secs(10), lockkit::connect(&url)).await {
        Ok(Ok(_)) => panic!("a connect where nothing listens succeeded"),
        Ok(Err(error)) => error,
        Err(_) => panic!("a connect where nothing listens did not fail within 10 s"),
    }
}
