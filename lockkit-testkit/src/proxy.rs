//! A fault-injecting TCP proxy to put between a client and a real server.
//!
//! [`FaultProxy`] listens on a free 127.0.0.1 port and forwards every connection to one
//! upstream address. While it runs, a test can
//!
//! - [`cut_all`](FaultProxy::cut_all): reset every proxied connection on both sides;
//! - [`blackhole`](FaultProxy::blackhole): keep every socket open but forward nothing, in either
//!   direction (a silent partition: no FIN, no RST, just silence);
//! - [`set_latency`](FaultProxy::set_latency): delay every chunk by a fixed one-way latency;
//! - [`refuse_new`](FaultProxy::refuse_new): reset new connections right after accepting them;
//! - [`heal`](FaultProxy::heal): remove all of these faults.
//!
//! ```no_run
//! # async fn demo(server: std::net::SocketAddr) -> std::io::Result<()> {
//! use lockkit_testkit::proxy::FaultProxy;
//!
//! let proxy = FaultProxy::start(server).await?;
//! let client_target = proxy.addr(); // connect the client here instead of to `server`
//! proxy.blackhole(); // the client now hears nothing back
//! proxy.heal(); // held bytes are delivered, in order
//! # let _ = client_target;
//! # Ok(())
//! # }
//! ```

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// The fault settings every task of one proxy follows.
#[derive(Clone, Copy, Debug)]
struct Control {
    blackhole: bool,
    latency: Duration,
    refuse_new: bool,
    /// Bumped by `cut_all`; a connection is cut when this differs from its value at accept.
    cut_generation: u64,
}

/// How many chunks one direction of a connection may hold (while blackholed or delayed)
/// before the proxy stops reading from that side and TCP flow control pushes back.
const HELD_CHUNKS: usize = 256;
const CHUNK_SIZE: usize = 16 * 1024;

/// A TCP proxy on 127.0.0.1 that forwards to one upstream address and injects faults on demand.
///
/// # Runtime
///
/// The proxy's tasks (one accept loop, one task per connection) run on the Tokio runtime that
/// called [`start`](FaultProxy::start). Keep the proxy within that runtime's lifetime, such as
/// inside one `#[tokio::test]`; when that runtime shuts down, the proxy stops and its sockets
/// close. The control methods are synchronous and may be called from anywhere.
///
/// # Drop
///
/// Dropping the proxy stops the accept loop (the listening port closes) and resets every
/// proxied connection on both sides.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    control: watch::Sender<Control>,
    connections: Arc<AtomicUsize>,
    accept_task: AbortHandle,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free 127.0.0.1 port, in pass-through mode.
    ///
    /// Nothing is connected upstream until a client connects to [`addr`](FaultProxy::addr).
    ///
    /// # Errors
    ///
    /// Fails if no listening socket can be bound.
    ///
    /// # Panics
    ///
    /// Panics if called outside a Tokio runtime (it spawns the proxy's tasks).
    pub async fn start(upstream: SocketAddr) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (control, control_rx) =
            watch::channel(Control { blackhole: false, latency: Duration::ZERO, refuse_new: false, cut_generation: 0 });
        let connections = Arc::new(AtomicUsize::new(0));
        let accept_task =
            tokio::spawn(accept_loop(listener, upstream, control_rx, Arc::clone(&connections))).abort_handle();
        Ok(FaultProxy { addr, upstream, control, connections, accept_task })
    }

    /// Returns the address clients should connect to instead of the upstream.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Returns the upstream address every connection is forwarded to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Closes every current proxied connection on both sides with a reset (`SO_LINGER` zero),
    /// so that the client and the server both see `ECONNRESET` or a broken pipe promptly.
    ///
    /// Bytes held by the proxy for these connections are dropped. The connection tasks act on
    /// the cut asynchronously, within moments; connections accepted afterwards are not
    /// affected.
    pub fn cut_all(&self) {
        self.control.send_modify(|c| c.cut_generation += 1);
    }

    /// Starts a silent partition: every socket stays open, but bytes are held in both
    /// directions instead of forwarded, for current connections and for new ones.
    ///
    /// New connections are accepted but not connected upstream until [`heal`](FaultProxy::heal).
    /// Each direction of a connection reads and holds up to 256 chunks; beyond that the proxy
    /// stops reading, and TCP flow control makes the sender's writes block.
    pub fn blackhole(&self) {
        self.control.send_modify(|c| c.blackhole = true);
    }

    /// Returns to plain pass-through: ends a [`blackhole`](FaultProxy::blackhole), sets the
    /// latency to zero and accepts new connections again.
    ///
    /// Bytes held during the blackhole are **delivered**, in order, and connections are kept:
    /// after a short partition both sides receive everything the other sent, as TCP would
    /// after a network partition heals. Connections accepted while blackholed are then
    /// connected upstream.
    pub fn heal(&self) {
        self.control.send_modify(|c| {
            c.blackhole = false;
            c.latency = Duration::ZERO;
            c.refuse_new = false;
        });
    }

    /// Delays every chunk, in each direction, by `latency` after the proxy read it, so that a
    /// request/response round trip takes at least twice as long. Bytes keep their order.
    /// `Duration::ZERO` removes the delay.
    pub fn set_latency(&self, latency: Duration) {
        self.control.send_modify(|c| c.latency = latency);
    }

    /// While `refuse` is true, new connections are accepted and then reset at once, so that
    /// connection attempts fail with `ECONNRESET`. Current connections are not affected.
    pub fn refuse_new(&self, refuse: bool) {
        self.control.send_modify(|c| c.refuse_new = refuse);
    }

    /// Returns whether the proxy is currently blackholed.
    pub fn is_blackholed(&self) -> bool {
        self.control.borrow().blackhole
    }

    /// Returns the number of open proxied connections, including those accepted while
    /// blackholed and not yet connected upstream. Refused connections are not counted.
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept_task.abort();
        // Every connection task also watches `control`; dropping it (right after this) makes
        // them reset their sockets and end. Bumping the generation does it even sooner.
        self.cut_all();
    }
}

