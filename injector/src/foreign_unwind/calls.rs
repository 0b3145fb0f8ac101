//! Running code in the target after the stop, for the unwinders' sake: the policy
//! that allows it, borrowing one thread at a safe point for function calls
//! ([`Borrower`]), and any thread for raw system calls ([`with_any_thread`]).

use std::time::Duration;

use crate::error::Error;
use crate::memory::{MemoryError, ProcessMemory};
use crate::ptrace::call::RemoteCallError;
use crate::ptrace::gadgets::Gadgets;
use crate::ptrace::safe_point::{borrow_at_safe_point, call_candidates, Guard, NoSafePoint};
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;
use reader::symbols::ProcessSymbols;
use reader::unwind::Unwinder;

/// How long one registration call may take before it is abandoned.
pub const CALL_TIMEOUT: Duration = Duration::from_millis(500);

/// How long [`super::register`] and [`super::unregister`] look for a thread at a safe point by default.
pub const SAFE_POINT_WAIT: Duration = Duration::from_millis(500);

/// Whether argstash may run functions of the target after the stop (libgcc's frame
/// registration, the loader's `dlopen`/`dlclose` for the gdb JIT helper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteCalls {
    /// Only on a thread proved to be at a safe point (`safe_point`), found
    /// within the wait allowed; otherwise the call is skipped and reported.
    #[default]
    AtSafePoints,
    /// Never: no code of the target runs (no C++ exception support through hooks, no
    /// gdb JIT helper; the symbol file and perf files are still written).
    Off,
}

/// What to do with a hook that a C++ exception could cross when its unwind
/// information cannot be made findable by the program's own unwinder first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnprotectedHooks {
    /// Do not hook it: the install fails and the process is left as it was.
    #[default]
    Refuse,
    /// Hook it anyway, because the user asked: an exception thrown through it
    /// ends the program (`std::terminate`); the report and `list` say so.
    Accept,
}

/// How `register` and `unregister` may run code in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPolicy {
    /// Whether calls run at all.
    pub calls: RemoteCalls,
    /// How long to look for a thread at a safe point.
    pub wait: Duration,
    /// What to do when a hook's unwind information cannot be registered before its jump.
    pub unprotected: UnprotectedHooks,
}

impl Default for CallPolicy {
    fn default() -> Self {
        CallPolicy {
            calls: RemoteCalls::AtSafePoints,
            wait: SAFE_POINT_WAIT,
            unprotected: UnprotectedHooks::Refuse,
        }
    }
}

/// Why the work done on a borrowed thread failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkError {
    /// The function call failed, or did not return in time.
    #[error(transparent)]
    Call(#[from] RemoteCallError),
    /// Recording the call's progress in the target's memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// Why a call in the target was not made or not finished.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallSkipped {
    /// [`RemoteCalls::Off`].
    #[error("calls in the target are turned off")]
    Off,
    /// Reading what finding a safe point needs (maps, symbols, memory, arenas) failed.
    #[error("{0}")]
    Context(Box<Error>),
    /// No thread was at a safe point in time.
    #[error("{0}")]
    NoSafePoint(NoSafePoint),
    /// The call did not return in time; the thread finishes it by itself.
    #[error("{0}")]
    Released(RemoteCallError),
    /// Something else failed (the thread was restored).
    #[error("{0}")]
    Failed(WorkError),
    /// The borrowed thread could not be let go.
    #[error("{0}")]
    Detach(SessionError),
}

/// What finding a safe point needs, read once per [`Borrower`].
struct SafePointContext {
    unwind: Unwinder,
    guard: Guard,
    mem: ProcessMemory,
}

/// Lends threads of one process, each only at a safe point, for calls in the target.
pub(crate) struct Borrower<'g> {
    pid: i32,
    policy: CallPolicy,
    /// The caller's gadgets, given to every borrowed session.
    gadgets: &'g mut Gadgets,
    /// Built on first use.
    ctx: Option<SafePointContext>,
}

