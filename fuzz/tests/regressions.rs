//! Every input the fuzzer once found a problem with (`fuzz/regressions/<target>/`)
//! and the seeds that need no outside program run clean through their target.

use std::path::Path;

use argstash_fuzz::targets::TARGETS;

#[test]
fn every_regression_input_runs_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-regressions");
    argstash_fuzz::set_scratch(&scratch).unwrap();
    let mut ran = 0;
    let mut failed = Vec::new();
    for t in TARGETS {
        let Ok(dir) = std::fs::read_dir(root.join(t.name)) else {
            continue;
        };
        for e in dir.flatten() {
            let data = std::fs::read(e.path()).unwrap();
            ran += 1;
            if std::panic::catch_unwind(|| (t.run)(&data)).is_err() {
                failed.push(e.path());
            }
        }
    }
    assert!(ran > 0, "no regression inputs under {}", root.display());
    assert!(failed.is_empty(), "these inputs panic: {failed:?}");
}

#[test]
fn encoder_made_seeds_run_clean_and_are_understood() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-seeds");
    let _ = std::fs::remove_dir_all(&dir);
    let counts = argstash_fuzz::seeds::generate(&dir, &Default::default()).unwrap();
    let count = |name| {
        counts
            .iter()
            .find(|(t, _)| *t == name)
            .map_or(0, |(_, n)| *n)
    };
    assert!(count("signature") >= 10);
    assert!(count("arena") >= 3);
    assert!(
        count("unwind") >= 3,
        "this test's own stack was recorded: {counts:?}"
    );
    for t in TARGETS {
        for e in std::fs::read_dir(dir.join(t.name)).unwrap().flatten() {
            let data = std::fs::read(e.path()).unwrap();
            (t.run)(&data);
        }
    }
    // The arena seeds are real arenas to the reader.
    let seed = std::fs::read(dir.join("arena/arena-0")).unwrap();
    let image = argstash_fuzz::image::Image::decode(&seed, 0);
    let arenas = reader::arena::discover(&image.maps(), &image).unwrap();
    assert_eq!(arenas.len(), 1);
    assert_eq!(arenas[0].hooks().count(), 3);
}
