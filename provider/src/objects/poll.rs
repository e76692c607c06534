//! Poll set (fi_poll(3)): CQs and counters of one domain, progressed and
//! looked at by one call.
//!
//! `fi_poll` drives each member's progress (a CQ's or counter's bound
//! endpoints, as its own read would) and returns the contexts of the CQs
//! that are not empty (a completion or an error waits) and of the counters
//! whose value or error count changed since this set last returned them
//! (a counter that ever counted, on the first call). A counter is compared
//! with what the set saw (`CntrState`: the values and the number of
//! `fi_cntr_set`/`fi_cntr_seterr` calls, the only way a value goes back),
//! so no change is missed; the application's own
//! `fi_cntr_add`/`fi_cntr_set` show as a change too (a false positive,
//! which fi_poll(3) allows). A counter that changed but did not fit in the
//! caller's array keeps its change for the next call.
//!
//! Members are held by reference while they are in the set (so `fi_close`
//! of a CQ or counter still in a set answers `-FI_EBUSY`), and the set holds
//! its domain. The set's lock is held for the whole call, progress
//! included: progress never takes it (the engines know nothing of poll
//! sets), and `fi_poll_del` that returns means no `fi_poll` still uses the
//! member, so the CQ or counter can be closed right after. When the
//! caller's array fills, the next call starts after the last member
//! returned, so a small array cannot starve the members behind it.

use std::sync::{Arc, Mutex};

use oxmr_ffi as ffi;

use super::cntr::{Cntr, CntrState};
use super::cq::Cq;
use super::domain::Domain;
use crate::error::Result;
use crate::fail;
use crate::sys::LockExt;
use oxmr_ffi::FidHeader;

/// What `fi_poll_add` puts in a set.
pub enum PollMember {
    Cq(Arc<Cq>),
    Cntr(Arc<Cntr>),
}

impl PollMember {
    /// The address of the member's fid (what `fi_poll_del` names).
    fn addr(&self) -> usize {
        match self {
            PollMember::Cq(c) => Arc::as_ptr(c) as usize,
            PollMember::Cntr(c) => Arc::as_ptr(c) as usize,
        }
    }

    fn domain(&self) -> &Arc<Domain> {
        match self {
            PollMember::Cq(c) => &c.domain,
            PollMember::Cntr(c) => &c.domain,
        }
    }

    /// The context the CQ or counter was opened with.
    fn context(&self) -> usize {
        match self {
            PollMember::Cq(c) => c.hdr.0.fid.context as usize,
            PollMember::Cntr(c) => c.hdr.0.fid.context as usize,
        }
    }
}

struct Entry {
    member: PollMember,
    /// A counter's state when this set last returned it (zeros until
    /// then); unused for a CQ.
    seen: CntrState,
}

#[derive(Default)]
struct Members {
    list: Vec<Entry>,
    /// Where the next poll starts.
    next: usize,
}

/// A poll set.
#[repr(C)]
pub struct Poll {
    pub hdr: FidHeader<ffi::fid_poll>,
    pub domain: Arc<Domain>,
    members: Mutex<Members>,
}

fn check_flags(call: &str, flags: u64) -> Result<()> {
    if flags != 0 {
        return Err(fail!(ffi::FI_EBADFLAGS, "{call}: flags {flags:#x} are not defined for a poll set; pass 0"));
    }
    Ok(())
}

impl Poll {
    /// Build from `fi_poll_attr` (NULL: the defaults).
    pub fn new(hdr: FidHeader<ffi::fid_poll>, domain: Arc<Domain>, attr: Option<&ffi::fi_poll_attr>) -> Result<Self> {
        if let Some(a) = attr.filter(|a| a.flags != 0) {
            return Err(fail!(ffi::FI_EINVAL, "fi_poll_attr flags {:#x} are reserved; pass 0", a.flags));
        }
        Ok(Poll { hdr, domain, members: Mutex::default() })
    }