impl<'g> Borrower<'g> {
    /// A borrower for `pid` under `policy`, lending sessions the caller's `gadgets`.
    pub(crate) fn new(pid: i32, policy: CallPolicy, gadgets: &'g mut Gadgets) -> Borrower<'g> {
        Borrower {
            pid,
            policy,
            gadgets,
            ctx: None,
        }
    }

    /// The caller's gadgets (for sessions opened without a borrower meanwhile).
    pub(crate) fn gadgets(&mut self) -> &mut Gadgets {
        self.gadgets
    }

    fn context(&mut self) -> Result<&SafePointContext, Error> {
        if self.ctx.is_none() {
            let pid = self.pid;
            let maps = reader::procfs::read_maps(pid).map_err(|source| Error::Proc {
                path: format!("/proc/{pid}/maps"),
                source,
            })?;
            let symbols = ProcessSymbols::load(pid, &maps)?;
            let exe = reader::procfs::read_exe_link(pid)
                .ok()
                .and_then(|p| p.to_str().map(str::to_string));
            let guard = Guard::new(&symbols, exe.as_deref());
            let mem = ProcessMemory::open(pid)?;
            let arenas = reader::arena::discover(&maps, &mem)?;
            let unwind = Unwinder::new(reader::unwind::Arch::X86_64, symbols, arenas);
            self.ctx = Some(SafePointContext { unwind, guard, mem });
        }
        Ok(self.ctx.as_ref().expect("just built"))
    }

    /// Runs `call` on a thread borrowed at a safe point (the others keep running).
    pub(crate) fn with_thread(
        &mut self,
        call: impl FnOnce(&mut Session, i32) -> Result<(), WorkError>,
    ) -> Result<(), CallSkipped> {
        if self.policy.calls == RemoteCalls::Off {
            return Err(CallSkipped::Off);
        }
        let (pid, wait) = (self.pid, self.policy.wait);
        let ctx = self
            .context()
            .map_err(|e| CallSkipped::Context(Box::new(e)))?;
        let (mut session, tid) = borrow_at_safe_point(pid, &ctx.unwind, &ctx.guard, &ctx.mem, wait)
            .map_err(CallSkipped::NoSafePoint)?;
        session.set_gadgets(self.gadgets);
        let result = call(&mut session, tid);
        keep_gadgets(self.gadgets, &session);
        let detached = session.detach();
        match result {
            Ok(()) => detached.map(drop).map_err(CallSkipped::Detach),
            Err(WorkError::Call(e @ RemoteCallError::Released { .. })) => {
                Err(CallSkipped::Released(e))
            }
            Err(e) => Err(CallSkipped::Failed(e)),
        }
    }
}

/// Why raw system calls on some thread of the process could not be run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnyThreadError {
    /// The process has no thread to stop.
    #[error("no thread could be stopped")]
    NoThread,
    /// Stopping a thread, a system call on it, or letting it go failed.
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// Runs `call` on one stopped thread (the others keep running), for raw system calls
/// only: they take no user-space lock, so any thread will do.
pub(crate) fn with_any_thread(
    pid: i32,
    gadgets: &mut Gadgets,
    call: impl FnOnce(&mut Session, i32) -> Result<(), SessionError>,
) -> Result<(), AnyThreadError> {
    let mut last = AnyThreadError::NoThread;
    for tid in call_candidates(pid) {
        let mut session = match Session::attach_thread(pid, tid) {
            Ok(s) => s,
            Err(e) => {
                last = e.into();
                continue;
            }
        };
        session.set_gadgets(gadgets);
        let result = call(&mut session, tid);
        keep_gadgets(gadgets, &session);
        let detached = session.detach();
        result?;
        detached?;
        return Ok(());
    }
    Err(last)
}

/// Takes back the gadgets a session found (see [`crate::ptrace::gadgets`]).
fn keep_gadgets(gadgets: &mut Gadgets, session: &Session) {
    if session.gadgets().owner() == gadgets.owner() {
        *gadgets = session.gadgets().clone();
    }
}
