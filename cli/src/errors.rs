//! Errors as the command line prints them: the library's message, then its hint
//! in command-line syntax (`--addr 0x401136`, `argstash eject ...`).
//!
//! Library errors state facts and offer a typed [`Hint`]; the daemon words the
//! same hint for D-Bus callers and also sends it typed, so `--bus` prints here
//! exactly what the standalone command prints.

use injector::names::{SignatureError, SyntaxReason};
use injector::{hint_of, Hint, RequestOption, UNNAMED_CODE_ADVICE};

/// A hint in command-line syntax, as a clause appended to the error's message.
fn hint_text(hint: &Hint) -> String {
    match hint {
        Hint::EjectFirst { function, .. } => {
            format!(": eject it first with `argstash eject --pid PID --func {function}`")
        }
        Hint::GiveStackWindow { max } => format!(
            "; give the window yourself with `--stack-args N` (N incoming 8-byte stack words, \
             at most {max})"
        ),
        Hint::PickByAddress => ", or --addr ADDR to pick one function".to_string(),
        Hint::UseEntry { entry } => format!(": use --addr {entry:#x}"),
        Hint::WriteOneAlone { read_as, names } => {
            let flags: Vec<String> = names
                .iter()
                .map(|n| format!("--func {}", shell_quoted(n)))
                .collect();
            match (read_as, names.len()) {
                (None, _) => format!("\n  hook one alone with {}", or_list(&flags)),
                (Some(_), 1) => format!("\n  to hook it, write {}", or_list(&flags)),
                (Some(_), _) => format!("\n  to hook one of them, write {}", or_list(&flags)),
            }
        }
        Hint::NameImplementation => "; hook the implementation instead, by its own name (`nm` \
             the module's debug file) or --addr"
            .to_string(),
        Hint::HookImplementations { functions, unnamed } => {
            let mut text = String::new();
            if !functions.is_empty() {
                let flags: Vec<String> = functions.iter().map(|f| format!("--func {f}")).collect();
                text.push_str(&format!(
                    "\n  hook {} instead: {}",
                    if functions.len() == 1 {
                        "that"
                    } else {
                        "those"
                    },
                    flags.join(" ")
                ));
            }
            if *unnamed {
                text.push_str("\n  ");
                text.push_str(UNNAMED_CODE_ADVICE);
            }
            text
        }
        Hint::LeaveOut { option } => format!("; leave out {}", flag(*option)),
        Hint::AcceptUnwindLoss { retry } => format!(
            "; {}or pass --accept-unwind-loss to hook it anyway (a C++ exception thrown \
             through it then ends the program)",
            if *retry {
                "try again (a thread may be at a safe point then; --safe-point-wait MS looks \
                 longer), "
            } else {
                ""
            }
        ),
        Hint::GiveKernelCore => {
            "; pass the core the kernel wrote (see /proc/sys/kernel/core_pattern) with --core"
                .to_string()
        }
        Hint::GiveCoreNotProgram => "; pass the core with --core (and this file with --exe if \
             it is the program that crashed)"
            .to_string(),
    }
}

/// `word` in single quotes for a POSIX shell (a `'` in it as `'\''`).
fn shell_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The `inject` flag of a request option.
fn flag(option: RequestOption) -> &'static str {
    match option {
        RequestOption::FloatArgs => "--float-args",
        RequestOption::Python => "--python",
    }
}

/// A refused signature: the reason, the text with a caret under the byte where
/// it goes wrong, and how to write it.
fn signature_syntax(text: &str, at: usize, reason: &SyntaxReason) -> String {
    // One column per character; control characters (tabs, newlines) show as spaces.
    let shown: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let column = text.get(..at).map_or(at, |before| before.chars().count());
    format!(
        "cannot read the signature `{shown}`: {reason}\n  {shown}\n  {:column$}^ at byte {at}\n  {}",
        "",
        reason.advice()
    )
}

/// One error of a chain as the command line prints it.
fn part(cause: &(dyn std::error::Error + 'static)) -> String {
    if let Some(SignatureError::Syntax { text, at, reason }) = cause.downcast_ref() {
        return signature_syntax(text, *at, reason);
    }
    if let Some(hint) = hint_of(cause) {
        return format!("{cause}{}", hint_text(&hint));
    }
    // From the daemon: its message words the hint for D-Bus; reword it here.
    if let Some(wire) = cause
        .downcast_ref::<argstash_dbus::Error>()
        .and_then(|e| e.hint())
    {
        if let (Some(text), Some(hint)) = (&wire.text, argstash_dbus::from_wire::hint(wire)) {
            return format!("{text}{}", hint_text(&hint));
        }
    }
    cause.to_string()
}

/// The error and its causes, each cause once: library errors already put their
/// cause in their own message, so a cause whose text is there is not repeated.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        if text.contains(&cause.to_string()) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part(cause));
    }
    text
}

