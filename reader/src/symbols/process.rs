//! [`ProcessSymbols`]: every module of a process, and resolving what the user
//! asked to hook to one function entry (IFUNCs through the GOT slots the dynamic
//! linker filled).

use std::io;

use super::elf::parse_elf;
use super::error::{AddressPlace, SymbolError};
use super::module::Module;
use super::module_match::{module_match, same_file_in, ModuleMatch};
use super::resolve::{resolve_demangled, resolve_name, resolve_name_with, resolved};
use super::spec::FuncSpec;
use super::symbol::{IfuncTarget, Resolved, Symbol, VDSO};
use crate::memory::Memory;
use crate::procfs::{self, MapEntry};
/// Every ELF module mapped in a process.
#[derive(Debug)]
pub struct ProcessSymbols {
    /// The process.
    pub pid: i32,
    /// One module per executable file mapping, in address order, plus the `[vdso]`.
    pub modules: Vec<Module>,
    /// Mapped files left out because they were deleted or replaced on disk and
    /// cannot be read as mapped ([`SymbolError::ReplacedOnDisk`]).
    pub refused: Vec<std::sync::Arc<SymbolError>>,
    /// The executable's path when the process is a 32-bit program.
    exe_32bit: Option<String>,
}

impl ProcessSymbols {
    /// Loads every ELF file the process has mapped executable, plus its `[vdso]`.
    ///
    /// Files that are not ELF or cannot be opened or parsed are skipped silently;
    /// files with no executable mapping (locale archives, fonts, data) are never
    /// opened. Fails only when the process itself is gone.
    pub fn load(pid: i32, maps: &[MapEntry]) -> Result<ProcessSymbols, SymbolError> {
        Ok(ProcessSymbols::load_known(
            pid,
            maps,
            executable_is_32bit(pid)?,
        ))
    }

    /// [`ProcessSymbols::load`] for a caller that has read the executable's class
    /// already (`is_32bit`: it is `ELFCLASS32`), so `/proc/PID/exe` is not read again.
    pub fn load_with_class(pid: i32, maps: &[MapEntry], is_32bit: bool) -> ProcessSymbols {
        ProcessSymbols::load_known(pid, maps, is_32bit.then(|| procfs::exe_path(pid)))
    }

    fn load_known(pid: i32, maps: &[MapEntry], exe_32bit: Option<String>) -> ProcessSymbols {
        let mut paths: Vec<&str> = Vec::new();
        for e in maps {
            if e.perms.exec && (e.is_file() || e.path == VDSO) {
                let p = e.file_path();
                if !paths.contains(&p) {
                    paths.push(p);
                }
            }
        }
        let mut modules = Vec::new();
        let mut refused = Vec::new();
        for p in paths {
            match Module::load(pid, p, maps) {
                Ok(m) => modules.push(m),
                Err(e @ SymbolError::ReplacedOnDisk { .. }) => refused.push(std::sync::Arc::new(e)),
                Err(_) => {}
            }
        }
        ProcessSymbols {
            pid,
            modules,
            refused,
            exe_32bit,
        }
    }

    /// The one function called `name` in any module, as [`ProcessSymbols::resolve`]
    /// finds it, when a program (not a person) asks: by its symbol name only (no
    /// demangled names), and no similar names are looked for when there is none.
    pub fn find_function(&self, name: &str) -> Option<Resolved> {
        self.resolve_unqualified(name, false).ok()
    }

    fn resolve_unqualified(&self, name: &str, suggest: bool) -> Result<Resolved, SymbolError> {
        // The vdso duplicates libc names (`clock_gettime`, `time`); it is searched
        // only when nothing else has the name, or when named as `[vdso]!NAME`.
        let (vdso, files): (Vec<&Module>, Vec<&Module>) =
            self.modules.iter().partition(|m| m.path == VDSO);
        match resolve_name_with(name, &files, suggest) {
            Err(SymbolError::NotFound { .. })
                if vdso.iter().any(|m| m.symbols_named(name).next().is_some()) =>
            {
                resolve_name_with(name, &vdso, suggest)
            }
            other => other,
        }
    }

    /// Reads now the symbol tables of the modules whose path is among `paths`
    /// (each is otherwise read on its first lookup): a caller runs this on
    /// another thread while it stops and copies threads, so that the unwind
    /// that follows finds the large tables (libpython's, libc's) ready.
    pub fn read_tables(&self, paths: &[&str]) {
        for m in self
            .modules
            .iter()
            .filter(|m| paths.contains(&m.path.as_str()))
        {
            m.symbols();
        }
    }

