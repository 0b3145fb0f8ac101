//! The last phase of an install, on a stopped process: [`Prepared::commit`] maps
//! the new arenas, checks that what the plan read is still there, writes code,
//! records and unwind slots, finds the threads inside the bytes about to be
//! overwritten, patches, reads everything back, and moves those threads into the
//! relocated copies. Every change goes through one [`Transaction`], so an error
//! at any step takes all of them back before the session lets the process go.

use trampolines::unwind_area::UNWIND_SLOT_LEN;

use crate::arch::Arch;
use crate::error::{Change, Error, Since};
use crate::foreign_unwind::UnwindHook;
use crate::hooks::arena::ArenaChoice;
use crate::hooks::plan::Prepared;
use crate::hooks::undo::{Suspended, ThreadMove, Transaction};
use crate::hooks::{HookInfo, RipCensus};
use crate::memory::{Memory, WriteMemory};
use crate::ptrace::session::Session;
use crate::ptrace::session_error::SessionError;
use reader::arena::read_arena;

/// What a commit did.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The new hooks.
    pub(crate) hooks: Vec<HookInfo>,
    /// Threads moved out of patched bytes into relocated code.
    pub(crate) moved_threads: Vec<i32>,
    /// Where the stopped threads' RIPs were.
    pub(crate) census: RipCensus,
    /// The hooks with an unwind slot, for registration after the stop.
    pub(crate) unwind_hooks: Vec<UnwindHook>,
    /// Bases of the arenas created.
    pub(crate) new_arenas: Vec<u64>,
}

impl Prepared {
    /// True when the commit maps arenas (it then runs system calls in the target).
    pub(crate) fn creates_arenas(&self) -> bool {
        !self.new_arenas.is_empty()
    }

    /// Applies the install to the process `session` holds stopped, writing
    /// through `mem`, in one stop; on error every change is taken back.
    pub(crate) fn commit(
        &mut self,
        session: &mut Session,
        mem: &dyn WriteMemory,
    ) -> Result<Committed, Error> {
        let mut tx = Transaction::begin(session, mem);
        let unwind_hooks = self.stage_in(&mut tx)?;
        let committed = self.activate_in(&mut tx, unwind_hooks)?;
        tx.commit();
        Ok(committed)
    }

    /// The first half of an install in two stops: maps the new arenas and writes
    /// every hook's code, signature entry and unwind slot, but no record and no
    /// jump, so nothing can run the new code yet. The process may then be let go
    /// (its unwind information registered) and the changes continued by
    /// [`Prepared::activate`] on a later stop, or taken back by resuming and
    /// dropping them. On error every change is taken back at once.
    pub(crate) fn stage(
        &mut self,
        session: &mut Session,
        mem: &dyn WriteMemory,
    ) -> Result<(Suspended, Vec<UnwindHook>), Error> {
        let mut tx = Transaction::begin(session, mem);
        let unwind_hooks = self.stage_in(&mut tx)?;
        Ok((tx.suspend(), unwind_hooks))
    }

    /// The second half of an install in two stops: re-checks what the plan read,
    /// writes the records and the jumps, and moves threads out of the patched
    /// bytes. On error only these changes are taken back, and the staged ones are
    /// handed back with the error: the caller decides whether they can go (see
    /// [`Prepared::unstage`], [`Prepared::retire`]).
    pub(crate) fn activate(
        &mut self,
        session: &mut Session,
        mem: &dyn WriteMemory,
        staged: Suspended,
        unwind_hooks: Vec<UnwindHook>,
    ) -> Result<Committed, Box<(Error, Suspended)>> {
        let mut tx = Transaction::begin(session, mem);
        match self.activate_in(&mut tx, unwind_hooks) {
            Ok(committed) => {
                tx.commit();
                staged.keep();
                Ok(committed)
            }
            Err(e) => {
                drop(tx);
                Err(Box::new((e, staged)))
            }
        }
    }

    /// Takes back the changes of [`Prepared::stage`] on a new stop (nothing ran
    /// the staged code: no jump to it was written).
    pub(crate) fn unstage(session: &mut Session, mem: &dyn WriteMemory, staged: Suspended) {
        drop(Transaction::resume(session, mem, staged));
    }

    /// Keeps the staged code and unwind slots of a hook that was never activated
    /// but whose unwind information libgcc may hold: each slot gets an ejected
    /// record, so it is never reused, and nothing is unmapped.
    pub(crate) fn retire(
        &self,
        session: &mut Session,
        mem: &dyn WriteMemory,
        staged: Suspended,
    ) -> Result<(), Error> {
        let mut tx = Transaction::resume(session, mem, staged);
        for h in &self.hooks {
            let arena = self.arena_header(h.planned.target);
            let mut record = h.code.record.clone();
            record.state = trampolines::arena::HookState::Ejected;
            let bytes = record.encode().map_err(|source| Error::Format {
                addr: arena.base,
                source,
            })?;
            tx.write_over_zeros(arena.record_addr(h.code.slot), &bytes)?;
        }
        tx.commit();
        Ok(())
    }

