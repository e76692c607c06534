//! Registration benchmark (not a test: prints numbers, asserts nothing
//! about time).
//!
//!   bash ci/build.sh && FI_PROVIDER_PATH=$PWD/build \
//!       cargo run --release -p oxmr --example mr_bench
//!
//! 1. fi_mr_reg + fi_close cost through libfabric for oxmr, shm and tcp at
//!    4 KiB, 64 KiB, 2 MiB and 64 MiB, in one run. oxmr pins (io_uring
//!    long-term pin, like ibv_reg_mr); shm and tcp only record the range,
//!    so they are a floor, not a peer. "hit" registers the same buffer
//!    again and again (after the first, a registration-cache hit); "cold"
//!    registers a buffer mapped fresh for each iteration (a miss: the
//!    pages are pinned), and the cold/hit ratio of oxmr is printed.
//! 2. The remote-access check (`Registry::check`) at 10 000 live
//!    registrations: ns per lookup, one thread and two.
#![allow(clippy::unnecessary_cast)] // FI_* constant types vary with the header version

use std::ffi::{c_void, CString};
use std::ptr::{null, null_mut};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oxmr::mr::pin::Pin;
use oxmr::mr::registry::{Ranges, Region, Registry};
use oxmr::sys::SpinLock;
use oxmr_ffi as ffi;

struct Dom {
    fabric: *mut ffi::fid_fabric,
    domain: *mut ffi::fid_domain,
    info: *mut ffi::fi_info,
}

unsafe fn open(prov: &str) -> Option<Dom> {
    unsafe {
        let hints = ffi::fi_dupinfo(null());
        (*(*hints).ep_attr).type_ = ffi::FI_EP_RDM;
        (*hints).caps = (ffi::FI_MSG | ffi::FI_RMA) as u64;
        (*(*hints).domain_attr).mr_mode =
            (ffi::FI_MR_VIRT_ADDR | ffi::FI_MR_ALLOCATED | ffi::FI_MR_PROV_KEY | ffi::FI_MR_LOCAL) as i32;
        (*(*hints).fabric_attr).prov_name = libc::strdup(CString::new(prov).unwrap().as_ptr());
        let mut info = null_mut();
        let r = ffi::fi_getinfo(ffi::FI_HEADER_VERSION, null(), null(), 0, hints, &mut info);
        ffi::fi_freeinfo(hints);
        if r != 0 {
            eprintln!("{prov}: fi_getinfo failed ({r}); skipped");
            return None;
        }
        let mut fabric = null_mut();
        if ffi::fi_fabric((*info).fabric_attr, &mut fabric, null_mut()) != 0 {
            return None;
        }
        let mut domain = null_mut();
        if ((*(*fabric).ops).domain.unwrap())(fabric, info, &mut domain, null_mut()) != 0 {
            return None;
        }
        Some(Dom { fabric, domain, info })
    }
}

unsafe fn close(f: *mut ffi::fid) {
    unsafe { ((*(*f).ops).close.unwrap())(f) };
}

fn buffer(len: usize) -> *mut u8 {
    // SAFETY: anonymous mapping, touched so every page exists before timing.
    unsafe {
        let p = libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::write_bytes(p as *mut u8, 1, len);
        p as *mut u8
    }
}

/// One fi_mr_reg + fi_close of `buf`: the time each took.
unsafe fn reg_close(d: &Dom, buf: *mut u8, len: usize, key: u64) -> (Duration, Duration) {
    let access = (ffi::FI_REMOTE_READ | ffi::FI_REMOTE_WRITE | ffi::FI_SEND | ffi::FI_RECV) as u64;
    let mut mr = null_mut();
    let t = Instant::now();
    // SAFETY: an open domain of ours and a live buffer of `len` bytes.
    let r = unsafe {
        ((*(*d.domain).mr).reg.unwrap())(
            &mut (*d.domain).fid,
            buf as *const c_void,
            len,
            access,
            0,
            key,
            0,
            &mut mr,
            null_mut(),
        )
    };
    let reg = t.elapsed();
    assert_eq!(r, 0, "fi_mr_reg failed: {r}");
    let t = Instant::now();
    // SAFETY: the MR just registered.
    unsafe { close(mr.cast()) };
    (reg, t.elapsed())
}

