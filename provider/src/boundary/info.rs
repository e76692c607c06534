//! `struct fi_info` <-> [`Info`]/[`Hints`].
//!
//! Infos returned to the application are built with libfabric's own
//! `fi_dupinfo(NULL)` and libc `malloc`/`strdup`, because the application
//! frees them with `fi_freeinfo`, which calls `free()` on every field.

use std::ffi::{c_char, CStr};
use std::ptr;

use oxmr_ffi as ffi;

use crate::info::{addr, DomainAttr, EpAttr, FabricAttr, Hints, Info, RxAttr, TxAttr};

/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub unsafe fn opt_str(s: *const c_char) -> Option<String> {
    // SAFETY: non-NULL here, so a NUL-terminated string (this fn's contract).
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn opt_addr(p: *const std::ffi::c_void, len: usize) -> (Option<std::net::SocketAddr>, bool) {
    if p.is_null() || len == 0 {
        return (None, false);
    }
    if len > size_of::<libc::sockaddr_storage>() {
        return (None, true);
    }
    // SAFETY: non-NULL here, so `len` readable bytes (this fn's contract);
    // `len` is at most a sockaddr_storage.
    let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, len) };
    match addr::parse(bytes) {
        Some(a) => (Some(a), false),
        None => (None, true),
    }
}

fn tx_from(t: &ffi::fi_tx_attr) -> TxAttr {
    TxAttr {
        caps: t.caps,
        mode: t.mode,
        op_flags: t.op_flags,
        msg_order: t.msg_order,
        comp_order: t.comp_order,
        inject_size: t.inject_size,
        size: t.size,
        iov_limit: t.iov_limit,
        rma_iov_limit: t.rma_iov_limit,
        tclass: t.tclass,
    }
}

fn rx_from(r: &ffi::fi_rx_attr) -> RxAttr {
    RxAttr {
        caps: r.caps,
        mode: r.mode,
        op_flags: r.op_flags,
        msg_order: r.msg_order,
        comp_order: r.comp_order,
        total_buffered_recv: r.total_buffered_recv,
        size: r.size,
        iov_limit: r.iov_limit,
    }
}

/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn opt_bytes(p: *const u8, len: usize) -> Option<Vec<u8>> {
    // SAFETY: non-NULL here, so `len` readable bytes (this fn's contract).
    (!p.is_null() && len > 0).then(|| unsafe { std::slice::from_raw_parts(p, len) }.to_vec())
}

/// # Safety
/// `e.auth_key` is NULL or points to `e.auth_key_size` readable bytes.
unsafe fn ep_from(e: &ffi::fi_ep_attr) -> EpAttr {
    EpAttr {
        type_: e.type_,
        protocol: e.protocol,
        protocol_version: e.protocol_version,
        max_msg_size: e.max_msg_size,
        msg_prefix_size: e.msg_prefix_size,
        max_order_raw_size: e.max_order_raw_size,
        max_order_war_size: e.max_order_war_size,
        max_order_waw_size: e.max_order_waw_size,
        mem_tag_format: e.mem_tag_format,
        tx_ctx_cnt: e.tx_ctx_cnt,
        rx_ctx_cnt: e.rx_ctx_cnt,
        auth_key_size: e.auth_key_size,
        // SAFETY: `e.auth_key` holds `e.auth_key_size` bytes or is NULL
        // (this fn's contract; fi_endpoint(3)'s auth_key).
        auth_key: unsafe { opt_bytes(e.auth_key, e.auth_key_size) },
    }
}

/// `data_progress`, which API 2.0 puts in a union with `progress` (the one
/// progress model of a domain; same offset, same type).
fn data_progress(d: &ffi::fi_domain_attr) -> ffi::fi_progress {
    #[cfg(fi_2_0)]
    // SAFETY: both members of the union are an `enum fi_progress`.
    return unsafe { d.__bindgen_anon_1.data_progress };
    #[cfg(not(fi_2_0))]
    return d.data_progress;
}

