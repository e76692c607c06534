//! Link flags for liboxmr-fi.so, and the libfabric header version as cfgs.
fn main() {
    // libfabric dlcloses providers in fi_fini() at process exit, while
    // oxmr's userfaultfd monitor thread may still be running its code: keep
    // the library mapped for the life of the process (RTLD_NODELETE).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");

    // The headers' version, from the ffi crate's build (pkg-config):
    // `fi_1_20` where fi_ops_av has the auth-key and user-id slots and
    // fi_mr_attr's mr_iov shares a union with dmabuf (FI_MR_DMABUF);
    // `fi_2_0` where fi_domain_attr's data_progress shares a union with
    // progress.
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let major = num("DEP_FABRIC_MAJOR").unwrap_or(1);
    let minor = num("DEP_FABRIC_MINOR").unwrap_or(0);
    let at_least = |a: u32, b: u32| (major, minor) >= (a, b);
    println!("cargo:rustc-check-cfg=cfg(fi_1_20)");
    println!("cargo:rustc-check-cfg=cfg(fi_2_0)");
    if at_least(1, 20) {
        println!("cargo:rustc-cfg=fi_1_20");
    }
    if at_least(2, 0) {
        println!("cargo:rustc-cfg=fi_2_0");
    }
}
