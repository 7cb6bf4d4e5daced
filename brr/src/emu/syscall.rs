//! A Linux process around the machine: program loading and the system-call
//! layer. File descriptors are the host's own (the guest's stdout is the
//! emulator's stdout); memory calls act on guest memory; signal calls are
//! accepted and ignored, except the timer signals: `setitimer` arms an
//! interval timer counted in retired instructions whose handler runs like a
//! signal handler (see `Timer`).

use super::elf::{self, Image};
use super::machine::Machine;
use super::mem::{GuestMemory, Prot, PAGE};
use crate::lfsr::Lfsr;
use iced_x86::{Decoder, DecoderOptions, Formatter, GasFormatter, Instruction};
use std::path::Path;
use x86_sem::{gpr, CpuState, Memory, Registers, Stop, MXCSR_DEFAULT, X87};

/// Anonymous mmaps are placed downwards from here.
const MMAP_TOP: u64 = 0x7f00_0000_0000;

/// Why a run ended without the guest exiting.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Load(#[from] elf::LoadError),
    #[error("{0}")]
    Setup(String),
    #[error("unsupported instruction `{text}` ({code}) at {ip:#x}")]
    Unsupported { ip: u64, text: String, code: String },
    #[error("segmentation fault: {kind} of {addr:#x} by the instruction at {ip:#x}")]
    Fault {
        ip: u64,
        addr: u64,
        kind: &'static str,
    },
    #[error("`{text}` at {ip:#x} has a result only the CPU knows (cpuid, rdtsc, rdrand, or a form the manuals leave undefined): the emulator does not run it")]
    Opaque { ip: u64, text: String },
    #[error("cannot fetch an instruction at {ip:#x} (unmapped, not executable, or undecodable)")]
    BadFetch { ip: u64 },
    #[error("divide error (#DE) at {ip:#x}")]
    DivideError { ip: u64 },
    #[error("the guest trapped with `{text}` at {ip:#x}")]
    Trap { ip: u64, text: String },
    #[error("unsupported system call {nr} ({name}) at {ip:#x}")]
    Syscall {
        nr: u64,
        name: &'static str,
        ip: u64,
    },
    #[error("instruction limit of {0} reached")]
    Limit(u64),
}

/// A guest process: machine, heap break and mmap allocator.
pub struct Process {
    pub machine: Machine,
    pub image: Image,
    brk: u64,
    heap_mapped: u64,
    mmap_next: u64,
    /// Number of system calls serviced.
    pub syscalls: u64,
    /// Host descriptors behind the guest's 0, 1 and 2 (default: the same).
    pub stdio: [i32; 3],
    /// The epoch timer's period in retired instructions, replacing the
    /// period the guest asks `setitimer` for (`brr-run --epoch N`). Without
    /// it a requested microsecond counts as 1000 instructions.
    pub epoch: Option<u64>,
    /// Timer signals delivered to the guest's handler.
    pub signals_delivered: u64,
    timer: Timer,
}

/// The guest's interval timer and the handler it runs. Delivery is like a
/// signal's: at an instruction boundary the registers are saved (by the
/// emulator, not on the guest stack), the handler is called with the
/// signal number on a stack below the red zone and returns through its
/// restorer to `rt_sigreturn`, which restores them.
#[derive(Debug, Default)]
struct Timer {
    /// Handler and restorer per timer signal (SIGALRM, SIGVTALRM, SIGPROF).
    handlers: [Option<(u64, u64)>; 3],
    /// (signal, period in instructions), when armed.
    armed: Option<(u32, u64)>,
    next: u64,
    /// Interrupted states, innermost last.
    saved: Vec<CpuState>,
}

const TIMER_SIGNALS: [u32; 3] = [14, 26, 27];
const SIG_DFL: u64 = 0;
const SIG_IGN: u64 = 1;

