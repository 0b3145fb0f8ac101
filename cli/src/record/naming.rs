//! The names a sample's frames get in a profile: native frames by symbol (a
//! hooked frame with its arguments under `--with-args`), Python frames as
//! `[py] NAME` at their exact place among the native ones when read while
//! the thread was stopped, `[py~] NAME` when read right after the kernel's
//! sample and found consistent with it (see [`py_tag`]).

use std::cell::RefCell;
use std::collections::HashMap;

use injector::names::ArgSource;
use injector::pyframes::Merged;
use injector::{Frame, Sample};

use super::profile::{FrameInfo, FrameOrigin};

/// A hooked function's parameter names by stash slot: `(slot, name)`.
type Params = Vec<(String, String)>;

/// How frames are named.
#[derive(Debug, Clone, Default)]
pub struct Naming {
    /// Put a hooked frame's arguments into its name.
    pub with_args: bool,
    /// Put them into pprof labels instead (a pprof output without `--with-args`).
    pub labels: bool,
    /// Only these arguments (parameter or register names); empty: all.
    pub only: Vec<String>,
    /// Per hooked function (its entry), learnt once from an annotated sample
    /// (samples are unwound without DWARF): its hook's name and its parameter
    /// names by stash slot, `None` when no signature is known for it.
    params: HashMap<u64, (String, Option<Params>)>,
    /// C++ and Rust symbol names demangled as `bt` shows them, once each.
    demangled: RefCell<HashMap<String, String>>,
    /// Names from debug info of frames the symbol tables do not name, by
    /// lookup address (looked up once each).
    debug_names: HashMap<u64, Option<String>>,
}

