//! `reader::python` against real CPython interpreters.
//!
//! Each test runs `tests/fixtures/python/frames.py` under every CPython 3.11 on
//! the machine (Debian's `/usr/bin/python3.11`, statically linked, and the
//! `python3` on PATH, e.g. pyenv's with a shared libpython), lets it print what it
//! knows about its own threads and frames, stops it, reads its memory through
//! `/proc/PID/mem`, and compares. The layout table is checked against each
//! interpreter's headers with a compiled `offsetof` program. Interpreters or
//! headers that are absent are skipped with a message.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use reader::memory::{Memory, MemoryError};
use reader::procfs::read_maps;
use reader::python::PY311;
use reader::python::{ChainEnd, Interpreter, PythonError};
use reader::symbols::ProcessSymbols;

/// A live process's memory, read-only, through `/proc/PID/mem`.
struct ProcMem(File, std::sync::atomic::AtomicUsize);

impl ProcMem {
    fn open(pid: i32) -> ProcMem {
        let f = File::open(format!("/proc/{pid}/mem")).expect("open /proc/PID/mem");
        ProcMem(f, Default::default())
    }

    /// Reads so far.
    fn reads(&self) -> usize {
        self.1.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Memory for ProcMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.0
            .read_exact_at(buf, addr)
            .map_err(|source| MemoryError::Read {
                addr,
                len: buf.len(),
                source,
            })
    }
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/python/frames.py")
}

/// Runs `exe -c code` and returns its trimmed stdout.
fn ask(exe: &Path, code: &str) -> Option<String> {
    let out = Command::new(exe).args(["-c", code]).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Every CPython 3.11 here, by real path, each once.
fn interpreters() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut seen = HashSet::new();
    let candidates = [
        Some(PathBuf::from("/usr/bin/python3.11")),
        ask(Path::new("python3"), "import sys; print(sys.executable)").map(PathBuf::from),
    ];
    for exe in candidates.into_iter().flatten() {
        let Ok(real) = exe.canonicalize() else {
            continue;
        };
        let minor = ask(&real, "import sys; print(sys.version_info[:2] == (3, 11))");
        if minor.as_deref() == Some("True") && seen.insert(real.clone()) {
            found.push(real);
        }
    }
    if found.is_empty() {
        eprintln!("skipped: no CPython 3.11 interpreter found");
    }
    found
}

/// One frame as the script saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SeenFrame {
    qualname: String,
    file: String,
    line: i32,
    params: Vec<(String, String)>,
}

/// One thread as the script saw it.
#[derive(Debug)]
struct SeenThread {
    tid: u64,
    frames: Vec<SeenFrame>,
}

/// A running fixture, stopped with SIGSTOP once it reported; killed on drop.
struct Running {
    child: Child,
    threads: Vec<SeenThread>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn main_thread(&self) -> &SeenThread {
        self.threads
            .iter()
            .find(|t| t.tid == self.pid() as u64)
            .expect("the main thread reported")
    }
}

fn read_report(out: ChildStdout) -> Vec<SeenThread> {
    let mut threads: Vec<SeenThread> = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.expect("fixture output");
        let f: Vec<&str> = line.split('\t').collect();
        match f.as_slice() {
            ["thread", tid] => threads.push(SeenThread {
                tid: tid.parse().unwrap(),
                frames: Vec::new(),
            }),
            ["frame", q, file, l] => threads.last_mut().unwrap().frames.push(SeenFrame {
                qualname: q.to_string(),
                file: file.to_string(),
                line: l.parse().unwrap(),
                params: Vec::new(),
            }),
            ["param", n, d] => {
                let frame = threads.last_mut().unwrap().frames.last_mut().unwrap();
                frame.params.push((n.to_string(), d.to_string()));
            }
            ["end"] => break,
            _ => panic!("unexpected fixture line {line:?}"),
        }
    }
    threads
}

/// Starts the fixture in `mode` under `exe` (with `env`), waits for its report, stops it.
fn run(exe: &Path, mode: &str, env: &[(&str, &Path)]) -> Running {
    let mut cmd = Command::new(exe);
    cmd.arg(fixture())
        .arg(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the fixture");
    let out = child.stdout.take().unwrap();
    let threads = read_report(out);
    let pid = child.id() as i32;
    // The report is printed just before the main thread blocks reading stdin:
    // wait until it does (syscall 0, `read`), so its frames are the reported ones.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sc = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/syscall")).unwrap();
        if sc.split(' ').next() == Some("0") {
            break;
        }
        assert!(Instant::now() < deadline, "the fixture did not block: {sc}");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: sending a signal to our own child; no memory is involved.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = stat.rsplit(')').next().unwrap().trim_start().chars().next();
        if state == Some('T') {
            break;
        }
        assert!(Instant::now() < deadline, "the fixture did not stop");
        std::thread::sleep(Duration::from_millis(5));
    }
    Running { child, threads }
}

