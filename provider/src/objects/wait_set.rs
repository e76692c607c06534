//! Wait set (fi_poll(3), `fi_wait_open`): CQs, counters and EQs opened
//! with `wait_obj = FI_WAIT_SET` and this set as `wait_set` signal it;
//! `fi_wait` blocks until one of them has an event.
//!
//! A member keeps a wait fd of its own (its `FI_WAIT_SET` waiter is an
//! `FI_WAIT_FD` one, `queues::wait`), and joins the set as one of the
//! set's sleepers ([`MemberWake`]): the set's fd watches the member's fd
//! (which holds the member's endpoints' wake fds: TCP sockets, the
//! shared-memory doorbell), and before the set sleeps each member clears
//! its fd and tells its endpoints "about to sleep" (`Waiter::doze`), so
//! an arrival, a completion written by another thread, `fi_cq_signal`,
//! `fi_cntr_add` or an EQ event rings the set's fd. The sleep itself is a
//! member's: `Waiter::block_until` (spin 2 ms, then sleep on the fd until
//! the safety tick, or 1 ms where an endpoint cannot ring or has work
//! pending), and every look runs the progress of every member, as its own
//! read would (manual progress).
//!
//! What counts as an event: a CQ that holds a completion or an error (or
//! was signalled since the set last looked), an EQ that holds an event or
//! an error, a counter whose value or error count changed since the set
//! last looked (the first look compares with the values it had when it
//! joined). Looks are level-triggered for CQs and EQs (`fi_wait` returns
//! at once while a CQ is not read empty, as libfabric's util wait sets
//! do) and edge-triggered for counters, which have nothing to read empty:
//! a change that came before `fi_wait` is reported by it, never lost.
//!
//! Lifetime: a member holds the set (`fi_close` of the set is `-FI_EBUSY`
//! while a member lives, fi_poll(3)); the set holds its members weakly, and
//! a closed member leaves it (its fd closes with it, which takes it out of
//! the set's epoll; its sleeper is dropped at the next join).

use std::sync::{Arc, Mutex, Weak};

use oxmr_ffi as ffi;

use super::cntr::{Cntr, CntrState};
use super::cq::Cq;
use super::eq::Eq;
use super::fabric::Fabric;
use crate::error::{Error, Result};
use crate::fail;
use crate::queues::wait::{deadline, Doze, Sleeper, Waiter};
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// A member, held weakly (it holds the set).
#[derive(Clone)]
enum Member {
    Cq(Weak<Cq>),
    Cntr(Weak<Cntr>),
    Eq(Weak<Eq>),
}

/// A member while the set looks at it.
enum Live {
    Cq(Arc<Cq>),
    Cntr(Arc<Cntr>),
    Eq(Arc<Eq>),
}

impl Member {
    fn upgrade(&self) -> Option<Live> {
        match self {
            Member::Cq(w) => w.upgrade().map(Live::Cq),
            Member::Cntr(w) => w.upgrade().map(Live::Cntr),
            Member::Eq(w) => w.upgrade().map(Live::Eq),
        }
    }

    fn gone(&self) -> bool {
        match self {
            Member::Cq(w) => w.strong_count() == 0,
            Member::Cntr(w) => w.strong_count() == 0,
            Member::Eq(w) => w.strong_count() == 0,
        }
    }

    fn same(&self, other: &Member) -> bool {
        match (self, other) {
            (Member::Cq(a), Member::Cq(b)) => a.ptr_eq(b),
            (Member::Cntr(a), Member::Cntr(b)) => a.ptr_eq(b),
            (Member::Eq(a), Member::Eq(b)) => a.ptr_eq(b),
            _ => false,
        }
    }
}

impl Live {
    fn waiter(&self) -> &Waiter {
        match self {
            Live::Cq(c) => &c.core.waiter,
            Live::Cntr(c) => &c.core.waiter,
            Live::Eq(e) => e.waiter(),
        }
    }
}

struct Entry {
    member: Member,
    /// A counter's values when the set last looked (unused otherwise).
    seen: CntrState,
}

/// A wait set.
#[repr(C)]
pub struct WaitSet {
    pub hdr: FidHeader<ffi::fid_wait>,
    pub fabric: Arc<Fabric>,
    /// The set's own wait object: its fd watches every member's
    /// (`FI_GETWAIT`), and its sleepers are the members (`MemberWake`).
    waiter: Waiter,
    members: Mutex<Vec<Entry>>,
}