/// Mean µs of (register, close) over `iters`, after one untimed round (so
/// that a cache's first miss is not in the figure).
unsafe fn reg_cost(d: &Dom, buf: *mut u8, len: usize, iters: u32) -> (f64, f64) {
    // SAFETY: forwarded contract.
    unsafe { reg_close(d, buf, len, 0) };
    let (mut reg, mut dereg) = (Duration::ZERO, Duration::ZERO);
    for i in 1..=iters {
        // SAFETY: forwarded contract.
        let (r, c) = unsafe { reg_close(d, buf, len, i as u64) };
        reg += r;
        dereg += c;
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / iters as f64;
    (us(reg), us(dereg))
}

/// Mean µs of (register, close) over `iters`, each of a buffer mapped (and
/// touched) just before and unmapped after: the cache never has it.
unsafe fn cold_cost(d: &Dom, len: usize, iters: u32) -> (f64, f64) {
    let (mut reg, mut dereg) = (Duration::ZERO, Duration::ZERO);
    for i in 0..iters {
        let buf = buffer(len);
        // SAFETY: an open domain and the buffer just mapped.
        let (r, c) = unsafe { reg_close(d, buf, len, i as u64) };
        reg += r;
        dereg += c;
        // SAFETY: the mapping made by buffer() above, no longer registered.
        unsafe { libc::munmap(buf as *mut c_void, len) };
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6 / iters as f64;
    (us(reg), us(dereg))
}

fn lookup_bench() {
    let reg = Arc::new(Registry::new());
    let mut keys = Vec::new();
    for i in 0..10_000u64 {
        let key = reg.new_key();
        reg.insert(Arc::new(Region {
            face: oxmr::mr::registry::face(oxmr::mr::registry::no_fid(), key),
            key,
            iovs: Ranges::One((0x1000_0000 + (i as usize) * 0x10000, 0x10000)),
            len: 0x10000,
            iova: 0x1000_0000 + i * 0x10000,
            access: ffi::FI_REMOTE_READ as u64,
            enabled: AtomicBool::new(true),
            cached: None,
            refreshed: AtomicBool::new(false),
            revoked: std::sync::OnceLock::new(),
            denied: std::sync::OnceLock::new(),
            pin: std::sync::Mutex::new(Pin::None),
            pfn0: 0,
            phys: false,
            mmio: false,
            cntr: SpinLock::new(None),
            tail: (),
        }))
        .unwrap();
        keys.push((key, 0x1000_0000 + i * 0x10000));
    }
    let run = |reg: &Registry, n: usize, seed: usize| {
        let mut ok = 0usize;
        let t = Instant::now();
        for j in 0..n {
            let (k, base) = keys[(j * 7919 + seed) % keys.len()];
            if reg.check(k, base + 64, 128, ffi::FI_REMOTE_READ as u64).is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, n);
        t.elapsed().as_secs_f64() * 1e9 / n as f64
    };
    let n = 5_000_000;
    println!("check() at 10000 live registrations, 1 thread: {:.1} ns/lookup", run(&reg, n, 0));
    let threads: Vec<_> = (0..2)
        .map(|s| {
            let reg = reg.clone();
            let keys = keys.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                for j in 0..n {
                    let (k, base) = keys[(j * 7919 + s) % keys.len()];
                    std::hint::black_box(reg.check(k, base + 64, 128, ffi::FI_REMOTE_READ as u64).is_ok());
                }
                t.elapsed().as_secs_f64() * 1e9 / n as f64
            })
        })
        .collect();
    let per: Vec<f64> = threads.into_iter().map(|h| h.join().unwrap()).collect();
    println!("check() at 10000 live registrations, 2 threads: {:.1} / {:.1} ns/lookup", per[0], per[1]);
    let bad = Instant::now();
    for j in 0..n {
        std::hint::black_box(reg.check(keys[j % keys.len()].0 ^ 0xdead_0000, 0, 1, 0).is_err());
    }
    println!("check() of an unknown key: {:.1} ns", bad.elapsed().as_secs_f64() * 1e9 / n as f64);
}

fn main() {
    let sizes: [(usize, &str, u32); 4] =
        [(4 << 10, "4 KiB", 20000), (64 << 10, "64 KiB", 20000), (2 << 20, "2 MiB", 20000), (64 << 20, "64 MiB", 2000)];
    let provs = ["oxmr", "shm", "tcp"];
    println!(
        "fi_mr_reg / fi_close, mean µs (FI_PROVIDER_PATH={})",
        std::env::var("FI_PROVIDER_PATH").unwrap_or_default()
    );
    println!(
        "{:>8} {:>20} {:>20} {:>20} {:>20}",
        "size", "oxmr hit reg/close", "oxmr cold reg/close", "shm reg/close", "tcp reg/close"
    );
    let doms: Vec<Option<Dom>> = provs.iter().map(|p| unsafe { open(p) }).collect();
    let mut ratios = Vec::new();
    for (len, name, iters) in sizes {
        let buf = buffer(len);
        let mut hit = 0.0;
        let mut cells: Vec<String> = doms
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Some(d) => {
                    let (r, c) = unsafe { reg_cost(d, buf, len, iters) };
                    if i == 0 {
                        hit = r + c;
                    }
                    format!("{r:.3} / {c:.3}")
                }
                None => "-".into(),
            })
            .collect();
        let cold = match &doms[0] {
            Some(d) => {
                let (r, c) = unsafe { cold_cost(d, len, iters.min(200)) };
                if hit > 0.0 {
                    ratios.push((name, (r + c) / hit));
                }
                format!("{r:.3} / {c:.3}")
            }
            None => "-".into(),
        };
        cells.insert(1, cold);
        println!("{name:>8} {:>20} {:>20} {:>20} {:>20}", cells[0], cells[1], cells[2], cells[3]);
        // SAFETY: the mapping made by buffer().
        unsafe { libc::munmap(buf as *mut c_void, len) };
    }
    for (name, x) in ratios {
        println!("oxmr cold/hit (reg+close) at {name}: {x:.0}x");
    }
    for d in doms.into_iter().flatten() {
        unsafe {
            close(d.domain.cast());
            close(d.fabric.cast());
            ffi::fi_freeinfo(d.info);
        }
    }
    lookup_bench();
}