/// A name that the collapsed-stack format carries intact (no `;`, no line breaks).
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            ';' => ',',
            '\n' | '\r' | '\t' => ' ',
            c => c,
        })
        .collect()
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl Naming {
    /// Names frames with arguments when `with_args`, keeping only `only` (if not empty).
    pub fn new(with_args: bool, only: Vec<String>) -> Naming {
        Naming {
            with_args,
            labels: false,
            only,
            params: HashMap::new(),
            demangled: RefCell::default(),
            debug_names: HashMap::new(),
        }
    }

    /// Names the frames of `s` that no symbol covers by their module's debug
    /// info (`lookup` a frame's lookup address), as `bt` does: with libc6-dbg,
    /// `__libc_start_call_main` rather than `[libc.so.6]`. Samples are walked
    /// by symbol tables only; the few addresses without a symbol are looked up
    /// once each.
    pub fn name_from_debug(&mut self, s: &mut Sample, lookup: impl Fn(u64) -> Option<String>) {
        for (i, f) in s.frames.iter_mut().enumerate() {
            if f.function.is_some() || f.module.is_none() {
                continue;
            }
            // A caller's pc is its return address: the call is the byte before.
            let at = if i == 0 { f.pc } else { f.pc.wrapping_sub(1) };
            f.function = self
                .debug_names
                .entry(at)
                .or_insert_with(|| lookup(at))
                .clone();
        }
    }

    /// Whether `s` has a hooked frame whose parameter names are not known yet
    /// (the caller then takes an annotated sample and [`Self::learn`]s from it).
    pub fn needs_names(&self, s: &Sample) -> bool {
        (self.with_args || self.labels)
            && s.frames
                .iter()
                .filter_map(|f| f.stash.as_ref())
                .any(|st| !self.params.contains_key(&st.function))
    }

    /// Learns the parameter names of the hooked frames of an annotated sample.
    /// A function without DWARF or a `--func` signature has none: which of the
    /// argument registers it reads is not known, so they stay out of its name.
    pub fn learn(&mut self, s: &Sample) {
        for f in &s.frames {
            let Some(st) = &f.stash else { continue };
            // Annotation gives a typed value per parameter when a signature is
            // known, nothing otherwise; a function that DWARF describes with no
            // parameters has none either (and its own frame: no tail call).
            let known =
                !f.args.is_empty() || (f.source_function.is_some() && f.foreign_hook().is_none());
            let names = known.then(|| {
                f.args
                    .iter()
                    .filter(|a| a.source == Some(ArgSource::Stash))
                    // A parameter without a name (a signature of types only)
                    // goes by its register.
                    .filter_map(|a| {
                        let reg = a.register.clone()?;
                        Some((reg.clone(), a.name.clone().unwrap_or(reg)))
                    })
                    .collect()
            });
            if !self.params.contains_key(&st.function) {
                let hook = self.shown(&st.hook);
                self.params.insert(st.function, (hook, names));
            }
        }
    }

    /// Hooked functions whose frames carry no arguments under `--with-args`
    /// because no signature is known for them (and `--args` names no register).
    pub fn without_signature(&self) -> Vec<String> {
        if !(self.with_args || self.labels) || self.only.iter().any(|o| is_register(o)) {
            return Vec::new();
        }
        let mut v: Vec<String> = self
            .params
            .values()
            .filter(|(_, names)| names.is_none())
            .map(|(hook, _)| hook.clone())
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The frames of `s`, innermost first, Python ones interleaved.
    pub fn stack(&self, s: &Sample) -> Vec<FrameInfo> {
        let mut out = Vec::with_capacity(s.frames.len());
        let merged = match &s.python {
            Some(py) => py.interleave(s.frames.len()),
            None => (0..s.frames.len()).map(Merged::Native).collect(),
        };
        for m in merged {
            match m {
                Merged::Native(i) => self.native(&s.frames[i], &mut out),
                Merged::Python(p) => {
                    let Some(py) = s.python.as_ref().and_then(|py| py.frames.get(p)) else {
                        continue;
                    };
                    out.push(FrameInfo {
                        name: clean(&format!("{} {}", py_tag(s.python_read), py.frame.qualname)),
                        file: Some(py.frame.file.clone()),
                        origin: FrameOrigin::Python,
                    });
                }
            }
        }
        out
    }

    /// Pushes a native frame and the functions inlined at its pc (innermost first).
    fn native(&self, f: &Frame, out: &mut Vec<FrameInfo>) {
        for i in &f.inlined {
            out.push(FrameInfo {
                name: clean(i.function.as_deref().unwrap_or("??")),
                file: i.file.clone(),
                origin: FrameOrigin::Native,
            });
        }
        let base = match (&f.function, &f.module) {
            (Some(name), _) => self.shown(name),
            (None, Some(m)) => format!("[{}]", basename(m)),
            (None, None) => "[unknown]".to_string(),
        };
        // A stash left by the hook of a function that tail-called this one
        // holds that function's arguments: they go with its name, marked as
        // `bt` marks such a frame (`spin [stashed by hook work(id=1)]`).
        let args = self.args(f).map(|a| format!("({})", a.join(", ")));
        let name = match (args, f.foreign_hook()) {
            (Some(args), None) => format!("{base}{args}"),
            (Some(args), Some(hook)) => {
                format!("{base} [{}{args}]", injector::render::stashed_by(hook))
            }
            (None, _) => base,
        };
        out.push(FrameInfo {
            name: clean(&name),
            file: f.module.clone(),
            origin: FrameOrigin::Native,
        });
    }

    /// A symbol's name as `bt` shows it: C++ and Rust names demangled (samples
    /// are unwound without DWARF, whose names `bt` would show).
    fn shown(&self, name: &str) -> String {
        if !name.starts_with("_Z") && !name.starts_with("_R") {
            return name.to_string();
        }
        self.demangled
            .borrow_mut()
            .entry(name.to_string())
            .or_insert_with(|| injector::names::demangle(name))
            .clone()
    }

    /// `name=value` of a hooked frame's stashed arguments under `--with-args`:
    /// the parameters of its signature (by name), the value as `bt` shows a raw
    /// stashed word. Without a known signature only the registers `--args`
    /// names (`rdi`), and `None` (no parentheses) when it names none.
    fn args(&self, f: &Frame) -> Option<Vec<String>> {
        if !self.with_args {
            return None;
        }
        let pairs = self.arg_values(f)?;
        Some(pairs.iter().map(|(n, v)| format!("{n}={v}")).collect())
    }

    /// The pprof labels of a sample when arguments go into labels rather than
    /// names ([`Self::labels`]): `FUNCTION.PARAMETER` and the value, for every
    /// hooked frame (the innermost of a recursion), as `--with-args` would name them.
    pub fn sample_labels(&self, s: &Sample) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        if !self.labels {
            return out;
        }
        for f in &s.frames {
            let Some(st) = &f.stash else { continue };
            let Some((hook, _)) = self.params.get(&st.function) else {
                continue;
            };
            for (name, value) in self.arg_values(f).unwrap_or_default() {
                let key = format!("{hook}.{name}");
                if !out.iter().any(|(k, _)| *k == key) {
                    out.push((key, value));
                }
            }
        }
        // How its Python frames were paired: `exact`, `after-sample`, or
        // `moved-on` (left out), as the `[py]`/`[py~]` marks say in the names.
        let has_python = s.python.as_ref().is_some_and(|p| !p.frames.is_empty());
        if has_python || s.python_read == injector::PythonRead::MovedOn {
            out.push(("python_frames".into(), s.python_read.name().into()));
        }
        out
    }

    /// `(name, value)` of a hooked frame's stashed arguments: see [`Self::args`].
    fn arg_values(&self, f: &Frame) -> Option<Vec<(String, String)>> {
        let keep = |name: &str| self.only.is_empty() || self.only.iter().any(|o| o == name);
        let st = f.stash.as_ref()?;
        let learnt = self.params.get(&st.function).and_then(|(_, n)| n.as_ref());
        if learnt.is_none() && !self.only.iter().any(|o| is_register(o)) {
            return None;
        }
        let named = |slot: &str| -> Option<String> {
            match learnt {
                Some(v) => v
                    .iter()
                    .find(|(reg, _)| reg == slot)
                    .map(|(_, n)| n.clone()),
                // No signature: a register only when asked for by name.
                None => self
                    .only
                    .iter()
                    .any(|o| o == slot)
                    .then(|| slot.to_string()),
            }
        };
        let named_args = st
            .slots()
            .iter()
            .filter_map(|slot| {
                let name = named(&slot.name)?;
                (keep(&name) || keep(&slot.name)).then(|| {
                    let low = slot.value as u64;
                    let value = match slot.xmm {
                        true => f64::from_bits(low).to_string(),
                        false => injector::render::display_value(low),
                    };
                    (name, value)
                })
            })
            .collect();
        Some(named_args)
    }
}