    fn stage_in(&mut self, tx: &mut Transaction<'_>) -> Result<Vec<UnwindHook>, Error> {
        self.create_arenas(tx)?;
        self.check_unchanged(tx.mem())?;
        self.write_code(tx)
    }

    fn activate_in(
        &mut self,
        tx: &mut Transaction<'_>,
        unwind_hooks: Vec<UnwindHook>,
    ) -> Result<Committed, Error> {
        self.check_unchanged(tx.mem())?;
        self.write_records(tx)?;
        let (census, moves) = self.threads_in_patches(tx.session())?;
        for h in &self.hooks {
            let plan = &h.planned.plan;
            tx.write(plan.patch_addr(), &h.code.patch, plan.original())?;
        }
        self.verify(tx.mem())?;
        let mut moved_threads = Vec::new();
        for m in &moves {
            tx.move_thread(m)?;
            moved_threads.push(m.tid);
        }
        Ok(Committed {
            hooks: self.infos(),
            moved_threads,
            census,
            unwind_hooks,
            new_arenas: self.new_arenas.iter().map(|n| n.header().base).collect(),
        })
    }

    /// Maps each new arena at its first free candidate and writes its header
    /// (and, on x86-64, its unwind area); code planned for a candidate that was
    /// taken meanwhile is generated again for the one used.
    fn create_arenas(&mut self, tx: &mut Transaction<'_>) -> Result<(), Error> {
        for i in 0..self.new_arenas.len() {
            let n = &mut self.new_arenas[i];
            let len = n.header().arena_len;
            let mut created = false;
            let mut last_error = None;
            while n.chosen < n.candidates.len() {
                let want = n.candidates[n.chosen];
                let got = tx.session().remote_mmap(
                    want,
                    len,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                );
                match got {
                    Ok(addr) if addr == want => {
                        created = true;
                        break;
                    }
                    Ok(other) => {
                        // A kernel without MAP_FIXED_NOREPLACE put it elsewhere.
                        let _ = tx.session().remote_munmap(other, len);
                        n.chosen += 1;
                    }
                    Err(e) => {
                        last_error = Some(e);
                        n.chosen += 1;
                    }
                }
            }
            if !created {
                let module = self
                    .hooks
                    .iter()
                    .find(|h| matches!(h.planned.target, ArenaChoice::New(j, _) if j == i))
                    .map(|h| h.planned.resolved.module_path.clone())
                    .unwrap_or_default();
                // EEXIST only means the spot was taken meanwhile; anything else is the cause.
                return Err(match last_error {
                    Some(e)
                        if !matches!(
                            e,
                            SessionError::RemoteSyscall {
                                errno: libc::EEXIST,
                                ..
                            }
                        ) =>
                    {
                        Error::ArenaMapFailed { module, cause: e }
                    }
                    _ => Error::NoArenaSpace { module },
                });
            }
            let header = n.header();
            let moved_on = n.chosen != 0;
            tx.mapped(header.base, len);
            tx.write_over_zeros(header.base, &header.encode())?;
            // i386 hooks get no unwind area yet: their CFI is not generated.
            if self.arch == Arch::X86_64 {
                let area = crate::foreign_unwind::map_area(tx.session(), &header)?;
                tx.mapped(area.base, area.len());
                crate::foreign_unwind::init_area(tx.mem(), &header, &area)?;
            }
            if moved_on {
                let installed_ns = self.installed_ns;
                for h in self
                    .hooks
                    .iter_mut()
                    .filter(|h| matches!(h.planned.target, ArenaChoice::New(j, _) if j == i))
                {
                    let ArenaChoice::New(_, slot) = h.planned.target else {
                        continue;
                    };
                    h.code = h.planned.generate(&header, slot, installed_ns)?;
                }
            }
        }
        Ok(())
    }

    /// Re-reads what the plan read and another tool may have changed since: the
    /// records of the arenas used, and the bytes at every patch.
    fn check_unchanged(&self, mem: &dyn Memory) -> Result<(), Error> {
        for (i, a) in self.arenas.iter().enumerate() {
            if !self
                .hooks
                .iter()
                .any(|h| matches!(h.planned.target, ArenaChoice::Existing(j, _) if j == i))
            {
                continue;
            }
            let fresh = read_arena(mem, &a.header)?;
            if fresh != *a {
                return Err(Error::Changed {
                    change: Change::ArenaRecords {
                        arena: a.header.base,
                    },
                });
            }
        }
        for h in &self.hooks {
            let plan = &h.planned.plan;
            let now = mem.read_vec(plan.patch_addr(), plan.patch_len())?;
            if now != plan.original() {
                return Err(Error::Changed {
                    change: Change::Entry {
                        function: h.planned.label(),
                        since: Since::Read,
                        expected: plan.original().to_vec(),
                        found: now,
                    },
                });
            }
        }
        Ok(())
    }