fn set_data_progress(d: &mut ffi::fi_domain_attr, p: ffi::fi_progress) {
    #[cfg(fi_2_0)]
    {
        d.__bindgen_anon_1.data_progress = p;
    }
    #[cfg(not(fi_2_0))]
    {
        d.data_progress = p;
    }
}

/// # Safety
/// `d.name` is NULL or NUL-terminated; `d.auth_key` is NULL or holds
/// `d.auth_key_size` bytes.
unsafe fn domain_from(d: &ffi::fi_domain_attr) -> DomainAttr {
    DomainAttr {
        // SAFETY: `d.name` is NULL or NUL-terminated (this fn's contract).
        name: unsafe { opt_str(d.name) },
        threading: d.threading,
        control_progress: d.control_progress,
        data_progress: data_progress(d),
        resource_mgmt: d.resource_mgmt,
        av_type: d.av_type,
        mr_mode: d.mr_mode,
        mr_key_size: d.mr_key_size,
        cq_data_size: d.cq_data_size,
        cq_cnt: d.cq_cnt,
        ep_cnt: d.ep_cnt,
        tx_ctx_cnt: d.tx_ctx_cnt,
        rx_ctx_cnt: d.rx_ctx_cnt,
        max_ep_tx_ctx: d.max_ep_tx_ctx,
        max_ep_rx_ctx: d.max_ep_rx_ctx,
        max_ep_stx_ctx: d.max_ep_stx_ctx,
        max_ep_srx_ctx: d.max_ep_srx_ctx,
        cntr_cnt: d.cntr_cnt,
        mr_iov_limit: d.mr_iov_limit,
        caps: d.caps,
        mode: d.mode,
        auth_key_size: d.auth_key_size,
        // SAFETY: `d.auth_key` is NULL or holds `d.auth_key_size` bytes
        // (this fn's contract; fi_domain(3)'s auth_key).
        auth_key: unsafe { opt_bytes(d.auth_key, d.auth_key_size) },
        max_err_data: d.max_err_data,
        mr_cnt: d.mr_cnt,
        tclass: d.tclass,
    }
}

/// # Safety
/// Strings are NULL or NUL-terminated.
unsafe fn fabric_from(f: &ffi::fi_fabric_attr) -> FabricAttr {
    FabricAttr {
        // SAFETY: `f.name` is NULL or NUL-terminated (this fn's contract).
        name: unsafe { opt_str(f.name) },
        // SAFETY: `f.prov_name` is NULL or NUL-terminated (this fn's contract).
        prov_name: unsafe { opt_str(f.prov_name) },
        prov_version: f.prov_version,
        api_version: f.api_version,
    }
}

/// Decode application hints.
///
/// # Safety
/// `h` is NULL or a valid `fi_info` whose pointers are NULL or valid.
pub unsafe fn hints_from(h: *const ffi::fi_info) -> Option<Hints> {
    // SAFETY: `h` is NULL (None) or a readable fi_info whose address,
    // attr, string and key pointers are each NULL or valid for what they
    // name (this fn's contract, the shape fi_getinfo(3) gives hints), which
    // is what opt_addr and the *_from decoders need.
    unsafe {
        let h = h.as_ref()?;
        let (src, bad_src) = opt_addr(h.src_addr, h.src_addrlen);
        let (dest, bad_dest) = opt_addr(h.dest_addr, h.dest_addrlen);
        Some(Hints {
            caps: h.caps,
            mode: h.mode,
            addr_format: h.addr_format,
            src,
            dest,
            bad_src,
            bad_dest,
            tx: h.tx_attr.as_ref().map(tx_from),
            rx: h.rx_attr.as_ref().map(rx_from),
            ep: h.ep_attr.as_ref().map(|e| ep_from(e)),
            domain: h.domain_attr.as_ref().map(|d| domain_from(d)),
            fabric: h.fabric_attr.as_ref().map(|f| fabric_from(f)),
            handle: h.handle as usize,
        })
    }
}

