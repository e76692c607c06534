//! Data-transfer slots of an endpoint: message, tagged, RMA, atomic and
//! collective operations. The data path is not implemented yet, so each
//! slot logs and returns -FI_ENOSYS (never a silent success); the README's
//! Status section says so. The tables are complete so that no slot is NULL.

use std::ffi::c_void;

use ffi::{fi_addr_t, fid_ep, iovec};
use oxmr_ffi as ffi;

crate::enosys!(msg_recv, "fi_recv", (ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(msg_recvv, "fi_recvv", (ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, src_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(msg_recvmsg, "fi_recvmsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg, flags: u64) -> isize);
crate::enosys!(msg_send, "fi_send", (ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(msg_sendv, "fi_sendv", (ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(msg_sendmsg, "fi_sendmsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg, flags: u64) -> isize);
crate::enosys!(msg_inject, "fi_inject", (ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t) -> isize);
crate::enosys!(msg_senddata, "fi_senddata", (ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(msg_injectdata, "fi_injectdata", (ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest_addr: fi_addr_t) -> isize);

pub static MSG_OPS: ffi::fi_ops_msg = ffi::fi_ops_msg {
    size: size_of::<ffi::fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
};

crate::enosys!(rma_read, "fi_rma_read", (ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize);
crate::enosys!(rma_readv, "fi_rma_readv", (ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, src_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize);
crate::enosys!(rma_readmsg, "fi_rma_readmsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize);
crate::enosys!(rma_write, "fi_rma_write", (ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize);
crate::enosys!(rma_writev, "fi_rma_writev", (ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize);
crate::enosys!(rma_writemsg, "fi_rma_writemsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_rma, flags: u64) -> isize);
crate::enosys!(rma_inject, "fi_rma_inject", (ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t, addr: u64, key: u64) -> isize);
crate::enosys!(rma_writedata, "fi_rma_writedata", (ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest_addr: fi_addr_t, addr: u64, key: u64, context: *mut c_void) -> isize);
crate::enosys!(rma_injectdata, "fi_rma_injectdata", (ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest_addr: fi_addr_t, addr: u64, key: u64) -> isize);

pub static RMA_OPS: ffi::fi_ops_rma = ffi::fi_ops_rma {
    size: size_of::<ffi::fi_ops_rma>(),
    read: Some(rma_read),
    readv: Some(rma_readv),
    readmsg: Some(rma_readmsg),
    write: Some(rma_write),
    writev: Some(rma_writev),
    writemsg: Some(rma_writemsg),
    inject: Some(rma_inject),
    writedata: Some(rma_writedata),
    injectdata: Some(rma_injectdata),
};

crate::enosys!(tagged_recv, "fi_trecv", (ep: *mut fid_ep, buf: *mut c_void, len: usize, desc: *mut c_void, src_addr: fi_addr_t, tag: u64, ignore: u64, context: *mut c_void) -> isize);
crate::enosys!(tagged_recvv, "fi_trecvv", (ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, src_addr: fi_addr_t, tag: u64, ignore: u64, context: *mut c_void) -> isize);
crate::enosys!(tagged_recvmsg, "fi_trecvmsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_tagged, flags: u64) -> isize);
crate::enosys!(tagged_send, "fi_tsend", (ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, dest_addr: fi_addr_t, tag: u64, context: *mut c_void) -> isize);
crate::enosys!(tagged_sendv, "fi_tsendv", (ep: *mut fid_ep, iov: *const iovec, desc: *mut *mut c_void, count: usize, dest_addr: fi_addr_t, tag: u64, context: *mut c_void) -> isize);
crate::enosys!(tagged_sendmsg, "fi_tsendmsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_tagged, flags: u64) -> isize);
crate::enosys!(tagged_inject, "fi_tinject", (ep: *mut fid_ep, buf: *const c_void, len: usize, dest_addr: fi_addr_t, tag: u64) -> isize);
crate::enosys!(tagged_senddata, "fi_tsenddata", (ep: *mut fid_ep, buf: *const c_void, len: usize, desc: *mut c_void, data: u64, dest_addr: fi_addr_t, tag: u64, context: *mut c_void) -> isize);
crate::enosys!(tagged_injectdata, "fi_tinjectdata", (ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest_addr: fi_addr_t, tag: u64) -> isize);

pub static TAGGED_OPS: ffi::fi_ops_tagged = ffi::fi_ops_tagged {
    size: size_of::<ffi::fi_ops_tagged>(),
    recv: Some(tagged_recv),
    recvv: Some(tagged_recvv),
    recvmsg: Some(tagged_recvmsg),
    send: Some(tagged_send),
    sendv: Some(tagged_sendv),
    sendmsg: Some(tagged_sendmsg),
    inject: Some(tagged_inject),
    senddata: Some(tagged_senddata),
    injectdata: Some(tagged_injectdata),
};

crate::enosys!(atomic_write, "fi_atomic_write", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op, context: *mut c_void) -> isize);
crate::enosys!(atomic_writev, "fi_atomic_writev", (ep: *mut fid_ep, iov: *const ffi::fi_ioc, desc: *mut *mut c_void, count: usize, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op, context: *mut c_void) -> isize);
crate::enosys!(atomic_writemsg, "fi_atomic_writemsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_atomic, flags: u64) -> isize);
crate::enosys!(atomic_inject, "fi_atomic_inject", (ep: *mut fid_ep, buf: *const c_void, count: usize, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op) -> isize);
crate::enosys!(atomic_readwrite, "fi_atomic_readwrite", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op, context: *mut c_void) -> isize);
crate::enosys!(atomic_readwritev, "fi_atomic_readwritev", (ep: *mut fid_ep, iov: *const ffi::fi_ioc, desc: *mut *mut c_void, count: usize, resultv: *mut ffi::fi_ioc, result_desc: *mut *mut c_void, result_count: usize, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op, context: *mut c_void) -> isize);
crate::enosys!(atomic_readwritemsg, "fi_atomic_readwritemsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_atomic, resultv: *mut ffi::fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize);
crate::enosys!(atomic_compwrite, "fi_atomic_compwrite", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, compare: *const c_void, compare_desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op, context: *mut c_void) -> isize);
crate::enosys!(atomic_compwritev, "fi_atomic_compwritev", (ep: *mut fid_ep, iov: *const ffi::fi_ioc, desc: *mut *mut c_void, count: usize, comparev: *const ffi::fi_ioc, compare_desc: *mut *mut c_void, compare_count: usize, resultv: *mut ffi::fi_ioc, result_desc: *mut *mut c_void, result_count: usize, dest_addr: fi_addr_t, addr: u64, key: u64, datatype: ffi::fi_datatype, op: ffi::fi_op, context: *mut c_void) -> isize);
crate::enosys!(atomic_compwritemsg, "fi_atomic_compwritemsg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_atomic, comparev: *const ffi::fi_ioc, compare_desc: *mut *mut c_void, compare_count: usize, resultv: *mut ffi::fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize);
crate::enosys!(atomic_writevalid, "fi_atomic_writevalid", (ep: *mut fid_ep, datatype: ffi::fi_datatype, op: ffi::fi_op, count: *mut usize) -> i32);
crate::enosys!(atomic_readwritevalid, "fi_atomic_readwritevalid", (ep: *mut fid_ep, datatype: ffi::fi_datatype, op: ffi::fi_op, count: *mut usize) -> i32);
crate::enosys!(atomic_compwritevalid, "fi_atomic_compwritevalid", (ep: *mut fid_ep, datatype: ffi::fi_datatype, op: ffi::fi_op, count: *mut usize) -> i32);

pub static ATOMIC_OPS: ffi::fi_ops_atomic = ffi::fi_ops_atomic {
    size: size_of::<ffi::fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

crate::enosys!(coll_barrier, "fi_coll_barrier", (ep: *mut fid_ep, coll_addr: fi_addr_t, context: *mut c_void) -> isize);
crate::enosys!(coll_broadcast, "fi_coll_broadcast", (ep: *mut fid_ep, buf: *mut c_void, count: usize, desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_alltoall, "fi_coll_alltoall", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_allreduce, "fi_coll_allreduce", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, op: ffi::fi_op, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_allgather, "fi_coll_allgather", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_reduce_scatter, "fi_coll_reduce_scatter", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, datatype: ffi::fi_datatype, op: ffi::fi_op, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_reduce, "fi_coll_reduce", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, op: ffi::fi_op, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_scatter, "fi_coll_scatter", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_gather, "fi_coll_gather", (ep: *mut fid_ep, buf: *const c_void, count: usize, desc: *mut c_void, result: *mut c_void, result_desc: *mut c_void, coll_addr: fi_addr_t, root_addr: fi_addr_t, datatype: ffi::fi_datatype, flags: u64, context: *mut c_void) -> isize);
crate::enosys!(coll_msg, "fi_coll_msg", (ep: *mut fid_ep, msg: *const ffi::fi_msg_collective, resultv: *mut ffi::fi_ioc, result_desc: *mut *mut c_void, result_count: usize, flags: u64) -> isize);
crate::enosys!(coll_barrier2, "fi_coll_barrier2", (ep: *mut fid_ep, coll_addr: fi_addr_t, flags: u64, context: *mut c_void) -> isize);

pub static COLL_OPS: ffi::fi_ops_collective = ffi::fi_ops_collective {
    size: size_of::<ffi::fi_ops_collective>(),
    barrier: Some(coll_barrier),
    broadcast: Some(coll_broadcast),
    alltoall: Some(coll_alltoall),
    allreduce: Some(coll_allreduce),
    allgather: Some(coll_allgather),
    reduce_scatter: Some(coll_reduce_scatter),
    reduce: Some(coll_reduce),
    scatter: Some(coll_scatter),
    gather: Some(coll_gather),
    msg: Some(coll_msg),
    barrier2: Some(coll_barrier2),
};