    /// Symbols of a process that is not running (a core file): modules built by the caller.
    pub fn from_modules(pid: i32, modules: Vec<Module>) -> ProcessSymbols {
        ProcessSymbols {
            pid,
            modules,
            refused: Vec::new(),
            exe_32bit: None,
        }
    }

    /// True when the process runs a 32-bit (i386) executable.
    pub fn is_32bit(&self) -> bool {
        self.exe_32bit.is_some()
    }

    /// The module whose mappings contain `addr` (executable mappings first).
    pub fn module_for(&self, addr: u64) -> Option<&Module> {
        self.modules
            .iter()
            .find(|m| m.exec_ranges.iter().any(|r| r.contains(&addr)))
            .or_else(|| self.modules.iter().find(|m| m.range.contains(&addr)))
    }

    /// The module and function containing `addr`, with the offset into the function.
    pub fn lookup(&self, addr: u64) -> Option<(&Module, &Symbol, u64)> {
        let m = self.module_for(addr)?;
        let (s, off) = m.lookup(addr)?;
        Some((m, s, off))
    }

    /// Resolves a spec to one function entry.
    pub fn resolve(&self, spec: &FuncSpec) -> Result<Resolved, SymbolError> {
        match spec {
            FuncSpec::Name(name) => self.resolve_unqualified(name, true),
            FuncSpec::Qualified { module, name } => {
                let matched = self.modules_matching(module);
                if matched.is_empty() {
                    let mut loaded: Vec<String> = Vec::new();
                    for m in &self.modules {
                        let shown = match m.soname.as_deref() {
                            Some(so) if so != m.file_name() => {
                                format!("{} (soname {so})", m.file_name())
                            }
                            _ => m.file_name().to_string(),
                        };
                        if !loaded.contains(&shown) {
                            loaded.push(shown);
                        }
                    }
                    return Err(SymbolError::ModuleNotFound {
                        module: module.clone(),
                        loaded,
                    });
                }
                let defining: Vec<&Module> = matched
                    .iter()
                    .copied()
                    .filter(|m| m.symbols_named(name).next().is_some() || m.is_ifunc(name))
                    .collect();
                if defining.len() > 1 {
                    return Err(SymbolError::AmbiguousModule {
                        module: module.clone(),
                        name: name.clone(),
                        candidates: defining
                            .iter()
                            .map(|m| {
                                let at = m.symbols_named(name).next().map_or_else(
                                    || "IFUNC".to_string(),
                                    |s| format!("{:#x}", s.addr),
                                );
                                format!(
                                    "{name} in {} ({at}): write `{}!{name}`",
                                    m.path,
                                    self.unique_spelling(m)
                                )
                            })
                            .collect(),
                    });
                }
                resolve_name(
                    name,
                    if defining.is_empty() {
                        &matched
                    } else {
                        &defining
                    },
                )
            }
            FuncSpec::Addr(addr) => self.resolve_addr(*addr),
        }
    }

    /// For a hook written `NAME(PARAMS)` whose list also parses as a C signature:
    /// the C++ function whose demangled name with parameter list this is, when no
    /// symbol is called `NAME` exactly (a C function `NAME` takes `PARAMS` as its
    /// signature). `None` when there is no such C++ function.
    pub fn resolve_with_parameter_list(
        &self,
        spec: &FuncSpec,
        params: &str,
    ) -> Option<Result<Resolved, SymbolError>> {
        let (modules, name): (Vec<&Module>, &str) = match spec {
            FuncSpec::Name(n) => (self.modules.iter().filter(|m| m.path != VDSO).collect(), n),
            FuncSpec::Qualified { module, name } => (self.modules_matching(module), name),
            FuncSpec::Addr(_) => return None,
        };
        if modules
            .iter()
            .any(|m| m.symbols_named(name).next().is_some() || m.is_ifunc(name))
        {
            return None;
        }
        match resolve_demangled(&format!("{name}({params})"), &modules)? {
            Err(SymbolError::BadName { .. }) => None,
            found => Some(found),
        }
    }