/// Whether `--args` names a stash slot (`rdi`, `stack+8`, `xmm0`, i386's
/// `eax`) rather than a parameter.
fn is_register(name: &str) -> bool {
    const REGS: [&str; 9] = ["rdi", "rsi", "rdx", "rcx", "r8", "r9", "eax", "edx", "ecx"];
    REGS.contains(&name) || name.starts_with("stack+") || name.starts_with("xmm")
}

/// The mark a Python frame's name starts with, saying how it was paired with
/// the native frames: `[py]` read while the thread was stopped (exact),
/// `[py~]` read right after the kernel's sample, while the thread ran on, and
/// found consistent with the sample's copied stack.
pub fn py_tag(read: injector::PythonRead) -> &'static str {
    match read {
        injector::PythonRead::Stopped => "[py]",
        injector::PythonRead::AfterSample | injector::PythonRead::MovedOn => "[py~]",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use injector::names::ArgValue;
    use injector::{StashedArgs, Tid};
    use std::time::Duration;

    fn frame(name: &str) -> Frame {
        Frame {
            function: Some(name.into()),
            module: Some("/srv/app".into()),
            ..Frame::default()
        }
    }

    fn arg(name: &str, reg: &str, v: &str) -> ArgValue {
        ArgValue {
            name: Some(name.into()),
            ty: Some("long".into()),
            display: v.into(),
            source: Some(ArgSource::Stash),
            register: Some(reg.into()),
            value: None,
        }
    }

    fn sample(frames: Vec<Frame>) -> Sample {
        Sample {
            tid: Tid::from_raw(1),
            frames,
            python: None,
            truncated: None,
            stopped: Duration::ZERO,
            latency: Duration::ZERO,
            stack_bytes: 0,
            at_syscall: false,
            on_cpu: Some(true),
            capture: injector::Capture::Stopped,
            python_read: injector::PythonRead::Stopped,
        }
    }

    #[test]
    fn hooked_frames_carry_the_chosen_arguments() {
        let mut hooked = frame("apply_entry");
        hooked.stash = Some(StashedArgs {
            registers: vec![("rdi", 1003), ("rsi", 5)],
            stack: vec![],
            xmm: vec![],
            variadic: false,
            frame: 0,
            function: 0,
            hook: "apply_entry".into(),
        });
        hooked.args = vec![arg("account", "rdi", "1003"), arg("amount", "rsi", "5")];
        let mut unknown = frame("x");
        unknown.function = None;
        let s = sample(vec![hooked.clone(), unknown, frame("main")]);
        let plain = Naming::default().stack(&s);
        assert_eq!(plain[0].name, "apply_entry");
        assert_eq!(plain[1].name, "[app]");
        let mut all = Naming::new(true, vec![]);
        assert!(all.needs_names(&s));
        all.learn(&s);
        assert!(!all.needs_names(&s));
        assert_eq!(all.stack(&s)[0].name, "apply_entry(account=1003, amount=5)");
        let mut one = Naming::new(true, vec!["account".into()]);
        one.learn(&s);
        // Later samples are not annotated: the names learnt still apply.
        hooked.args.clear();
        let bare = sample(vec![hooked.clone()]);
        assert_eq!(one.stack(&bare)[0].name, "apply_entry(account=1003)");
        // Without DWARF or signature: only registers asked for by name.
        let mut regs = Naming::new(true, vec!["rdi".into()]);
        regs.learn(&bare);
        assert_eq!(regs.stack(&bare)[0].name, "apply_entry(rdi=1003)");
        assert!(regs.without_signature().is_empty());
        let mut unknown = Naming::new(true, vec![]);
        unknown.learn(&bare);
        assert_eq!(unknown.stack(&bare)[0].name, "apply_entry");
        assert_eq!(unknown.without_signature(), ["apply_entry"]);
    }

    #[test]
    fn a_tail_called_frame_keeps_its_name_and_gives_the_arguments_to_the_hook() {
        let mut spin = frame("spin");
        spin.stash = Some(StashedArgs {
            registers: vec![("rdi", 2), ("rsi", 3)],
            stack: vec![],
            xmm: vec![],
            variadic: false,
            frame: 0,
            function: 0x1000,
            hook: "work".into(),
        });
        spin.args = vec![arg("id", "rdi", "2"), arg("rounds", "rsi", "3")];
        let s = sample(vec![spin, frame("main")]);
        let mut n = Naming::new(true, vec![]);
        n.learn(&s);
        assert_eq!(
            n.stack(&s)[0].name,
            "spin [stashed by hook work(id=2, rounds=3)]"
        );
        assert_eq!(Naming::default().stack(&s)[0].name, "spin");
    }

    #[test]
    fn names_stay_one_collapsed_field() {
        assert_eq!(clean("f(s=\"a;b\")\n"), "f(s=\"a,b\") ");
    }

    #[test]
    fn a_sample_whose_python_frames_moved_on_is_labelled_so() {
        let mut n = Naming::new(false, Vec::new());
        n.labels = true;
        let mut s = sample(vec![frame("_PyEval_EvalFrameDefault")]);
        assert!(n.sample_labels(&s).is_empty());
        s.python_read = injector::PythonRead::MovedOn;
        assert_eq!(
            n.sample_labels(&s),
            [("python_frames".to_string(), "moved-on".to_string())]
        );
        assert_eq!(py_tag(injector::PythonRead::Stopped), "[py]");
        assert_eq!(py_tag(injector::PythonRead::AfterSample), "[py~]");
    }
}
