//! `Machine::step` never allocates: a counting global allocator watches every
//! step of a whole workload run (decoding misses included).

mod common;

use brr::emu::syscall::Process;
use brr::emu::Stop;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn step_does_not_allocate() {
    let src = common::workloads().join("opmix.c");
    let Some(exe) = common::build_static("opmix", &[src], common::Cc::Gcc, &[]) else {
        return;
    };
    let args = vec![exe.display().to_string()];
    // Loading and syscalls may allocate; only the steps are watched.
    let mut p = Process::load(&exe, &args, &[], 1).unwrap();
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    p.stdio[1] = std::os::fd::AsRawFd::as_raw_fd(&null);
    let mut steps = 0u64;
    let mut in_step = 0u64;
    loop {
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let r = p.machine.step();
        in_step += ALLOCATIONS.load(Ordering::Relaxed) - before;
        steps += 1;
        match r {
            Ok(()) => {}
            Err(Stop::Syscall) => {
                if p.machine.guest.regs.gpr[0] == 231 || p.machine.guest.regs.gpr[0] == 60 {
                    break;
                }
                p.service_syscall().unwrap();
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(steps > 1_000_000, "{steps} steps");
    assert_eq!(in_step, 0, "allocations inside step over {steps} steps");
}
