//! Link flags for liboxmr-fi.so.
fn main() {
    // libfabric dlcloses providers in fi_fini() at process exit, while
    // oxmr's userfaultfd monitor thread may still be running its code: keep
    // the library mapped for the life of the process (RTLD_NODELETE).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rerun-if-changed=build.rs");
}
