//! Round trips: every value that crosses the bus, sent with [`crate::to_wire`],
//! encoded as D-Bus encodes it, decoded and read back with [`crate::from_wire`],
//! equals the value sent. Library types without `PartialEq` are compared by
//! their `Debug` form, which shows every field.

use std::borrow::Cow;
use std::time::Duration;

use injector::names::{ArgSource, ArgValue};
use injector::pyframes::InterpreterLabel;
use injector::pyframes::Placement;
use injector::pyframes::{FrameOwner, ParamKind};
use injector::pyframes::{PairedBy, PyFrame, PyParam, PyValue, PythonStack, StackFrame};
use injector::{
    Backtrace, Capture, Frame, FrameKind, Hint, HookInfo, HookState, HookUnwindStatus,
    InlinedFrame, Pid, RequestOption, SignalFate, SignalOutcome, StashedArgs, StopReason,
    ThreadBacktrace, Tid, WindowSource,
};
use serde::{de::DeserializeOwned, Serialize};
use zbus::zvariant::{serialized::Context, to_bytes, Type, LE};

use crate::{from_wire, to_wire, Error, ErrorKind};

/// `v` as D-Bus encodes it, decoded again.
fn over_the_bus<T: Serialize + DeserializeOwned + Type>(v: &T) -> T {
    let ctxt = Context::new_dbus(LE, 0);
    to_bytes(ctxt, v).unwrap().deserialize().unwrap().0
}

const PID: i32 = 4242;

fn hook(name: &str, slot: u32, state: HookState) -> HookInfo {
    HookInfo {
        name: name.to_string(),
        module: "/usr/bin/prog".into(),
        function: 0x40_1136 + u64::from(slot),
        patch_addr: 0x40_1137 + u64::from(slot),
        patch_len: 5,
        trampoline: 0x7f00_0000_1000 + u64::from(slot) * 0x100,
        arena: 0x7f00_0000_0000,
        slot,
        stack_words: 3,
        variadic: slot % 2 == 1,
        xmm: slot % 3 == 1,
        state,
        installed_ns: 1_700_000_000_123_456_789,
        signature: (slot == 1).then(|| "int n, const char *s".to_string()),
        window_source: None,
    }
}

fn unwind() -> injector::UnwindReport {
    injector::UnwindReport {
        registered: 2,
        unwinder: Some("/lib/x86_64-linux-gnu/libgcc_s.so.1".into()),
        notes: vec!["one hook skipped: no safe point".into()],
        perf_map: Some("/tmp/perf-4242.map".into()),
        perf_jitdump: None,
        perf_jitdump_elapsed: Duration::from_micros(17),
        symbol_file: Some("/tmp/argstash-4242.sym".into()),
        gdb_jit: 1,
        elapsed: Duration::from_micros(1234),
    }
}

fn every_fate() -> Vec<SignalOutcome> {
    [
        SignalFate::Redelivered,
        SignalFate::Requeued,
        SignalFate::InfoDropped,
        SignalFate::Resent,
        SignalFate::Merged,
        SignalFate::Lost { errno: 11 },
    ]
    .into_iter()
    .enumerate()
    .map(|(i, fate)| SignalOutcome {
        tid: PID + i as i32,
        signal: 10 + i as i32,
        code: -(i as i32),
        fate,
    })
    .collect()
}

#[test]
fn hook_records_of_every_state() {
    for (slot, state) in [HookState::Active, HookState::Ejected, HookState::Free]
        .into_iter()
        .enumerate()
    {
        let h = hook("bar", slot as u32, state);
        let wire = over_the_bus(&to_wire::hook_entry(PID, &h));
        assert_eq!(from_wire::hook_info(&wire).unwrap(), h);
    }
    let mut wire = to_wire::hook_entry(PID, &hook("bar", 0, HookState::Active));
    wire.state = "frozen".into();
    assert_eq!(
        from_wire::hook_info(&wire).unwrap_err(),
        from_wire::FromWireError::Unknown {
            what: "the hook state",
            value: "frozen".into()
        }
    );
}

