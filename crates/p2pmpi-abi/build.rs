//! Names the shared library as MPICH's ABI does, so that programs linked by `mpicc.mpich`
//! (which need `libmpich.so.12`) and loaders that look for `libmpi.so.12` accept it.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpi.so.12");
    println!("cargo:rerun-if-changed=build.rs");
}