impl Process {
    /// Loads `path` and prepares the stack for `args` (args[0] is the
    /// program name) and `env`. The LFSR starts from `seed`.
    pub fn load(
        path: &Path,
        args: &[String],
        env: &[String],
        seed: u64,
    ) -> Result<Process, RunError> {
        let mut mem = GuestMemory::new();
        let image = elf::load(path, &mut mem)?;
        let random = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes();
        let mut rnd = [0u8; 16];
        rnd[..8].copy_from_slice(&random);
        rnd[8..].copy_from_slice(&random);
        let sp = elf::setup_stack(&mut mem, &image, args, env, rnd).map_err(RunError::Setup)?;
        let mut cpu = CpuState::new();
        cpu.rip = image.entry;
        cpu.gpr[gpr::RSP] = sp;
        // The state the kernel gives a new process (x86-64 psABI §3.4.1).
        cpu.mxcsr = MXCSR_DEFAULT;
        cpu.x87 = X87::INIT;
        let brk = image.brk_start;
        Ok(Process {
            machine: Machine::new(cpu, mem, Lfsr::new(seed)),
            image,
            brk,
            heap_mapped: 0,
            mmap_next: MMAP_TOP,
            syscalls: 0,
            stdio: [0, 1, 2],
            epoch: None,
            signals_delivered: 0,
            timer: Timer::default(),
        })
    }

    /// Runs to exit (returning the exit status) or to `limit` instructions,
    /// calling `observe` after every retired instruction.
    pub fn run_with(
        &mut self,
        limit: u64,
        mut observe: impl FnMut(&Machine),
    ) -> Result<i32, RunError> {
        loop {
            match self.machine.step() {
                Ok(()) => observe(&self.machine),
                Err(Stop::Syscall) => {
                    observe(&self.machine);
                    if let Some(status) = self.syscall()? {
                        return Ok(status);
                    }
                }
                Err(stop) => return Err(self.describe(stop)),
            }
            if self.machine.icount >= self.timer.next {
                self.tick()?;
            }
            if self.machine.icount >= limit {
                return Err(RunError::Limit(limit));
            }
        }
    }

    /// The timer expired: runs the guest's handler (or, for a signal whose
    /// action is the default, ends the run as the kernel would kill it).
    #[cold]
    fn tick(&mut self) -> Result<(), RunError> {
        let Some((sig, period)) = self.timer.armed else {
            self.timer.next = u64::MAX;
            return Ok(());
        };
        if !self.timer.saved.is_empty() {
            // Still in the handler: the signal is blocked until it returns.
            return Ok(());
        }
        self.timer.next = self.machine.icount + period;
        let slot = TIMER_SIGNALS.iter().position(|&s| s == sig).unwrap_or(0);
        let Some((handler, restorer)) = self.timer.handlers[slot] else {
            return Err(RunError::Setup(format!(
                "the guest was killed by timer signal {sig} (no handler installed)"
            )));
        };
        if handler == SIG_IGN {
            return Ok(());
        }
        self.signals_delivered += 1;
        let regs = &mut self.machine.guest.regs;
        self.timer.saved.push(*regs);
        let sp = ((regs.gpr(gpr::RSP) - 128) & !15) - 8;
        self.machine
            .guest
            .mem
            .poke(sp, &restorer.to_le_bytes())
            .map_err(|_| RunError::Setup(format!("no stack for a signal frame at {sp:#x}")))?;
        let regs = &mut self.machine.guest.regs;
        regs.set_gpr(gpr::RSP, sp);
        regs.set_gpr(gpr::RDI, u64::from(sig));
        regs.set_gpr(gpr::RSI, 0);
        regs.set_gpr(gpr::RDX, 0);
        regs.rflags &= !(1 << 10); // DF clear, as the kernel leaves it
        regs.rip = handler;
        Ok(())
    }

    /// Runs to exit without observing; the fast functional mode.
    ///
    /// The same instructions, syscalls and timer signals as `run_with`
    /// (the timer is looked at after every instruction that reaches its
    /// instant, and after every syscall), and the limit is looked at
    /// every `LIMIT_BATCH` instructions from the start, as it always was.
    /// But the steps between two such instants run in
    /// `Machine::run_until`, whose loop compares the count with one bound:
    /// the timer check per instruction here, with `step`'s count in
    /// memory, cost brr 8–15% of its MIPS (`cargo bench -p brr --bench
    /// mips`).
    pub fn run(&mut self, limit: u64) -> Result<i32, RunError> {
        const LIMIT_BATCH: u64 = 1024;
        let mut batch_end = self.machine.icount.saturating_add(LIMIT_BATCH);
        loop {
            // At least one step: a timer due but blocked (its handler is
            // running) is looked at again after each instruction.
            let icount = self.machine.icount;
            let end = batch_end.min(self.timer.next.max(icount + 1));
            match self.machine.run_until(end) {
                Ok(()) => {}
                Err(Stop::Syscall) => {
                    if let Some(status) = self.syscall()? {
                        return Ok(status);
                    }
                }
                Err(stop) => return Err(self.describe(stop)),
            }
            if self.machine.icount >= self.timer.next {
                self.tick()?;
            }
            if self.machine.icount >= batch_end {
                if self.machine.icount >= limit {
                    return Err(RunError::Limit(limit));
                }
                batch_end = batch_end.saturating_add(LIMIT_BATCH);
            }
        }
    }