    /// fi_poll_add: -FI_EBADFLAGS for any flag, -FI_EINVAL for a member of
    /// another domain, -FI_EALREADY if it is in the set already.
    pub fn add(&self, member: PollMember, flags: u64) -> Result<()> {
        check_flags("fi_poll_add", flags)?;
        if !Arc::ptr_eq(member.domain(), &self.domain) {
            return Err(fail!(
                ffi::FI_EINVAL,
                "fi_poll_add: the CQ or counter belongs to another domain than the poll set; open the set on its domain"
            ));
        }
        let mut m = self.members.lock_ok();
        if m.list.iter().any(|e| e.member.addr() == member.addr()) {
            return Err(fail!(ffi::FI_EALREADY, "fi_poll_add: the CQ or counter is in this poll set already"));
        }
        // A counter that ever counted is returned by the first poll (what
        // it counted before it joined may be what the caller waits for).
        m.list.push(Entry { member, seen: CntrState::default() });
        Ok(())
    }

    /// fi_poll_del of the CQ or counter whose fid is at `addr`:
    /// -FI_EBADFLAGS for any flag, -FI_ENOENT if it is not in the set.
    pub fn remove(&self, addr: usize, flags: u64) -> Result<()> {
        check_flags("fi_poll_del", flags)?;
        let mut m = self.members.lock_ok();
        let Some(i) = m.list.iter().position(|e| e.member.addr() == addr) else {
            return Err(fail!(
                ffi::FI_ENOENT,
                "fi_poll_del: the fid is not in this poll set (never added, or deleted)"
            ));
        };
        let gone = m.list.remove(i);
        if m.next > i {
            m.next -= 1;
        }
        drop(m);
        drop(gone);
        Ok(())
    }

