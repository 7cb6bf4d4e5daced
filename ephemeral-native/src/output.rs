//! What the library writes at exit, into `EPHEMERAL_OUTPUT`:
//!
//! - `<exe>.<pid>.edges.csv`: one line per site, addresses as the ELF's
//!   link-time vaddrs (for a PIE, its file offsets' address space, as
//!   callgrind reports them): `site,target,fallthrough,taken,not_taken,
//!   hooked_executions,hooks,unhooks`. `taken` counts executions that went
//!   to `target`, `not_taken` those that went to `fallthrough`.
//! - `<exe>.<pid>.summary.json`: the settings and the process's counters.

use crate::sites::Site;
use crate::Profile;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// The CSV header, the contract with readers (bench-harness).
pub const CSV_HEADER: &str =
    "site,target,fallthrough,taken,not_taken,hooked_executions,hooks,unhooks";

/// Process-wide counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Epochs ended by the timer (each re-hooked the unhooked sites).
    pub epochs: u64,
    /// int3 writes, the initial ones included.
    pub hooks: u64,
    /// Original bytes written back after P executions.
    pub unhooks: u64,
    /// SIGTRAPs that were not ours, passed to the application's action.
    pub foreign_traps: u64,
    /// Traps at a site another thread had just unhooked.
    pub late_traps: u64,
}

/// The CSV text of `sites`.
pub fn edges_csv(sites: &[Site]) -> String {
    let mut s = String::with_capacity(64 * (sites.len() + 1));
    s.push_str(CSV_HEADER);
    s.push('\n');
    for site in sites {
        let taken = site.taken.load(Ordering::Relaxed);
        let not_taken = site.not_taken.load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "{:#x},{:#x},{:#x},{taken},{not_taken},{},{},{}",
            site.vaddr,
            site.target,
            site.fallthrough(),
            taken + not_taken,
            site.hooks.load(Ordering::Relaxed),
            site.unhooks.load(Ordering::Relaxed)
        );
    }
    s
}

/// The summary's JSON text.
pub fn summary_json(profile: &Profile, c: &Counters, pid: i32) -> String {
    let executions: u64 = profile.sites.iter().map(Site::executions).sum();
    format!(
        "{{\n  \"exe\": \"{}\",\n  \"pid\": {pid},\n  \"persistence\": {},\n  \"epoch_ms\": {},\n  \
         \"sites\": {},\n  \"unmapped_sites\": {},\n  \"hooked_executions\": {executions},\n  \
         \"epochs\": {},\n  \"hooks\": {},\n  \"unhooks\": {},\n  \"foreign_traps\": {},\n  \
         \"late_traps\": {}\n}}\n",
        profile.exe_name.escape_default(),
        profile.persistence,
        profile.epoch_ms,
        profile.sites.len(),
        profile.unmapped_sites,
        c.epochs,
        c.hooks,
        c.unhooks,
        c.foreign_traps,
        c.late_traps,
    )
}

/// Writes both files (std's files are opened close-on-exec and closed
/// here: no descriptor stays open in the application).
pub fn write(profile: &Profile, c: &Counters, pid: i32) -> std::io::Result<()> {
    std::fs::create_dir_all(&profile.output)?;
    let name = |what: &str| {
        profile
            .output
            .join(format!("{}.{pid}.{what}", profile.exe_name))
    };
    std::fs::write(name("edges.csv"), edges_csv(&profile.sites))?;
    std::fs::write(name("summary.json"), summary_json(profile, c, pid))
}