    /// Services the syscall `step` just stopped at; `Some(status)` when the
    /// guest exits. For callers that drive `Machine::step` themselves.
    pub fn service_syscall(&mut self) -> Result<Option<i32>, RunError> {
        self.syscall()
    }

    fn disassemble(&mut self, ip: u64) -> String {
        let mut bytes = [0u8; 15];
        let n = self.machine.guest.mem.fetch(ip, &mut bytes);
        let mut instr = Instruction::default();
        Decoder::with_ip(64, &bytes[..n], ip, DecoderOptions::NONE).decode_out(&mut instr);
        let mut text = String::new();
        GasFormatter::new().format(&instr, &mut text);
        text
    }

    fn describe(&mut self, stop: Stop) -> RunError {
        let ip = self.machine.guest.regs.rip;
        match stop {
            Stop::Unsupported { ip, code } => RunError::Unsupported {
                ip,
                text: self.disassemble(ip),
                code: format!("{code:?}"),
            },
            Stop::Opaque => RunError::Opaque {
                ip,
                text: self.disassemble(ip),
            },
            Stop::Fault { addr, write } => RunError::Fault {
                ip,
                addr,
                kind: if write { "write" } else { "read" },
            },
            // GuestMemory never refuses an access.
            Stop::Refused { addr } => RunError::Fault {
                ip,
                addr,
                kind: "refused access",
            },
            Stop::BadFetch => RunError::BadFetch { ip },
            Stop::DivideError => RunError::DivideError { ip },
            Stop::Trap => RunError::Trap {
                ip,
                text: self.disassemble(ip),
            },
            Stop::Syscall | Stop::UnknownFlags => {
                unreachable!("Machine::step handles {stop:?}")
            }
        }
    }

    /// Unmaps guest memory and forgets any code decoded from it.
    fn unmap(&mut self, addr: u64, len: u64) {
        let end = addr.saturating_add(len);
        let code = self.machine.guest.mem.executable_in(addr, end);
        self.machine.guest.mem.unmap(addr, len);
        if code {
            self.machine.flush_code(addr, end);
        }
    }

    fn arg(&self, i: usize) -> u64 {
        const ARGS: [usize; 6] = [gpr::RDI, gpr::RSI, gpr::RDX, 10, gpr::R8, gpr::R9];
        self.machine.guest.regs.gpr(ARGS[i])
    }