/// Decode an info the application passes back to fi_domain/fi_endpoint,
/// filling absent attrs from oxmr's template for its endpoint type.
///
/// # Safety
/// As for [`hints_from`].
pub unsafe fn info_from(i: *const ffi::fi_info) -> Option<Info> {
    // SAFETY: `i` is NULL or a valid fi_info (this fn's contract, the same
    // as hints_from's).
    let h = unsafe { hints_from(i) }?;
    let ep_type = h.ep.as_ref().map_or(ffi::FI_EP_RDM, |e| e.type_);
    let t = crate::info::attrs::template(if ep_type == ffi::FI_EP_UNSPEC { ffi::FI_EP_RDM } else { ep_type });
    Some(Info {
        caps: if h.caps == 0 { t.caps } else { h.caps },
        mode: h.mode,
        addr_format: h.addr_format,
        src: h.src,
        dest: h.dest,
        tx: h.tx.unwrap_or(t.tx),
        rx: h.rx.unwrap_or(t.rx),
        ep: h.ep.unwrap_or(t.ep),
        domain: h.domain.unwrap_or(t.domain),
        fabric: h.fabric.unwrap_or(t.fabric),
        handle: h.handle,
    })
}

fn c_strdup(s: &Option<String>) -> *mut c_char {
    match s {
        None => ptr::null_mut(),
        Some(s) => {
            let c = std::ffi::CString::new(s.replace('\0', "")).unwrap_or_default();
            // SAFETY: strdup copies a valid C string into malloc'd memory.
            unsafe { libc::strdup(c.as_ptr()) }
        }
    }
}

/// A malloc'd copy of `b` (fi_freeinfo frees it), and its length; NULL
/// and 0 for None or when malloc fails.
fn c_bytes(b: &Option<Vec<u8>>) -> (*mut u8, usize) {
    let Some(b) = b.as_ref().filter(|b| !b.is_empty()) else { return (ptr::null_mut(), 0) };
    // SAFETY: malloc of a non-zero size; NULL is checked.
    let p = unsafe { libc::malloc(b.len()) }.cast::<u8>();
    if p.is_null() {
        return (p, 0);
    }
    // SAFETY: `p` holds `b.len()` freshly allocated bytes, disjoint from `b`.
    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p, b.len()) };
    (p, b.len())
}

fn c_addr(a: &Option<std::net::SocketAddr>) -> (*mut std::ffi::c_void, usize) {
    match a {
        None => (ptr::null_mut(), 0),
        Some(a) => {
            let bytes = addr::encode(a);
            // SAFETY: malloc of a non-zero size; checked for NULL.
            let p = unsafe { libc::malloc(bytes.len()) };
            if p.is_null() {
                return (ptr::null_mut(), 0);
            }
            // SAFETY: `p` has bytes.len() writable bytes.
            unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), p as *mut u8, bytes.len()) };
            (p, bytes.len())
        }
    }
}

