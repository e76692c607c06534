//! oxmr's extension API, as C sees it in `include/rdma/fi_ext_oxmr.h`
//! (generated from this file by cbindgen; CI fails when the header is
//! stale).
//!
//! Conventions, for every table added here: a table is obtained with
//! `fi_open_ops(fid, NAME, 0, (void **)&ops, NULL)` and stays valid while
//! the fid is open; its first field is its size in bytes, so an application
//! built against an older header can check which slots exist; functions
//! return 0 or a negative `FI_E*` code and write out-parameters only on
//! success.
//!
//! The registration table ("oxmr_mr_ops") is not there yet: `fi_open_ops`
//! answers -FI_ENOSYS until the memory-registration work lands.

/// Version of the extension API described by this header.
pub const OXMR_EXT_VERSION: u32 = 1;

/// Name of the provider, as given to `FI_PROVIDER` and printed by `fi_info`.
pub const OXMR_PROV_NAME: &str = "oxmr";

/// `fi_open_ops` name of the memory-registration extension table.
pub const OXMR_MR_OPS_NAME: &str = "oxmr_mr_ops";

#[cfg(test)]
mod tests {
    /// cbindgen cannot export string constants, so cbindgen.toml spells
    /// them; this keeps the header and the provider in agreement.
    #[test]
    fn header_strings_match() {
        let h = include_str!("../../include/rdma/fi_ext_oxmr.h");
        assert!(h.contains(&format!(
            "#define OXMR_PROV_NAME \"{}\"",
            super::OXMR_PROV_NAME
        )));
        assert!(h.contains(&format!(
            "#define OXMR_MR_OPS_NAME \"{}\"",
            super::OXMR_MR_OPS_NAME
        )));
        assert!(h.contains(&format!(
            "#define OXMR_EXT_VERSION {}",
            super::OXMR_EXT_VERSION
        )));
    }

    /// The README's variable table lists every FI_OXMR_* variable.
    #[test]
    fn readme_lists_every_variable() {
        let readme = include_str!("../../README.md");
        for p in crate::boundary::params::PARAMS {
            let var = format!("FI_OXMR_{}", p.name.to_str().unwrap().to_uppercase());
            assert!(
                readme.contains(&format!("| `{var}` |")),
                "README misses {var}"
            );
        }
    }
}
