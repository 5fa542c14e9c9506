//! What the spawn examples print when they pass, checked the same way for local and grid
//! jobs.

use super::Outcome;

/// Lines of `text` that contain `pat`.
pub fn count(text: &str, pat: &str) -> usize {
    text.lines().filter(|l| l.contains(pat)).count()
}

/// `spawn_checks nested` with 2 parents: both passed, the grandchild talked to both children.
pub fn assert_nested(o: &Outcome) {
    o.assert_ok();
    assert_eq!(count(&o.stdout, "OK spawn_checks nested"), 2, "{}", o.stdout);
    assert!(o.stdout.contains("grandchild of 2 parents"), "{}", o.stdout);
    assert!(o.stdout.contains("nested child 0 relayed 300"), "{}", o.stdout);
    assert!(o.stdout.contains("nested child 1 relayed 301"), "{}", o.stdout);
}

/// `spawn_collectives` with `parents` parents and its 3 children: every process passed.
pub fn assert_collectives(o: &Outcome, parents: usize) {
    o.assert_ok();
    for r in 0..parents {
        let l = format!("OK spawn_collectives: parent {r} of {parents}, remote group of 3");
        assert!(o.stdout.contains(&l), "missing {l:?} in:\n{}", o.stdout);
    }
    for r in 0..3 {
        let l = format!("OK spawn_collectives: child {r} of 3, remote group of {parents}");
        assert!(o.stdout.contains(&l), "missing {l:?} in:\n{}", o.stdout);
    }
}
