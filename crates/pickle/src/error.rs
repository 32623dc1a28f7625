//! Errors of the pickle reader. Every variant says where (byte offset), what
//! was expected and what was found. Hand-written `Display` keeps the crate
//! dependency-free.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PickleError {
    /// The input has no bytes at all.
    Empty,
    /// The input ended inside an opcode argument and nothing could be recovered.
    UnexpectedEof {
        offset: u64,
        opcode: &'static str,
        needed: u64,
    },
    /// A byte that is not a pickle opcode.
    UnknownOpcode { offset: u64, byte: u8 },
    /// A PROTO opcode naming a protocol this reader does not know.
    UnsupportedProtocol { offset: u64, protocol: u8 },
    /// An opcode needed more values on the stack than there were.
    StackUnderflow { offset: u64, opcode: &'static str },
    /// An opcode that consumes a MARK found none.
    MissingMark { offset: u64, opcode: &'static str },
    /// An operand had the wrong type (e.g. APPENDS onto a dict).
    WrongType {
        offset: u64,
        opcode: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    /// BINGET/GET of a memo slot that was never written.
    MemoMissing { offset: u64, index: u64 },
    /// A text argument (protocol 0) could not be read.
    BadArgument {
        offset: u64,
        opcode: &'static str,
        detail: String,
    },
    /// A safety limit was hit (nesting depth, container size, decompressed size).
    LimitExceeded {
        offset: u64,
        what: &'static str,
        limit: u64,
    },
    /// STOP was reached with a stack that does not hold exactly one value.
    BadStop { offset: u64, stack_len: usize },
}

impl PickleError {
    /// Byte offset the error refers to, if any.
    pub fn offset(&self) -> Option<u64> {
        match self {
            PickleError::Empty => None,
            PickleError::UnexpectedEof { offset, .. }
            | PickleError::UnknownOpcode { offset, .. }
            | PickleError::UnsupportedProtocol { offset, .. }
            | PickleError::StackUnderflow { offset, .. }
            | PickleError::MissingMark { offset, .. }
            | PickleError::WrongType { offset, .. }
            | PickleError::MemoMissing { offset, .. }
            | PickleError::BadArgument { offset, .. }
            | PickleError::LimitExceeded { offset, .. }
            | PickleError::BadStop { offset, .. } => Some(*offset),
        }
    }
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickleError::Empty => write!(f, "expected a pickle, found an empty input"),
            PickleError::UnexpectedEof {
                offset,
                opcode,
                needed,
            } => write!(
                f,
                "expected {needed} more byte(s) for {opcode} at byte {offset}, found the end of the input"
            ),
            PickleError::UnknownOpcode { offset, byte } => write!(
                f,
                "expected a pickle opcode at byte {offset}, found byte 0x{byte:02x} (not a pickle, or corrupt)"
            ),
            PickleError::UnsupportedProtocol { offset, protocol } => write!(
                f,
                "expected pickle protocol 0-5 at byte {offset}, found protocol {protocol}"
            ),
            PickleError::StackUnderflow { offset, opcode } => write!(
                f,
                "expected a value on the stack for {opcode} at byte {offset}, found an empty stack"
            ),
            PickleError::MissingMark { offset, opcode } => write!(
                f,
                "expected a MARK before {opcode} at byte {offset}, found none"
            ),
            PickleError::WrongType {
                offset,
                opcode,
                expected,
                found,
            } => write!(
                f,
                "expected {expected} for {opcode} at byte {offset}, found {found}"
            ),
            PickleError::MemoMissing { offset, index } => write!(
                f,
                "expected memo entry {index} (referenced at byte {offset}) to be defined, found none"
            ),
            PickleError::BadArgument {
                offset,
                opcode,
                detail,
            } => write!(f, "bad argument to {opcode} at byte {offset}: {detail}"),
            PickleError::LimitExceeded {
                offset,
                what,
                limit,
            } => write!(
                f,
                "safety limit exceeded at byte {offset}: {what} (limit {limit})"
            ),
            PickleError::BadStop { offset, stack_len } => write!(
                f,
                "expected exactly one value on the stack at STOP (byte {offset}), found {stack_len}"
            ),
        }
    }
}

impl std::error::Error for PickleError {}
