//! The one error type inside oxmr, and its one conversion to a C return.
//!
//! An [`Error`] carries a positive `FI_E*` code. Rejections of caller input
//! are created with [`fail!`](crate::fail), which logs one line (in the
//! subsystem of the module that rejects) saying what was wrong and what to
//! do; flow control (`-FI_EAGAIN`) and "nothing matched" answers are made
//! with [`Error::quiet`] and never logged as warnings.

use std::fmt;

/// A libfabric error: `code` is the positive `FI_E*` value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Error {
    code: u32,
}

/// oxmr's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error that has already been logged, or needs no log line.
    pub const fn quiet(code: u32) -> Self {
        Error { code }
    }

    /// The positive `FI_E*` code.
    pub const fn code(self) -> u32 {
        self.code
    }

    /// The negative value a C entry point returns.
    pub const fn to_c(self) -> i32 {
        -(self.code as i32)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "-FI_E({}) {}", self.code, errno_name(self.code))
    }
}

/// Short name of an `FI_E*` code, for log lines and test messages.
pub fn errno_name(code: u32) -> &'static str {
    use oxmr_ffi as f;
    match code {
        f::FI_EPERM => "FI_EPERM",
        f::FI_ENOENT => "FI_ENOENT",
        f::FI_EINTR => "FI_EINTR",
        f::FI_EIO => "FI_EIO",
        f::FI_E2BIG => "FI_E2BIG",
        f::FI_EBADF => "FI_EBADF",
        f::FI_EAGAIN => "FI_EAGAIN",
        f::FI_ENOMEM => "FI_ENOMEM",
        f::FI_EACCES => "FI_EACCES",
        f::FI_EFAULT => "FI_EFAULT",
        f::FI_EBUSY => "FI_EBUSY",
        f::FI_ENODEV => "FI_ENODEV",
        f::FI_EINVAL => "FI_EINVAL",
        f::FI_EMFILE => "FI_EMFILE",
        f::FI_ENOSPC => "FI_ENOSPC",
        f::FI_ENOSYS => "FI_ENOSYS",
        f::FI_ENODATA => "FI_ENODATA",
        f::FI_EOVERFLOW => "FI_EOVERFLOW",
        f::FI_EMSGSIZE => "FI_EMSGSIZE",
        f::FI_ENOPROTOOPT => "FI_ENOPROTOOPT",
        f::FI_EOPNOTSUPP => "FI_EOPNOTSUPP",
        f::FI_EADDRINUSE => "FI_EADDRINUSE",
        f::FI_EADDRNOTAVAIL => "FI_EADDRNOTAVAIL",
        f::FI_ENETDOWN => "FI_ENETDOWN",
        f::FI_ENETUNREACH => "FI_ENETUNREACH",
        f::FI_ECONNABORTED => "FI_ECONNABORTED",
        f::FI_ECONNRESET => "FI_ECONNRESET",
        f::FI_EISCONN => "FI_EISCONN",
        f::FI_ENOTCONN => "FI_ENOTCONN",
        f::FI_ESHUTDOWN => "FI_ESHUTDOWN",
        f::FI_ETIMEDOUT => "FI_ETIMEDOUT",
        f::FI_ECONNREFUSED => "FI_ECONNREFUSED",
        f::FI_EHOSTDOWN => "FI_EHOSTDOWN",
        f::FI_EHOSTUNREACH => "FI_EHOSTUNREACH",
        f::FI_EALREADY => "FI_EALREADY",
        f::FI_EINPROGRESS => "FI_EINPROGRESS",
        f::FI_EREMOTEIO => "FI_EREMOTEIO",
        f::FI_ECANCELED => "FI_ECANCELED",
        f::FI_ENOKEY => "FI_ENOKEY",
        f::FI_EKEYREJECTED => "FI_EKEYREJECTED",
        f::FI_EOTHER => "FI_EOTHER",
        f::FI_ETOOSMALL => "FI_ETOOSMALL",
        f::FI_EOPBADSTATE => "FI_EOPBADSTATE",
        f::FI_EAVAIL => "FI_EAVAIL",
        f::FI_EBADFLAGS => "FI_EBADFLAGS",
        f::FI_ENOEQ => "FI_ENOEQ",
        f::FI_EDOMAIN => "FI_EDOMAIN",
        f::FI_ENOCQ => "FI_ENOCQ",
        f::FI_ECRC => "FI_ECRC",
        f::FI_ETRUNC => "FI_ETRUNC",
        f::FI_ENOAV => "FI_ENOAV",
        f::FI_EOVERRUN => "FI_EOVERRUN",
        _ => "FI_E?",
    }
}

/// Log one warning line and produce the error: `fail!(FI_EINVAL, "...", args)`.
///
/// The line is attributed to the calling module, which decides the libfabric
/// log subsystem (see `boundary::log`).
#[macro_export]
macro_rules! fail {
    ($code:expr, $($arg:tt)+) => {{
        ::tracing::warn!($($arg)+);
        $crate::error::Error::quiet($code)
    }};
}