/// Decrements the connection count when a connection task ends, however it ends.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    fn new(count: &Arc<AtomicUsize>) -> Counted {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(Arc::clone(count))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mut control: watch::Receiver<Control>,
    connections: Arc<AtomicUsize>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            // The proxy was dropped.
            changed = control.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
        };
        let down = match accepted {
            Ok((down, _)) => down,
            Err(e) => {
                // Usually out of file descriptors; back off instead of spinning.
                tracing::debug!(error = %e, "fault proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let now = *control.borrow_and_update();
        if now.refuse_new {
            reset(down);
            continue;
        }
        let counted = Counted::new(&connections);
        tokio::spawn(run_connection(down, upstream, control.clone(), now.cut_generation, counted));
    }
}

/// Closes a socket with a reset rather than a FIN.
fn reset(stream: TcpStream) {
    // If SO_LINGER cannot be set the socket still closes, with a FIN instead.
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Resolves when the connection must be cut: `cut_all` was called after it was accepted, or
/// the proxy was dropped.
async fn cut_signal(mut control: watch::Receiver<Control>, generation: u64) {
    let _ = control.wait_for(|c| c.cut_generation != generation).await.map(drop);
}

/// Waits while blackholed, then connects upstream.
async fn connect_when_passing(upstream: SocketAddr, mut control: watch::Receiver<Control>) -> io::Result<TcpStream> {
    let passing = control.wait_for(|c| !c.blackhole).await.map(drop);
    if passing.is_err() {
        return Err(io::Error::other("the proxy was stopped"));
    }
    TcpStream::connect(upstream).await
}

async fn run_connection(
    mut down: TcpStream,
    upstream: SocketAddr,
    control: watch::Receiver<Control>,
    generation: u64,
    _counted: Counted,
) {
    let cut = cut_signal(control.clone(), generation);
    tokio::pin!(cut);
    let connected = tokio::select! {
        biased;
        () = &mut cut => None,
        up = connect_when_passing(upstream, control.clone()) => up.ok(),
    };
    let Some(mut up) = connected else {
        // Cut, stopped, or the upstream refused: the client sees a reset.
        reset(down);
        return;
    };
    let _ = down.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let finished = {
        let (down_read, down_write) = down.split();
        let (up_read, up_write) = up.split();
        let both = async {
            tokio::try_join!(pump(down_read, up_write, control.clone()), pump(up_read, down_write, control.clone()),)
        };
        tokio::select! {
            biased;
            () = &mut cut => false,
            result = both => result.is_ok(),
        }
    };
    if !finished {
        // A cut, or one side failed: reset both sides.
        reset(down);
        reset(up);
    }
}

/// Forwards one direction until end-of-file (then half-closes the other side) or an error.
///
/// A reader stores each chunk with the time it arrived; a writer delivers chunks in order once
/// the proxy is not blackholed and the chunk's latency has passed.
async fn pump(mut from: ReadHalf<'_>, mut to: WriteHalf<'_>, control: watch::Receiver<Control>) -> Result<(), ()> {
    let (held_tx, mut held) = mpsc::channel::<(Instant, Vec<u8>)>(HELD_CHUNKS);
    let reader = async move {
        let mut buf = vec![0u8; CHUNK_SIZE];
        loop {
            let n = from.read(&mut buf).await.map_err(drop)?;
            if n == 0 {
                // End of file: dropping the sender lets the writer finish and half-close.
                return Ok(());
            }
            let chunk = buf.get(..n).ok_or(())?.to_vec();
            held_tx.send((Instant::now(), chunk)).await.map_err(drop)?;
        }
    };
    let writer = async move {
        let mut control = control;
        while let Some((arrived, chunk)) = held.recv().await {
            loop {
                let now = *control.wait_for(|c| !c.blackhole).await.map_err(drop)?;
                let due = arrived + now.latency;
                if Instant::now() >= due {
                    break;
                }
                // Re-check after sleeping: a blackhole may have started meanwhile.
                tokio::time::sleep_until(due).await;
            }
            to.write_all(&chunk).await.map_err(drop)?;
        }
        // The peer may already be gone; the other direction reports that.
        let _ = to.shutdown().await;
        Ok::<(), ()>(())
    };
    tokio::try_join!(reader, writer).map(drop)
}

/// The fault hooks of a client whose every connection goes through one [`FaultProxy`]: what a
/// harness hands to [`TestClient::new`](crate::TestClient::new) for a networked store.
///
/// `kill` blackholes the proxy for good: a dead process sends nothing more and never heals,
/// and its lease or session runs out on the server.
#[derive(Debug)]
pub struct ProxyFaults(pub FaultProxy);

impl ProxyFaults {
    /// The proxy itself, for the faults the hooks do not name (such as
    /// [`refuse_new`](FaultProxy::refuse_new)).
    pub fn proxy(&self) -> &FaultProxy {
        &self.0
    }

    /// Cuts the client off the server until [`reconnect`](Self::reconnect): its connections
    /// are reset and new ones refused.
    pub fn cut_off(&self) {
        self.0.refuse_new(true);
        self.0.cut_all();
    }

    /// Lets a client cut off by [`cut_off`](Self::cut_off) connect again.
    pub fn reconnect(&self) {
        self.0.refuse_new(false);
    }

    /// The one proxy, as the list the client faults act on.
    fn proxies(&self) -> &[FaultProxy] {
        std::slice::from_ref(&self.0)
    }
}

/// The proxy-per-client harness of the networked backends: starts a [`FaultProxy`] of its own
/// in front of `upstream` and builds one client on it, so that a fault cuts off that client
/// only.
///
/// `connect` gets the proxy's address and builds the client from it (it sets the URL, the
/// endpoints or the connect string that the backend takes); `backend` names the backend in
/// the error when the proxy cannot start.
///
/// # Errors
///
/// [`Error::Connection`](lockkit_core::Error::Connection) when the proxy cannot listen, and
/// whatever `connect` returns.
///
/// ```no_run
/// # async fn demo(server: std::net::SocketAddr) -> lockkit_core::Result<()> {
/// use lockkit_testkit::proxy::proxied;
///
/// let (address, faults) = proxied("demo", server, |proxy| Ok(proxy.to_string())).await?;
/// faults.cut_off(); // only the client that connects to `address` loses the server
/// # let _ = address;
/// # Ok(())
/// # }
/// ```
pub async fn proxied<C>(
    backend: &'static str,
    upstream: SocketAddr,
    connect: impl FnOnce(SocketAddr) -> lockkit_core::Result<C>,
) -> lockkit_core::Result<(C, Arc<ProxyFaults>)> {
    let proxy = FaultProxy::start(upstream)
        .await
        .map_err(|e| lockkit_core::Error::connection(backend, None, e).with_context("start the fault proxy"))?;
    let client = connect(proxy.addr())?;
    Ok((client, Arc::new(ProxyFaults(proxy))))
}

/// [`proxied`] for a harness's [`client`](crate::Harness::client): the provider that `connect`
/// builds, with its proxy's fault hooks.
///
/// # Errors
///
/// As [`proxied`].
pub async fn proxied_test_client<P: Into<lockkit_core::LockProvider>>(
    backend: &'static str,
    upstream: SocketAddr,
    connect: impl FnOnce(SocketAddr) -> lockkit_core::Result<P>,
) -> lockkit_core::Result<crate::TestClient> {
    let (provider, faults) = proxied(backend, upstream, connect).await?;
    Ok(crate::TestClient::new(provider, faults))
}

/// An address on 127.0.0.1 where nothing listens: a port that was free a moment ago, for the
/// cases of a client that cannot reach its server.
///
/// # Panics
///
/// When no loopback port can be bound at all (the machine has no loopback interface).
#[allow(clippy::expect_used)] // a test helper: without loopback no test of the kit can run
pub fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a loopback port");
    listener.local_addr().expect("a bound listener has an address")
}

/// The fault hooks of a cluster client that reaches each member through a [`FaultProxy`] of
/// its own (made by [`proxied_members`]): every fault acts on all of its proxies at once, so
/// the client is cut off from the whole cluster while the members go on serving the others.
#[derive(Debug)]
pub struct MemberProxies(Vec<FaultProxy>);

impl MemberProxies {
    /// The proxies, one per member, in the order of the members given to [`proxied_members`].
    pub fn proxies(&self) -> &[FaultProxy] {
        &self.0
    }

    /// The member whose proxy carries a connection now (the first such), if any: the member
    /// the client is talking to.
    pub fn connected_member(&self) -> Option<usize> {
        self.0.iter().position(|proxy| proxy.connection_count() > 0)
    }
}

/// The client faults of a client behind proxies (one, or one per member): each fault acts on
/// every proxy of the client. `kill` blackholes them for good: a dead process sends nothing
/// more and never heals, and its lease or session runs out on the server.
macro_rules! proxy_client_faults {
    ($($faults:ty),* $(,)?) => {$(
        #[async_trait::async_trait]
        impl crate::ClientFaults for $faults {
            async fn kill(&self) -> crate::FaultResult {
                self.blackhole().await
            }

            async fn blackhole(&self) -> crate::FaultResult {
                self.proxies().iter().for_each(FaultProxy::blackhole);
                Ok(())
            }

            async fn heal(&self) -> crate::FaultResult {
                self.proxies().iter().for_each(FaultProxy::heal);
                Ok(())
            }

            async fn cut_connection(&self) -> crate::FaultResult {
                self.proxies().iter().for_each(FaultProxy::cut_all);
                Ok(())
            }

            async fn set_latency(&self, latency: Duration) -> crate::FaultResult {
                self.proxies().iter().for_each(|proxy| proxy.set_latency(latency));
                Ok(())
            }
        }
    )*};
}

proxy_client_faults!(ProxyFaults, MemberProxies);

/// [`proxied`] for a client of a cluster: starts a [`FaultProxy`] of its own in front of each
/// of `members` and builds one client on them. `connect` gets the proxies' addresses as one
/// `host:port,host:port` list, in the members' order (what an etcd endpoint list or a
/// ZooKeeper connect string takes).
///
/// # Errors
///
/// [`Error::Connection`](lockkit_core::Error::Connection) when a proxy cannot listen, and
/// whatever `connect` returns.
pub async fn proxied_members<C>(
    backend: &'static str,
    members: &[SocketAddr],
    connect: impl FnOnce(String) -> lockkit_core::Result<C>,
) -> lockkit_core::Result<(C, Arc<MemberProxies>)> {
    let mut proxies = Vec::with_capacity(members.len());
    for member in members {
        let proxy = FaultProxy::start(*member)
            .await
            .map_err(|e| lockkit_core::Error::connection(backend, None, e).with_context("start the fault proxy"))?;
        proxies.push(proxy);
    }
    let addresses = proxies.iter().map(|proxy| proxy.addr().to_string()).collect::<Vec<_>>().join(",");
    let client = connect(addresses)?;
    Ok((client, Arc::new(MemberProxies(proxies))))
}
