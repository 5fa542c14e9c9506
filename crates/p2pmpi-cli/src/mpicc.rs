//! `p2pmpi mpicc …`, `p2pmpi mpicxx …` and `p2pmpi abi-check PROGRAM`: compiling against
//! p2pmpi's `mpi.h` and library with MPICH's ABI, for users without MPICH, and listing what of
//! a built program the library lacks.

use crate::abi;
use crate::elf::Elf;
use anyhow::{Context, Result};
use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;

/// The compiler driver's options that stop before linking.
const NO_LINK: [&str; 5] = ["-c", "-S", "-E", "-M", "-MM"];

/// The compiler command of `p2pmpi mpicc` (`cxx`: `mpicxx`) for `args`: `gcc` (`g++`; or
/// `P2PMPI_CC`, `P2PMPI_CXX`) with our header's directory, and when it links, our library
/// (`-lmpi` from the directory of its names, which also becomes the program's RUNPATH: a
/// program run alone finds it, and `LD_LIBRARY_PATH` still comes first).
pub fn command(cxx: bool, args: &[String]) -> Result<Command> {
    let lib = abi::find_library()?;
    let dir = abi::library_dir(&lib)?;
    let include = abi::include_dir(&dir)?;
    let (var, default) = if cxx { ("P2PMPI_CXX", "g++") } else { ("P2PMPI_CC", "gcc") };
    let compiler = std::env::var(var).ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.into());
    let mut cmd = Command::new(compiler);
    cmd.arg(format!("-I{}", include.display()));
    cmd.args(args.iter().filter(|a| !matches!(a.as_str(), "-show" | "--show")));
    if !args.iter().any(|a| NO_LINK.contains(&a.as_str())) {
        let d = dir.display();
        cmd.arg(format!("-L{d}")).arg(format!("-Wl,-rpath,{d}")).arg("-Wl,--enable-new-dtags").arg("-lmpi");
    }
    Ok(cmd)
}

/// `p2pmpi mpicc|mpicxx ARGS`: runs the compiler (`-show`: prints its command instead).
pub fn compile(name: &str, cxx: bool, args: &[String]) -> i32 {
    let mut cmd = match command(cxx, args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: error: {}", crate::error_text(&e));
            return 1;
        }
    };
    if args.iter().any(|a| a == "-show" || a == "--show") {
        let words: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        println!("{}", words.join(" "));
        return 0;
    }
    match cmd.status() {
        Ok(st) => st.code().unwrap_or(1),
        Err(e) => {
            eprintln!("{name}: error: cannot run {}: {e}", cmd.get_program().to_string_lossy());
            1
        }
    }
}

/// Whether a symbol is of MPI's interface (or MPICH's internals a program may import).
fn is_mpi_symbol(name: &str) -> bool {
    ["MPI_", "PMPI_", "MPIX_", "PMPIX_", "MPII_", "MPIR_"].iter().any(|p| name.starts_with(p))
}

/// What `program` imports of MPI that `lib` lacks: (imported, absent, stubs), sorted.
pub fn check(program: &Path, lib: &Path) -> Result<(usize, Vec<String>, Vec<String>)> {
    let elf = Elf::read(program)?;
    let imports: BTreeSet<String> =
        elf.symbols()?.into_iter().filter(|s| !s.defined && is_mpi_symbol(&s.name)).map(|s| s.name).collect();
    let ours = Elf::read(lib)?;
    let symbols = ours.symbols()?;
    let exported: HashSet<&str> = symbols.iter().filter(|s| s.defined).map(|s| s.name.as_str()).collect();
    let stubs: HashSet<String> = match symbols.iter().find(|s| s.defined && s.name == abi::STUBS_SYMBOL) {
        Some(s) => String::from_utf8_lossy(ours.symbol_bytes(s)?).lines().map(str::to_string).collect(),
        None => anyhow::bail!("{} has no list of its stubs ({}): an older build?", lib.display(), abi::STUBS_SYMBOL),
    };
    let absent = imports.iter().filter(|n| !exported.contains(n.as_str())).cloned().collect();
    let stubbed = imports.iter().filter(|n| exported.contains(n.as_str()) && stubs.contains(*n)).cloned().collect();
    Ok((imports.len(), absent, stubbed))
}

/// `p2pmpi abi-check PROGRAM`: prints the MPI functions `program` imports that p2pmpi's
/// library lacks or provides only as stubs, and why `p2pmpirun` would refuse it (it would load
/// another MPI library); 0 when there is nothing to say, 1 when there is.
pub fn abi_check(program: &Path) -> Result<i32> {
    let lib = abi::find_library()?;
    let (imported, absent, stubs) = check(program, &lib).context("abi-check")?;
    println!(
        "{}: {imported} MPI symbol(s) imported; p2pmpi's library ({}) provides {} of them",
        program.display(),
        lib.display(),
        imported - absent.len() - stubs.len()
    );
    for n in &absent {
        println!("  {n}: absent (the program would not load)");
    }
    for n in &stubs {
        println!("  {n}: stub (fails with MPI_ERR_UNSUPPORTED_OPERATION)");
    }
    // What p2pmpirun would say of it: another MPI library found first (an RPATH…).
    let refused = abi::setup(program, &[]).err();
    if let Some(e) = &refused {
        println!("  refused by p2pmpirun: {e:#}");
    }
    Ok(if absent.is_empty() && stubs.is_empty() && refused.is_none() { 0 } else { 1 })
}