#[cfg(test)]
mod tests {
    //! The command line prints what it printed when the library spelled its flags:
    //! each expected text below is the message as it was before hints were typed.

    use super::*;
    use argstash_dbus::{ErrorHint, ErrorKind, HINT_EJECT_FIRST};
    use injector::names::{AddressPlace, IfuncTarget, SymbolError};
    use injector::CoreError;
    use injector::UnsureWindow;
    use trampolines::x86_64::Unsure;

    fn printed(e: impl Into<anyhow::Error>) -> String {
        error_text(&e.into())
    }

    fn already_hooked() -> injector::Error {
        injector::Error::AlreadyHooked {
            function: "bar in /prog".into(),
            name: "bar".into(),
            slot: 2,
            arena: 0x7f00_0000_0000,
            trampoline: 0x7f00_0000_1000,
        }
    }

    const ALREADY_HOOKED: &str = "bar in /prog is already hooked (hook #2 in the arena at \
         0x7f0000000000, trampoline 0x7f0000001000): eject it first with `argstash eject --pid \
         PID --func bar`";

    #[test]
    fn injector_errors_print_their_hint_as_flags() {
        assert_eq!(printed(already_hooked()), ALREADY_HOOKED);
        let unknown = injector::Error::StackWindowUnknown {
            function: "quad_ref in /prog".into(),
            reason: UnsureWindow {
                tail_called: Some("inner".into()),
                why: Unsure::AddressTaken { at: 0x401000 },
                instruction: Some("lea rax,[rsp+8]".into()),
            },
        };
        assert_eq!(
            printed(unknown),
            "cannot hook quad_ref in /prog: how many stack words to copy for it is unknown \
             (inner, which it tail-calls: the instruction at 0x401000 takes the address of an \
             incoming stack argument: `lea rax,[rsp+8]`); give the window yourself with `--stack-args N` (N \
             incoming 8-byte stack words, at most 16)"
        );
        let unsupported = injector::Error::Unsupported32Bit {
            pid: 42,
            name: "cdecl32".into(),
            option: RequestOption::FloatArgs,
        };
        assert_eq!(
            printed(unsupported),
            "process 42 (cdecl32) is a 32-bit (i386) process: stashing floating-point arguments \
             (i386 passes floating-point arguments on the stack, which the window copies) is not \
             supported for 32-bit targets; leave out --float-args"
        );
    }

    #[test]
    fn symbol_errors_print_their_hint_as_flags() {
        let inside = SymbolError::AddressNotInFunction {
            addr: 0x401137,
            place: AddressPlace::Inside {
                function: "bar".into(),
                offset: 1,
                entry: 0x401136,
                module: "/prog".into(),
            },
        };
        assert_eq!(
            printed(injector::Error::from(inside)),
            "0x401137 is inside bar+0x1 (in /prog); hooks go on function entries: use --addr \
             0x401136"
        );
        let ambiguous = SymbolError::Ambiguous {
            name: "twin".into(),
            candidates: vec![
                "twin in /prog (0x1000)".into(),
                "twin in /prog (0x2000)".into(),
            ],
        };
        assert_eq!(
            printed(ambiguous),
            "`twin` is ambiguous, 2 functions have that name:\n  twin in /prog (0x1000)\n  twin \
             in /prog (0x2000)\n  write MODULE!NAME to pick a module (e.g. `libc.so.6!write`), \
             or --addr ADDR to pick one function"
        );
        let ifunc = |targets| SymbolError::Ifunc {
            name: "memset".into(),
            module: "/lib/libc.so.6".into(),
            targets,
        };
        let start = "`memset` in /lib/libc.so.6 is a GNU indirect function (IFUNC): its symbol \
             is the resolver that picks an implementation at load time, not the code that runs";
        assert_eq!(
            printed(ifunc(vec![])),
            format!(
                "{start}; no GOT slot of this process shows which implementation it chose (no \
                 caller has been bound to it yet); hook the implementation instead, by its own \
                 name (`nm` the module's debug file) or --addr"
            )
        );
        let target = |addr, name: Option<&str>| IfuncTarget {
            addr,
            name: name.map(str::to_string),
            module: "/lib/libc.so.6".into(),
            spelling: "libc.so.6".into(),
            via: vec!["/prog".into()],
        };
        assert_eq!(
            printed(ifunc(vec![target(0x10, Some("__memset_avx2"))])),
            format!(
                "{start}\n  this process calls __memset_avx2 (0x10, /lib/libc.so.6), resolved \
                 through the GOT of /prog\n  hook that instead: --func libc.so.6!__memset_avx2"
            )
        );
        assert_eq!(
            printed(ifunc(vec![
                target(0x10, Some("__memset_avx2")),
                target(0x20, Some("__memset_sse2")),
                target(0x30, None),
            ])),
            format!(
                "{start}\n  this process calls 3 implementations of it:\n    __memset_avx2 \
                 (0x10, /lib/libc.so.6), resolved through the GOT of /prog\n    __memset_sse2 \
                 (0x20, /lib/libc.so.6), resolved through the GOT of /prog\n    unnamed code at \
                 0x30 (in /lib/libc.so.6), resolved through the GOT of /prog\n  hook those \
                 instead: --func libc.so.6!__memset_avx2 --func libc.so.6!__memset_sse2\n  code \
                 that no symbol names cannot be bounded for a hook: install the module's debug \
                 symbols (for glibc, libc6-dbg) to name it"
            )
        );
    }

