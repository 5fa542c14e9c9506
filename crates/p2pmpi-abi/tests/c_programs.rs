//! C programs built by Debian's `mpicc.mpich` (linked against its libmpich.so.12), run
//! unchanged by `p2pmpirun --local` with our library directory first on the library path.
//! Each test checks the values the programs computed, not only their exit status.

mod common;
use common::*;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// `o`'s output, for the failure messages.
fn show(o: &Outcome) -> String {
    format!("stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr)
}

#[test]
fn our_library_is_the_one_the_program_loads() {
    if !require(&["mpicc.mpich", "ldd"], true) {
        return;
    }
    let prog = c_program("env");
    let out = Command::new("ldd").arg(&prog).env("LD_LIBRARY_PATH", lib_dir()).output().expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("libmpich.so.12")).unwrap_or_else(|| panic!("no libmpich in:\n{text}"));
    assert!(line.contains(lib_dir().to_str().unwrap()), "libmpich.so.12 resolves elsewhere: {line}");
    // And without our directory, Debian's: the program was really linked against MPICH.
    let out = Command::new("ldd").arg(&prog).env_remove("LD_LIBRARY_PATH").output().expect("run ldd");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(lib_dir().to_str().unwrap()), "{text}");
    // The file carries MPICH's soname.
    let out = Command::new("readelf").arg("-d").arg(lib_dir().join("libmpi.so.12")).output();
    if let Ok(out) = out {
        assert!(String::from_utf8_lossy(&out.stdout).contains("Library soname: [libmpi.so.12]"));
    }
}

#[test]
fn environment_family_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("env"), &[], T);
    o.assert_ok();
    let lib = lib_dir().join("libmpich.so.12");
    assert_eq!(o.lines_with("before:").len(), 3, "{}", show(&o));
    assert!(o.lines_with("before:").iter().all(|l| l == "before: initialized 0"), "{}", show(&o));
    for r in 0..3 {
        let expect = [
            format!("rank {r}: size 3 initialized 1 provided 1 query 1 main 1"),
            format!("rank {r}: processor name matches 1 length 1"),
            format!("rank {r}: version 4.0 library p2pmpi 1 length 1"),
            format!("rank {r}: wtime advances 1 tick 1"),
            format!("rank {r}: MPI_Init from {}", lib.display()),
            format!("rank {r}: debian libmpich mapped 0"),
            format!("rank {r}: finalized before 0"),
            format!("rank {r}: finalized after 1"),
        ];
        for e in expect {
            assert!(o.stdout.lines().any(|l| l == e), "missing {e:?}\n{}", show(&o));
        }
    }
}

#[test]
fn point_to_point_family_on_four_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(4, &c_program("p2p"), &[], T);
    o.assert_ok();
    let want = [
        // 1 + 2 + 3 + 4.
        "ring: token 10 source 3 tag 7",
        "nonblocking 0: from prev 4.5 from next 1 status 3/2 nulls 1",
        "nonblocking 1: from prev 0.0 from next 2 status 0/2 nulls 1",
        "nonblocking 2: from prev 1.5 from next 3 status 1/2 nulls 1",
        "nonblocking 3: from prev 3.0 from next 0 status 2/2 nulls 1",
        "sendrecv 0: got 103 from 3",
        "sendrecv 1: got 100 from 0",
        "sendrecv 2: got 101 from 1",
        "sendrecv 3: got 102 from 2",
        "replace 0: got 1.25 from 1",
        "replace 3: got 0.25 from 0",
        "probe: from 1 count 3 bytes 6 last 12",
        "probe: from 2 count 6 bytes 12 last 25",
        "probe: from 3 count 9 bytes 18 last 38",
        "modes: ssend 200 rsend 200 tag 6 polled 1 request null 1",
        "null 0: source -1 tag -1 count 0 x 5",
        "null 3: source -1 tag -1 count 0 x 5",
        // 1 + 4 + 9, then no active request.
        "waitany: sum 14 then 1",
    ];
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
    assert_eq!(o.lines_with("probe:").len(), 3);
}