#[test]
fn install_reports() {
    let mut hooks = vec![
        hook("bar", 0, HookState::Active),
        hook("foo", 1, HookState::Active),
    ];
    hooks[0].window_source = Some(WindowSource::Code);
    let mut report = injector::InstallReport {
        hooks,
        stopped: Duration::from_micros(321),
        threads: 3,
        new_arenas: vec![0x7f00_0000_0000],
        moved_threads: vec![PID + 1],
        unwind: unwind(),
        rip_census: injector::RipCensus {
            in_patch: 1,
            in_relocated: 2,
            in_trampoline: 3,
        },
        signals: every_fate(),
    };
    for source in WindowSource::ALL {
        report.hooks[1].window_source = Some(source);
        let wire = over_the_bus(&to_wire::install_report(PID, &report));
        let back = from_wire::install_report(wire).unwrap();
        assert_eq!(format!("{back:?}"), format!("{report:?}"));
    }
    // A key the daemon did not send is named, not made up.
    let mut wire = to_wire::install_report(PID, &report);
    wire.rip_census = None;
    assert_eq!(
        from_wire::install_report(wire).unwrap_err(),
        from_wire::FromWireError::MissingKey {
            what: "an install report",
            key: "rip-census"
        }
    );
}

#[test]
fn eject_reports() {
    let report = injector::EjectReport {
        hooks: vec![hook("bar", 0, HookState::Active)],
        stopped: Duration::from_micros(99),
        moved_threads: vec![],
        rip_census: injector::RipCensus {
            in_patch: 0,
            in_relocated: 4,
            in_trampoline: 0,
        },
        unwind: injector::UnwindReport {
            unwinder: None,
            perf_map: None,
            symbol_file: None,
            notes: vec![],
            ..unwind()
        },
        signals: vec![],
    };
    let wire = over_the_bus(&to_wire::eject_report(PID, &report));
    let back = from_wire::eject_report(wire).unwrap();
    assert_eq!(format!("{back:?}"), format!("{report:?}"));
}

#[test]
fn unwind_status_rows() {
    let rows: Vec<HookUnwindStatus> = (0..4u32)
        .map(|i| HookUnwindStatus {
            name: format!("f{i}"),
            arena: 0x7f00_0000_0000,
            slot: i,
            described: i != 0,
            libgcc: i & 1 != 0,
            gdb_jit: i & 2 != 0,
            perf_map: i == 3,
            perf_jit: i == 2,
        })
        .collect();
    for has_libgcc in [true, false] {
        let wire = over_the_bus(&to_wire::unwind_status(&rows, has_libgcc));
        let (back, libgcc) = from_wire::unwind_status(wire).unwrap();
        assert_eq!(format!("{back:?}"), format!("{rows:?}"));
        assert_eq!(libgcc, has_libgcc);
    }
}

fn arg(
    name: &str,
    register: Option<&str>,
    source: Option<ArgSource>,
    value: Option<u64>,
) -> ArgValue {
    ArgValue {
        name: Some(name.to_string()),
        ty: Some("int".into()),
        display: value.map_or("<optimized out>".to_string(), |v| v.to_string()),
        source,
        register: register.map(str::to_string),
        value,
    }
}

/// A hooked x86-64 frame: every argument register, two stack words, xmm0-1.
fn x86_64_frame() -> Frame {
    let regs = trampolines::x86_64::ARGUMENT_REGS.map(|r| r.name());
    Frame {
        pc: 0x40_1140,
        function: Some("bar".into()),
        offset: 10,
        module: Some("/usr/bin/prog".into()),
        kind: FrameKind::Normal,
        stash: Some(StashedArgs {
            registers: regs.iter().zip(1..).map(|(r, v)| (*r, v)).collect(),
            stack: vec![7, 8],
            xmm: vec![(1u128 << 64) | 0x4000_0000_0000_0000, 3],
            variadic: true,
            frame: 0x7ffd_0000_1000,
            function: 0x40_1136,
            hook: "bar_hooked".into(),
        }),
        source_function: Some("ns::bar".into()),
        file: Some("/src/prog.c".into()),
        line: Some(27),
        inlined: vec![InlinedFrame {
            function: Some("helper".into()),
            file: Some("/src/prog.h".into()),
            line: Some(3),
            args: vec![arg("k", None, Some(ArgSource::Dwarf), Some(4))],
        }],
        args: vec![
            arg("n", Some("rdi"), Some(ArgSource::Stash), Some(1)),
            arg("late", Some("stack+8"), Some(ArgSource::Stash), Some(7)),
            arg("gone", None, None, None),
        ],
        stack: Some((0x7ffd_0000_0f00, 0x7ffd_0000_1010)),
    }
}