impl WaitSet {
    /// Build from `fi_wait_attr`: `wait_obj` FI_WAIT_UNSPEC or FI_WAIT_FD
    /// (a pollable fd) or FI_WAIT_YIELD; flags 0.
    pub fn new(hdr: FidHeader<ffi::fid_wait>, fabric: Arc<Fabric>, attr: &ffi::fi_wait_attr) -> Result<Self> {
        if attr.flags != 0 {
            return Err(fail!(ffi::FI_EINVAL, "fi_wait_attr flags {:#x} are reserved; pass 0", attr.flags));
        }
        let waiter = Waiter::for_set(attr.wait_obj)?;
        Ok(WaitSet { hdr, fabric, waiter, members: Mutex::new(Vec::new()) })
    }

    /// A CQ opened with this set (`fi_cq_attr.wait_set`) joins it.
    pub fn join_cq(&self, cq: &Arc<Cq>) -> Result<()> {
        self.join(&cq.domain.fabric, Member::Cq(Arc::downgrade(cq)), CntrState::default())
    }

    /// A counter opened with this set joins it; the set reports its
    /// changes from its values now.
    pub fn join_cntr(&self, c: &Arc<Cntr>) -> Result<()> {
        let seen = CntrState { resets: c.core.resets(), value: c.core.value(), errors: c.core.errors() };
        self.join(&c.domain.fabric, Member::Cntr(Arc::downgrade(c)), seen)
    }

    /// An EQ opened with this set joins it.
    pub fn join_eq(&self, eq: &Arc<Eq>) -> Result<()> {
        self.join(&eq.fabric, Member::Eq(Arc::downgrade(eq)), CntrState::default())
    }

    fn join(&self, fabric: &Arc<Fabric>, member: Member, seen: CntrState) -> Result<()> {
        if !Arc::ptr_eq(fabric, &self.fabric) {
            return Err(fail!(
                ffi::FI_EINVAL,
                "wait_set belongs to another fabric than the object opened with it; open the wait set on the object's fabric"
            ));
        }
        {
            let mut m = self.members.lock_ok();
            m.retain(|e| !e.member.gone());
            m.push(Entry { member: member.clone(), seen });
        }
        let wake = MemberWake { member, dozing: Mutex::new(Vec::new()) };
        self.waiter.attach(Arc::new(wake), self.fabric.config.wait_tick);
        Ok(())
    }

    /// Run every member's progress (as its own read would) and say
    /// whether any has an event (see the module header). Every member is
    /// looked at, so a counter's change is taken once.
    fn ready(&self) -> bool {
        let live: Vec<(Member, Live)> = {
            let m = self.members.lock_ok();
            m.iter().filter_map(|e| e.member.upgrade().map(|l| (e.member.clone(), l))).collect()
        };
        let mut any = false;
        for (member, l) in &live {
            any |= match l {
                // (A signal ends this wait, as it would a blocked sread.)
                Live::Cq(c) => c.poll_ready() | c.core.take_signal(),
                Live::Eq(e) => e.poll_ready(),
                Live::Cntr(c) => {
                    let now = c.poll_state();
                    let mut m = self.members.lock_ok();
                    match m.iter_mut().find(|e| e.member.same(member)) {
                        Some(e) if e.seen != now => {
                            e.seen = now;
                            true
                        }
                        _ => false,
                    }
                }
            };
        }
        any
    }

    /// `fi_wait`: until a member has an event (Ok) or `timeout_ms` passes
    /// (-FI_ETIMEDOUT; negative: no timeout).
    pub fn wait(&self, timeout_ms: i32) -> Result<()> {
        if self.waiter.block_until(deadline(timeout_ms), || self.ready()) {
            Ok(())
        } else {
            Err(Error::quiet(ffi::FI_ETIMEDOUT))
        }
    }

    /// `fi_trywait` on the set: run progress; -FI_EAGAIN if a member has
    /// an event, else the set's fd is clear and every member's endpoint
    /// rings it on arrival until the next `fi_wait` or `fi_trywait`.
    pub fn trywait(&self) -> Result<()> {
        self.waiter.unpark();
        self.waiter.clear();
        // The members clear their fds and tell their endpoints before the
        // look, so an event after it rings the fd (and one before it is
        // seen by it).
        self.waiter.park();
        if self.ready() {
            self.waiter.unpark();
            self.waiter.notify();
            return Err(Error::quiet(ffi::FI_EAGAIN));
        }
        Ok(())
    }

