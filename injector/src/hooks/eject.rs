//! Ejecting hooks, in the same phases as an install: while the process runs,
//! choose the active records to eject ([`Ejection::choose`]); then, in one stop,
//! check each against the target, move threads out of relocated prologues,
//! restore the original bytes, read them back and mark the records ejected
//! ([`Ejection::commit`]), every change through one [`Transaction`].
//!
//! Trampoline code is never unmapped: a thread may still return into it.

use trampolines::arena::{Arena, HookRecord, HookState, RECORD_LEN};

use crate::arch::Arch;
use crate::error::{Change, Error, Since};
use crate::foreign_unwind::UnwindHook;
use crate::hooks::undo::{ThreadMove, Transaction};
use crate::hooks::{EjectWhat, HookInfo, RipCensus};
use crate::memory::{Memory, WriteMemory};
use crate::ptrace::session::Session;
use reader::symbols::{FuncSpec, ModuleMatch, NameMatch};

/// The hooks one eject removes, chosen before the stop.
pub(crate) struct Ejection {
    arch: Arch,
    arenas: Vec<Arena>,
    /// `(arena index, slot)` of each hook to eject.
    chosen: Vec<(usize, u32)>,
}

/// What an ejection's commit did.
pub(crate) struct Ejected {
    /// The hooks ejected (records as now written).
    pub(crate) hooks: Vec<HookInfo>,
    /// Threads moved from relocated code back to the original function.
    pub(crate) moved_threads: Vec<i32>,
    /// Where the stopped threads' RIPs were.
    pub(crate) census: RipCensus,
}

/// What the checks inside the stop read of one hook, kept for the undo.
struct Found {
    /// The record's bytes.
    record: Vec<u8>,
    /// The bytes at the patch (the jump, or the original bytes after an interrupted operation).
    patch: Vec<u8>,
}