    /// Writes every hook's code, signature entry and unwind slot into its free
    /// slot (all zeros before); returns the hooks that have an unwind slot.
    fn write_code(&self, tx: &mut Transaction<'_>) -> Result<Vec<UnwindHook>, Error> {
        let mut unwind_hooks = Vec::new();
        for h in &self.hooks {
            let code = &h.code;
            let arena = self.arena_header(h.planned.target);
            tx.write_over_zeros(arena.slot_addr(code.slot), &code.slot_bytes())?;
            // Every record gets its signature entry written (empty when none), so a
            // slot never shows a stale one.
            match arena.signature_addr(code.slot) {
                Some(at) => {
                    let entry = trampolines::arena::encode_signature(&h.planned.signature)
                        .map_err(|source| Error::Format {
                            addr: arena.base,
                            source,
                        })?;
                    tx.write_over_zeros(at, &entry)?;
                }
                None if !h.planned.signature.is_empty() => {
                    return Err(Error::Signature(reader::args::SignatureError::OldArena {
                        arena: arena.base,
                    }))
                }
                None => {}
            }
            if let Some(area) = crate::foreign_unwind::write_slot(tx.mem(), &arena, code)? {
                tx.overwritten(area.slot_addr(code.slot), vec![0u8; UNWIND_SLOT_LEN]);
                unwind_hooks.push(crate::foreign_unwind::hook_of(
                    area,
                    code.slot,
                    &code.record,
                ));
            }
        }
        Ok(unwind_hooks)
    }

    /// Writes every hook's record (its slot's code is in place): from now on
    /// `list`, `bt` and `eject` see the hook.
    fn write_records(&self, tx: &mut Transaction<'_>) -> Result<(), Error> {
        for h in &self.hooks {
            let code = &h.code;
            let arena = self.arena_header(h.planned.target);
            let record = code.record.encode().map_err(|source| Error::Format {
                addr: arena.base,
                source,
            })?;
            tx.write_over_zeros(arena.record_addr(code.slot), &record)?;
        }
        Ok(())
    }

    /// Counts where the stopped threads are, and finds the moves of those inside
    /// bytes about to be overwritten into the relocated copies.
    fn threads_in_patches(
        &self,
        session: &mut Session,
    ) -> Result<(RipCensus, Vec<ThreadMove>), Error> {
        let mut census = RipCensus::default();
        let mut moves = Vec::new();
        for tid in session.tids() {
            let regs = session.regs(tid)?;
            for h in &self.hooks {
                let record = &h.code.record;
                if record.in_trampoline(regs.rip) {
                    census.in_trampoline += 1;
                }
                if record.in_relocated(regs.rip) {
                    census.in_relocated += 1;
                }
                if record.inside_patch(regs.rip) {
                    census.in_patch += 1;
                    let Some(to) = record.original_to_relocated(regs.rip) else {
                        return Err(Error::ThreadInPatch {
                            tid,
                            function: h.planned.label(),
                            rip: regs.rip,
                        });
                    };
                    moves.push(ThreadMove { tid, regs, to });
                }
            }
        }
        Ok((census, moves))
    }

    /// Reads every patch and slot back.
    fn verify(&self, mem: &dyn Memory) -> Result<(), Error> {
        for h in &self.hooks {
            let code = &h.code;
            let arena = self.arena_header(h.planned.target);
            let at = h.planned.plan.patch_addr();
            if mem.read_vec(at, code.patch.len())? != code.patch {
                return Err(Error::Verify {
                    addr: at,
                    what: "patch",
                });
            }
            let slot = code.slot_bytes();
            if mem.read_vec(arena.slot_addr(code.slot), slot.len())? != slot {
                return Err(Error::Verify {
                    addr: arena.slot_addr(code.slot),
                    what: "trampoline",
                });
            }
        }
        Ok(())
    }

    /// The hooks as reported.
    fn infos(&self) -> Vec<HookInfo> {
        self.hooks
            .iter()
            .map(|h| {
                let p = &h.planned;
                HookInfo {
                    signature: (!p.signature.is_empty()).then(|| p.signature.clone()),
                    window_source: Some(p.window.source),
                    ..HookInfo::new(&self.arena_header(p.target), h.code.slot, &h.code.record)
                }
            })
            .collect()
    }
}
