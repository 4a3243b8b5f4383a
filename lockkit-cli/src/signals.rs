//! The signals that stop `lockkit`: SIGINT (Ctrl-C), SIGTERM and SIGHUP.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::exit::{Failure, OS_ERROR};

/// SIGHUP's number.
pub(crate) const SIGHUP: i32 = 1;
/// SIGINT's number.
pub(crate) const SIGINT: i32 = 2;
/// SIGTERM's number.
pub(crate) const SIGTERM: i32 = 15;

/// Listeners for the stopping signals, installed once at start.
#[derive(Debug)]
pub(crate) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    /// Installs the handlers: from now on these signals no longer kill `lockkit` outright.
    pub(crate) fn install() -> Result<Self, Failure> {
        let listen = |kind: SignalKind| {
            signal(kind).map_err(|error| Failure::new(OS_ERROR, format!("cannot install a signal handler: {error}")))
        };
        Ok(Self {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    /// Resolves with the number of the next stopping signal.
    ///
    /// # Cancel Safety
    ///
    /// Cancel safe: a signal that arrives while no future waits is kept for the next call.
    pub(crate) async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => SIGINT,
            _ = self.terminate.recv() => SIGTERM,
            _ = self.hangup.recv() => SIGHUP,
        }
    }
}

/// The name of a stopping signal, for messages.
pub(crate) fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}