    /// Modules named by `module` (the `MODULE` of `MODULE!NAME`), those of the best
    /// [`ModuleMatch`] only: its path (or another path of the same file, such as the
    /// symlink `ldd` prints), else its file name or `DT_SONAME` (`libz.so.1`), else a
    /// prefix of either that ends at a name boundary (`libz`, `libz.so`, `libz.so.1`
    /// all find `libz.so.1.2.13`; `lib` and `libz.s` find nothing).
    pub fn modules_matching(&self, module: &str) -> Vec<&Module> {
        let same_file = |m: &Module| {
            module.contains('/')
                && m.path.starts_with('/')
                && same_file_in(self.pid, module, &m.path)
        };
        let best = self
            .modules
            .iter()
            .filter_map(|m| {
                let how = module_match(&m.path, m.soname.as_deref(), module);
                how.or_else(|| same_file(m).then_some(ModuleMatch::Path))
                    .map(|how| (how, m))
            })
            .collect::<Vec<_>>();
        let Some(top) = best.iter().map(|(how, _)| *how).min() else {
            return Vec::new();
        };
        best.into_iter()
            .filter(|(how, _)| *how == top)
            .map(|(_, m)| m)
            .collect()
    }

    /// Resolves what the user asked to hook, as [`Self::resolve`] does and more,
    /// reading the live process through `mem`:
    ///
    /// - a name no symbol table of the loaded files has is looked up in the
    ///   `.symtab` of their separate debug files (build-id or debuglink), which
    ///   names local functions of stripped libraries;
    /// - an IFUNC is still refused, but the error names the implementation(s) this
    ///   process calls, read from the GOT slots that hold it (nothing runs in the
    ///   target).
    pub fn resolve_for_hook(
        &self,
        spec: &FuncSpec,
        mem: &dyn Memory,
    ) -> Result<Resolved, SymbolError> {
        match self.resolve(spec) {
            Err(SymbolError::NotFound { name, suggestions }) => {
                let modules: Vec<&Module> = match spec {
                    FuncSpec::Qualified { module, .. } => self.modules_matching(module),
                    _ => self.modules.iter().filter(|m| m.path != VDSO).collect(),
                };
                let found: Vec<(&Module, &Symbol)> = modules
                    .iter()
                    .flat_map(|m| {
                        m.separate_symbols()
                            .iter()
                            .filter(|s| s.name == name)
                            .map(move |s| (*m, s))
                    })
                    .collect();
                match found.as_slice() {
                    [] => Err(SymbolError::NotFound { name, suggestions }),
                    [(_, s)] if s.size == 0 => Err(SymbolError::ZeroSize {
                        name: s.name.clone(),
                    }),
                    [(m, s)] => Ok(resolved(m, s)),
                    many => Err(SymbolError::Ambiguous {
                        name,
                        candidates: many
                            .iter()
                            .map(|(m, s)| format!("{} in {} ({:#x})", s.name, m.path, s.addr))
                            .collect(),
                    }),
                }
            }
            Err(SymbolError::Ifunc { name, module, .. }) => {
                let targets = match self.modules.iter().find(|m| m.path == module) {
                    Some(m) => self.ifunc_targets(m, &name, mem),
                    None => Vec::new(),
                };
                Err(SymbolError::Ifunc {
                    name,
                    module,
                    targets,
                })
            }
            other => other,
        }
    }

    /// Where the GNU indirect function `name` of module `m` resolved to in this
    /// process, read from GOT slots without running code in it: every module's
    /// `JUMP_SLOT`/`GLOB_DAT` relocation for `name`, and `m`'s own `IRELATIVE`
    /// relocations whose resolver is `name`'s (glibc's internal calls). Slots that
    /// do not point into `m`'s code (not bound yet, or bound to another module's
    /// `name`) are left out. Sorted by address.
    pub fn ifunc_targets(&self, m: &Module, name: &str, mem: &dyn Memory) -> Vec<IfuncTarget> {
        let resolver = m.ifunc_resolver(name);
        let mut slots: Vec<(u64, &Module)> = Vec::new();
        for x in self.modules.iter().filter(|x| x.path != VDSO) {
            for slot in got_slots(x, name, (std::ptr::eq(x, m)).then_some(resolver).flatten()) {
                let width = if x.is_64 { 8 } else { 4 };
                let mut buf = [0u8; 8];
                let Some(word) = buf.get_mut(..width) else {
                    continue;
                };
                if mem.read(slot, word).is_err() {
                    continue;
                }
                let value = u64::from_le_bytes(buf);
                if m.exec_ranges.iter().any(|r| r.contains(&value)) {
                    slots.push((value, x));
                }
            }
        }
        slots.sort_by_key(|(addr, _)| *addr);
        let mut out: Vec<IfuncTarget> = Vec::new();
        for (addr, x) in slots {
            match out.last_mut() {
                Some(t) if t.addr == addr => {
                    if !t.via.contains(&x.path) {
                        t.via.push(x.path.clone());
                    }
                }
                _ => out.push(IfuncTarget {
                    addr,
                    name: m.name_at(addr).map(|s| s.name.clone()),
                    module: m.path.clone(),
                    spelling: self.unique_spelling(m),
                    via: vec![x.path.clone()],
                }),
            }
        }
        out
    }

