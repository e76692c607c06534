//! Event queue.
//!
//! Events (with their bytes, exactly as written) and errors are kept in two
//! FIFOs, as fi_eq(3) describes: while an error is queued, `read` answers
//! -FI_EAVAIL, and `readerr` takes it. The application's own writes are
//! bounded by the EQ size (-FI_EAGAIN beyond); events oxmr generates (AV
//! insert completions, CM events) are never dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};

use oxmr_ffi as ffi;

use super::fabric::Fabric;
use super::wait_set::WaitSet;
use crate::error::{Error, Result};
use crate::fail;
use crate::queues::wait::{deadline, Waiter};
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// Default depth when the application asks for size 0.
pub(crate) const DEFAULT_SIZE: usize = 1024;

/// An error event (`struct fi_eq_err_entry`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EqError {
    pub fid: usize,
    pub context: usize,
    pub data: u64,
    pub err: i32,
    pub prov_errno: i32,
    /// Provider data (a reject's cm_data).
    pub err_data: Vec<u8>,
}

/// Something whose connection progress runs when its EQ is read
/// (passive endpoints and MSG endpoints): fi_eq_read and fi_eq_sread drive
/// connection progress, as manual control progress asks.
pub trait CmSource: Send + Sync {
    /// Move connections on and post their events; false once there is
    /// nothing more to watch.
    fn cm_progress(&self) -> bool;
    /// The sockets whose readability (or writability, where asked: a
    /// connect under way, bytes to write) means `cm_progress` has
    /// something to do (into `out`); false while it has work that no
    /// socket rings for (a sleeper then looks again after a short tick).
    fn cm_wake_fds(&self, out: &mut Vec<crate::sys::WakeFd>) -> bool;
}

type Sources = Arc<Mutex<Vec<Weak<dyn CmSource>>>>;

/// How a thread blocked in fi_eq_sread (or in poll() on the EQ's fd)
/// wakes when a connection moves: an epoll of the watched connections'
/// sockets, brought up to date each time a thread is about to sleep
/// (added anew, or their interest changed, so a closed fd whose number
/// came back is watched again and a connect that completed is watched for
/// what it reads; sockets no longer watched taken out, so a request
/// waiting for fi_accept whose socket is readable cannot keep waking it).
struct CmWake {
    epoll: crate::sys::Epoll,
    sources: Sources,
    /// The fds watched since last time.
    added: Mutex<Vec<crate::sys::WakeFd>>,
}

impl crate::queues::wait::Sleeper for CmWake {
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.epoll.fd())
    }

    fn sleep(&self) -> bool {
        let live: Vec<Arc<dyn CmSource>> = self.sources.lock_ok().iter().filter_map(Weak::upgrade).collect();
        let mut want = Vec::new();
        let quiet = live.iter().fold(true, |q, s| s.cm_wake_fds(&mut want) & q);
        let mut added = self.added.lock_ok();
        for (fd, _) in added.iter().filter(|(fd, _)| !want.iter().any(|w| w.0 == *fd)) {
            self.epoll.remove(*fd);
        }
        // (A socket that cannot be watched is not rung for: tick instead.)
        let all = want.iter().fold(true, |ok, &w| self.epoll.watch(w) & ok);
        *added = want;
        quiet && all
    }

    fn awake(&self) {}
}

struct Event {
    event: u32,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Queues {
    events: VecDeque<Event>,
    errors: VecDeque<EqError>,
}

/// An event queue.
#[repr(C)]
pub struct Eq {
    pub hdr: FidHeader<ffi::fid_eq>,
    pub fabric: Arc<Fabric>,
    pub size: usize,
    waiter: Waiter,
    q: Mutex<Queues>,
    /// Who posts connection events here (weak: they are the EQ's users,
    /// closed before it).
    sources: Sources,
    /// The err_data handed out by the last fi_eq_readerr that asked for
    /// the provider's buffer (valid until the next one: fi_eq(3)).
    err_keep: Mutex<Vec<u8>>,
    /// The wait set it signals (`FI_WAIT_SET`), held while the EQ lives.
    pub wait_set: Option<Arc<WaitSet>>,
}

/// The bytes of a `struct fi_eq_entry`.
pub fn eq_entry_bytes(fid: usize, context: usize, data: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(24);
    b.extend_from_slice(&fid.to_ne_bytes());
    b.extend_from_slice(&context.to_ne_bytes());
    b.extend_from_slice(&data.to_ne_bytes());
    b
}

impl Eq {
    /// Build from `fi_eq_attr` fields.
    pub fn new(hdr: FidHeader<ffi::fid_eq>, fabric: Arc<Fabric>, attr: &ffi::fi_eq_attr) -> Result<Self> {
        let known = ffi::FI_WRITE as u64 | ffi::FI_AFFINITY as u64;
        if attr.flags & !known != 0 {
            return Err(fail!(ffi::FI_EINVAL, "unsupported fi_eq_attr flags {:#x}", attr.flags & !known));
        }
        let waiter = Waiter::new(attr.wait_obj)?;
        let sources = Sources::default();
        // (Without an epoll the sleeper polls every tick, as before.)
        if let Ok(epoll) = crate::sys::Epoll::new() {
            let wake = CmWake { epoll, sources: sources.clone(), added: Mutex::new(Vec::new()) };
            waiter.attach(Arc::new(wake), fabric.config.wait_tick);
        }
        Ok(Eq {
            hdr,
            fabric,
            size: if attr.size == 0 { DEFAULT_SIZE } else { attr.size },
            waiter,
            q: Mutex::new(Queues::default()),
            sources,
            err_keep: Mutex::new(Vec::new()),
            wait_set: None,
        })
    }

