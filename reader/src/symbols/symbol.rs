//! The small facts a symbol lookup answers with: a symbol, an IFUNC's target, a resolved function.

/// The maps name (and [`Module::path`](crate::symbols::Module::path)) of the kernel's vDSO.
pub const VDSO: &str = "[vdso]";
/// One function symbol at its runtime address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// Symbol name (mangled as in the file).
    pub name: String,
    /// Runtime address of the first instruction.
    pub addr: u64,
    /// Size in bytes; 0 when the symbol table does not say.
    pub size: u64,
}

/// One implementation a GNU indirect function resolved to in a process, as a GOT
/// slot holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IfuncTarget {
    /// Runtime address of the implementation.
    pub addr: u64,
    /// Its symbol name (from the module's tables or its separate debug file), if any.
    pub name: Option<String>,
    /// Path of the module holding the implementation.
    pub module: String,
    /// How to write that module in `MODULE!NAME` so it names that module alone.
    pub spelling: String,
    /// Paths of the modules whose GOT slots hold this address (`R_*_JUMP_SLOT` and
    /// `R_*_GLOB_DAT` of importers, `R_*_IRELATIVE` of the defining module).
    pub via: Vec<String>,
}

impl IfuncTarget {
    /// `NAME (0xADDR in MODULE), resolved through the GOT of A and B`.
    pub(super) fn describe(&self) -> String {
        let what = match &self.name {
            Some(n) => format!("{n} ({:#x}, {})", self.addr, self.module),
            None => format!("unnamed code at {:#x} (in {})", self.addr, self.module),
        };
        format!(
            "{what}, resolved through the GOT of {}",
            self.via.join(" and ")
        )
    }
}

/// A function resolved to one runtime address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Symbol name.
    pub name: String,
    /// Path of the module as in `/proc/PID/maps`.
    pub module_path: String,
    /// Runtime address of the function entry.
    pub addr: u64,
    /// Size of the function in bytes (never 0).
    pub size: u64,
}