    /// The pollable fd (`FI_GETWAIT`), if the wait object has one.
    pub fn wait_fd(&self) -> Option<i32> {
        self.waiter.fd()
    }

    /// The wait object `FI_GETWAITOBJ` reports.
    pub fn wait_obj(&self) -> u32 {
        match (self.waiter.fd(), self.waiter.yields()) {
            (Some(_), _) => ffi::FI_WAIT_FD,
            (None, true) => ffi::FI_WAIT_YIELD,
            (None, false) => ffi::FI_WAIT_NONE,
        }
    }

    /// How many members are open (tests).
    #[cfg(test)]
    fn live_members(&self) -> usize {
        self.members.lock_ok().iter().filter(|e| !e.member.gone()).count()
    }
}

/// A member as the set's waiter sees it: its fd in the set's, and around
/// each sleep of the set, its own endpoints told (as its own sleep would).
struct MemberWake {
    member: Member,
    /// What each sleep still under way told the member's endpoints (one
    /// per thread sleeping on the set; each `awake` ends one).
    dozing: Mutex<Vec<Doze>>,
}

impl Sleeper for MemberWake {
    fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        self.member.upgrade().and_then(|l| l.waiter().fd())
    }

    fn sleep(&self) -> bool {
        let Some(l) = self.member.upgrade() else {
            // (Closed: nothing comes from it any more.)
            return true;
        };
        // Cleared before the set looks at its members once more: what
        // notifies it from now on rings the set's fd.
        let w = l.waiter();
        w.clear();
        let doze = w.doze();
        let quiet = doze.quiet
            && match &l {
                // Bound to MRs only, it drives the whole domain, whose
                // endpoints it does not watch: look again after a tick
                // (as its own `trywait` does).
                Live::Cntr(c) => !c.progress.is_empty() || c.domain.progress.is_empty(),
                _ => true,
            };
        self.dozing.lock_ok().push(doze);
        quiet
    }

    fn awake(&self) {
        // (Dropping the Doze tells the endpoints.)
        let d = self.dozing.lock_ok().pop();
        drop(d);
    }

    fn retired(&self) -> bool {
        self.member.gone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::cq::CqEntry;
    use std::time::{Duration, Instant};

    fn set(domain: &Arc<super::super::domain::Domain>) -> Arc<WaitSet> {
        let attr = ffi::fi_wait_attr { wait_obj: ffi::FI_WAIT_FD, flags: 0 };
        Arc::new(
            WaitSet::new(crate::boundary::wait_set::header(std::ptr::null_mut()), domain.fabric.clone(), &attr)
                .unwrap(),
        )
    }

    fn cq(domain: &Arc<super::super::domain::Domain>, s: &Arc<WaitSet>) -> Arc<Cq> {
        let attr = ffi::fi_cq_attr {
            size: 8,
            format: ffi::FI_CQ_FORMAT_CONTEXT,
            wait_obj: ffi::FI_WAIT_SET,
            ..Default::default()
        };
        Cq::open(crate::boundary::cq::header(std::ptr::null_mut()), domain.clone(), &attr, Some(s.clone())).unwrap()
    }

    fn cntr(domain: &Arc<super::super::domain::Domain>, s: &Arc<WaitSet>) -> Arc<Cntr> {
        let attr =
            ffi::fi_cntr_attr { events: ffi::FI_CNTR_EVENTS_COMP, wait_obj: ffi::FI_WAIT_SET, ..Default::default() };
        Cntr::open(crate::boundary::cntr::header(std::ptr::null_mut()), domain.clone(), &attr, Some(s.clone())).unwrap()
    }

    fn readable(s: &WaitSet, ms: i32) -> bool {
        let mut p = libc::pollfd { fd: s.wait_fd().unwrap(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd on the set's open fd.
        unsafe { libc::poll(&mut p, 1, ms) == 1 }
    }

    #[test]
    fn attributes_are_checked() {
        let d = crate::objects::cq::tests::domain();
        let new = |wait_obj, flags| {
            WaitSet::new(
                crate::boundary::wait_set::header(std::ptr::null_mut()),
                d.fabric.clone(),
                &ffi::fi_wait_attr { wait_obj, flags },
            )
            .err()
            .map(Error::code)
        };
        assert_eq!(new(ffi::FI_WAIT_UNSPEC, 0), None);
        assert_eq!(new(ffi::FI_WAIT_YIELD, 0), None);
        assert_eq!(new(ffi::FI_WAIT_FD, 1), Some(ffi::FI_EINVAL));
        assert_eq!(new(ffi::FI_WAIT_NONE, 0), Some(ffi::FI_EINVAL));
        assert_eq!(new(ffi::FI_WAIT_SET, 0), Some(ffi::FI_EINVAL));
        assert_eq!(new(ffi::FI_WAIT_MUTEX_COND, 0), Some(ffi::FI_ENOSYS));
        assert_eq!(new(99, 0), Some(ffi::FI_EINVAL));
    }

    #[test]
    fn a_completion_from_another_thread_ends_the_wait_and_rings_the_fd() {
        let d = crate::objects::cq::tests::domain();
        let s = set(&d);
        let q = cq(&d, &s);
        let t = Instant::now();
        assert_eq!(s.wait(30).err().map(Error::code), Some(ffi::FI_ETIMEDOUT));
        assert!(t.elapsed() >= Duration::from_millis(30));
        s.trywait().unwrap();
        assert!(!readable(&s, 0));
        let q2 = q.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            q2.reserve().unwrap().complete(CqEntry { op_context: 7, ..Default::default() });
        });
        assert!(readable(&s, 10_000), "the member's completion rings the set's fd");
        h.join().unwrap();
        assert_eq!(s.trywait().err().map(Error::code), Some(ffi::FI_EAGAIN));
        s.wait(0).unwrap();
        s.wait(-1).unwrap(); // (level-triggered: the CQ still holds it)
        assert_eq!(q.read(1, |_, _| ()).unwrap(), 1);
        assert_eq!(s.wait(0).err().map(Error::code), Some(ffi::FI_ETIMEDOUT));
        // From a thread while the set sleeps.
        let q2 = q.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            q2.reserve().unwrap().complete(CqEntry { op_context: 8, ..Default::default() });
        });
        let t = Instant::now();
        s.wait(10_000).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        h.join().unwrap();
        q.signal();
        assert_eq!(q.read(1, |_, _| ()).unwrap(), 1);
        s.wait(0).unwrap(); // (the signal, once)
        assert_eq!(s.wait(0).err().map(Error::code), Some(ffi::FI_ETIMEDOUT));
    }

    #[test]
    fn a_counter_change_is_reported_once_and_never_lost() {
        let d = crate::objects::cq::tests::domain();
        let s = set(&d);
        let c = cntr(&d, &s);
        assert_eq!(s.wait(0).err().map(Error::code), Some(ffi::FI_ETIMEDOUT));
        c.add(1); // before the wait: not lost
        s.wait(0).unwrap();
        assert_eq!(s.wait(0).err().map(Error::code), Some(ffi::FI_ETIMEDOUT), "reported once");
        c.set(1); // (a set to the same value is a change too)
        s.wait(0).unwrap();
        c.adderr(1);
        s.wait(0).unwrap();
        let c2 = c.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            c2.add(1);
        });
        s.wait(10_000).unwrap();
        h.join().unwrap();
        assert_eq!(c.read(), 2);
    }

    #[test]
    fn members_hold_the_set_and_leave_it_when_closed() {
        let d = crate::objects::cq::tests::domain();
        let s = set(&d);
        let q = cq(&d, &s);
        let c = cntr(&d, &s);
        assert_eq!(Arc::strong_count(&s), 3, "each member holds the set");
        assert_eq!(s.live_members(), 2);
        drop(q);
        drop(c);
        assert_eq!(Arc::strong_count(&s), 1);
        assert_eq!(s.live_members(), 0);
        assert_eq!(s.wait(0).err().map(Error::code), Some(ffi::FI_ETIMEDOUT));
        // A member of another fabric is refused.
        let other = crate::objects::cq::tests::domain();
        let attr = ffi::fi_cq_attr { size: 8, wait_obj: ffi::FI_WAIT_SET, ..Default::default() };
        let r = Cq::open(crate::boundary::cq::header(std::ptr::null_mut()), other, &attr, Some(s.clone()));
        assert_eq!(r.err().map(Error::code), Some(ffi::FI_EINVAL));
        assert_eq!(Arc::strong_count(&s), 1);
    }
}
