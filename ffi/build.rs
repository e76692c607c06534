//! Generates the libfabric bindings from the headers `pkg-config libfabric`
//! finds, so every struct layout matches the library oxmr is loaded into.

use std::env;
use std::path::PathBuf;

fn main() {
    let lib = pkg_config::Config::new()
        .atleast_version("1.17")
        // Link libfabric as libfabric's own dlopened providers do
        // ("linkback"): symbols resolve to the already-loaded library, and
        // Rust test binaries can call the real libfabric.
        .probe("libfabric")
        .expect("libfabric >= 1.17 not found by pkg-config: apt-get install libfabric-dev pkg-config");

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for path in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", path.display()));
    }
    let bindings = builder.generate().expect("bindgen failed on the libfabric headers (is libclang-dev installed?)");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings.write_to_file(out.join("bindings.rs")).expect("cannot write bindings.rs");

    // Tell dependants which header version they compile against (as
    // DEP_FABRIC_MAJOR / DEP_FABRIC_MINOR: this crate `links` fabric), so
    // that code which needs a newer API can be gated on it.
    let version = lib.version.clone();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(1), parts.next().unwrap_or(0));
    println!("cargo:major={major}");
    println!("cargo:minor={minor}");
    println!("cargo:rerun-if-changed=wrapper.h");
}