fn attach(pid: i32, mem: &ProcMem) -> Interpreter {
    let maps = read_maps(pid).unwrap();
    let symbols = ProcessSymbols::load(pid, &maps).unwrap();
    Interpreter::attach(&symbols, mem).expect("attach to the interpreter")
}

/// Reads every reported thread from memory and compares it with the report.
fn check_threads(run: &Running, interp: &Interpreter, mem: &ProcMem) {
    let walk = interp.threads(mem).unwrap();
    assert!(walk.problems.is_empty(), "{:?}", walk.problems);
    assert_eq!(walk.threads.len(), run.threads.len(), "{walk:?}");
    let mut reader = interp.frame_reader(mem);
    for seen in &run.threads {
        let ts = walk
            .for_tid(seen.tid)
            .unwrap_or_else(|| panic!("no thread state for tid {}: {walk:?}", seen.tid));
        let chain = reader.chain(ts.current_frame.expect("a current frame"), 1000);
        assert_eq!(chain.end, ChainEnd::Root);
        let read: Vec<SeenFrame> = chain
            .frames
            .iter()
            .filter(|f| !f.incomplete)
            .map(|f| SeenFrame {
                qualname: f.qualname.clone(),
                file: f.file.clone(),
                line: f.line.unwrap_or(-1),
                params: f
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.value.display.clone()))
                    .collect(),
            })
            .collect();
        assert_eq!(read, seen.frames, "thread {}", seen.tid);
    }
}

#[test]
fn frames_threads_and_arguments_match_what_python_says() {
    for exe in interpreters() {
        let run = run(&exe, "frames", &[]);
        let mem = ProcMem::open(run.pid());
        let maps = read_maps(run.pid()).unwrap();
        let symbols = ProcessSymbols::load(run.pid(), &maps).unwrap();
        let t = Instant::now();
        let interp = Interpreter::attach(&symbols, &mem).unwrap();
        let attached = t.elapsed();
        let walk = interp.threads(&mem).unwrap();
        let mut reader = interp.frame_reader(&mem);
        let n: usize = walk
            .threads
            .iter()
            .filter_map(|t| t.current_frame)
            .map(|f| reader.chain(f, 1000).frames.len())
            .sum();
        eprintln!(
            "{}: attach {attached:?}, threads and {n} frames {:?}, {} reads",
            exe.display(),
            t.elapsed() - attached,
            mem.reads()
        );
        let hex = ask(&exe, "import sys; print(sys.hexversion)").unwrap();
        assert_eq!(
            interp.located().version_source,
            reader::python::VersionSource::PyVersion
        );
        let want = reader::python::PythonVersion::from_hex(hex.parse().unwrap());
        assert_eq!(interp.version(), want, "{}", exe.display());
        check_threads(&run, &interp, &mem);

        // Entry frames: the key function called from C (sorted) and the module
        // start an evaluator call; the inlined Python calls do not.
        let main = run.main_thread();
        let ts = interp.threads(&mem).unwrap();
        let frame = ts.for_tid(main.tid).unwrap().current_frame.unwrap();
        let chain = interp.frames(&mem, frame, 1000);
        let entry: Vec<(&str, bool)> = chain
            .frames
            .iter()
            .map(|f| (f.qualname.as_str(), f.is_entry))
            .collect();
        assert_eq!(
            entry,
            vec![
                ("innermost_key", true),
                ("through_c", false),
                ("recurse", false),
                ("recurse", false),
                ("recurse", false),
                ("Shape.Inner.area", false),
                ("main", false),
                ("<module>", true),
            ],
            "{}",
            exe.display()
        );
        // The native pairing of that chain: two evaluator calls, by order.
        use reader::python::{NativeEval, PairedBy};
        let eval = NativeEval {
            is_eval: true,
            stashed_frame: None,
            stack: None,
        };
        let c = NativeEval {
            is_eval: false,
            stashed_frame: None,
            stack: None,
        };
        let stashed = NativeEval {
            is_eval: true,
            stashed_frame: Some(chain.frames[0].addr),
            stack: None,
        };
        eprintln!("  {}", chain.frames[2]);
        let p = chain.pair_with(&[c, stashed, c, eval, c]);
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        let owners: Vec<_> = p
            .python
            .iter()
            .map(|x| x.map(|x| (x.eval_frame, x.paired_by)))
            .collect();
        let mut want = vec![Some((1, PairedBy::Stash))];
        want.extend([Some((3, PairedBy::Order)); 7]);
        assert_eq!(owners, want);
        eprintln!("{}: {} ok", exe.display(), interp.version());
    }
}