    /// Services the syscall just retired; `Some(status)` when the guest exits.
    fn syscall(&mut self) -> Result<Option<i32>, RunError> {
        self.syscalls += 1;
        let nr = self.machine.guest.regs.gpr(gpr::RAX);
        let a: [u64; 6] = std::array::from_fn(|i| self.arg(i));
        let ip = self.machine.retired.ip;
        let ret: i64 = match nr {
            0 => self.io(a[0], a[1], a[2], false),
            1 => self.io(a[0], a[1], a[2], true),
            19 => self.iov(a[0], a[1], a[2], false),
            20 => self.iov(a[0], a[1], a[2], true),
            2 => self.with_path(a[0], |p| host(unsafe_open(libc::AT_FDCWD, p, a[1], a[2]))),
            257 => self.with_path(a[1], |p| host(unsafe_open(a[0] as i32, p, a[2], a[3]))),
            3 => {
                // Keep the emulator's own stdio usable.
                if a[0] <= 2 {
                    0
                } else {
                    // SAFETY: closing a descriptor the guest opened.
                    host(unsafe { libc::close(a[0] as i32) } as i64)
                }
            }
            5 => self.fstat(a[0], a[1]),
            4 | 6 => self.stat_path(a[0], a[1], nr == 6),
            262 => self.fstatat(a[0], a[1], a[2], a[3]),
            8 => host(unsafe { libc::lseek(a[0] as i32, a[1] as i64, a[2] as i32) }),
            9 => self.mmap(a[0], a[1], a[2], a[3], a[4] as i32),
            10 => self.mprotect(a[0], a[1], a[2]),
            13 => self.rt_sigaction(a[0], a[1], a[2]),
            15 => {
                // rt_sigreturn: back to the interrupted state, rax included.
                let Some(state) = self.timer.saved.pop() else {
                    return Err(RunError::Setup(format!(
                        "rt_sigreturn at {ip:#x} outside a signal handler"
                    )));
                };
                self.machine.guest.regs = state;
                return Ok(None);
            }
            38 => self.setitimer(a[0], a[1], a[2]),
            11 => {
                self.unmap(a[0], a[1].div_ceil(PAGE) * PAGE);
                0
            }
            12 => self.brk(a[0]),
            25 => self.mremap(a[0], a[1], a[2], a[3]),
            14 | 131 => 0,
            16 => self.ioctl(a[0], a[1], a[2]),
            21 => self.with_path(a[0], |p| {
                host(unsafe { libc::access(p, a[1] as i32) } as i64)
            }),
            87 => self.with_path(a[0], |p| host(unsafe { libc::unlink(p) } as i64)),
            90 => self.with_path(
                a[0],
                |p| host(unsafe { libc::chmod(p, a[1] as u32) } as i64),
            ),
            91 => host(unsafe { libc::fchmod(a[0] as i32, a[1] as u32) } as i64),
            93 => host(unsafe { libc::fchown(a[0] as i32, a[1] as u32, a[2] as u32) } as i64),
            72 => self.fcntl(a[0], a[1], a[2]),
            28 => 0,
            39 | 186 | 218 => host(unsafe { libc::getpid() } as i64),
            102 | 104 | 107 | 108 => 0,
            60 | 231 => return Ok(Some(a[0] as i32)),
            63 => self.uname(a[0]),
            158 => self.arch_prctl(a[0], a[1]),
            228 => self.clock_gettime(a[0], a[1]),
            201 => host(unsafe { libc::time(std::ptr::null_mut()) }),
            273 | 334 | 302 => -i64::from(libc::ENOSYS),
            280 => self.with_path_opt(a[1], |p| {
                // SAFETY: times may be null; a non-null guest pointer is
                // not translated, so only null (now) is supported.
                host(
                    unsafe { libc::utimensat(a[0] as i32, p, std::ptr::null(), a[3] as i32) }
                        as i64,
                )
            }),
            318 => self.io_getrandom(a[0], a[1]),
            _ => {
                return Err(RunError::Syscall {
                    nr,
                    name: syscall_name(nr),
                    ip,
                })
            }
        };
        self.machine.guest.regs.set_gpr(gpr::RAX, ret as u64);
        Ok(None)
    }

    /// mprotect: honoured for whole regions (see `GuestMemory::protect`);
    /// decoded code in them is forgotten when execute rights change.
    fn mprotect(&mut self, addr: u64, len: u64, prot: u64) -> i64 {
        if addr % PAGE != 0 {
            return -i64::from(libc::EINVAL);
        }
        let p = Prot {
            read: prot & 1 != 0,
            write: prot & 2 != 0,
            exec: prot & 4 != 0,
        };
        let end = addr.saturating_add(len);
        if self.machine.guest.mem.protect(addr, len, p) {
            self.machine.flush_code(addr, end);
        }
        0
    }

    /// rt_sigaction: remembered for the timer signals, accepted and ignored
    /// for the others (the emulator delivers no other signal).
    fn rt_sigaction(&mut self, sig: u64, act: u64, old: u64) -> i64 {
        let slot = TIMER_SIGNALS.iter().position(|&s| u64::from(s) == sig);
        if old != 0 {
            // struct k_sigaction: handler, flags, restorer, mask.
            let mut buf = [0u8; 32];
            if let Some((h, r)) = slot.and_then(|i| self.timer.handlers[i]) {
                buf[..8].copy_from_slice(&h.to_le_bytes());
                buf[16..24].copy_from_slice(&r.to_le_bytes());
            }
            if self.put(old, &buf) != 0 {
                return Self::efault();
            }
        }
        if let (Some(i), true) = (slot, act != 0) {
            let mut buf = [0u8; 24];
            if self.machine.guest.mem.peek(act, &mut buf).is_err() {
                return Self::efault();
            }
            let word = |k: usize| u64::from_le_bytes(buf[8 * k..8 * k + 8].try_into().unwrap());
            let (handler, restorer) = (word(0), word(2));
            self.timer.handlers[i] = (handler != SIG_DFL).then_some((handler, restorer));
        }
        0
    }

