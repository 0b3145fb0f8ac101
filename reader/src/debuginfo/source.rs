//! What debug information answers about an address: source frames and the
//! call-site values of a caller's arguments.

use crate::args::FunctionInfo;

/// One source-level frame at a pc: a function, possibly inlined into the next one.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFrame {
    /// Function name, demangled, without parameter list.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// The function's parameters (with locations valid at this pc).
    pub info: Option<FunctionInfo>,
}

/// A call's parameter: its location expression at the callee's entry and the
/// expression of its value in the caller (`DW_AT_call_value`).
pub type CallSiteParam = (Vec<u8>, Vec<u8>);
