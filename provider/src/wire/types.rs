//! What every wire shares: the answers of a send, an open and a copy,
//! where a link stands, and what a wire is ([`Props`]), the engine's only
//! way to tell one wire from another.

use std::io;
use std::net::SocketAddr;

use crate::config::Wire;

/// What a wire is, as the engine sees it: made by the wire when it opens
/// a link (or an inbox takes frames over it), from the configuration, and
/// kept in a field, so that each frame reads a field (no dispatch, no
/// lookup). The engine decides by these, never by which wire it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Props {
    /// Which wire this is (what `Dial::route` answers for a peer it
    /// carries): a frame is taken as its sender's only if it came over the
    /// wire that sender is routed to.
    pub wire: Wire,
    /// Its name in log lines ("shared memory", "TCP").
    pub name: &'static str,
    /// The largest frame one send takes (at least [`FRAME_FLOOR`]).
    pub max_frame: usize,
    /// The most payload a send puts inline over it (its eager limit; the
    /// frame bounds it too), and the variable that sets it, for log lines.
    pub eager_max: usize,
    pub eager_setting: &'static str,
    /// Whether a send queues the frame behind a full socket (`Link::flush`
    /// writes it later) rather than answering `Full`.
    pub buffers: bool,
    /// Whether `Link::send_spread` may use several connections (lanes).
    pub spreads: bool,
    /// Whether the peer's memory may be reachable for direct copies
    /// (`Link::read`/`write`; false: every copy answers `Copied::Push`).
    pub reaches_memory: bool,
    /// Whether an RMA write sends its data behind the request (the target
    /// can never copy it from us, so it need not ask for it).
    pub streams_writes: bool,
    /// Whether the wire offers shared copies (both processes copy chunks
    /// of one transfer: `Copies`, `SharedCopy`).
    pub shares: bool,
    /// How a frame's sender is proven.
    pub proof: Proof,
}

/// How a wire proves who sent a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// By the process that owns the peer's endpoint: the pid a frame names
    /// must be the one the wire records for that peer (`Link::vouches`).
    Owner,
    /// By the connection: its hello named (with a job key, proved) the
    /// sender, every frame comes with that name (`Arrival::via`) and must
    /// claim it, and a frame that does not closes the connection.
    Hello,
}

/// The largest frame every wire carries (the shm queue's cell): the
/// protocol sizes its inline payloads and batched answers by it.
pub(crate) const FRAME_FLOOR: usize = super::shm::region::CELL_DATA;

/// How a frame arrived (`Inbox::pop`).
#[derive(Clone, Copy, Debug)]
pub struct Arrival<'a> {
    /// Whether another frame waits behind it.
    pub more: bool,
    /// Whether it is the last the inbox has for this pass: nothing waited
    /// behind it when it was taken, and nothing else of the inbox had
    /// anything (a TCP frame cut from sockets read until they were empty;
    /// a queue cell whose next was not published, with no connection to
    /// read). Another pop would only look again: the next progress call
    /// does.
    pub last: bool,
    /// The sender the connection proved (`Proof::Hello`); None on a wire
    /// whose frames carry no such proof. (By reference: every frame's
    /// handler asks first whether there is one, and a pointer is one
    /// whole word to store and load, where the value's two-byte tag was
    /// read back through a store it could not be forwarded from: a
    /// third of that handler's time in a one-thread profile.)
    pub via: Option<&'a SocketAddr>,
    /// Payload bytes that went straight to their landing zone
    /// (`Inbox::landings`; the frame is then its header alone).
    pub landed: usize,
    /// The wire it came over.
    pub wire: &'a Props,
}

/// Why a frame was not sent.
#[derive(Debug)]
pub enum WireError {
    /// The peer's queue (or socket buffer) is full: try again after
    /// progress (flow control, -FI_EAGAIN to the application).
    Full,
    /// The endpoint this link reached has closed (another may have opened
    /// at its address since).
    Closed,
    /// Anything else the kernel said.
    Io(io::Error),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Full => write!(f, "the peer's queue is full"),
            WireError::Closed => write!(f, "the peer's endpoint closed"),
            WireError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// Why a link could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// Nothing listens at the address (the error, for the log line).
    Unreachable(io::Error),
    /// An endpoint was there, but its process exited without closing it.
    Dead { owner: u32 },
    /// The endpoint there speaks another version of the wire.
    Version { theirs: u32, ours: u32 },
    /// What holds the peer's queue name is not a queue this process may
    /// use (what is wrong, naming the file).
    Refused(String),
    /// The peer's queue does not prove the job key this endpoint holds,
    /// or proves one where this endpoint holds none (docs/security.md,
    /// "The shared-memory wire").
    Key(super::shm::region::KeyMismatch),
    /// The peer's host refused the connection at once (nothing listens at
    /// its port): the operation fails as refused, not unreachable.
    ConnectRefused,
}

/// Where a link stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// The peer's endpoint is there and reads its frames.
    Open,
    /// The peer closed its endpoint.
    Closed,
    /// The peer's process is gone (it exited without closing).
    Dead,
    /// The connection never came up (TCP: the errno of the failed or
    /// timed-out connect): nothing we sent reached the peer.
    Unreachable(i32),
}

/// What a copy of the peer's memory did.
#[derive(Debug)]
pub enum Copied {
    /// This many bytes moved (all of them, unless the peer's buffers are
    /// shorter than they said).
    Done(usize),
    /// This wire cannot reach the peer's memory (shm: memory CMA cannot
    /// reach, such as device or secret memory; TCP: never): the side that
    /// owns it must push it (PULL -> DATA, or DATA chunks for a read).
    Push,
    /// The copy failed otherwise (the peer's process gone, ptrace rules).
    Failed(io::Error),
}
