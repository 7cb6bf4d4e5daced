//! `libephemeral.so`: ephemeral instrumentation as a native software edge
//! profiler, after Traub, Schechter and Smith, "Ephemeral instrumentation
//! for lightweight program profiling" (2000).
//!
//! Preloaded into an unmodified x86-64 program (PIE or not) with
//! `EPHEMERAL_OUTPUT=DIR`, it finds every conditional branch of the main
//! executable's `.text` (`sites`), hooks each with an int3 over its first
//! byte, and counts the branch's direction in the SIGTRAP handler, which
//! then sets rip where the branch goes (`trap`): the branch is emulated,
//! not stepped, so a hooked execution costs one trap and no byte is
//! rewritten per execution. After P executions in an epoch the site is
//! unhooked (its byte restored); every epoch of process CPU time, all
//! unhooked sites are hooked again (`epoch`). At exit the counts go to
//! `DIR/<exe>.<pid>.edges.csv` and `DIR/<exe>.<pid>.summary.json`
//! (`output`).
//!
//! Settings: `EPHEMERAL_P` (default 1000; a P above a site's executions
//! per epoch never unhooks it, so the counts are exact),
//! `EPHEMERAL_EPOCH_MS` (default 10, the paper's).

pub mod cond;
mod epoch;
mod interpose;
pub mod output;
pub mod sites;
mod sys;
mod trap;

use sites::Site;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

pub const DEFAULT_PERSISTENCE: u64 = 1000;
pub const DEFAULT_EPOCH_MS: u64 = 10;

/// The site table and the settings, built once before any hook exists and
/// never changed after (only the sites' atomics are).
pub struct Profile {
    /// Sorted by `vaddr`.
    pub sites: Box<[Site]>,
    /// Run-time minus link-time address of the executable.
    pub bias: u64,
    /// P: executions of a site per epoch before it is unhooked.
    pub persistence: u64,
    pub epoch_ms: u64,
    /// Conditional branches decoded that lie outside the executable
    /// mappings (none in a normal binary): not hooked.
    pub unmapped_sites: u64,
    output: PathBuf,
    exe_name: String,
}

impl Profile {
    /// The site whose first byte is at run-time address `at`.
    /// Called from the SIGTRAP handler: a binary search, no allocation.
    pub fn site_at(&self, at: u64) -> Option<&Site> {
        let vaddr = at.wrapping_sub(self.bias);
        self.sites
            .binary_search_by_key(&vaddr, |s| s.vaddr)
            .ok()
            .map(|i| &self.sites[i])
    }
}

static PROFILE: OnceLock<Profile> = OnceLock::new();
/// Whether the interposers guard SIGTRAP (set once our handler is in).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The process that profiles: a fork child inherits the hooks (its traps
/// are still emulated) but writes nothing, its counts being mixed with the
/// parent's.
static PROFILING_PID: AtomicI32 = AtomicI32::new(0);

/// The settings from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub output: PathBuf,
    pub persistence: u64,
    pub epoch_ms: u64,
}

impl Config {
    /// `None` when `EPHEMERAL_OUTPUT` is unset (the library stays idle);
    /// an error names the variable that does not parse.
    pub fn from(get: impl Fn(&str) -> Option<String>) -> Result<Option<Config>, String> {
        let Some(output) = get("EPHEMERAL_OUTPUT").filter(|o| !o.is_empty()) else {
            return Ok(None);
        };
        let number =
            |name: &str, default: u64| -> Result<u64, String> {
                match get(name) {
                    None => Ok(default),
                    Some(v) => v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("{name} must be a positive whole number, got '{v}'")
                    }),
                }
            };
        Ok(Some(Config {
            output: PathBuf::from(output),
            persistence: number("EPHEMERAL_P", DEFAULT_PERSISTENCE)?,
            epoch_ms: number("EPHEMERAL_EPOCH_MS", DEFAULT_EPOCH_MS)?,
        }))
    }
}

extern "C" fn init() {
    let config = match Config::from(|k| std::env::var(k).ok()) {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => return not_profiling(&e),
    };
    match std::panic::catch_unwind(|| start(config)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => not_profiling(&e),
        Err(_) => not_profiling("internal error while starting"),
    }
}

