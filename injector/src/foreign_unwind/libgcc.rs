//! libgcc's in-process unwinder (C++ exceptions, `backtrace()`): each hook's
//! `.eh_frame` registered with `__register_frame_info(eh_frame, object)` on a
//! thread borrowed at a safe point, and deregistered with
//! `__deregister_frame_info(eh_frame)` at eject. The slot's `registered` word
//! records the deregistration function, so a later eject (even by another
//! argstash) knows what to undo.

use super::calls::{Borrower, CallSkipped, CALL_TIMEOUT};
use super::report::UnwindReport;
use super::slots::{read_slot, set_registered, UnwindHook, REGISTRATION_PENDING};
use crate::memory::WriteMemory;
use crate::ptrace::call::RemoteCallError;
use reader::symbols::{FuncSpec, ProcessSymbols};

/// libgcc's registration functions in the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unwinder {
    /// Module holding them.
    pub module: String,
    /// `__register_frame_info`.
    pub register: u64,
    /// `__deregister_frame_info`.
    pub deregister: u64,
}

/// Finds `__register_frame_info` / `__deregister_frame_info` (libgcc_s first, then any module).
pub fn find_unwinder(symbols: &ProcessSymbols) -> Option<Unwinder> {
    let find = |name: &str| {
        symbols
            .resolve(&FuncSpec::Qualified {
                module: "libgcc_s".into(),
                name: name.into(),
            })
            .ok()
            .or_else(|| symbols.find_function(name))
    };
    let register = find("__register_frame_info")?;
    let deregister = find("__deregister_frame_info")?;
    if register.module_path != deregister.module_path {
        return None;
    }
    Some(Unwinder {
        module: register.module_path,
        register: register.addr,
        deregister: deregister.addr,
    })
}

/// The note for a registration call that was not made or not finished.
fn skipped_note(what: &str, count: usize, why: &CallSkipped, consequence: &str) -> String {
    match why {
        CallSkipped::Off => {
            format!("{what} skipped for {count} hooks (calls in the target are off): {consequence}")
        }
        CallSkipped::NoSafePoint(e) => format!(
            "{what} skipped for {count} hooks: {e}; running code there could corrupt the \
             program's heap or deadlock it: {consequence} (eject and inject again to retry)"
        ),
        CallSkipped::Released(e) => format!("{what} for {count} hooks not confirmed: {e}"),
        CallSkipped::Context(_) | CallSkipped::Failed(_) | CallSkipped::Detach(_) => {
            format!("{what} failed for {count} hooks: {why}")
        }
    }
}

/// Registers the `.eh_frame` of every hook not registered yet with `unwinder`;
/// without one, notes that the process has no in-process unwinder.
pub(crate) fn register(
    mem: &dyn WriteMemory,
    unwinder: Option<&Unwinder>,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
    borrower: &mut Borrower,
) {
    let Some(unwinder) = unwinder else {
        report.notes.push(
            "no in-process unwinder to register with (the process has not loaded libgcc_s): \
             C++ exceptions and backtrace() are not in use there"
                .into(),
        );
        return;
    };
    let todo: Vec<&UnwindHook> = hooks
        .iter()
        .filter(
            |h| matches!(read_slot(mem, h), Ok(s) if s.registered == 0 && !s.eh_frame.is_empty()),
        )
        .collect();
    if todo.is_empty() {
        return;
    }
    let mut done = 0usize;
    let outcome = borrower.with_thread(|session, tid| {
        for hook in &todo {
            // Marked first: a call released unfinished must never be deregistered.
            set_registered(mem, hook, REGISTRATION_PENDING)?;
            let called = session.remote_call(
                tid,
                unwinder.register,
                "__register_frame_info",
                &[
                    hook.area.eh_frame_addr(hook.slot),
                    hook.area.object_addr(hook.slot),
                ],
                CALL_TIMEOUT,
            );
            match called {
                Ok(()) => set_registered(mem, hook, unwinder.deregister)?,
                Err(e @ RemoteCallError::Released { .. }) => return Err(e.into()),
                Err(e) => {
                    set_registered(mem, hook, 0)?;
                    return Err(e.into());
                }
            }
            done += 1;
        }
        Ok(())
    });
    report.registered = done;
    if let Err(why) = outcome {
        report.notes.push(skipped_note(
            &format!("registration with {}", unwinder.module),
            todo.len() - done,
            &why,
            "a C++ exception thrown through those hooked functions would end the program \
             (std::terminate)",
        ));
    }
}

/// Deregisters the `.eh_frame` of every registered hook (each with the function its
/// slot recorded); a registration never confirmed is left in place.
pub(crate) fn deregister(
    mem: &dyn WriteMemory,
    hooks: &[UnwindHook],
    report: &mut UnwindReport,
    borrower: &mut Borrower,
) {
    let mut pending = 0;
    let todo: Vec<(&UnwindHook, u64)> = hooks
        .iter()
        .filter_map(|h| match read_slot(mem, h) {
            Ok(s) if s.registered == REGISTRATION_PENDING => {
                pending += 1;
                None
            }
            Ok(s) if s.registered != 0 => Some((h, s.registered)),
            _ => None,
        })
        .collect();
    if pending > 0 {
        report.notes.push(format!(
            "{pending} hooks stay registered with libgcc (their registration was never \
             confirmed; the unwind information stays mapped, so this is harmless)"
        ));
    }
    let mut done = 0usize;
    if !todo.is_empty() {
        let outcome = borrower.with_thread(|session, tid| {
            for (hook, deregister) in &todo {
                // Cleared first: a deregistration released unfinished is not retried.
                set_registered(mem, hook, 0)?;
                let called = session.remote_call(
                    tid,
                    *deregister,
                    "__deregister_frame_info",
                    &[hook.area.eh_frame_addr(hook.slot)],
                    CALL_TIMEOUT,
                );
                if let Err(e) = called {
                    if !matches!(e, RemoteCallError::Released { .. }) {
                        let _ = set_registered(mem, hook, *deregister);
                    }
                    return Err(e.into());
                }
                done += 1;
            }
            Ok(())
        });
        if let Err(why) = outcome {
            report.notes.push(skipped_note(
                "deregistration from libgcc",
                todo.len() - done,
                &why,
                "their unwind information stays registered and mapped (harmless: the \
                 trampolines stay mapped too)",
            ));
        }
    }
    report.registered = done;
}