/// A hooked i386 frame: eax, edx, ecx and three stack words among its registers.
fn i386_frame() -> Frame {
    let mut registers: Vec<(&'static str, u64)> = trampolines::i386::STASHED_REGS
        .iter()
        .zip(1..)
        .map(|(r, v)| (r.name(), v))
        .collect();
    registers.extend([("stack+4", 10), ("stack+8", 0xffff_fffe), ("stack+12", 12)]);
    Frame {
        pc: 0x0804_9000,
        function: Some("cdecl_sum".into()),
        kind: FrameKind::Normal,
        stash: Some(StashedArgs {
            registers,
            stack: vec![],
            xmm: vec![],
            variadic: false,
            frame: 0xffff_d000,
            function: 0x0804_8ff0,
            hook: "cdecl_sum".into(),
        }),
        ..Default::default()
    }
}

fn py(
    name: &str,
    placement: Option<Placement>,
    owner: FrameOwner,
    note: Option<&str>,
) -> StackFrame {
    StackFrame {
        frame: PyFrame {
            addr: 0x7f11_0000_0040,
            code: 0x7f22_0000_0000,
            qualname: name.to_string(),
            file: "/srv/app.py".into(),
            line: Some(27),
            first_line: 20,
            is_entry: placement.is_some(),
            entry_frame: placement.map(|_| 0x7ffd_0000_2000),
            owner,
            incomplete: false,
            params: [
                ParamKind::PositionalOnly,
                ParamKind::Positional,
                ParamKind::KeywordOnly,
                ParamKind::VarArgs,
                ParamKind::VarKeywords,
            ]
            .into_iter()
            .enumerate()
            .map(|(i, kind)| PyParam {
                name: format!("p{i}"),
                kind,
                value: PyValue {
                    type_name: "int".into(),
                    display: i.to_string(),
                },
            })
            .collect(),
            params_note: note.map(|n| Cow::Owned(n.to_string())),
        },
        placement,
        // A frame with no placement stands for one of a subinterpreter here, so
        // both label forms (with and without an id) cross the wire.
        interpreter: match placement {
            Some(_) => None,
            None => Some(InterpreterLabel {
                addr: 0x7f33_0000_1000,
                id: (owner == FrameOwner::Thread).then_some(2),
            }),
        },
    }
}

fn threads() -> Vec<ThreadBacktrace> {
    let place = |eval_frame, paired_by| {
        Some(Placement {
            eval_frame,
            paired_by,
        })
    };
    vec![
        ThreadBacktrace {
            tid: Tid::from_raw(PID),
            name: "prog".into(),
            frames: vec![
                x86_64_frame(),
                Frame {
                    pc: 0x7f00_0000_1010,
                    kind: FrameKind::Trampoline,
                    ..Default::default()
                },
                Frame {
                    pc: 0x7f00_0000_1080,
                    kind: FrameKind::Relocated,
                    function: Some("foo".into()),
                    ..Default::default()
                },
            ],
            truncated: Some(StopReason::Text(
                "Could not read stack memory at 0x10".into(),
            )),
            stopped: Duration::from_micros(58),
            python: Some(PythonStack {
                frames: vec![
                    py("inner", place(1, PairedBy::Stash), FrameOwner::Thread, None),
                    py(
                        "gen",
                        place(1, PairedBy::Order),
                        FrameOwner::Generator,
                        None,
                    ),
                    py(
                        "entry",
                        place(2, PairedBy::EntryFrame),
                        FrameOwner::Other(3),
                        None,
                    ),
                    py(
                        "lost",
                        None,
                        FrameOwner::Thread,
                        Some("too many parameters to show"),
                    ),
                ],
                notes: vec!["a note".into()],
            }),
            capture: Capture::Stopped,
        },
        ThreadBacktrace {
            tid: Tid::from_raw(PID + 1),
            name: "worker".into(),
            frames: vec![i386_frame()],
            truncated: None,
            stopped: Duration::ZERO,
            python: None,
            capture: Capture::WithoutStop { syscall: 7 },
        },
        ThreadBacktrace {
            tid: Tid::from_raw(PID + 2),
            name: "idle python".into(),
            frames: vec![],
            truncated: None,
            stopped: Duration::from_micros(1),
            python: Some(PythonStack {
                frames: vec![],
                notes: vec![],
            }),
            capture: Capture::Stopped,
        },
    ]
}

#[test]
fn backtraces_with_stashes_inlined_and_python_frames() {
    let bt = Backtrace {
        pid: Pid::from_raw(PID),
        threads: threads(),
    };
    let wire = over_the_bus(&to_wire::threads(&bt));
    let back = from_wire::backtrace(bt.pid, &wire).unwrap();
    assert_eq!(format!("{back:?}"), format!("{bt:?}"));
    // What the front ends print is then the same too.
    for view in [
        injector::render::View::All,
        injector::render::View::Python,
        injector::render::View::Native,
    ] {
        assert_eq!(
            injector::render::backtrace_text(&back, view),
            injector::render::backtrace_text(&bt, view)
        );
        assert_eq!(
            injector::render::backtrace_json(&back, view),
            injector::render::backtrace_json(&bt, view)
        );
    }
}

#[test]
fn a_typed_stop_reason_comes_back_as_its_text() {
    let mut t = threads().swap_remove(1);
    t.truncated = Some(StopReason::Unreadable { addr: 0x10 });
    let bt = Backtrace {
        pid: Pid::from_raw(PID),
        threads: vec![t],
    };
    let back = from_wire::backtrace(bt.pid, &to_wire::threads(&bt)).unwrap();
    assert_eq!(
        back.threads[0].truncated,
        Some(StopReason::Text(
            StopReason::Unreadable { addr: 0x10 }.to_string()
        ))
    );
}

#[test]
fn a_register_this_build_does_not_know_is_refused_not_dropped() {
    let bt = Backtrace {
        pid: Pid::from_raw(PID),
        threads: threads(),
    };
    let mut wire = to_wire::threads(&bt);
    wire[0].frames[0].args[0].register = "r42".into();
    assert_eq!(
        from_wire::backtrace(bt.pid, &wire).unwrap_err(),
        from_wire::FromWireError::Unknown {
            what: "the stashed register",
            value: "r42".into()
        }
    );
}

/// Every hint a daemon call can give.
fn hints() -> Vec<Hint> {
    let names = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        Hint::EjectFirst {
            function: "bar".into(),
            arena: 0x7f00_0000_0000,
            slot: 2,
        },
        Hint::GiveStackWindow { max: 16 },
        Hint::PickByAddress,
        Hint::UseEntry { entry: 0x40_1136 },
        Hint::WriteOneAlone {
            read_as: None,
            names: names(&["ns::f(long)", "other::f"]),
        },
        Hint::WriteOneAlone {
            read_as: Some("ns::call".into()),
            names: names(&["ns::call<long (*)(long)>"]),
        },
        Hint::NameImplementation,
        Hint::HookImplementations {
            functions: names(&["libc.so.6!__memset_avx2"]),
            unnamed: true,
        },
        Hint::LeaveOut {
            option: RequestOption::FloatArgs,
        },
        Hint::LeaveOut {
            option: RequestOption::Python,
        },
    ]
}

