//! The dispatch table: one handler per iced `Code`, built once.

use crate::insn::Insn;
use crate::step::{Machine, Retired, Stop};
use iced_x86::Code;

/// The semantics of one instruction form. `r` arrives with `ip`, `len` and
/// `next_rip` (the fall-through) filled in; a handler that transfers
/// control sets `next_rip`, `kind`, `taken` and `target`; memory accesses
/// set `mem_addr` and `mem_write`.
///
/// # Errors
/// A [`Stop`]; the handler must then have written no register.
pub type Handler<X> = fn(x: &mut X, insn: &Insn, r: &mut Retired) -> Result<(), Stop>;

/// Number of iced `Code` values (the table's length).
pub const CODE_COUNT: usize = Code::VEX_Vsm3rnds2_xmm_xmm_xmmm128_imm8 as usize + 1;

const WORDS: usize = CODE_COUNT.div_ceil(64);

/// Handlers indexed by iced `Code`.
///
/// About 40 KiB: build it once, before any signal is armed, and keep it
/// (boxed, or in a static the owner initialises). Owners may replace
/// entries with [`Table::set`]; brr installs its branch-on-random handler
/// on `Code::Ud1_r32_rm32`.
pub struct Table<X: Machine> {
    handlers: [Handler<X>; CODE_COUNT],
    implemented: [u64; WORDS],
}

impl<X: Machine> core::fmt::Debug for Table<X> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Table")
            .field("implemented", &self.implemented().count())
            .finish()
    }
}

impl<X: Machine> Default for Table<X> {
    fn default() -> Self {
        Self::new()
    }
}

impl<X: Machine> Table<X> {
    /// The core's semantics for every form it implements; every other
    /// `Code` stops with [`Stop::Unsupported`]. Also decodes one
    /// instruction, so that iced's lazily built tables exist before a
    /// signal handler needs them.
    #[must_use]
    pub fn new() -> Self {
        assert_eq!(Code::values().len(), CODE_COUNT, "iced's Code count");
        let _ = Insn::decode(0, &[0x90]);
        let mut t = Table {
            handlers: [crate::ops::unsupported::<X>; CODE_COUNT],
            implemented: [0; WORDS],
        };
        crate::ops::install(&mut t);
        t
    }

    /// Installs `handler` for `code` (an owner's own instruction, or a
    /// replacement for the core's semantics).
    pub fn set(&mut self, code: Code, handler: Handler<X>) {
        let c = code as usize;
        self.handlers[c] = handler;
        self.implemented[c / 64] |= 1 << (c % 64);
    }

    /// The handler for `code`.
    #[must_use]
    #[inline(always)]
    pub fn handler(&self, code: u16) -> Handler<X> {
        self.handlers[usize::from(code)]
    }

    /// Whether `code` has a handler (from the core or the owner).
    #[must_use]
    pub fn implements(&self, code: Code) -> bool {
        let c = code as usize;
        self.implemented[c / 64] & (1 << (c % 64)) != 0
    }

    /// Every `Code` with a handler.
    pub fn implemented(&self) -> impl Iterator<Item = Code> + '_ {
        Code::values().filter(|&c| self.implements(c))
    }
}