#[test]
fn deep_recursion_stops_at_the_limit() {
    for exe in interpreters() {
        let run = run(&exe, "deep", &[]);
        let mem = ProcMem::open(run.pid());
        let interp = attach(run.pid(), &mem);
        let walk = interp.threads(&mem).unwrap();
        let frame = walk
            .for_tid(run.pid() as u64)
            .unwrap()
            .current_frame
            .unwrap();
        let cut = interp.frames(&mem, frame, 512);
        assert_eq!(cut.frames.len(), 512);
        assert!(matches!(cut.end, ChainEnd::Limit { limit: 512, .. }));
        let t = Instant::now();
        let reads = mem.reads();
        let all = interp.frames(&mem, frame, 20_000);
        let took = t.elapsed();
        let reads = mem.reads() - reads;
        assert_eq!(all.end, ChainEnd::Root);
        let seen = &run.main_thread().frames;
        assert_eq!(seen.len(), 10_003);
        assert_eq!(all.frames.len(), seen.len());
        assert_eq!(all.frames[0].params[0].value.display, "0");
        assert_eq!(all.frames[10_000].params[0].value.display, "10000");
        eprintln!(
            "{}: 10,003 frames read in {took:?} ({:?} and {:.1} reads per frame)",
            exe.display(),
            took / 10_003,
            reads as f64 / 10_003.0
        );
    }
}

#[test]
fn not_python_is_refused() {
    let mut child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(50));
    let maps = read_maps(pid).unwrap();
    let symbols = ProcessSymbols::load(pid, &maps).unwrap();
    let mem = ProcMem::open(pid);
    let err = Interpreter::attach(&symbols, &mem).unwrap_err();
    let _ = child.kill();
    let _ = child.wait();
    assert!(matches!(err, PythonError::NotPython { .. }), "{err}");
    assert!(err.to_string().contains("not a CPython"), "{err}");
}