    /// setitimer: ITIMER_REAL, ITIMER_VIRTUAL and ITIMER_PROF all count
    /// retired instructions (see `Process::epoch`).
    fn setitimer(&mut self, which: u64, new: u64, old: u64) -> i64 {
        let Some(&sig) = TIMER_SIGNALS.get(which as usize) else {
            return -i64::from(libc::EINVAL);
        };
        if old != 0 && self.put(old, &[0u8; 32]) != 0 {
            return Self::efault();
        }
        if new == 0 {
            return 0;
        }
        let mut buf = [0u8; 32];
        if self.machine.guest.mem.peek(new, &mut buf).is_err() {
            return Self::efault();
        }
        let word = |k: usize| u64::from_le_bytes(buf[8 * k..8 * k + 8].try_into().unwrap());
        let us = |sec: u64, usec: u64| sec.saturating_mul(1_000_000).saturating_add(usec);
        let (interval, value) = (us(word(0), word(1)), us(word(2), word(3)));
        if value == 0 {
            self.timer.armed = None;
            self.timer.next = u64::MAX;
            return 0;
        }
        let period = self
            .epoch
            .unwrap_or_else(|| interval.max(value).saturating_mul(1000))
            .max(1);
        self.timer.armed = Some((sig, period));
        self.timer.next = self.machine.icount + period;
        0
    }

    fn efault() -> i64 {
        -i64::from(libc::EFAULT)
    }

    fn io(&mut self, fd: u64, buf: u64, len: u64, write: bool) -> i64 {
        if len == 0 {
            return 0;
        }
        let stdio = self.stdio;
        let Ok(slice) = self.machine.guest.mem.slice_mut(buf, len as usize) else {
            return Self::efault();
        };
        let fd = stdio.get(fd as usize).map_or(fd, |&h| h as u64);
        let fd = fd as i32;
        // SAFETY: `slice` is a live guest buffer of `len` bytes.
        let n = unsafe {
            if write {
                libc::write(fd, slice.as_ptr().cast(), slice.len())
            } else {
                libc::read(fd, slice.as_mut_ptr().cast(), slice.len())
            }
        };
        host(n as i64)
    }

    fn iov(&mut self, fd: u64, iov: u64, count: u64, write: bool) -> i64 {
        let mut total = 0i64;
        for i in 0..count.min(1024) {
            let mut e = [0u8; 16];
            if self.machine.guest.mem.peek(iov + i * 16, &mut e).is_err() {
                return Self::efault();
            }
            let base = u64::from_le_bytes(e[..8].try_into().unwrap());
            let len = u64::from_le_bytes(e[8..].try_into().unwrap());
            let n = self.io(fd, base, len, write);
            if n < 0 {
                return if total > 0 { total } else { n };
            }
            total += n;
            if (n as u64) < len {
                break;
            }
        }
        total
    }

    fn guest_cstr(&mut self, addr: u64) -> Option<std::ffi::CString> {
        let mut bytes = Vec::new();
        let mut b = [0u8; 1];
        loop {
            self.machine
                .guest
                .mem
                .peek(addr + bytes.len() as u64, &mut b)
                .ok()?;
            if b[0] == 0 {
                return std::ffi::CString::new(bytes).ok();
            }
            bytes.push(b[0]);
            if bytes.len() > 4096 {
                return None;
            }
        }
    }

    fn with_path(&mut self, addr: u64, f: impl FnOnce(*const libc::c_char) -> i64) -> i64 {
        match self.guest_cstr(addr) {
            Some(p) => f(p.as_ptr()),
            None => Self::efault(),
        }
    }

    fn with_path_opt(&mut self, addr: u64, f: impl FnOnce(*const libc::c_char) -> i64) -> i64 {
        if addr == 0 {
            f(std::ptr::null())
        } else {
            self.with_path(addr, f)
        }
    }