    /// The shortest way to write module `m` in `MODULE!NAME` that names it alone:
    /// its file name, its soname, or else its path.
    pub fn unique_spelling(&self, m: &Module) -> String {
        let alone = |spelling: &str| {
            let found = self.modules_matching(spelling);
            found.len() == 1 && std::ptr::eq(found[0], m)
        };
        [Some(m.file_name()), m.soname.as_deref()]
            .into_iter()
            .flatten()
            .find(|s| alone(s))
            .unwrap_or(&m.path)
            .to_string()
    }

    fn resolve_addr(&self, addr: u64) -> Result<Resolved, SymbolError> {
        let Some(m) = self.module_for(addr) else {
            return Err(SymbolError::AddressNotInFunction {
                addr,
                place: AddressPlace::NoModule,
            });
        };
        if let Some(s) = m.symbol_at(addr) {
            if s.size == 0 {
                return Err(SymbolError::ZeroSize {
                    name: s.name.clone(),
                });
            }
            return Ok(resolved(m, s));
        }
        let place = match m.lookup(addr) {
            Some((s, offset)) => AddressPlace::Inside {
                function: s.name.clone(),
                offset,
                entry: s.addr,
                module: m.path.clone(),
            },
            None => AddressPlace::NoSymbol {
                module: m.path.clone(),
            },
        };
        Err(SymbolError::AddressNotInFunction { addr, place })
    }
}

/// Runtime addresses of module `x`'s GOT slots that the dynamic linker fills with
/// the address of `name`: its `JUMP_SLOT` and `GLOB_DAT` relocations against a
/// symbol called `name` and, when `irelative` is the runtime address of `name`'s
/// IFUNC resolver in `x`, the `IRELATIVE` relocations that call that resolver.
pub(super) fn got_slots(x: &Module, name: &str, irelative: Option<u64>) -> Vec<u64> {
    use goblin::elf::reloc::{
        R_386_GLOB_DAT, R_386_IRELATIVE, R_386_JMP_SLOT, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE,
        R_X86_64_JUMP_SLOT,
    };
    let Ok(elf) = parse_elf(x.data()) else {
        return Vec::new();
    };
    let (jump_slot, glob_dat, irel) = if x.is_64 {
        (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE)
    } else {
        (R_386_JMP_SLOT, R_386_GLOB_DAT, R_386_IRELATIVE)
    };
    let resolver_svma = irelative.map(|a| a.wrapping_sub(x.bias));
    let mut out = Vec::new();
    let relocs = elf
        .dynrelas
        .iter()
        .chain(elf.dynrels.iter())
        .chain(elf.pltrelocs.iter());
    for r in relocs {
        let wanted = if r.r_type == jump_slot || r.r_type == glob_dat {
            elf.dynsyms
                .get(r.r_sym)
                .and_then(|sym| elf.dynstrtab.get_at(sym.st_name))
                == Some(name)
        } else if r.r_type == irel {
            // RELA keeps the resolver in the addend; REL (i386) in the slot's file bytes.
            let addend = match r.r_addend {
                Some(a) => Some(a as u64),
                None => x
                    .file_bytes(r.r_offset.wrapping_add(x.bias), 4)
                    .and_then(|b| b.try_into().ok())
                    .map(|b: [u8; 4]| u64::from(u32::from_le_bytes(b))),
            };
            resolver_svma.is_some() && addend == resolver_svma
        } else {
            false
        };
        if wanted {
            out.push(r.r_offset.wrapping_add(x.bias));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// The executable's path if `/proc/PID/exe` is a 32-bit ELF; errors only if the process is gone.
pub(super) fn executable_is_32bit(pid: i32) -> Result<Option<String>, SymbolError> {
    let exe = procfs::exe_path(pid);
    match procfs::read_exe_class(pid) {
        Ok(Some(procfs::ElfClass::Elf32)) => {
            let path = procfs::read_exe_link(pid).map_or(exe, |p| p.to_string_lossy().into_owned());
            Ok(Some(path))
        }
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(SymbolError::Io {
            path: exe,
            source: e,
        }),
        Err(_) => Ok(None),
    }
}
