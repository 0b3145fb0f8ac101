//! The names a sample's frames get in a profile: native frames by symbol (a
//! hooked frame with its arguments under `--with-args`), Python frames as
//! `[py] NAME` at their exact place among the native ones.

use injector::reader::args::ArgSource;
use injector::reader::python::pair::Merged;
use injector::{Frame, Sample};

use super::profile::{FrameInfo, FrameOrigin};

/// How frames are named.
#[derive(Debug, Clone, Default)]
pub struct Naming {
    /// Put a hooked frame's arguments into its name.
    pub with_args: bool,
    /// Only these arguments (parameter or register names); empty: all.
    pub only: Vec<String>,
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
                        name: clean(&format!("[py] {}", py.frame.qualname)),
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
            (Some(name), _) => name.clone(),
            (None, Some(m)) => format!("[{}]", basename(m)),
            (None, None) => "[unknown]".to_string(),
        };
        let name = match (&f.stash, self.with_args) {
            (Some(_), true) => format!("{base}({})", self.args(f).join(", ")),
            _ => base,
        };
        out.push(FrameInfo {
            name: clean(&name),
            file: f.module.clone(),
            origin: FrameOrigin::Native,
        });
    }

    /// `name=value` of a hooked frame's stashed arguments, as `bt` shows them.
    fn args(&self, f: &Frame) -> Vec<String> {
        let keep = |name: &str| self.only.is_empty() || self.only.iter().any(|o| o == name);
        let named: Vec<String> = f
            .args
            .iter()
            .filter(|a| a.source == Some(ArgSource::Stash))
            .filter_map(|a| {
                let name = a.name.as_deref().or(a.register.as_deref())?;
                let by_register = a.register.as_deref().is_some_and(keep);
                (keep(name) || by_register).then(|| format!("{name}={}", a.display))
            })
            .collect();
        if !named.is_empty() || f.args.iter().any(|a| a.source == Some(ArgSource::Stash)) {
            return named;
        }
        f.stash
            .iter()
            .flat_map(|s| s.slots())
            .filter(|slot| keep(&slot.name))
            .map(|slot| {
                let low = slot.value as u64;
                if slot.xmm {
                    format!("{}={}", slot.name, f64::from_bits(low))
                } else {
                    format!("{}={}", slot.name, low as i64)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use injector::reader::args::ArgValue;
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
        let all = Naming {
            with_args: true,
            only: vec![],
        };
        assert_eq!(all.stack(&s)[0].name, "apply_entry(account=1003, amount=5)");
        let one = Naming {
            with_args: true,
            only: vec!["account".into()],
        };
        assert_eq!(one.stack(&s)[0].name, "apply_entry(account=1003)");
        // Without DWARF: register names.
        hooked.args.clear();
        let s = sample(vec![hooked]);
        let regs = Naming {
            with_args: true,
            only: vec!["rdi".into()],
        };
        assert_eq!(regs.stack(&s)[0].name, "apply_entry(rdi=1003)");
    }

    #[test]
    fn names_stay_one_collapsed_field() {
        assert_eq!(clean("f(s=\"a;b\")\n"), "f(s=\"a,b\") ");
    }
}