#[test]
fn hints_travel_typed() {
    for hint in hints() {
        let wire = to_wire::wire_hint(&hint, "the message".into()).unwrap();
        let wire = over_the_bus(&wire);
        assert_eq!(wire.text.as_deref(), Some("the message"));
        assert_eq!(from_wire::hint(&wire), Some(hint));
    }
    // Hints about core files and unprotected hooks are not the daemon's to give:
    // its message words them, and no typed hint is sent.
    for hint in [
        Hint::AcceptUnwindLoss { retry: true },
        Hint::AcceptUnwindLoss { retry: false },
        Hint::GiveKernelCore,
        Hint::GiveCoreNotProgram,
    ] {
        assert_eq!(to_wire::wire_hint(&hint, String::new()), None);
    }
}

#[test]
fn errors_travel_with_their_kind_message_and_typed_hint() {
    use zbus::DBusError;
    let call = zbus::message::Message::method_call(crate::MANAGER_PATH, "Inject")
        .unwrap()
        .destination(crate::BUS_NAME)
        .unwrap()
        .build(&())
        .unwrap();
    let errors = [
        (
            injector::Error::AlreadyHooked {
                function: "bar in /prog".into(),
                name: "bar".into(),
                slot: 2,
                arena: 0x7f00,
                trampoline: 0x7f40,
            },
            ErrorKind::AlreadyHooked,
        ),
        (
            injector::Error::Unsupported32Bit {
                pid: PID,
                name: "cdecl32".into(),
                option: RequestOption::FloatArgs,
            },
            ErrorKind::NotPermitted,
        ),
        (
            injector::SessionError::NoSuchProcess { pid: PID }.into(),
            ErrorKind::NoSuchProcess,
        ),
    ];
    for (e, kind) in errors {
        let text = e.to_string();
        let hint = e.hint();
        let sent = to_wire::error(PID, e);
        let reply = sent.create_reply(&call.header()).unwrap();
        let got = Error::from(zbus::Error::from(reply));
        assert_eq!(got.kind(), Some(kind));
        assert_eq!(got.to_string(), sent.to_string());
        match hint {
            Some(hint) => {
                let wire = got.hint().expect("a typed hint");
                assert_eq!(wire.text.as_deref(), Some(text.as_str()));
                assert_eq!(from_wire::hint(wire), Some(hint));
            }
            None => assert_eq!((got.hint(), got.to_string()), (None, text)),
        }
    }
}