impl Ejection {
    /// Chooses among the active hooks of `arenas` (in a process of `arch`) those
    /// `what` names; `pid` resolves module names in `MODULE!NAME`.
    pub(crate) fn choose(
        pid: i32,
        arch: Arch,
        arenas: Vec<Arena>,
        what: &EjectWhat,
    ) -> Result<Ejection, Error> {
        let active: Vec<(usize, u32)> = arenas
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                a.hooks()
                    // Call-through records (the PEP 523 extension's) patch
                    // nothing: only their owner can take them out.
                    .filter(|(_, r)| r.state == HookState::Active && !r.is_call_through())
                    .map(move |(s, _)| (i, s))
            })
            .collect();
        let record = |(i, s): (usize, u32)| &arenas[i].records[s as usize];
        let chosen: Vec<(usize, u32)> = match what {
            EjectWhat::All => active.clone(),
            EjectWhat::Functions(specs) => {
                let mut chosen = Vec::new();
                let mut sonames = Vec::new();
                for spec in specs {
                    let matched: Vec<((usize, u32), (NameMatch, ModuleMatch))> = active
                        .iter()
                        .filter_map(|h| {
                            Some((*h, spec_match(pid, spec, record(*h), &mut sonames)?))
                        })
                        .collect();
                    let best = matched.iter().map(|(_, how)| *how).min();
                    let hits: Vec<(usize, u32)> = matched
                        .iter()
                        .filter(|(_, how)| Some(*how) == best)
                        .map(|(h, _)| *h)
                        .collect();
                    match hits.len() {
                        0 => {
                            return Err(Error::NotHooked {
                                function: spec.to_string(),
                                hooked: active
                                    .iter()
                                    .map(|h| format!("{} ({})", record(*h).name, record(*h).module))
                                    .collect(),
                            })
                        }
                        1 => chosen.push(hits[0]),
                        _ => {
                            return Err(reader::symbols::SymbolError::Ambiguous {
                                name: spec.to_string(),
                                candidates: hits
                                    .iter()
                                    .map(|h| {
                                        format!(
                                            "{} in {} (0x{:x})",
                                            reader::symbols::shown_name(&record(*h).name),
                                            record(*h).module,
                                            record(*h).function
                                        )
                                    })
                                    .collect(),
                            }
                            .into())
                        }
                    }
                }
                chosen
            }
        };
        Ok(Ejection {
            arch,
            arenas,
            chosen,
        })
    }

    /// True when no hook is to be ejected.
    pub(crate) fn is_empty(&self) -> bool {
        self.chosen.is_empty()
    }

    fn record(&self, (i, s): (usize, u32)) -> &HookRecord {
        &self.arenas[i].records[s as usize]
    }

    /// The chosen hooks that have an unwind slot, for deregistration after the stop.
    pub(crate) fn unwind_hooks(&self, mem: &dyn Memory) -> Vec<UnwindHook> {
        self.chosen
            .iter()
            .filter_map(|(i, s)| {
                let area = crate::foreign_unwind::read_area(mem, &self.arenas[*i].header)?;
                Some(crate::foreign_unwind::hook_of(
                    area,
                    *s,
                    &self.arenas[*i].records[*s as usize],
                ))
            })
            .collect()
    }

    /// Ejects the chosen hooks from the process `session` holds stopped, writing
    /// through `mem`; on error every change is taken back.
    pub(crate) fn commit(
        &self,
        session: &mut Session,
        mem: &dyn WriteMemory,
    ) -> Result<Ejected, Error> {
        let mut tx = Transaction::begin(session, mem);
        // Check everything before writing anything.
        let found = self.check(mem)?;
        let (census, moves) = self.threads_in_relocated(tx.session())?;
        for (h, f) in self.chosen.iter().zip(&found) {
            let r = self.record(*h);
            tx.write(r.patch_addr, &r.original, &f.patch)?;
            if mem.read_vec(r.patch_addr, r.patch_len())? != r.original {
                return Err(Error::Verify {
                    addr: r.patch_addr,
                    what: "restored bytes",
                });
            }
        }
        let mut hooks = Vec::new();
        for ((i, s), f) in self.chosen.iter().zip(&found) {
            let a = &self.arenas[*i];
            let mut r = a.records[*s as usize].clone();
            r.state = HookState::Ejected;
            let bytes = r.encode().map_err(|source| Error::Format {
                addr: a.header.base,
                source,
            })?;
            tx.write(a.header.record_addr(*s), &bytes, &f.record)?;
            hooks.push(HookInfo::new(&a.header, *s, &r));
        }
        let mut moved_threads = Vec::new();
        for m in &moves {
            tx.move_thread(m)?;
            moved_threads.push(m.tid);
        }
        tx.commit();
        Ok(Ejected {
            hooks,
            moved_threads,
            census,
        })
    }

    /// Checks that every chosen record is as read before the stop and its patch
    /// holds the jump (or the original bytes); returns what was read.
    fn check(&self, mem: &dyn Memory) -> Result<Vec<Found>, Error> {
        let mut found = Vec::with_capacity(self.chosen.len());
        for (i, s) in &self.chosen {
            let a = &self.arenas[*i];
            let record = mem.read_vec(a.header.record_addr(*s), RECORD_LEN)?;
            let fresh = HookRecord::decode(&record).map_err(|source| Error::Format {
                addr: a.header.base,
                source,
            })?;
            let r = self.record((*i, *s));
            if fresh != *r {
                return Err(Error::Changed {
                    change: Change::Record {
                        function: r.name.clone(),
                    },
                });
            }
            let expected = (self.arch.codegen())
                .jump_patch(r.patch_addr, r.trampoline, r.patch_len())
                .map_err(|source| Error::Codegen {
                    function: r.name.clone(),
                    source,
                })?;
            let now = mem.read_vec(r.patch_addr, r.patch_len())?;
            // Original bytes under an active record: an argstash killed between writing
            // the record and the patch (inject), or between restoring the bytes and
            // marking the record (eject). Ejecting it completes that operation.
            if now != expected && now != r.original {
                return Err(Error::Changed {
                    change: Change::Entry {
                        function: format!("{} in {}", r.name, r.module),
                        since: Since::Hooked,
                        expected,
                        found: now,
                    },
                });
            }
            found.push(Found { record, patch: now });
        }
        Ok(found)
    }

    /// Counts where the stopped threads are, and finds the moves of those inside
    /// relocated prologues back to the original instructions.
    fn threads_in_relocated(
        &self,
        session: &mut Session,
    ) -> Result<(RipCensus, Vec<ThreadMove>), Error> {
        let mut census = RipCensus::default();
        let mut moves = Vec::new();
        for tid in session.tids() {
            let regs = session.regs(tid)?;
            for h in &self.chosen {
                let r = self.record(*h);
                if r.in_trampoline(regs.rip) {
                    census.in_trampoline += 1;
                }
                if r.in_patch(regs.rip) {
                    census.in_patch += 1;
                }
                if r.in_relocated(regs.rip) {
                    census.in_relocated += 1;
                    let Some(to) = r.relocated_to_original(regs.rip) else {
                        return Err(Error::ThreadInPatch {
                            tid,
                            function: r.name.clone(),
                            rip: regs.rip,
                        });
                    };
                    moves.push(ThreadMove { tid, regs, to });
                }
            }
        }
        Ok((census, moves))
    }
}

/// How well `spec` names the hooked function of `r`, `None` if it does not; the
/// module of a `MODULE!NAME` is matched as symbol resolution matches it (path,
/// file name or soname, prefix at a name boundary), and only the best-matching
/// hooks count, so `libz.so.1!f` picks the module whose soname it is. The name
/// is matched as [`reader::symbols::name_match`] says (the symbol's own name
/// first, then its demangled path, then a suffix of that path).
fn spec_match(
    pid: i32,
    spec: &FuncSpec,
    r: &HookRecord,
    sonames: &mut Vec<(String, Option<String>)>,
) -> Option<(NameMatch, ModuleMatch)> {
    match spec {
        FuncSpec::Name(n) => Some((reader::symbols::name_match(n, &r.name)?, ModuleMatch::Path)),
        FuncSpec::Qualified { module, name } => {
            let by_name = reader::symbols::name_match(name, &r.name)?;
            let soname = match sonames.iter().find(|(p, _)| *p == r.module) {
                Some((_, so)) => so.clone(),
                None => {
                    let so = reader::symbols::soname_of(pid, &r.module);
                    sonames.push((r.module.clone(), so.clone()));
                    so
                }
            };
            reader::symbols::module_match(&r.module, soname.as_deref(), module)
                .or_else(|| {
                    (module.contains('/') && reader::symbols::same_file_in(pid, module, &r.module))
                        .then_some(ModuleMatch::Path)
                })
                .map(|how| (by_name, how))
        }
        FuncSpec::Addr(a) => (r.function == *a).then_some((NameMatch::Exact, ModuleMatch::Path)),
    }
}
