//! End-to-end: a hook in the vDSO (`[vdso]!clock_gettime`, which badfuncs.c
//! calls for its ticks). The vDSO's pages are shared by every process, so the
//! patch must stay private to the target (copy-on-write), and eject must put
//! the original bytes back.

use std::time::Duration;

use argstash_tests::*;

fn vdso(pid: i32) -> MapEntry {
    maps(pid)
        .into_iter()
        .find(|m| m.path == "[vdso]")
        .unwrap_or_else(|| panic!("no [vdso] in pid {pid}"))
}

#[test]
fn hook_in_the_vdso_stays_private() {
    let mut t = Target::start("badfuncs", Variant::O2G);
    let p = t.pid().to_string();
    let theirs = vdso(t.pid());
    let before = read_mem(t.pid(), theirs.start, (theirs.end - theirs.start) as usize);
    let me = std::process::id() as i32;
    let ours = vdso(me);
    let ours_before = read_mem(me, ours.start, (ours.end - ours.start) as usize);

    run_ok(&["inject", "--pid", &p, "--func", "vdso!clock_gettime"]);
    let hooks = list_hooks(t.pid());
    let h = hooks_named(&hooks, "clock_gettime", "active");
    assert_eq!(h.len(), 1, "{hooks:#?}");
    assert_eq!(h[0]["module"].as_str(), Some("[vdso]"));
    let addr = json_hex(&h[0]["address"]);
    assert!((theirs.start..theirs.end).contains(&addr));
    let patched = read_mem(t.pid(), theirs.start, before.len());
    assert_ne!(patched, before, "the target's vdso is patched");
    assert_eq!(
        read_mem(me, ours.start, ours_before.len()),
        ours_before,
        "another process's vdso is not"
    );
    // Its clock (through the hook) still drives the ticks, ~100 ms apart.
    t.drain_lines();
    let start = std::time::Instant::now();
    for _ in 0..3 {
        t.wait_for_line(Duration::from_secs(5), |l| l.starts_with("tick "));
    }
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "{:?}",
        start.elapsed()
    );
    t.assert_healthy();

    run_ok(&["eject", "--pid", &p, "--all"]);
    assert_eq!(read_mem(t.pid(), theirs.start, before.len()), before);
    t.drain_lines();
    t.wait_for_line(Duration::from_secs(5), |l| l.starts_with("tick "));
    t.assert_healthy();
}
