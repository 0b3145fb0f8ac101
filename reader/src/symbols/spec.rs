//! What the user asked to hook: [`FuncSpec`], parsed from `NAME`, `MODULE!NAME` or an address.

use std::fmt;

/// What the user asked to hook: `NAME`, `MODULE!NAME`, or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuncSpec {
    /// A function name searched in every module.
    Name(String),
    /// A function name searched in one module.
    Qualified {
        /// Module path, file name (`libc.so.6`) or file-name prefix (`libc`).
        module: String,
        /// Function name.
        name: String,
    },
    /// A runtime address that must be a function entry.
    Addr(u64),
}

impl FuncSpec {
    /// Parses `0x1234` as an address, `MODULE!NAME` as qualified, anything else as a name.
    ///
    /// The `!` of `MODULE!NAME` is the first one that is not part of a C++ name: a `!`
    /// after a `::`, `<` or `(`, or in `operator!`/`operator!=`, belongs to the name
    /// (`ns::operator!=(A, B)`, `f<(!0)>`); such a name is written with its module as
    /// `MODULE!ns::operator!=(A, B)`.
    pub fn parse(s: &str) -> FuncSpec {
        let s = s.trim();
        if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            if let Ok(addr) = u64::from_str_radix(hex, 16) {
                return FuncSpec::Addr(addr);
            }
        }
        match module_separator(s).map(|i| (&s[..i], &s[i + 1..])) {
            Some((module, name)) if !module.is_empty() && !name.is_empty() => FuncSpec::Qualified {
                module: module.to_string(),
                name: name.to_string(),
            },
            _ => FuncSpec::Name(s.to_string()),
        }
    }
}

/// Byte offset of the `!` that ends the `MODULE` of `MODULE!NAME`, if there is one.
pub(super) fn module_separator(s: &str) -> Option<usize> {
    let i = s.find('!')?;
    let head = &s[..i];
    let operator = head.trim_end().ends_with("operator");
    let in_name = head.contains("::") || head.contains('<') || head.contains('(');
    (!operator && !in_name).then_some(i)
}

impl fmt::Display for FuncSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FuncSpec::Name(name) => f.write_str(name),
            FuncSpec::Qualified { module, name } => write!(f, "{module}!{name}"),
            FuncSpec::Addr(addr) => write!(f, "{addr:#x}"),
        }
    }
}
