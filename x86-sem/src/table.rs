//! The dispatch table: one handler per iced `Code`, built once.

use crate::insn::Insn;
use crate::model::CpuModel;
use crate::step::{Machine, Retired, Stop};
use core::mem::MaybeUninit;
use core::ptr;
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

/// Handlers indexed by iced `Code`, for one [`CpuModel`].
///
/// About 40 KiB: build it once, before any signal is armed, and keep it.
/// Build it in place, never on a small stack: [`Table::boxed`] on the
/// heap, or [`Table::init`] in storage the owner provides. Owners may
/// replace entries with [`Table::set`]; brr installs its branch-on-random
/// handler on `Code::Ud1_r32_rm32`.
pub struct Table<X: Machine> {
    handlers: [Handler<X>; CODE_COUNT],
    implemented: [u64; WORDS],
    model: CpuModel,
}

impl<X: Machine> core::fmt::Debug for Table<X> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Table")
            .field("model", &self.model)
            .field("implemented", &self.implemented().count())
            .finish()
    }
}

impl<X: Machine> Table<X> {
    /// Builds the table for `model` in `slot` and returns it: the core's
    /// semantics for every form it implements and `model` runs
    /// ([`CpuModel::supports`]), with `model`'s quirks; every other `Code`
    /// stops with [`Stop::Unsupported`](crate::Stop::Unsupported), as the
    /// CPU raises #UD. Writes the handlers one by one, so the table never
    /// passes through the stack. Also decodes one instruction, so that
    /// iced's lazily built tables exist before a signal handler needs
    /// them.
    #[allow(unsafe_code)]
    pub fn init<'a>(slot: &'a mut MaybeUninit<Self>, model: &CpuModel) -> &'a mut Self {
        assert_eq!(Code::values().len(), CODE_COUNT, "iced's Code count");
        let _ = Insn::decode_with_iced(0, &[0x90]);
        crate::quick::warm();
        let p = slot.as_mut_ptr();
        // SAFETY: `p` is valid for writes of a whole `Table`; each field is
        // written exactly once through a raw pointer (no reference to
        // uninitialised memory is made), the handler array element by
        // element; after that every field is initialised.
        let t = unsafe {
            let h = ptr::addr_of_mut!((*p).handlers).cast::<Handler<X>>();
            for c in 0..CODE_COUNT {
                h.add(c).write(crate::ops::unsupported::<X>);
            }
            ptr::addr_of_mut!((*p).implemented).write([0; WORDS]);
            ptr::addr_of_mut!((*p).model).write(*model);
            slot.assume_init_mut()
        };
        crate::ops::install(t);
        for code in Code::values() {
            if t.implements(code) && !model.supports(code) {
                t.unset(code);
            }
        }
        crate::ops::quirks::apply(t, model);
        t
    }

    /// [`Table::init`] on the heap.
    #[cfg(feature = "alloc")]
    #[must_use]
    #[allow(unsafe_code)]
    pub fn boxed(model: &CpuModel) -> alloc::boxed::Box<Self> {
        let mut b = alloc::boxed::Box::<Self>::new_uninit();
        Self::init(&mut b, model);
        // SAFETY: init initialised every field.
        unsafe { b.assume_init() }
    }

    /// The model the table was built for.
    #[must_use]
    pub fn model(&self) -> &CpuModel {
        &self.model
    }

    /// Installs `handler` for `code` (an owner's own instruction, or a
    /// replacement for the core's semantics).
    pub fn set(&mut self, code: Code, handler: Handler<X>) {
        let c = code as usize;
        self.handlers[c] = handler;
        self.implemented[c / 64] |= 1 << (c % 64);
    }

    /// Makes `code` stop as a form the core does not implement.
    pub(crate) fn unset(&mut self, code: Code) {
        let c = code as usize;
        self.handlers[c] = crate::ops::unsupported::<X>;
        self.implemented[c / 64] &= !(1 << (c % 64));
    }

    /// The handler for `code`.
    #[must_use]
    #[inline(always)]
    pub fn handler(&self, code: u16) -> Handler<X> {
        self.handlers[usize::from(code)]
    }

    /// Where the handler of `code` is kept: for an owner that counts the
    /// memory a step touches (the table is 8 bytes a form, 39 KiB in all).
    #[must_use]
    pub fn handler_slot(&self, code: u16) -> &Handler<X> {
        &self.handlers[usize::from(code)]
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