/// Build one C info (freed by the application with fi_freeinfo).
fn to_c(i: &Info) -> *mut ffi::fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed info with every attr.
    let c = unsafe { ffi::fi_dupinfo(ptr::null()) };
    if c.is_null() {
        return c;
    }
    // SAFETY: `c` and its five attrs were just allocated by libfabric.
    unsafe {
        let ci = &mut *c;
        ci.caps = i.caps;
        ci.mode = i.mode;
        ci.addr_format = i.addr_format;
        (ci.src_addr, ci.src_addrlen) = c_addr(&i.src);
        (ci.dest_addr, ci.dest_addrlen) = c_addr(&i.dest);
        ci.handle = i.handle as ffi::fid_t;

        let t = &mut *ci.tx_attr;
        t.caps = i.tx.caps;
        t.mode = i.tx.mode;
        t.op_flags = i.tx.op_flags;
        t.msg_order = i.tx.msg_order;
        t.comp_order = i.tx.comp_order;
        t.inject_size = i.tx.inject_size;
        t.size = i.tx.size;
        t.iov_limit = i.tx.iov_limit;
        t.rma_iov_limit = i.tx.rma_iov_limit;
        t.tclass = i.tx.tclass;

        let r = &mut *ci.rx_attr;
        r.caps = i.rx.caps;
        r.mode = i.rx.mode;
        r.op_flags = i.rx.op_flags;
        r.msg_order = i.rx.msg_order;
        r.comp_order = i.rx.comp_order;
        r.total_buffered_recv = i.rx.total_buffered_recv;
        r.size = i.rx.size;
        r.iov_limit = i.rx.iov_limit;

        let e = &mut *ci.ep_attr;
        e.type_ = i.ep.type_;
        e.protocol = i.ep.protocol;
        e.protocol_version = i.ep.protocol_version;
        e.max_msg_size = i.ep.max_msg_size;
        e.msg_prefix_size = i.ep.msg_prefix_size;
        e.max_order_raw_size = i.ep.max_order_raw_size;
        e.max_order_war_size = i.ep.max_order_war_size;
        e.max_order_waw_size = i.ep.max_order_waw_size;
        e.mem_tag_format = i.ep.mem_tag_format;
        e.tx_ctx_cnt = i.ep.tx_ctx_cnt;
        e.rx_ctx_cnt = i.ep.rx_ctx_cnt;
        (e.auth_key, e.auth_key_size) = c_bytes(&i.ep.auth_key);

        let d = &mut *ci.domain_attr;
        d.name = c_strdup(&i.domain.name);
        d.threading = i.domain.threading;
        d.control_progress = i.domain.control_progress;
        set_data_progress(d, i.domain.data_progress);
        d.resource_mgmt = i.domain.resource_mgmt;
        d.av_type = i.domain.av_type;
        d.mr_mode = i.domain.mr_mode;
        d.mr_key_size = i.domain.mr_key_size;
        d.cq_data_size = i.domain.cq_data_size;
        d.cq_cnt = i.domain.cq_cnt;
        d.ep_cnt = i.domain.ep_cnt;
        d.tx_ctx_cnt = i.domain.tx_ctx_cnt;
        d.rx_ctx_cnt = i.domain.rx_ctx_cnt;
        d.max_ep_tx_ctx = i.domain.max_ep_tx_ctx;
        d.max_ep_rx_ctx = i.domain.max_ep_rx_ctx;
        d.max_ep_stx_ctx = i.domain.max_ep_stx_ctx;
        d.max_ep_srx_ctx = i.domain.max_ep_srx_ctx;
        d.cntr_cnt = i.domain.cntr_cnt;
        d.mr_iov_limit = i.domain.mr_iov_limit;
        d.caps = i.domain.caps;
        d.mode = i.domain.mode;
        (d.auth_key, d.auth_key_size) = c_bytes(&i.domain.auth_key);
        d.max_err_data = i.domain.max_err_data;
        d.mr_cnt = i.domain.mr_cnt;
        d.tclass = i.domain.tclass;

        let f = &mut *ci.fabric_attr;
        f.name = c_strdup(&i.fabric.name);
        // prov_name stays NULL: the core fills it in.
        f.prov_version = i.fabric.prov_version;
        f.api_version = i.fabric.api_version;
    }
    c
}

/// Build the C list for a getinfo answer; NULL (and nothing leaked) if an
/// allocation fails.
pub fn list_to_c(infos: &[Info]) -> *mut ffi::fi_info {
    let mut head: *mut ffi::fi_info = ptr::null_mut();
    for i in infos.iter().rev() {
        let c = to_c(i);
        if c.is_null() {
            // SAFETY: `head` is NULL or a list built here with fi_dupinfo.
            unsafe { ffi::fi_freeinfo(head) };
            return ptr::null_mut();
        }
        // SAFETY: `c` is a fresh info owned here.
        unsafe { (*c).next = head };
        head = c;
    }
    head
}
