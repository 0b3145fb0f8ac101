//! Pure code generation for argstash: no system calls, testable in-process.
//!
//! argstash patches a function's entry with a `jmp` to a small trampoline. The
//! trampoline pushes the argument registers into a *stash frame* with a fixed,
//! self-describing layout and then **calls** the original function (its relocated
//! prologue, which jumps back into the body). While that call is live, the
//! arguments sit at a known place on the stack, so any later unwind can read them.
//!
//! # The x86-64 stash frame
//!
//! Addresses grow upwards; `base` is the trampoline's `rbp`.
//!
//! ```text
//!            │ caller's frame …                         │
//! base+16 ─► │ stack arguments 7, 8, … (if any)         │
//! base+8     │ return address into the caller           │ ◄─ pushed by the caller's `call`
//! base+0     │ caller's rbp                             │ ◄─ push rbp; mov rbp, rsp
//! base-8     │ STASH_MARKER  "ARGSTASH"                 │
//! base-16    │ address of the hook record (arena)       │
//! base-24    │ rdi   (argument 1)                       │
//! base-32    │ rsi   (argument 2)                       │
//! base-40    │ rdx   (argument 3)                       │
//! base-48    │ rcx   (argument 4)                       │
//! base-56    │ r8    (argument 5)                       │
//! base-64    │ r9    (argument 6)                       │
//! base-72    │ rax   (al = vector registers, varargs)   │
//! base-80    │ r10   (static chain)                     │
//!            │ [8 bytes padding if the window is odd]   │
//!            │ copy of stack words 0..n (window)        │ ◄─ rsp at the call, 16-aligned
//!            │ return address = trampoline after_call   │ ◄─ the hooked function's frame starts here
//! ```
//!
//! A reader recognises a stash frame without scanning: when a return address equals
//! some hook's `after_call` address, the frame base is the hooked function's CFA plus
//! [`x86_64::StashLayout::call_sp_offset`]; the marker and the record address confirm
//! it. See [`x86_64::frame`] for the single definition, and [`arena`] for the
//! self-describing header that lists every hook.
//!
//! # The i386 stash frame
//!
//! Every cdecl argument is on the stack, so the frame stashes the three registers
//! that `regparm(3)`/`fastcall` functions take arguments in and copies the incoming
//! stack words; `base` is the trampoline's `ebp`.
//!
//! ```text
//!            │ caller's frame …                         │
//! base+8  ─► │ stack arguments 1, 2, … (hidden struct   │
//!            │ return pointer first, if any)            │
//! base+4     │ return address into the caller           │ ◄─ pushed by the caller's `call`
//! base+0     │ caller's ebp                             │ ◄─ push ebp; mov ebp, esp
//! base-8     │ STASH_MARKER "ARGSTASH" (two words)      │
//! base-12    │ address of the hook record (32-bit)      │
//! base-16    │ eax   (regparm argument 1)               │
//! base-20    │ edx   (regparm 2, fastcall 2)            │
//! base-24    │ ecx   (regparm 3, fastcall 1)            │
//!            │ [0..12 bytes padding: entry alignment]   │
//!            │ copy of stack words 0..n (window)        │ ◄─ esp at the call
//!            │ return address = trampoline after_call   │ ◄─ the hooked function's frame starts here
//! ```
//!
//! After the call the trampoline passes on whatever the callee popped (`ret 4` of a
//! struct-returning function, `ret N` of stdcall), see [`i386::emit`].
//!
//! # Modules
//! - [`arch`]: [`Arch`] and the contract every architecture implements,
//!   [`Architecture`]; [`codegen`]: choosing one at run time ([`Arch::codegen`]).
//! - [`trampoline`], [`hook`], [`relocation`]: the containers every architecture
//!   fills (a trampoline, a hook's code and record, a relocated prologue) and
//!   [`hook::build_hook`], written once over the contract.
//! - [`arena`]: the arena header and hook records (architecture-neutral byte format).
//! - [`x86_64`] and [`i386`], side by side with the same files (`arch`, `emit`,
//!   `frame`, `hook`, `relocate`): stash frame, trampoline emitter (dynasmrt),
//!   prologue relocation (iced-x86); x86-64 adds call-through hooks, whole-function
//!   analysis, SysV placement and `.eh_frame` for hooks.

#![deny(missing_docs)]

pub mod arch;
pub mod arena;
pub mod codegen;
pub mod error;
pub mod hook;
pub mod i386;
pub mod relocation;
pub mod symbol_file;
pub mod trampoline;
pub mod unwind_area;
pub mod x86_64;

pub use arch::{Arch, Architecture, PatchSite, PlanInputs};
pub use codegen::{ArchCodegen, PlannedPatch};
pub use error::{CodegenError, FormatError, FrameError, PlanError};
pub use hook::{HookCode, HookMeta, RELOCATED_OFFSET};
pub use relocation::{FunctionContext, RelocatedPrologue};
pub use trampoline::{Trampoline, TrampolineOffsets, STASH_MARKER};
