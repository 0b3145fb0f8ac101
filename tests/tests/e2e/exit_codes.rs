//! End-to-end: the command line's exit codes and the read-only commands on a
//! process without hooks.

use argstash_tests::*;
use serde_json::json;

#[test]
fn help_and_version_exit_0() {
    let out = run_ok(&["--help"]);
    for cmd in ["inject", "eject", "list", "bt"] {
        assert!(out.contains(cmd), "--help lists {cmd}: {out}");
    }
    let out = run_ok(&["inject", "--help"]);
    assert!(out.contains("--func") && out.contains("--addr"), "{out}");
    let out = run_ok(&["--version"]);
    assert!(out.starts_with("argstash "), "{out}");
}

#[test]
fn no_command_is_a_usage_error() {
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage: argstash"));
}

#[test]
fn bt_and_list_without_hooks() {
    let mut t = Target::start("threads", Variant::O2G);
    let p = t.pid().to_string();
    let before = Untouched::take(&t);

    let bt = bt_json(t.pid(), None);
    assert_eq!(bt["pid"].as_i64(), Some(i64::from(t.pid())));
    let threads = bt_threads(&bt);
    assert_eq!(threads.len(), consts::THREADS_TOTAL, "{bt:#}");
    for th in threads {
        let frames = thread_frames(th);
        assert!(!frames.is_empty(), "{th:#}");
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(f["index"].as_u64(), Some(i as u64), "{f:#}");
            assert_eq!(f["hooked"], json!(false), "{f:#}");
            assert_eq!(f["args"], json!([]), "{f:#}");
            assert!(f.get("stash_frame").is_none(), "{f:#}");
        }
    }
    let main = bt_thread(&bt, t.pid()).expect("main thread");
    assert!(frame_named(main, "main").is_some(), "{main:#}");

    let text = run_ok(&["bt", "--pid", &p]);
    assert!(text.contains(&format!("Thread {} ", t.pid())), "{text}");
    // gdb style: `from MODULE` without debug info, `at FILE:LINE` with it.
    assert!(
        text.lines()
            .any(|l| l.contains("main () from ") || l.contains("main () at ")),
        "{text}"
    );
    assert!(!text.contains("[stashed]"), "{text}");

    assert_eq!(list_hooks(t.pid()), Vec::<serde_json::Value>::new());
    let text = run_ok(&["list", "--pid", &p]);
    assert!(text.contains("has no argstash hooks"), "{text}");
    // Reading is not touching.
    before.check(&mut t);
}
