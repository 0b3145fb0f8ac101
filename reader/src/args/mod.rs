//! Typed arguments: what a function's parameters are (from DWARF or a signature the
//! user gives), where their values are, and how to show them the way gdb does.
//!
//! [`FunctionInfo`] is the reusable description: parameter names, [`TypeDesc`]s
//! (kind, byte size, names, members) and DWARF locations. Hooked frames take the
//! values from the stash frame by the SysV x86-64 calling convention
//! ([`assign_registers`]); other frames evaluate each parameter's DWARF location at
//! the frame's pc against what the unwinder recovered ([`FrameState`]) and show
//! `<optimized out>` for anything it cannot recover with certainty.
//!
//! One responsibility per file; every name below is re-exported here:
//!
//! - `types.rs`: the type model ([`TypeDesc`], [`Param`], [`Location`],
//!   [`FunctionInfo`], [`FrameState`], [`ArgValue`]). A leaf: it uses nothing
//!   else in the crate.
//! - `dwarf.rs`: reading a [`FunctionInfo`] from DWARF ([`function_info`]) and
//!   parameter values by evaluating location expressions ([`dwarf_values`],
//!   [`call_value`]).
//! - `signature/`: the C signature parser ([`split_signature`], [`parse_params`]):
//!   its grammar, lexer, parser and the C types it names.
//! - [`x86_64`]: SysV placement ([`x86_64::placement_of`]) and values from an
//!   x86-64 stash frame ([`stashed_values_with_xmm`]).
//! - [`i386`]: values from an i386 stash frame.
//! - `format.rs`: values shown as gdb prints them ([`format_value`], [`gdb_float`]).
//!
//! Uses point one way: `types` <- `format` <- `dwarf`, `x86_64`, `i386`;
//! `types` <- `signature`. DWARF readers use the `dwarf` leaf, never
//! [`crate::debuginfo`], which builds on this module.

mod dwarf;
mod format;
pub mod i386;
mod signature;
#[cfg(test)]
mod testing;
mod types;
pub mod x86_64;

pub use dwarf::{call_value, dwarf_values, function_info, wants_entry_values};
pub use format::{format_value, gdb_float, MAX_STRING};
pub use signature::{
    parse_params, split_function, split_signature, Expected, Found, Signature, SignatureError,
    SyntaxError, SyntaxReason, TYPEDEFS,
};
pub use types::{
    ArgSource, ArgValue, FrameState, FunctionInfo, Location, Member, Param, TypeDesc, TypeKind,
};
pub use x86_64::{assign_registers, stashed_values, stashed_values_with_xmm, ArgSlot};
