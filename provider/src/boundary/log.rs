//! Logging through libfabric's own logger.
//!
//! oxmr's code logs with `tracing` macros. This subscriber, installed by
//! `fi_prov_ini`, forwards each event to `fi_log` when `fi_log_enabled`
//! says libfabric wants it, so `FI_LOG_LEVEL`, `FI_LOG_PROV` and
//! `FI_LOG_SUBSYS` behave as for every other provider. The message is
//! formatted in Rust and passed as `"%s"`: no user text ever reaches a
//! printf format string.
//!
//! The subsystem comes from the module that logs (`oxmr::objects::cq` ->
//! `FI_LOG_CQ`); levels map error/warn -> WARN, info -> INFO,
//! debug -> DEBUG, trace -> TRACE (libfabric's per-call tracing level).

use std::ffi::CString;
use std::fmt::Write as _;

use oxmr_ffi as ffi;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use super::provider::provider_ptr;

/// The libfabric log subsystem for a module path.
pub fn subsys_of(module_path: &str) -> ffi::fi_log_subsys {
    for seg in module_path.rsplit("::") {
        let s = match seg {
            "cq" => ffi::FI_LOG_CQ,
            "eq" => ffi::FI_LOG_EQ,
            "av" => ffi::FI_LOG_AV,
            "cntr" => ffi::FI_LOG_CNTR,
            "mr" => ffi::FI_LOG_MR,
            "ep" | "pep" => ffi::FI_LOG_EP_CTRL,
            "shm" | "tcp" | "protocol" => ffi::FI_LOG_EP_DATA,
            "domain" => ffi::FI_LOG_DOMAIN,
            "info" | "provider" => ffi::FI_LOG_CORE,
            "fabric" => ffi::FI_LOG_FABRIC,
            _ => continue,
        };
        return s;
    }
    ffi::FI_LOG_FABRIC
}

fn level_of(level: &Level) -> ffi::fi_log_level {
    match *level {
        Level::ERROR | Level::WARN => ffi::FI_LOG_WARN,
        Level::INFO => ffi::FI_LOG_INFO,
        Level::DEBUG => ffi::FI_LOG_DEBUG,
        Level::TRACE => ffi::FI_LOG_TRACE,
    }
}

fn enabled_for(meta: &Metadata<'_>) -> bool {
    let subsys = subsys_of(meta.module_path().unwrap_or(meta.target()));
    // SAFETY: fi_log_enabled only reads the provider struct, which is a
    // static that libfabric registered from fi_prov_ini.
    unsafe { ffi::fi_log_enabled(provider_ptr(), level_of(meta.level()), subsys) != 0 }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

/// The `tracing` subscriber that writes through `fi_log`.
pub struct FiLog;

impl Subscriber for FiLog {
    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        enabled_for(meta)
    }
    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        // Spans carry no state of their own here; events are self-contained.
        Id::from_u64(1)
    }
    fn record(&self, _span: &Id, _values: &Record<'_>) {}
    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut msg = Message(String::new());
        event.record(&mut msg);
        msg.0.push('\n');
        let text = CString::new(msg.0.replace('\0', "\\0")).unwrap_or_default();
        let func = CString::new(meta.module_path().unwrap_or("oxmr")).unwrap_or_default();
        let line = meta.line().unwrap_or(0) as i32;
        let subsys = subsys_of(meta.module_path().unwrap_or(meta.target()));
        // SAFETY: every pointer is a NUL-terminated string that outlives the
        // call; the format is a literal "%s" consuming exactly one string.
        unsafe {
            ffi::fi_log(
                provider_ptr(),
                level_of(meta.level()),
                subsys,
                func.as_ptr(),
                line,
                c"%s".as_ptr(),
                text.as_ptr(),
            );
        }
    }
    fn enter(&self, _span: &Id) {}
    fn exit(&self, _span: &Id) {}
}

/// Install the bridge (once; later calls are no-ops).
pub fn install() {
    let _ = tracing::dispatcher::set_global_default(tracing::Dispatch::new(FiLog));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_map_to_subsystems() {
        assert_eq!(subsys_of("oxmr::objects::cq"), ffi::FI_LOG_CQ);
        assert_eq!(subsys_of("oxmr::boundary::av"), ffi::FI_LOG_AV);
        assert_eq!(subsys_of("oxmr::mr::cache"), ffi::FI_LOG_MR);
        assert_eq!(subsys_of("oxmr::info::matching"), ffi::FI_LOG_CORE);
        assert_eq!(subsys_of("oxmr::boundary::guard"), ffi::FI_LOG_FABRIC);
    }
}
