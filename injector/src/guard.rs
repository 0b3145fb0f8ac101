//! Hooks that are taken out again when their owner is done with them.

use reader::ids::Pid;
use reader::symbols::FuncSpec;

use crate::error::Error;
use crate::hooks::{eject, install, EjectOptions, HookInfo, HookTarget, InstallOptions};

/// Hooks installed by [`HookGuard::install`], ejected when the guard is dropped
/// (errors on drop are ignored: the process may have ended; call
/// [`HookGuard::eject`] to see them).
///
/// ```
/// use injector::{HookGuard, InstallOptions, Pid};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut child = std::process::Command::new("sleep").arg("30").spawn()?;
/// let pid = Pid::try_from(child.id())?;
/// # std::thread::sleep(std::time::Duration::from_millis(200));
/// {
///     let guard = HookGuard::install(pid, &["clock_nanosleep"], &InstallOptions::default())?;
///     assert_eq!(guard.hooks().len(), 1);
///     assert_eq!(injector::list(pid)?.iter().filter(|h| h.state.name() == "active").count(), 1);
/// } // ejected here
/// assert!(injector::list(pid)?.iter().all(|h| h.state.name() != "active"));
/// child.kill()?;
/// # child.wait()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct HookGuard {
    pid: Pid,
    hooks: Vec<HookInfo>,
    armed: bool,
}

impl HookGuard {
    /// Hooks `targets` in `pid` as [`install`] does, owned by the returned guard.
    pub fn install<T: Clone + Into<HookTarget>>(
        pid: Pid,
        targets: &[T],
        opts: &InstallOptions,
    ) -> Result<HookGuard, Error> {
        let report = install(pid, targets, opts)?;
        Ok(HookGuard {
            pid,
            hooks: report.hooks,
            armed: true,
        })
    }

    /// The hooks the guard owns.
    pub fn hooks(&self) -> &[HookInfo] {
        &self.hooks
    }

    /// Ejects the hooks now, reporting errors.
    pub fn eject(mut self) -> Result<(), Error> {
        self.armed = false;
        self.take_out().map(drop)
    }

    /// Leaves the hooks in the process for good.
    pub fn keep(mut self) {
        self.armed = false;
    }

    fn take_out(&self) -> Result<crate::hooks::EjectReport, Error> {
        let functions = self
            .hooks
            .iter()
            .map(|h| FuncSpec::Addr(h.function))
            .collect();
        eject(self.pid, &EjectOptions::functions(functions))
    }
}

impl Drop for HookGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.take_out();
        }
    }
}