#[test]
fn deleted_libpython_still_reads() {
    // The shared-libpython build only: copy its libpython, run against the copy,
    // delete it, then read.
    for exe in interpreters() {
        let Some(lib) = ask(
            &exe,
            "import sysconfig; print(sysconfig.get_config_var('LIBDIR') + '/' + sysconfig.get_config_var('INSTSONAME'))",
        )
        .map(PathBuf::from)
        .filter(|p| p.exists() && sysconfig_shared(&exe)) else {
            eprintln!("{}: no shared libpython, skipped", exe.display());
            continue;
        };
        let dir = std::env::temp_dir().join(format!("argstash-pyr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join(lib.file_name().unwrap());
        std::fs::copy(&lib, &copy).unwrap();
        let run = run(&exe, "frames", &[("LD_LIBRARY_PATH", &dir)]);
        std::fs::remove_dir_all(&dir).unwrap();
        let mem = ProcMem::open(run.pid());
        let interp = attach(run.pid(), &mem);
        assert!(
            interp.module().starts_with(dir.to_str().unwrap()),
            "{}",
            interp.module()
        );
        check_threads(&run, &interp, &mem);
        eprintln!("{}: read with its libpython deleted", exe.display());
    }
}

/// Whether `exe` links libpython dynamically (Debian's has a libpython too, but not linked).
fn sysconfig_shared(exe: &Path) -> bool {
    let bytes = std::fs::read(exe).unwrap();
    goblin::elf::Elf::parse(&bytes)
        .is_ok_and(|elf| elf.libraries.iter().any(|l| l.starts_with("libpython")))
}

/// The C expression printing each entry of the layout table, by its name.
const OFFSETS_C: &str = r#"
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#define O(name, T, f) printf("%s %zu\n", name, (size_t)offsetof(T, f))
#define S(name, T) printf("%s %zu\n", name, (size_t)sizeof(T))
#define V(name, v) printf("%s %lu\n", name, (unsigned long)(v))
#define BIT(name, field) { PyASCIIObject o; unsigned v; memset(&o, 0, sizeof o); \
    o.state.field = ~0u; memcpy(&v, &o.state, 4); V(name, v); }
int main(void) {
  O("runtime.interpreters_head", _PyRuntimeState, interpreters.head);
  O("interp.next", PyInterpreterState, next);
  O("interp.threads_head", PyInterpreterState, threads.head);
  O("tstate.next", PyThreadState, next);
  O("tstate.interp", PyThreadState, interp);
  O("tstate.native_thread_id", PyThreadState, native_thread_id);
  O("tstate.cframe", PyThreadState, cframe);
  O("cframe.current_frame", _PyCFrame, current_frame);
  O("frame.f_code", _PyInterpreterFrame, f_code);
  O("frame.previous", _PyInterpreterFrame, previous);
  O("frame.prev_instr", _PyInterpreterFrame, prev_instr);
  O("frame.is_entry", _PyInterpreterFrame, is_entry);
  O("frame.owner", _PyInterpreterFrame, owner);
  O("frame.localsplus", _PyInterpreterFrame, localsplus);
  V("frame.owned_by_generator", FRAME_OWNED_BY_GENERATOR);
  O("code.co_flags", PyCodeObject, co_flags);
  O("code.co_argcount", PyCodeObject, co_argcount);
  O("code.co_posonlyargcount", PyCodeObject, co_posonlyargcount);
  O("code.co_kwonlyargcount", PyCodeObject, co_kwonlyargcount);
  O("code.co_firstlineno", PyCodeObject, co_firstlineno);
  O("code.co_nlocalsplus", PyCodeObject, co_nlocalsplus);
  O("code.co_localsplusnames", PyCodeObject, co_localsplusnames);
  O("code.co_localspluskinds", PyCodeObject, co_localspluskinds);
  O("code.co_filename", PyCodeObject, co_filename);
  O("code.co_name", PyCodeObject, co_name);
  O("code.co_qualname", PyCodeObject, co_qualname);
  O("code.co_linetable", PyCodeObject, co_linetable);
  O("code.co_firsttraceable", PyCodeObject, _co_firsttraceable);
  O("code.co_code_adaptive", PyCodeObject, co_code_adaptive);
  V("code.varargs", CO_VARARGS);
  V("code.varkeywords", CO_VARKEYWORDS);
  V("code.fast_cell", CO_FAST_CELL);
  O("object.ob_type", PyObject, ob_type);
  O("object.ob_size", PyVarObject, ob_size);
  O("type.tp_name", PyTypeObject, tp_name);
  O("type.tp_flags", PyTypeObject, tp_flags);
  O("long.ob_digit", PyLongObject, ob_digit);
  V("long.digit_bits", PyLong_SHIFT);
  S("long.digit_size", digit);
  O("float.ob_fval", PyFloatObject, ob_fval);
  O("str.length", PyASCIIObject, length);
  O("str.state", PyASCIIObject, state);
  BIT("str.kind_mask", kind);
  BIT("str.compact_bit", compact);
  BIT("str.ascii_bit", ascii);
  BIT("str.ready_bit", ready);
  S("str.ascii_data", PyASCIIObject);
  S("str.compact_data", PyCompactUnicodeObject);
  O("str.legacy_data", PyUnicodeObject, data);
  O("bytes.ob_sval", PyBytesObject, ob_sval);
  O("tuple.ob_item", PyTupleObject, ob_item);
  O("cell.ob_ref", PyCellObject, ob_ref);
  O("dict.ma_used", PyDictObject, ma_used);
  return 0;
}
"#;

#[test]
fn layout_table_matches_the_headers() {
    for exe in interpreters() {
        let Some(include) = ask(
            &exe,
            "import sysconfig; print(sysconfig.get_paths()['include'])",
        ) else {
            continue;
        };
        let include = PathBuf::from(include);
        if !include.join("Python.h").exists() || !include.join("internal/pycore_frame.h").exists() {
            eprintln!("{}: headers absent, skipped", exe.display());
            continue;
        }
        let dir = std::env::temp_dir().join(format!(
            "argstash-pyoff-{}-{}",
            std::process::id(),
            exe.to_string_lossy().len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("off.c"), OFFSETS_C).unwrap();
        let bin = dir.join("off");
        let cc = Command::new("cc")
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(&bin)
            .arg(dir.join("off.c"))
            .output();
        let Ok(cc) = cc else {
            eprintln!("no C compiler, skipped");
            return;
        };
        assert!(
            cc.status.success(),
            "{}: {}",
            exe.display(),
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = Command::new(&bin).output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let compiled: Vec<(String, u64)> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (n, v) = l.split_once(' ').unwrap();
                (n.to_string(), v.parse().unwrap())
            })
            .collect();
        let table: Vec<(String, u64)> = PY311
            .entries()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        assert_eq!(table, compiled, "{} ({})", exe.display(), include.display());
        eprintln!(
            "{}: {} layout entries match {}",
            exe.display(),
            table.len(),
            include.display()
        );
    }
}