#[test]
fn completions_request_free_large_counts_and_matched_probes_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("more_p2p"), &[], T);
    o.assert_ok();
    for w in [
        "freed null 1",
        "testall: 11 22 33 tags 1 2 3 nulls 1",
        "testany: index 1 value 33 tag 4",
        "testany none: flag 1 undefined 1",
        "large: 11 count 1 fortran source 0 tag 5 back 5",
        "mprobe null: no proc 1 source -1",
        "mrecv null: message null 1 source -1",
        "improbe: count 3 sum 7.5 tag 7 null 1",
        "mprobe: count 2 tag 8 last 2.5",
        "imrecv: count 2 sum 14.0 null 1",
        "zero 0: count 0",
        "zero 1: count 0",
    ] {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn communicators_and_groups_on_four_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(4, &c_program("comm"), &[], T);
    o.assert_ok();
    let mut want = Vec::new();
    for r in 0..4 {
        // Split by parity in reverse order: the higher rank of each pair is rank 0.
        let (half_rank, half_sum) = (if r >= 2 { 0 } else { 1 }, if r % 2 == 0 { 2 } else { 4 });
        let group_rank = match r {
            3 => 0,
            1 => 1,
            _ => -1,
        };
        want.push(format!("dup {r}: congruent 1 rank {r} sum 6 inherits 1"));
        want.push(format!("split {r}: rank {half_rank} size 2 sum {half_sum} unequal 1"));
        want.push(format!("undefined {r}: null {}", (r == 0) as i32));
        want.push(format!("group {r}: rank {group_rank} size 2 translated 3 1 union 4 similar 1 inter empty 1 diff 2"));
        want.push(match r {
            3 => "create 3: rank 0 got 42".to_string(),
            1 => "create 1: rank 1 got 42".to_string(),
            _ => format!("create {r}: not a member"),
        });
        want.push(format!("free {r}: null 1 world refused 1 group null 1"));
        // A freed communicator's handle names nothing: MPI_ERR_COMM.
        want.push(format!("freed {r}: 5"));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn attributes_of_communicators_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("attr"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        for w in [
            // MPI_COMM_DUP_FN copies, MPI_COMM_NULL_COPY_FN does not.
            "dup copied 1 value 7",
            "null copy 0",
            // Freeing the duplicate deletes its one attribute; replacing and deleting run the
            // delete callback once each.
            "deleted after free 1",
            "deleted after replace 2",
            "deleted after delete 3 still set 0",
            "keyval invalid 1",
            "tag_ub 1 big 1",
            "universe 1 at least size 1",
            "appnum 1 value 0",
            "wtime global 1 value 0",
            "predefined refused 1",
            // MPI_Finalize deletes MPI_COMM_SELF's attributes first.
            "self attribute 55 deleted",
            "deleted at the end 4",
        ] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn attributes_of_datatypes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(1, &c_program("type_attr"), &[], T);
    o.assert_ok();
    for w in [
        "unset 0",
        "set 1 value 7",
        // MPI_TYPE_DUP_FN copies, MPI_TYPE_NULL_COPY_FN does not; freeing the duplicate
        // deletes its one attribute.
        "dup copied 1 value 7",
        "null copy 0",
        "deleted after free 1",
        "predefined 1 value 9",
        "deleted after delete 2 still set 0",
        // Freeing the datatype deletes its two attributes.
        "deleted after freeing both 4",
        "keyval invalid 1",
    ] {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn nonblocking_collectives_with_a_count_per_process_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("ivarcount"), &[], T);
    o.assert_ok();
    for r in 0..3 {
        for w in [
            "igatherv",
            "iscatterv",
            "iallgatherv",
            "iallgatherv in place",
            "ialltoallv",
            "igatherv_c",
            "ireduce_scatter_block",
            "ireduce_scatter",
        ] {
            let w = format!("rank {r}: {w} ok");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn sessions_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("session"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        for w in [
            "psets 2 first mpi://WORLD len 12",
            "world size 2",
            "group 2 comm 2 sum 2",
            "unknown pset class 12",
            "finalized 1",
        ] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn split_by_hardware_type_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("split_hw"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        for w in ["guided without hint null 1", "guided shared memory size 2", "unguided null 1"] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn names_of_the_predefined_communicators() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(1, &c_program("names"), &[], T);
    o.assert_ok();
    for w in [
        "default MPI_COMM_SELF set mycomm restored MPI_COMM_SELF 13",
        "default MPI_COMM_WORLD set mycomm restored MPI_COMM_WORLD 14",
    ] {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn a_user_operation_with_a_large_count_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("userop_c"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        // Rank 0's values (1 2 3) then rank 1's (2 3 4): 1 * 10 + 2, ...
        for w in ["allreduce 12 23 34", "local 13 24 len 2", "replace and no_op commutative 0 0 0 0", "freed 1"] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn persistent_collectives_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("pcoll"), &[], T);
    o.assert_ok();
    for r in 0..3 {
        let w = format!("rank {r}: persistent collectives ok null 1");
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn files_open_and_close_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("file"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        // MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE = 1 + 8 + 16.
        for w in ["amode 25 errors return 1", "fortran 1 back 1 null 0", "closed null 1 deleted 1", "missing 1"] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn collectives_with_a_count_per_process_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("varcount"), &[], T);
    o.assert_ok();
    // Rank i gives i + 1 elements i * 100 + j, placed with a gap of i elements before part i
    // (each gap keeps -1): 0 + 201 + 603 - 2.
    let mut want = vec![
        "gatherv: sum 802 first 0 last 202".to_string(),
        "gatherv in place: 77 202".to_string(),
        "scatterv 0: 0.0".to_string(),
        "scatterv 1: 2.5".to_string(),
        "scatterv 2: 9.0".to_string(),
        "scatterv in place 0: 0.0".to_string(),
        "scatterv in place 1: 1.0".to_string(),
        "scatterv in place 2: 2.5".to_string(),
        // Rank r gets r + 1 elements j * 10 + r from each rank j.
        "alltoallv 0: sum 30".to_string(),
        "alltoallv 1: sum 66".to_string(),
        "alltoallv 2: sum 108".to_string(),
    ];
    for r in 0..3 {
        want.push(format!("allgatherv {r}: sum 802"));
        want.push(format!("allgatherv in place {r}: sum 802"));
        want.push(format!("alltoallv in place {r}: {r} 0 {}", 20 + r));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn memory_buffered_sends_names_dims_local_reduction_packing_ranges_and_info_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("misc"), &[], T);
    o.assert_ok();
    let mut want = vec![
        "rank 0: detached same 1 size 65536".to_string(),
        // Four ints read as shorts: eight elements, the first 5.
        "rank 1: bsend elements 8 first 5".to_string(),
        // An int and three doubles: 4 + 24 bytes.
        "rank 0: packed 28 pack_size 24".to_string(),
        "rank 1: unpacked 41 0.5 2.5 position 28".to_string(),
    ];
    for r in 0..2 {
        want.push(format!("rank {r}: alloc 2.5"));
        want.push(format!("rank {r}: world named MPI_COMM_WORLD length 14"));
        want.push(format!("rank {r}: dup named my duplicate"));
        want.push(format!("rank {r}: dims 3 2 2 and 4 3"));
        want.push(format!("rank {r}: reduce_local 4 5 9"));
        want.push(format!("rank {r}: range incl 2 excl 1"));
        want.push(format!("rank {r}: info 1 /tmp keys 2 nokey 1 null 1"));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn user_operations_and_minloc_maxloc_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("userop"), &[], T);
    o.assert_ok();
    // Rank r's map is x -> (r + 2) x + (r + 1); composed in rank order: (2, 1), (6, 5), (24, 23).
    let scans = ["2 1", "6 5", "24 23"];
    let mut want = vec!["rank 2: reduce 24 23".to_string()];
    for (r, scan) in scans.iter().enumerate() {
        want.push(format!("rank {r}: max abs -50 datatype int 1"));
        want.push(format!("rank {r}: affine 24 23 scan {scan} in place 24 23"));
        want.push(format!("rank {r}: local 15 26"));
        // MPI_MAXLOC and MPI_MINLOC on MPICH's pair types.
        want.push(format!("rank {r}: maxloc 100.0 at 1 minloc 8 at 2 short 6 at 2"));
        want.push(format!("rank {r}: commutative affine 0 abs 1 sum 1"));
        want.push(format!("rank {r}: freed 1"));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn nonblocking_collectives_in_flight_together_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("nonblocking"), &[], T);
    o.assert_ok();
    let mut want = vec!["rank 0: prod 6 gather sum 63".to_string()];
    for r in 0..3 {
        let scan: i32 = (1..=r + 1).sum();
        let exscan: i32 = (1..=r).sum();
        want.push(format!("rank {r}: sum 6 max 3 scan {scan} exscan {exscan} user 6 bcast 99 99"));
        // Block r of each rank j's 100 j + i; rank 2's block r.
        want.push(format!(
            "rank {r}: allgather sum 63 alltoall {} {} scatter {} {}",
            2 * r,
            200 + 2 * r + 1,
            200 + 2 * r,
            201 + 2 * r
        ));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn cartesian_topologies_split_type_and_waitsome_on_four_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(4, &c_program("topo"), &[], T);
    o.assert_ok();
    let mut want = vec!["rank 0: waitsome total 30 rounds ok 1 testsome undefined 1".to_string()];
    for r in 0..4 {
        // A 2 x 2 grid, periodic along its first dimension.
        let (x, y) = (r / 2, r % 2);
        let shift = (r + 2) % 4;
        let other = x * 2 + (1 - y);
        want.push(format!(
            "rank {r}: coords {x} {y} shift {shift} {shift} cart 1 ndims 2 get 22 10 {x}{y} other {other}"
        ));
        want.push(format!("rank {r}: row size 2 sum {} world undefined 1", if x == 0 { 1 } else { 5 }));
        // One host: everyone, ordered by -rank.
        want.push(format!("rank {r}: shared size 4 rank {}", 3 - r));
        want.push(format!("rank {r}: cancelled 0"));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn derived_datatypes_in_point_to_point_and_collectives_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("derived"), &[], T);
    o.assert_ok();
    // Rank 0's 4 x 4 matrix holds 10 i + j.
    let mut want = vec![
        "contiguous: 6 ints 2 elements last 11".to_string(),
        "column: 1 11 21 31".to_string(),
        "resized: 0 1 31".to_string(),
        "indexed: 0 1 11".to_string(),
        "struct: 1 2.5 x 3 4.5 y".to_string(),
        // Rows 1-2, columns 1-2; then rows 0-1 of column 3 in Fortran order (C's row 3).
        "subarray: 11 12 21 22 fortran 30 31 extent 64 size 16".to_string(),
        // MPI_BOTTOM with a datatype of absolute addresses.
        "bottom: 77 8.5 from 0".to_string(),
    ];
    for r in 0..2 {
        want.push(format!("rank {r}: bcast column 2 32"));
        want.push(format!("rank {r}: allreduce 1 6"));
        want.push(format!("rank {r}: column size 16 extent 52 true 0 52"));
        // struct rec { int; double; char; }: 13 data bytes, 24 with padding.
        want.push(format!("rank {r}: struct extent matches 1 size_x 13 extent_x 24"));
        want.push(format!("rank {r}: set elements 3 cancelled 1"));
        want.push(format!("rank {r}: vector 3 0 1 1 ints 4 1 4 int 1"));
        want.push(format!("rank {r}: struct 4 3 3 1 types 1"));
        want.push(format!("rank {r}: resized 1 extent 4 inner vector 1"));
        want.push(format!("rank {r}: named 1 triple MPI_DOUBLE"));
        want.push(format!("rank {r}: bottom bcast 5 0.5"));
        // MPI_ERR_UNSUPPORTED_OPERATION: billions of blocks are not laid out; copies of one
        // run are one block.
        want.push(format!("rank {r}: huge vector 44 contiguous 0 size 2147483647"));
        // An uncommitted datatype cannot be sent: MPI_ERR_TYPE.
        want.push(format!("rank {r}: uncommitted 3 dup size 12 freed 1"));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn persistent_requests_started_again_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("persistent"), &[], T);
    o.assert_ok();
    let mut want = Vec::new();
    for r in 0..3 {
        // From the previous rank p: 10 p + 0, 1, 2, then 100 + p.
        let p = (r + 2) % 3;
        want.push(format!("rank {r}: inactive test 1 source -2"));
        want.push(format!("rank {r}: ring sum {} handles kept 1", 30 * p + 3));
        want.push(format!("rank {r}: one more {} from {p} waitany 1", 100 + p));
        want.push(format!("rank {r}: all inactive 1"));
        want.push(format!("rank {r}: freed 1"));
    }
    for w in want {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

/// The collectives' lines for `n` processes.
fn collective_lines(n: i64) -> Vec<String> {
    let root_sum: i64 = (1..=n).sum();
    let mut v = vec![
        format!("reduce: sum {root_sum} min {} prod {} max in place {n}", 1000 - (n - 1), 2f64.powi(n as i32) as i64),
        "gather: ok 1 last ".to_string() + &((n - 1) * 10 + 1).to_string(),
        format!("gather in place: -7 -8 {}", if n == 1 { -8 } else { (n - 1) * 10 + 1 }),
    ];
    for r in 0..n {
        v.push(format!("bcast {r}: 1.25 -2.50 1e+100"));
        v.push(format!(
            "allreduce {r}: sum {} {} {} {} max {} bor {} in place {} {}",
            root_sum,
            root_sum * 2,
            root_sum * 3,
            root_sum * 4,
            n - 1,
            (1i64 << n) - 1,
            n,
            n * 4
        ));
        v.push(format!("scan {r}: {} exscan {}", (1..=r + 1).sum::<i64>(), (1..=r).sum::<i64>()));
        v.push(format!("scatter {r}: {} {}", 500 + 2 * r, 501 + 2 * r));
        v.push(format!("allgather {r}: ok 1"));
        v.push(format!("alltoall {r}: ok 1"));
        // Element j of the reduced vector is the sum over the ranks q of q + j.
        let element = |j: i64| n * (n - 1) / 2 + n * j;
        v.push(format!("reduce_scatter_block {r}: {} in place {}", element(r), element(r)));
        let first = r * (r + 1) / 2;
        v.push(format!("reduce_scatter {r}: {}", (first..first + r + 1).map(element).sum::<i64>()));
    }
    v
}

#[test]
fn collectives_on_four_and_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let prog = c_program("coll");
    for n in [4usize, 3] {
        let o = run(n, &prog, &[], T);
        o.assert_ok();
        for w in collective_lines(n as i64) {
            assert!(o.stdout.lines().any(|l| l == w), "-n {n}: missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn errors_return_their_classes_and_are_fatal_by_default() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("errors"), &[], T);
    for w in [
        "rank: 6",
        "type: 3",
        "unknown type: 3",
        "count: 2",
        "tag: 4",
        "comm: 5",
        "op: 9",
        "root: 7",
        "request: 19",
        "in place: 1",
        "in place gatherv: 1 iallgather: 1",
        "class 6 string MPI_ERR_RANK: invalid rank length 1",
        // The program's handler gets the communicator and the code; the call returns it.
        "user handler: calls 1 code 6 world 1 returned 6 freed 1",
        "call errhandler: calls 2 code 15",
        // Added classes and codes: the code's class, its text, MPI_LASTUSEDCODE.
        "added: class 1 code 1 text my failure last 1",
    ] {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
    assert_eq!(o.lines_with("rank").iter().filter(|l| l.ends_with("default fatal 1")).count(), 3, "{}", show(&o));
    // Under MPI_ERRORS_ARE_FATAL the wrong call stops the job, naming rank, function and cause.
    // The job's status is its class, or MPIX_ERR_PROC_FAILED (101) when a process that lost
    // rank 1 in the barrier reported first.
    assert!(matches!(o.status.code(), Some(6) | Some(101)), "{}", show(&o));
    assert!(o.stderr.contains("p2pmpi: rank 1: MPI_Send: invalid rank (MPI_ERR_RANK)"), "{}", show(&o));
    assert!(!o.stdout.contains("not stopped"), "{}", show(&o));
}

#[test]
fn bad_input_answers_its_class_under_errors_return_and_the_job_goes_on() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("badinput"), &[], T);
    o.assert_ok();
    for (case, class, name) in [
        ("wrong comm", 5, "MPI_ERR_COMM"),
        ("comm of another kind", 5, "MPI_ERR_COMM"),
        ("wrong group", 8, "MPI_ERR_GROUP"),
        ("wrong op", 9, "MPI_ERR_OP"),
        ("wrong type", 3, "MPI_ERR_TYPE"),
        ("wrong request", 19, "MPI_ERR_REQUEST"),
        ("freed comm barrier", 5, "MPI_ERR_COMM"),
        ("freed comm rank", 5, "MPI_ERR_COMM"),
        ("freed comm gatherv", 5, "MPI_ERR_COMM"),
        ("freed comm free", 5, "MPI_ERR_COMM"),
        ("uncommitted send", 3, "MPI_ERR_TYPE"),
        ("uncommitted bcast", 3, "MPI_ERR_TYPE"),
        ("rank", 6, "MPI_ERR_RANK"),
        ("negative rank", 6, "MPI_ERR_RANK"),
        ("tag", 4, "MPI_ERR_TAG"),
        ("root", 7, "MPI_ERR_ROOT"),
        ("root gatherv", 7, "MPI_ERR_ROOT"),
        ("root ireduce", 7, "MPI_ERR_ROOT"),
        ("count", 2, "MPI_ERR_COUNT"),
        ("truncate recv", 14, "MPI_ERR_TRUNCATE"),
        ("truncate mrecv", 14, "MPI_ERR_TRUNCATE"),
        ("truncate wait", 14, "MPI_ERR_TRUNCATE"),
        ("truncate gatherv", 14, "MPI_ERR_TRUNCATE"),
    ] {
        let want = format!("{case}: class {class} {name}: ");
        assert!(o.stdout.lines().any(|l| l.starts_with(&want)), "missing {want:?}\n{}", show(&o));
    }
    for r in 0..2 {
        let w = format!("rank {r}: after errors sum 3 failures 0");
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn a_lost_process_is_returned_as_its_class_by_a_collective_on_the_rust_api() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    // Fault-aware (MPICH's switch), so that the launcher lets the survivors go on once rank 1
    // is gone. A survivor that sees the failure revokes the communicator (as a ULFM program
    // must: the other may wait in the collective for data the first will no longer send).
    let mut cmd = std::process::Command::new(launcher());
    cmd.args(["--local", "-n", "3", "--t-gossip", "100", "--t-max-hang", "0"]).arg(c_program("badinput")).arg("lost");
    cmd.env("LD_LIBRARY_PATH", lib_dir())
        .env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests")
        .env("MPIR_CVAR_ENABLE_FT", "1");
    let o = run_cmd(&mut cmd, T);
    let printed = o.lines_with("rank");
    assert_eq!(printed.len(), 2, "both survivors answer: {}", show(&o));
    // MPIX_ERR_PROC_FAILED (101), or MPIX_ERR_REVOKED (103) for one freed by the other's
    // revocation; never the end of the job, and at least one saw the failure itself.
    for (l, r) in printed.iter().zip([0, 2]) {
        let ok = [101, 103].map(|c| format!("rank {r}: allgatherv after a loss: class {c}"));
        assert!(ok.contains(l), "{}", show(&o));
    }
    assert!(printed.iter().any(|l| l.ends_with("class 101")), "{}", show(&o));
}

#[test]
fn bad_input_stops_the_job_under_the_fatal_handler_naming_function_rank_and_cause() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    for (case, class, message) in [
        ("truncate", 14, "p2pmpi: rank 1: MPI_Recv: message truncated on receive (MPI_ERR_TRUNCATE)"),
        (
            "mrecv",
            14,
            "p2pmpi: rank 1: MPI_Mrecv: message truncated on receive (MPI_ERR_TRUNCATE): message truncated: 16 bytes \
             from rank 0 (tag 7) do not fit in a receive buffer of 8 bytes",
        ),
        ("freed", 5, "p2pmpi: rank 1: MPI_Barrier: invalid communicator (MPI_ERR_COMM)"),
        ("uncommitted", 3, "p2pmpi: rank 1: MPI_Send: invalid datatype (MPI_ERR_TYPE)"),
        ("root", 7, "p2pmpi: rank 1: MPI_Gatherv: invalid root (MPI_ERR_ROOT)"),
    ] {
        let o = run(2, &c_program("badinput"), &[case], T);
        assert!(o.stderr.contains(message), "{case}: {}", show(&o));
        // The job's status is the class (or MPIX_ERR_PROC_FAILED, 101, when rank 0, which lost
        // rank 1 in the barrier, reported first).
        assert!(matches!(o.status.code(), Some(c) if c == class || c == 101), "{case}: {}", show(&o));
        assert!(!o.stdout.contains("not stopped"), "{case}: {}", show(&o));
    }
}

/// The lines `tests/c/families.c` prints on each process when every value is right.
const FAMILIES: &[&str] = &[
    "cancel recv ok",
    "cancel send ok",
    "get_status ok",
    "get_status values ok",
    "alltoallw ok",
    "alltoallw in place ok",
    "alltoall in place ok",
    "igatherv ok",
    "iscatterv ok",
    "iallgatherv ok",
    "iallgatherv in place ok",
    "ialltoallv ok",
    "ireduce_scatter_block ok",
    "ireduce_scatter_block in place ok",
    "ireduce_scatter ok",
    "type attributes ok",
];

#[test]
fn cancel_get_status_alltoallw_nonblocking_v_variants_and_datatype_attributes_on_two_and_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    for n in [2, 3] {
        let o = run(n, &c_program("families"), &[], T);
        o.assert_ok();
        for w in FAMILIES {
            let got = o.stdout.lines().filter(|l| l == w).count();
            assert_eq!(got, n, "{n} processes: {w:?} {got} times\n{}", show(&o));
        }
        for r in 0..n {
            let w = format!("rank {r}: families bad 0");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn a_cxx_program_linked_by_mpicxx_uses_the_c_api_and_mpichs_cxx_bindings_on_two_processes() {
    if !require(&["mpicxx.mpich"], true) {
        return;
    }
    let o = run(2, &cxx_program("cxx"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        for w in [
            "c api sum 3".to_string(),
            format!("cxx rank {r} size 2"),
            // max |v| over v = 1 (rank 0) and -11 (rank 1), by a C++ function.
            "cxx op 11".to_string(),
            // The C++ copy callback ran at Dup, the delete one at Free and Delete_attr.
            "cxx attr copies 1 deletes 1 found 1 same 1".to_string(),
            "cxx attr deletes after delete 2".to_string(),
            "cxx handler calls 1 code 15".to_string(),
            // MPI::ERRORS_THROW_EXCEPTIONS: the call returned MPI_ERR_RANK, thrown by the bindings.
            "cxx exception class 6".to_string(),
        ] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn intercommunicators_created_used_across_and_merged_on_four_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(4, &c_program("intercomm"), &[], T);
    o.assert_ok();
    for r in 0..4 {
        let (lrank, other) = (r / 2, if r % 2 == 0 { r + 1 } else { r - 1 });
        for w in [
            format!("inter 1 size 2 rank {lrank} remote size 2"),
            "remote group 1".to_string(),
            format!("across got {other} from {lrank}"),
            "allreduce across 1".to_string(),
            "allgather across 1".to_string(),
            "alltoall across 1".to_string(),
            "reduce_scatter_block across 1".to_string(),
            // The odd group (high = 0) comes first in the merged communicator.
            "merged rank 1 size 4".to_string(),
            "intercomm bad 0".to_string(),
        ] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn graph_and_distributed_graph_topologies_on_four_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(4, &c_program("graph"), &[], T);
    o.assert_ok();
    for r in 0..4 {
        for w in ["graph 1", "graph of 3 1", "dist graph adjacent 1", "dist graph 1", "graph bad 0"] {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn abort_stops_every_process_with_its_code() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("errors"), &["abort"], T);
    assert_eq!(o.status.code(), Some(3), "{}", show(&o));
    assert!(o.stdout.contains("aborting"), "{}", show(&o));
    assert!(!o.stdout.contains("not stopped"), "{}", show(&o));
    assert!(o.stderr.contains("rank 0"), "{}", show(&o));
}

#[test]
fn a_program_runs_alone_without_the_launcher() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let mut cmd = Command::new(c_program("coll"));
    cmd.env("LD_LIBRARY_PATH", lib_dir());
    let o = run_cmd(&mut cmd, T);
    o.assert_ok();
    for w in collective_lines(1) {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn error_handlers_of_windows_files_and_sessions_added_classes_and_disconnect_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("objerr"), &[], T);
    o.assert_ok();
    for r in 0..2 {
        let w = format!("objerr {r}: ok");
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn files_read_and_written_through_offsets_views_and_both_pointers_on_two_and_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    for n in [2, 3] {
        let o = run(n, &c_program("io"), &[], T);
        o.assert_ok();
        for r in 0..n {
            for w in ["at", "size", "view", "shared", "ordered", "seek", "split", "errors", "clean"] {
                let w = format!("rank {r}: {w} 1");
                assert!(o.stdout.lines().any(|l| l == w), "-n {n}: missing {w:?}\n{}", show(&o));
            }
        }
    }
}

#[test]
fn neighbourhood_collectives_ialltoallw_alltoallw_init_and_cart_map_on_four_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(4, &c_program("neighbor"), &[], T);
    o.assert_ok();
    let checks = [
        "cart allgather",
        "cart alltoall",
        "cart ialltoall",
        "line allgather",
        "graph allgatherv gaps",
        "dist alltoallv",
        "dist alltoallw",
        "dist ialltoallw bottom",
        "dist allgatherv persistent",
        "ialltoallw",
        "ialltoallw in place",
        "alltoallw persistent",
        "ialltoall in place",
        "cart map",
        "no topology refused",
    ];
    for r in 0..4 {
        for c in checks {
            let w = format!("rank {r}: {c} ok");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
    assert!(!o.stdout.contains(" bad"), "{}", show(&o));
}

#[test]
fn rooted_varying_and_nonblocking_collectives_over_an_intercommunicator_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("intercoll"), &[], T);
    o.assert_ok();
    let mut checks = vec![];
    for g in 0..2 {
        for c in ["bcast", "reduce", "gather", "scatter", "gatherv", "scatterv"] {
            checks.push(format!("{c} {g}"));
        }
    }
    for c in
        ["allgatherv", "alltoallv", "alltoallw", "ibarrier", "ibcast", "iallreduce", "igather", "allgatherv persistent"]
    {
        checks.push(c.to_string());
    }
    for r in 0..3 {
        for c in &checks {
            let w = format!("rank {r}: {c} ok");
            // Once per round: the intercommunicator is made twice.
            assert_eq!(o.stdout.lines().filter(|l| *l == w).count(), 2, "missing {w:?}\n{}", show(&o));
        }
    }
    assert!(!o.stdout.contains(" bad"), "{}", show(&o));
}

#[test]
fn mpi1s_removed_datatype_functions_answer_from_the_extent() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(1, &c_program("removed"), &[], T);
    o.assert_ok();
    for w in ["removed: extent 4 lb 8 ub 12", "removed: double 8 null 1"] {
        assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
    }
}

#[test]
fn point_to_point_odds_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("p2p_odds"), &[], T);
    o.assert_ok();
    for r in 0..3 {
        let p = (r + 2) % 3;
        let mut want = vec![
            format!("isendrecv {p} {} {} -1 count 3 source {p}", p * 10, p * 100),
            "isendrecv large 1".to_string(),
            format!("isendrecv_replace {p} {}", p + 1),
            "isendrecv empty 1 count 0 source 1".to_string(),
            "partitioned round 0 arrived before 0 sent early 0 data 1".to_string(),
            "partitioned round 1 arrived before 0 sent early 0 data 1".to_string(),
            "partitioned freed 1".to_string(),
            "grequest early 0 cancels 2 (0 1) queried 1 freed 1 source 33 tag 42 count 3 null 1".to_string(),
            "grequest waitall before 1 sources 33 1 tags 42 1 freed 2".to_string(),
            "grequest failing query 1".to_string(),
            "issend to itself before 0 after 1 got 77".to_string(),
            "idup congruent 1".to_string(),
            "external32 size 8 bytes 01020304 3ff8 position 16 back 1 1 1".to_string(),
            "external other representation refused 1".to_string(),
        ];
        if r % 2 == 0 {
            want.push("create_group size 2 sum 2".to_string());
        }
        for w in want {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn datatype_odds_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("types_odds"), &[], T);
    o.assert_ok();
    let blocks = [(16, 0, 3), (16, 4, 7), (8, 8, 9)];
    for (r, &(size, first, last)) in blocks.iter().enumerate() {
        let want = [
            "f90 sizes 4 8 8 same 1 envelope 2 0 0 1 contents 15 300".to_string(),
            "f90 too wide refused 1 match_size 1 1 none 1".to_string(),
            "f90 integer sum 3 complex sum 3+3i product -2+2i".to_string(),
            "resized lb -4 extent 12 sent 0 3 6".to_string(),
            "resized backwards extent -4 sent 8 7 6".to_string(),
            format!("darray block size {size} extent 40 first {first} last {last}"),
            format!("darray cyclic C size 32 values {r} {} {} {}", r + 3, r + 6, r + 9),
            format!("darray cyclic Fortran values {r} {} {} {} envelope 12 0 1 1", r + 3, r + 6, r + 9),
            "huge size 1 int size undefined 1 envelope 0 0 1 1 1 contents 1 byte 1".to_string(),
            "name of null MPI_DATATYPE_NULL".to_string(),
            "name set on MPI_INT my int".to_string(),
            "name MPI_C_FLOAT_COMPLEX".to_string(),
        ];
        for w in want {
            let w = format!("rank {r}: {w}");
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

/// The lines `direct.c` prints on rank `r` of 3.
fn direct_lines(r: usize) -> Vec<String> {
    let p = (r + 2) % 3;
    let got = format!("{} {} {} {}", p * 10, p * 10 + 1, p * 10 + 2, p * 10 + 3);
    [
        // Rounds 0..200 each add their number: 199 * 200 / 2.
        "rounds 200 sum 19900 polled 1".to_string(),
        format!("issend got {}", 40 + p),
        format!("waitall {got} source {p} tag 23 nulls 1"),
        format!("testany waitsome {got}"),
        format!("get_status source {p} then wait {}", 50 + p),
        format!("cancelled 1 freed 1 got {}", 60 + p),
        format!("mixed waitall got {} source {p}", 80 + p),
        "test truncated 1 null 1".to_string(),
        "wait truncated 1 null 1".to_string(),
        format!("waitall in status 1 truncated 1 ok 1 got {} nulls 1", 70 + p),
    ]
    .into_iter()
    .map(|l| format!("direct {r}: {l}"))
    .collect()
}

#[test]
fn requests_held_by_the_handles_complete_by_every_function_of_requests_on_three_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(3, &c_program("direct"), &[], T);
    o.assert_ok();
    for r in 0..3 {
        for w in direct_lines(r) {
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

#[test]
fn requests_held_by_the_handles_complete_alike_in_a_replicated_job() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    // Every MPI_Test is a choice point: the replicas of a rank complete what their master did,
    // and receive what their master's receives from any source matched.
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-r", "2", "-n", "3"]).arg(c_program("direct"));
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests");
    let o = run_cmd(&mut cmd, T);
    o.assert_ok();
    for r in 0..3 {
        for w in direct_lines(r) {
            assert!(o.stdout.lines().any(|l| l == w), "missing {w:?}\n{}", show(&o));
        }
    }
}

/// The sum `checkpoint.c` computes on `n` ranks: over its 40 steps s, the sum of rank + s.
fn checkpoint_sum(n: i64) -> i64 {
    (0..40).map(|s| n * (n - 1) / 2 + n * s).sum()
}

#[test]
fn a_c_program_checkpointed_by_mpix_checkpoint_and_killed_restarts_with_the_right_sum() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("p2pmpi-abi-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-n", "3", "--max-restarts", "1", "--checkpoint-dir"]).arg(&dir);
    cmd.arg(c_program("checkpoint")).arg("die");
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests");
    let o = run_cmd(&mut cmd, T);
    let _ = std::fs::remove_dir_all(&dir);
    o.assert_ok();
    // Killed by -9 after the checkpoint of step 20, restarted from it: every rank restored.
    assert!(o.stderr.contains("restart 1 of 1: rank 1") && o.stderr.contains("signal 9"), "{}", show(&o));
    assert!(o.stderr.contains("from checkpoint generation 4 (step 20)"), "{}", show(&o));
    for r in 0..3 {
        assert!(o.stdout.contains(&format!("checkpoint {r}: restored at step 20")), "{}", show(&o));
        // The fresh start's refusal of a checkpoint with a message in flight, shown once.
        assert_eq!(
            o.lines_with(&format!("checkpoint {r}: in flight")),
            [format!("checkpoint {r}: in flight class pending")]
        );
    }
    assert!(o.stderr.contains("messages are in flight"), "the cause is told: {}", show(&o));
    assert!(o.stdout.contains(&format!("checkpoint result {} restored 1", checkpoint_sum(3))), "{}", show(&o));
}

#[test]
fn a_c_program_without_a_fault_checkpoints_and_ends_with_the_same_sum() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("p2pmpi-abi-ckpt-free-{}", std::process::id()));
    let mut cmd = Command::new(launcher());
    cmd.args(["--local", "-n", "3", "--checkpoint-dir"]).arg(&dir).arg(c_program("checkpoint"));
    cmd.env("LD_LIBRARY_PATH", lib_dir()).env("P2PMPI_HOME", "/nonexistent/p2pmpi-abi-tests");
    let o = run_cmd(&mut cmd, T);
    let _ = std::fs::remove_dir_all(&dir);
    o.assert_ok();
    assert!(o.stdout.contains(&format!("checkpoint result {} restored 0", checkpoint_sum(3))), "{}", show(&o));
    assert!(!o.stdout.contains("restored at"), "{}", show(&o));
}

/// Two processes take the collectives' two-process paths (one message each way, straight
/// from and into the caller's buffers): the same results as on three and four, the
/// `MPI_IN_PLACE` forms included.
#[test]
fn collectives_on_two_processes() {
    if !require(&["mpicc.mpich"], true) {
        return;
    }
    let o = run(2, &c_program("coll"), &[], T);
    o.assert_ok();
    for w in collective_lines(2) {
        assert!(o.stdout.lines().any(|l| l == w), "-n 2: missing {w:?}\n{}", show(&o));
    }
}