    /// fi_eq_open: build, and join `wait_set` (`FI_WAIT_SET`: the boundary
    /// resolved `fi_eq_attr.wait_set`).
    pub fn open(
        hdr: FidHeader<ffi::fid_eq>,
        fabric: Arc<Fabric>,
        attr: &ffi::fi_eq_attr,
        wait_set: Option<Arc<WaitSet>>,
    ) -> Result<Arc<Self>> {
        let eq = Arc::new(Eq { wait_set: wait_set.clone(), ..Eq::new(hdr, fabric, attr)? });
        if let Some(s) = wait_set {
            s.join_eq(&eq)?;
        }
        Ok(eq)
    }

    /// Its wait object (a wait set watches it).
    pub fn waiter(&self) -> &Waiter {
        &self.waiter
    }

    /// A wait set's look: drive connection progress as a read would, then
    /// whether an event or an error waits.
    pub fn poll_ready(&self) -> bool {
        self.waiter.unpark();
        self.drive();
        self.ready()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queues> {
        self.q.lock_ok()
    }

    /// `fi_eq_write` by the application: bounded by the EQ size.
    pub fn write(&self, event: u32, bytes: &[u8]) -> Result<usize> {
        let mut q = self.lock();
        if q.events.len() >= self.size {
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        q.events.push_back(Event { event, bytes: bytes.to_vec() });
        drop(q);
        self.waiter.notify();
        Ok(bytes.len())
    }

    /// An event oxmr generates (never refused).
    pub fn post(&self, event: u32, bytes: Vec<u8>) {
        self.lock().events.push_back(Event { event, bytes });
        self.waiter.notify();
    }

    /// An error event oxmr generates (never refused).
    pub fn post_error(&self, e: EqError) {
        self.lock().errors.push_back(e);
        self.waiter.notify();
    }

    /// Run connection progress for `s` on every read of this EQ.
    pub fn watch(&self, s: Weak<dyn CmSource>) {
        let mut v = self.sources.lock_ok();
        if !v.iter().any(|w| w.ptr_eq(&s)) {
            v.push(s);
        }
    }

    /// Connection progress of everything watched (run outside the lists'
    /// locks: a source posts into this EQ).
    fn drive(&self) {
        let live: Vec<Arc<dyn CmSource>> = {
            let mut v = self.sources.lock_ok();
            v.retain(|w| w.strong_count() > 0);
            v.iter().filter_map(Weak::upgrade).collect()
        };
        if live.is_empty() {
            return;
        }
        let done: Vec<_> = live.iter().filter(|s| !s.cm_progress()).map(Arc::as_ptr).collect();
        if !done.is_empty() {
            let mut v = self.sources.lock_ok();
            v.retain(|w| !done.iter().any(|d| std::ptr::addr_eq(w.as_ptr(), *d)));
        }
    }

    fn watching(&self) -> bool {
        !self.sources.lock_ok().is_empty()
    }

    /// Keep `data` as the provider's err_data buffer until the next call;
    /// returns its address.
    pub fn keep_err_data(&self, data: Vec<u8>) -> usize {
        let mut k = self.err_keep.lock_ok();
        *k = data;
        k.as_ptr() as usize
    }

    /// Read (or with `peek`, look at) the next event into `buf`.
    /// Returns the event and its length.
    pub fn read(&self, buf: &mut [u8], peek: bool) -> Result<(u32, usize)> {
        self.waiter.unpark();
        self.drive();
        self.take(buf, peek)
    }

    fn take(&self, buf: &mut [u8], peek: bool) -> Result<(u32, usize)> {
        let mut q = self.lock();
        if !q.errors.is_empty() {
            return Err(Error::quiet(ffi::FI_EAVAIL));
        }
        let Some(ev) = q.events.front() else {
            return Err(Error::quiet(ffi::FI_EAGAIN));
        };
        if buf.len() < ev.bytes.len() {
            return Err(fail!(
                ffi::FI_ETOOSMALL,
                "fi_eq_read buffer of {} bytes is smaller than the {}-byte event; pass a larger buffer",
                buf.len(),
                ev.bytes.len()
            ));
        }
        let n = ev.bytes.len();
        buf[..n].copy_from_slice(&ev.bytes);
        let event = ev.event;
        if !peek {
            q.events.pop_front();
        }
        Ok((event, n))
    }

    /// Take (or peek at) the next error.
    pub fn readerr(&self, peek: bool) -> Result<EqError> {
        let mut q = self.lock();
        let e = q.errors.front().cloned().ok_or(Error::quiet(ffi::FI_EAGAIN))?;
        if !peek {
            q.errors.pop_front();
        }
        Ok(e)
    }

    fn ready(&self) -> bool {
        let q = self.lock();
        !q.events.is_empty() || !q.errors.is_empty()
    }

    /// Blocking read with a timeout in ms (negative: forever).
    pub fn sread(&self, buf: &mut [u8], timeout_ms: i32, peek: bool) -> Result<(u32, usize)> {
        self.waiter.block_until(deadline(timeout_ms), || {
            self.drive();
            self.ready()
        });
        self.take(buf, peek)
    }

    /// The pollable fd (`FI_GETWAIT`).
    pub fn wait_fd(&self) -> Option<i32> {
        self.waiter.fd()
    }

    /// fi_trywait: -FI_EAGAIN if an event is ready, else clear the fd.
    pub fn trywait(&self) -> Result<()> {
        self.waiter.unpark();
        self.waiter.clear();
        self.drive();
        if self.ready() {
            self.waiter.notify();
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        // Connections move only when this EQ is read: their sockets make
        // the fd readable when something arrives, or a connect under way
        // ends (`CmWake`), the safety tick covers their timeouts, and a
        // connect that failed at once (no socket to ring) arms the short
        // tick (`Waiter::park`).
        if self.watching() {
            self.waiter.park();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eq(size: usize) -> Eq {
        let null = std::ptr::null_mut();
        let fabric = Arc::new(Fabric {
            hdr: crate::boundary::fabric::header(null, 0),
            name: "t".into(),
            config: Default::default(),
        });
        let attr = ffi::fi_eq_attr { size, wait_obj: ffi::FI_WAIT_UNSPEC, ..Default::default() };
        Eq::new(crate::boundary::eq::header(null), fabric, &attr).unwrap()
    }

    #[test]
    fn application_writes_are_bounded_internal_events_are_not() {
        let q = eq(2);
        assert_eq!(q.write(1, &[1; 24]).unwrap(), 24);
        assert_eq!(q.write(1, &[2; 24]).unwrap(), 24);
        assert_eq!(q.write(1, &[3; 24]).err().map(Error::code), Some(ffi::FI_EAGAIN));
        q.post(ffi::FI_AV_COMPLETE, vec![4; 24]);
        let mut b = [0u8; 24];
        for want in [1u8, 2, 4] {
            assert_eq!(q.read(&mut b, false).unwrap().1, 24);
            assert_eq!(b[0], want);
        }
    }

    #[test]
    fn errors_preempt_events_and_small_buffers_are_refused() {
        let q = eq(8);
        q.write(7, &[9; 24]).unwrap();
        let mut small = [0u8; 8];
        assert_eq!(q.read(&mut small, false).err().map(Error::code), Some(ffi::FI_ETOOSMALL));
        q.post_error(EqError { data: 5, err: 22, ..Default::default() });
        let mut b = [0u8; 24];
        assert_eq!(q.read(&mut b, false).err().map(Error::code), Some(ffi::FI_EAVAIL));
        assert_eq!(q.readerr(true).unwrap().data, 5, "peek leaves it");
        assert_eq!(q.readerr(false).unwrap().data, 5);
        assert_eq!(q.read(&mut b, true).unwrap(), (7, 24));
        assert_eq!(q.read(&mut b, false).unwrap(), (7, 24));
        assert_eq!(q.sread(&mut b, 20, false).err().map(Error::code), Some(ffi::FI_EAGAIN));
    }
}