    #[test]
    fn core_file_errors_print_their_hint_as_flags() {
        assert_eq!(
            printed(CoreError::NotElf {
                path: "notes.txt".into()
            }),
            "notes.txt is not a core file (no ELF header); pass the core the kernel wrote (see \
             /proc/sys/kernel/core_pattern) with --core"
        );
        assert_eq!(
            printed(CoreError::NotCore {
                path: "/prog".into(),
                kind: "executable"
            }),
            "/prog is an ELF executable, not a core file; pass the core with --core (and this \
             file with --exe if it is the program that crashed)"
        );
    }

    #[test]
    fn refused_signatures_point_at_the_byte() {
        let e = injector::names::split_signature("step(int a[)").unwrap_err();
        assert_eq!(
            printed(e),
            "cannot read the signature `step(int a[)`: expected an array size or `]`, found `)`\n  \
             step(int a[)\n             ^ at byte 11\n  write an array parameter as `int a[4]` or \
             `int a[]` (it is the pointer `int *a`)"
        );
        // Columns count characters, and a tab shows as one space.
        let e = injector::names::split_signature("f\u{e9}(int\t;)").unwrap_err();
        let text = printed(e);
        assert!(
            text.starts_with(
                "cannot read the signature `f\u{e9}(int ;)`: unexpected character `;`\n  \
                 f\u{e9}(int ;)\n         ^ at byte 8\n  "
            ),
            "{text}"
        );
    }

    #[test]
    fn a_daemon_error_prints_as_the_standalone_command_would() {
        // The daemon words the hint for D-Bus and sends it typed after the bare text.
        let text = already_hooked().to_string();
        let wire = ErrorHint {
            kind: Some(HINT_EJECT_FIRST.into()),
            text: Some(text.clone()),
            function: Some("bar".into()),
            arena: Some(0x7f00_0000_0000),
            slot: Some(2),
            ..Default::default()
        };
        let from_daemon = argstash_dbus::Error::with_hint(
            ErrorKind::AlreadyHooked,
            format!("{text}: eject it first with the Eject method of its object"),
            wire.clone(),
        );
        assert_eq!(printed(from_daemon), ALREADY_HOOKED);
        // A hint this build does not know: the daemon's own wording is printed.
        let newer = argstash_dbus::Error::with_hint(
            ErrorKind::Failed,
            "it failed: do the new thing",
            ErrorHint {
                kind: Some("new-thing".into()),
                ..wire
            },
        );
        assert_eq!(printed(newer), "it failed: do the new thing");
    }

    #[test]
    fn several_functions_are_offered_as_quoted_flags() {
        let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let hint = Hint::WriteOneAlone {
            read_as: None,
            names: names(&["ns::f(long, long)", "other::f", "it's"]),
        };
        assert_eq!(
            hint_text(&hint),
            "\n  hook one alone with --func 'ns::f(long, long)', --func 'other::f' or \
             --func 'it'\\''s'"
        );
        let hint = Hint::WriteOneAlone {
            read_as: Some("ns::call".into()),
            names: names(&["ns::call<long (*)(long)>"]),
        };
        assert_eq!(
            hint_text(&hint),
            "\n  to hook it, write --func 'ns::call<long (*)(long)>'"
        );
    }
}
