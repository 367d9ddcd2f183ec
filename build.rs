// Gives the shared library a SONAME (libdeltacells.so.<ABI>), so that programs linked
// against it record the name, not the build path.
fn main() {
    const ABI: u32 = 1; // = DC_ABI_VERSION (checked by a test)
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "freebsd" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdeltacells.so.{ABI}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