    /// How many CQs and counters the set holds.
    pub fn len(&self) -> usize {
        self.members.lock_ok().list.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// fi_poll: progress every member, hand up to `count` contexts of those
    /// with events to `out(index, context)`, return how many.
    pub fn poll(&self, count: usize, mut out: impl FnMut(usize, usize)) -> usize {
        let mut m = self.members.lock_ok();
        let n = m.list.len();
        let start = if m.next < n { m.next } else { 0 };
        let mut got = 0;
        let mut last = None;
        for k in 0..n {
            let i = (start + k) % n;
            let e = &mut m.list[i];
            let event = match &e.member {
                PollMember::Cq(cq) => cq.poll_ready(),
                PollMember::Cntr(c) => {
                    let now = c.poll_state();
                    // Past the caller's array the change is kept for the
                    // next call.
                    if now != e.seen && got < count {
                        e.seen = now;
                        true
                    } else {
                        false
                    }
                }
            };
            if event && got < count {
                out(got, e.member.context());
                got += 1;
                last = Some(i);
            }
        }
        if got == count {
            if let Some(i) = last {
                m.next = i + 1;
            }
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::cq::CqEntry;

    fn domain() -> Arc<Domain> {
        crate::objects::cq::tests::domain()
    }

    fn cq(d: &Arc<Domain>, context: usize) -> Arc<Cq> {
        let attr = ffi::fi_cq_attr { size: 8, format: ffi::FI_CQ_FORMAT_CONTEXT, ..Default::default() };
        Arc::new(Cq::new(crate::boundary::cq::header(context as *mut _), d.clone(), &attr).unwrap())
    }

    fn cntr(d: &Arc<Domain>, context: usize) -> Arc<Cntr> {
        let attr = ffi::fi_cntr_attr { events: ffi::FI_CNTR_EVENTS_COMP, ..Default::default() };
        Arc::new(Cntr::new(crate::boundary::cntr::header(context as *mut _), d.clone(), &attr).unwrap())
    }

    fn set(d: &Arc<Domain>) -> Poll {
        Poll::new(crate::boundary::poll::header(), d.clone(), None).unwrap()
    }

    fn polled(p: &Poll, count: usize) -> Vec<usize> {
        let mut v = vec![];
        assert_eq!(p.poll(count, |i, c| v.push((i, c))), v.len());
        v.iter().enumerate().for_each(|(k, (i, _))| assert_eq!(k, *i));
        v.into_iter().map(|(_, c)| c).collect()
    }

    fn code<T>(r: Result<T>) -> Option<u32> {
        r.err().map(crate::error::Error::code)
    }

    #[test]
    fn cqs_with_entries_and_only_those() {
        let d = domain();
        let p = set(&d);
        let (a, b) = (cq(&d, 10), cq(&d, 20));
        p.add(PollMember::Cq(a.clone()), 0).unwrap();
        p.add(PollMember::Cq(b.clone()), 0).unwrap();
        assert!(polled(&p, 8).is_empty());
        b.reserve().unwrap().complete(CqEntry::default());
        assert_eq!(polled(&p, 8), [20]);
        assert_eq!(polled(&p, 8), [20], "a CQ is returned while it is not empty");
        a.push_error(Default::default());
        let mut both = polled(&p, 8);
        both.sort();
        assert_eq!(both, [10, 20], "an error entry counts");
        // One slot: the next call starts after the member returned.
        let (x, y) = (polled(&p, 1), polled(&p, 1));
        assert_eq!(x.len(), 1);
        assert_ne!(x, y, "a small array must not starve the other member");
        assert!(polled(&p, 0).is_empty());
    }

    #[test]
    fn counter_once_per_change_and_never_missed() {
        let d = domain();
        let p = set(&d);
        let c = cntr(&d, 30);
        p.add(PollMember::Cntr(c.clone()), 0).unwrap();
        assert!(polled(&p, 4).is_empty(), "a counter that never counted");
        c.add(5);
        assert_eq!(polled(&p, 4), [30]);
        c.add(1);
        assert_eq!(polled(&p, 4), [30]);
        assert!(polled(&p, 4).is_empty(), "returned once per change");
        c.adderr(1);
        assert_eq!(polled(&p, 4), [30], "the error count is a change");
        // Set back to the value last seen, then counted up to it again:
        // the values are as before, yet things happened.
        c.set(5);
        c.add(1);
        assert_eq!(polled(&p, 4), [30]);
        // A change that does not fit the array is kept for the next call.
        let q = cq(&d, 40);
        p.add(PollMember::Cq(q.clone()), 0).unwrap();
        q.reserve().unwrap().complete(CqEntry::default());
        c.add(1);
        let first = polled(&p, 1);
        let second = polled(&p, 1);
        assert!(first == [30] || second == [30], "the counter's change was lost: {first:?} {second:?}");
    }

    #[test]
    fn add_del_refusals_and_references() {
        let d = domain();
        let p = set(&d);
        let (a, c) = (cq(&d, 1), cntr(&d, 2));
        assert_eq!(code(p.add(PollMember::Cq(a.clone()), 1)), Some(ffi::FI_EBADFLAGS));
        p.add(PollMember::Cq(a.clone()), 0).unwrap();
        assert_eq!(code(p.add(PollMember::Cq(a.clone()), 0)), Some(ffi::FI_EALREADY));
        assert_eq!(Arc::strong_count(&a), 2, "held once while in the set");
        p.add(PollMember::Cntr(c.clone()), 0).unwrap();
        assert_eq!(code(p.remove(Arc::as_ptr(&a) as usize, 2)), Some(ffi::FI_EBADFLAGS));
        p.remove(Arc::as_ptr(&a) as usize, 0).unwrap();
        assert_eq!(Arc::strong_count(&a), 1, "released by fi_poll_del");
        assert_eq!(code(p.remove(Arc::as_ptr(&a) as usize, 0)), Some(ffi::FI_ENOENT));
        let other = domain();
        assert_eq!(code(p.add(PollMember::Cq(cq(&other, 3)), 0)), Some(ffi::FI_EINVAL));
        assert_eq!(p.len(), 1);
        drop(p);
        assert_eq!(Arc::strong_count(&c), 1, "released when the set goes");
        let bad = ffi::fi_poll_attr { flags: 1 };
        assert_eq!(code(Poll::new(crate::boundary::poll::header(), d, Some(&bad))), Some(ffi::FI_EINVAL));
    }
}