    fn put(&mut self, addr: u64, bytes: &[u8]) -> i64 {
        match self.machine.guest.mem.poke(addr, bytes) {
            Ok(()) => 0,
            Err(_) => Self::efault(),
        }
    }

    fn put_stat(&mut self, addr: u64, r: i64, st: &libc::stat) -> i64 {
        if r < 0 {
            return r;
        }
        // SAFETY: struct stat is plain data; x86-64 host and guest share it.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (st as *const libc::stat).cast::<u8>(),
                std::mem::size_of::<libc::stat>(),
            )
        };
        self.put(addr, bytes)
    }

    fn fstat(&mut self, fd: u64, buf: u64) -> i64 {
        let fd = self.stdio.get(fd as usize).map_or(fd, |&h| h as u64);
        // SAFETY: zeroed stat is valid; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = host(unsafe { libc::fstat(fd as i32, &mut st) } as i64);
        self.put_stat(buf, r, &st)
    }

    fn stat_path(&mut self, path: u64, buf: u64, nofollow: bool) -> i64 {
        let flags = if nofollow {
            libc::AT_SYMLINK_NOFOLLOW
        } else {
            0
        };
        self.fstatat(libc::AT_FDCWD as i64 as u64, path, buf, flags as u64)
    }

    fn fstatat(&mut self, dirfd: u64, path: u64, buf: u64, flags: u64) -> i64 {
        // SAFETY: zeroed stat is valid; fstatat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = self.with_path(path, |p| {
            host(unsafe { libc::fstatat(dirfd as i32, p, &mut st, flags as i32) } as i64)
        });
        self.put_stat(buf, r, &st)
    }

    fn fcntl(&mut self, fd: u64, cmd: u64, arg: u64) -> i64 {
        match cmd as i32 {
            libc::F_GETFD
            | libc::F_SETFD
            | libc::F_GETFL
            | libc::F_SETFL
            | libc::F_DUPFD
            | libc::F_DUPFD_CLOEXEC => {
                // SAFETY: integer-argument commands only.
                host(unsafe { libc::fcntl(fd as i32, cmd as i32, arg as i64) } as i64)
            }
            _ => -i64::from(libc::EINVAL),
        }
    }

    fn ioctl(&mut self, fd: u64, req: u64, arg: u64) -> i64 {
        let fd = self.stdio.get(fd as usize).map_or(fd, |&h| h as u64);
        let size = match req {
            0x5401 => 60, // TCGETS: struct termios
            0x5413 => 8,  // TIOCGWINSZ: struct winsize
            _ => return -i64::from(libc::ENOTTY),
        };
        let mut buf = [0u8; 64];
        // SAFETY: both requests write at most `size` bytes into `buf`.
        let r = host(unsafe { libc::ioctl(fd as i32, req as _, buf.as_mut_ptr()) } as i64);
        if r < 0 {
            return r;
        }
        self.put(arg, &buf[..size])
    }

    fn brk(&mut self, want: u64) -> i64 {
        let start = self.image.brk_start;
        if want < start {
            return self.brk as i64;
        }
        let need = want.div_ceil(PAGE) * PAGE - start;
        if need > self.heap_mapped {
            let ok = if self.heap_mapped == 0 {
                self.machine
                    .guest
                    .mem
                    .map(start, need, Prot::RW, "heap")
                    .is_ok()
            } else {
                self.machine.guest.mem.resize(start, need).is_ok()
            };
            if !ok {
                return self.brk as i64;
            }
            self.heap_mapped = need;
        }
        self.brk = want;
        want as i64
    }

    fn mmap(&mut self, addr: u64, len: u64, prot: u64, flags: u64, fd: i32) -> i64 {
        const MAP_FIXED: u64 = 0x10;
        const MAP_ANONYMOUS: u64 = 0x20;
        if flags & MAP_ANONYMOUS == 0 || fd != -1 {
            return -i64::from(libc::ENODEV);
        }
        let len = len.div_ceil(PAGE) * PAGE;
        if len == 0 {
            return -i64::from(libc::EINVAL);
        }
        let prot = Prot {
            read: prot & 1 != 0,
            write: prot & 2 != 0,
            exec: prot & 4 != 0,
        };
        let start = if flags & MAP_FIXED != 0 {
            self.unmap(addr, len);
            addr
        } else {
            self.mmap_next -= len;
            self.mmap_next
        };
        match self.machine.guest.mem.map(start, len, prot, "mmap") {
            Ok(()) => start as i64,
            Err(_) => -i64::from(libc::ENOMEM),
        }
    }

    /// mremap: shrinking keeps the address; growing moves the mapping when
    /// MREMAP_MAYMOVE allows (always, here), as Linux may.
    fn mremap(&mut self, old: u64, old_len: u64, new_len: u64, flags: u64) -> i64 {
        const MREMAP_MAYMOVE: u64 = 1;
        let old_len = old_len.div_ceil(PAGE) * PAGE;
        let new_len = new_len.div_ceil(PAGE) * PAGE;
        if new_len <= old_len {
            self.unmap(old + new_len, old_len - new_len);
            return old as i64;
        }
        if flags & MREMAP_MAYMOVE == 0 {
            return -i64::from(libc::ENOMEM);
        }
        let mut data = vec![0u8; old_len as usize];
        if self.machine.guest.mem.peek(old, &mut data).is_err() {
            return -i64::from(libc::EFAULT);
        }
        let new = self.mmap(0, new_len, 3, 0x22, -1);
        if new < 0 {
            return new;
        }
        if self.machine.guest.mem.poke(new as u64, &data).is_err() {
            return -i64::from(libc::EFAULT);
        }
        self.unmap(old, old_len);
        new
    }

    fn arch_prctl(&mut self, code: u64, addr: u64) -> i64 {
        const ARCH_SET_FS: u64 = 0x1002;
        const ARCH_GET_FS: u64 = 0x1003;
        match code {
            ARCH_SET_FS => {
                self.machine.guest.regs.set_fs_base(addr);
                0
            }
            ARCH_GET_FS => {
                let fs = self.machine.guest.regs.fs_base();
                self.put(addr, &fs.to_le_bytes())
            }
            _ => -i64::from(libc::EINVAL),
        }
    }

    fn clock_gettime(&mut self, clock: u64, ts: u64) -> i64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec.
        let r = host(unsafe { libc::clock_gettime(clock as i32, &mut t) } as i64);
        if r < 0 {
            return r;
        }
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&t.tv_sec.to_le_bytes());
        b[8..].copy_from_slice(&t.tv_nsec.to_le_bytes());
        self.put(ts, &b)
    }

    fn uname(&mut self, buf: u64) -> i64 {
        let mut u = [0u8; 65 * 6];
        for (i, s) in ["Linux", "brr", "6.1.0-brr", "#1", "x86_64", "(none)"]
            .iter()
            .enumerate()
        {
            u[i * 65..i * 65 + s.len()].copy_from_slice(s.as_bytes());
        }
        self.put(buf, &u)
    }

    fn io_getrandom(&mut self, buf: u64, len: u64) -> i64 {
        // Deterministic: the guest's randomness comes from its LFSR.
        let mut l = self.machine.guest.lfsr;
        let bytes: Vec<u8> = (0..len.min(1 << 20))
            .map(|_| {
                l.clock();
                l.state() as u8
            })
            .collect();
        match self.put(buf, &bytes) {
            0 => bytes.len() as i64,
            e => e,
        }
    }
}

fn unsafe_open(dirfd: i32, path: *const libc::c_char, flags: u64, mode: u64) -> i64 {
    // SAFETY: `path` is a NUL-terminated string owned by the caller.
    unsafe { libc::openat(dirfd, path, flags as i32, mode as libc::c_uint) as i64 }
}

/// Converts a host libc return (-1 and errno) into a raw syscall return.
fn host(r: i64) -> i64 {
    if r == -1 {
        -i64::from(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    } else {
        r
    }
}

fn syscall_name(nr: u64) -> &'static str {
    match nr {
        7 => "poll",
        17 => "pread64",
        22 => "pipe",
        25 => "mremap",
        32 => "dup",
        33 => "dup2",
        56 => "clone",
        57 => "fork",
        59 => "execve",
        61 => "wait4",
        62 => "kill",
        89 => "readlink",
        200 => "tkill",
        234 => "tgkill",
        _ => "see asm/unistd_64.h",
    }
}