fn not_profiling(why: &str) {
    let msg = format!("ephemeral: not profiling: {why}\n");
    // SAFETY: a valid buffer.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

fn start(config: Config) -> Result<(), String> {
    sys::resolve_all();
    let exe_path = std::fs::read_link("/proc/self/exe")
        .map_err(|e| format!("cannot read /proc/self/exe: {e}"))?;
    let elf = std::fs::read("/proc/self/exe")
        .map_err(|e| format!("cannot read {}: {e}", exe_path.display()))?;
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    let maps = sites::parse_maps(&maps);
    let ours: Vec<&sites::Mapping> = maps
        .iter()
        .filter(|m| Path::new(&m.path) == exe_path)
        .collect();
    let first = ours
        .iter()
        .min_by_key(|m| m.offset)
        .ok_or("the executable is not in /proc/self/maps")?;
    let bias = sites::load_bias(&elf, first.start, first.offset)?;
    let code: Vec<(u64, u64)> = ours
        .iter()
        .filter(|m| m.executable)
        .map(|m| (m.start, m.end))
        .collect();
    let all = sites::find(&elf)?;
    let decoded = all.len() as u64;
    let mapped = |s: &Site| {
        let a = s.vaddr.wrapping_add(bias);
        code.iter()
            .any(|&(lo, hi)| lo <= a && a + u64::from(s.len) <= hi)
    };
    let sites: Box<[Site]> = all.into_iter().filter(mapped).collect();
    // Text stays writable for the whole run: hooks are written by the trap
    // handlers of any thread and the epoch thread at once, and a per-write
    // mprotect would race (one thread making a page read-only while
    // another writes) and cost two system calls per hook.
    for &(lo, hi) in &code {
        // SAFETY: whole pages of the executable's own code mappings.
        unsafe { sys::make_writable_code(lo, hi)? };
    }
    let exe_name = exe_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "exe".into());
    let profile = Profile {
        unmapped_sites: decoded - sites.len() as u64,
        sites,
        bias,
        persistence: config.persistence,
        epoch_ms: config.epoch_ms,
        output: config.output,
        exe_name,
    };
    if PROFILE.set(profile).is_err() {
        return Err("started twice".into());
    }
    let profile = PROFILE.get().expect("just set");
    trap::install()?;
    ACTIVE.store(true, Ordering::Release);
    PROFILING_PID.store(sys::getpid(), Ordering::Release);
    // SAFETY: a plain extern "C" function that lives as long as the
    // process (the library is preloaded, never unloaded).
    unsafe { libc::atexit(at_exit) };
    epoch::rehook_all(profile);
    epoch::start(profile, config.epoch_ms.saturating_mul(1_000_000))
}

extern "C" fn at_exit() {
    if PROFILING_PID.load(Ordering::Acquire) != sys::getpid() {
        return;
    }
    let Some(profile) = PROFILE.get() else {
        return;
    };
    let counters = output::Counters {
        epochs: epoch::EPOCHS.load(Ordering::Relaxed),
        hooks: epoch::HOOKS.load(Ordering::Relaxed),
        unhooks: trap::UNHOOKS.load(Ordering::Relaxed),
        foreign_traps: trap::FOREIGN_TRAPS.load(Ordering::Relaxed),
        late_traps: trap::LATE_TRAPS.load(Ordering::Relaxed),
    };
    if let Err(e) = output::write(profile, &counters, sys::getpid()) {
        not_profiling(&format!("cannot write the profile: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn settings_parse_with_defaults_and_name_the_bad_variable() {
        assert_eq!(Config::from(env(&[])), Ok(None));
        let c = Config::from(env(&[("EPHEMERAL_OUTPUT", "/tmp/x")]))
            .unwrap()
            .unwrap();
        assert_eq!((c.persistence, c.epoch_ms), (1000, 10));
        let c = Config::from(env(&[
            ("EPHEMERAL_OUTPUT", "/tmp/x"),
            ("EPHEMERAL_P", "10"),
            ("EPHEMERAL_EPOCH_MS", "3"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!((c.persistence, c.epoch_ms), (10, 3));
        let e = Config::from(env(&[("EPHEMERAL_OUTPUT", "/x"), ("EPHEMERAL_P", "0")]));
        assert!(e.unwrap_err().contains("EPHEMERAL_P"));
    }
}
