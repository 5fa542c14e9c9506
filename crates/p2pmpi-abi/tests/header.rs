//! Our `include/mpi.h` against Debian's MPICH header (libmpich-dev): every constant it
//! defines has MPICH's value, every type MPICH's size (and `MPI_Status` MPICH's layout), and
//! every function and data object it declares MPICH's type. Any difference fails.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The object-like macros of a header (`#define NAME VALUE`), in order.
fn constants(header: &str) -> Vec<String> {
    header
        .lines()
        .filter_map(|l| l.strip_prefix("#define "))
        .filter_map(|l| {
            let name: String = l.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let rest = &l[name.len()..];
            // Function-like macros and bare flags are not values.
            (!rest.starts_with('(') && !rest.trim().is_empty()).then_some(name)
        })
        .filter(|n| n.starts_with("MPI_") || n.starts_with("MPIX_"))
        // The addresses of functions (`MPI_COMM_DUP_FN` is `MPIR_Dup_fn`) are known only
        // once linked: their declarations are compared instead.
        .filter(|n| !n.ends_with("DUP_FN"))
        .collect()
}

/// The types whose sizes must match.
const TYPES: &[&str] = &[
    "MPI_Aint",
    "MPI_Offset",
    "MPI_Count",
    "MPI_Fint",
    "MPI_Status",
    "MPI_Comm",
    "MPI_Datatype",
    "MPI_Group",
    "MPI_Op",
    "MPI_Request",
    "MPI_Message",
    "MPI_Errhandler",
    "MPI_Info",
    "MPI_Win",
    "MPI_Session",
    "MPI_File",
];

const STATUS_FIELDS: &[&str] = &["count_lo", "count_hi_and_cancelled", "MPI_SOURCE", "MPI_TAG", "MPI_ERROR"];

/// A C program printing `NAME=value` for each constant, type size, field offset and the
/// signedness of the integer types.
fn values_program(names: &[String]) -> String {
    let mut c = String::from(
        "#include <mpi.h>\n#include <stdio.h>\n#include <stddef.h>\n#include <stdint.h>\nint main(void) {\n",
    );
    for n in names {
        c += &format!("    printf(\"{n}=%lld\\n\", (long long)(intptr_t)({n}));\n");
    }
    for t in TYPES {
        c += &format!("    printf(\"sizeof({t})=%zu\\n\", sizeof({t}));\n");
    }
    for t in ["MPI_Aint", "MPI_Offset", "MPI_Count", "MPI_Fint"] {
        c += &format!("    printf(\"signed({t})=%d\\n\", (int)(({t})-1 < 0));\n");
    }
    for f in STATUS_FIELDS {
        c += &format!("    printf(\"offsetof(MPI_Status, {f})=%zu\\n\", offsetof(MPI_Status, {f}));\n");
    }
    c += "    return 0;\n}\n";
    c
}

/// Compiles `source` with `include` first on the include path and runs it; its output as
/// `name -> value`.
fn values_under(include: &Path, source: &Path, work: &Path, tag: &str) -> BTreeMap<String, String> {
    let exe = work.join(format!("values-{tag}"));
    let out = Command::new("gcc").arg("-I").arg(include).arg("-o").arg(&exe).arg(source).output().expect("run gcc");
    assert!(out.status.success(), "gcc with {}: {}", include.display(), String::from_utf8_lossy(&out.stderr));
    let out = Command::new(&exe).output().expect("run the values program");
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// The differences between our header (in `ours`) and MPICH's: one line each.
fn differences(ours: &Path, work: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(ours.join("mpi.h")).expect("read our mpi.h");
    let names = constants(&text);
    assert!(names.len() > 250, "only {} constants found in our mpi.h", names.len());
    let src = work.join("values.c");
    std::fs::write(&src, values_program(&names)).unwrap();
    let a = values_under(ours, &src, work, "ours");
    let b = values_under(Path::new(MPICH_INCLUDE), &src, work, "mpich");
    assert_eq!(a.len(), names.len() + TYPES.len() + 4 + STATUS_FIELDS.len(), "every value printed");
    let mut diff: Vec<String> = a
        .iter()
        .filter(|(k, v)| b.get(*k) != Some(v))
        .map(|(k, v)| format!("{k}: ours {v}, MPICH's {:?}", b.get(k)))
        .collect();
    // The declarations: ours after MPICH's in one translation unit; a type that differs is a
    // conflict the compiler rejects.
    let decls = text
        .split("/* prototypes begin */")
        .nth(1)
        .and_then(|t| t.split("/* prototypes end */").next())
        .expect("the prototypes' markers in our mpi.h");
    let tu = work.join("decls.c");
    std::fs::write(&tu, format!("#include <mpi.h>\n{decls}\n")).unwrap();
    let out = Command::new("gcc")
        .args(["-fsyntax-only", "-Wall", "-Werror", "-I", MPICH_INCLUDE])
        .arg(&tu)
        .output()
        .expect("run gcc");
    if !out.status.success() {
        diff.push(format!("declarations: {}", String::from_utf8_lossy(&out.stderr)));
    }
    diff
}

fn work_dir(tag: &str) -> std::path::PathBuf {
    let d = profile_dir().join(format!("p2pmpi-abi-header-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn our_header_has_mpichs_values_sizes_layout_and_declarations() {
    if !require(&["gcc"], true) {
        return;
    }
    let work = work_dir("same");
    let diff = differences(&our_include(), &work);
    assert!(diff.is_empty(), "our mpi.h differs from MPICH's:\n{}", diff.join("\n"));
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn a_changed_value_or_declaration_is_caught() {
    if !require(&["gcc"], true) {
        return;
    }
    let text = std::fs::read_to_string(our_include().join("mpi.h")).unwrap();
    let work = work_dir("changed");
    let changed = text
        .replace("#define MPI_ERR_TRUNCATE              14", "#define MPI_ERR_TRUNCATE              13")
        .replace("P2PMPI_FN(int, Barrier, (MPI_Comm comm))", "P2PMPI_FN(int, Barrier, (MPI_Comm comm, int extra))");
    assert_ne!(changed, text);
    std::fs::write(work.join("mpi.h"), changed).unwrap();
    let diff = differences(&work, &work);
    assert!(diff.iter().any(|d| d.starts_with("MPI_ERR_TRUNCATE: ours 13")), "{diff:?}");
    assert!(diff.iter().any(|d| d.starts_with("declarations:") && d.contains("MPI_Barrier")), "{diff:?}");
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn our_header_compiles_alone_in_c_and_cpp() {
    if !require(&["gcc", "g++"], true) {
        return;
    }
    let work = work_dir("alone");
    let src = work.join("alone.c");
    std::fs::write(&src, "#include <mpi.h>\nint main(void) { MPI_Status s; return (int)sizeof s - 20; }\n").unwrap();
    for (cc, std) in [("gcc", "-std=c99"), ("g++", "-std=c++11")] {
        let mut cmd = Command::new(cc);
        cmd.args(["-fsyntax-only", "-Wall", "-Wextra", "-pedantic", "-Werror", std, "-I"]).arg(our_include());
        if cc == "g++" {
            cmd.args(["-x", "c++"]);
        }
        let out = cmd.arg(&src).output().expect("run the compiler");
        assert!(out.status.success(), "{cc}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = std::fs::remove_dir_all(&work);
}
