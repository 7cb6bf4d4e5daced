//! summary.json: what a session did, written by the library when the
//! session stops (on the control thread, never in a handler), and the
//! `stop` reply.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::counters::{CounterKind, Counters, Host};
use crate::options::{Event, Lookahead, SUMMARY_FILE};

/// The version of summary.json's layout. Adding a counter keeps it (a
/// reader takes a missing counter as 0); renaming, removing or changing the
/// meaning of a field raises it.
pub const SCHEMA_VERSION: u32 = 3;

/// summary.json.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema: u32,
    pub pid: u32,
    /// The program's command line, arguments separated by spaces.
    pub command: String,
    pub output_dir: PathBuf,
    pub config: SessionConfig,
    pub duration_ns: u64,
    /// Threads traced during the session.
    pub threads: u64,
    /// The session's counters: counts at the top level under their own
    /// names, `drops` and `aborts` by reason.
    #[serde(flatten)]
    pub counters: Counters,
    /// Traces that ended early, all reasons (Σ `aborts`).
    pub traces_aborted: u64,
    /// Traces written to perf.script (counted with their repeats).
    pub traces_written: u64,
    /// Distinct traces in perf.script.
    pub distinct_traces: u64,
    /// Taken branches written to perf.script.
    pub entries_written: u64,
    /// What the library met of its host program and survived.
    pub host: Host,
    /// Modules with samples, each with its profile files.
    pub modules: Vec<ModuleSummary>,
    /// Files written into the output directory.
    pub files: Vec<String>,
}

/// The session's settings, defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    pub event: Event,
    pub period: Option<u64>,
    pub freq: Option<u64>,
    pub lbr: u32,
    pub lookahead: Lookahead,
    /// Frames per call stack (`callstack`); 0: none taken.
    #[serde(default)]
    pub callstack: u32,
    /// How the call stacks were unwound.
    #[serde(default)]
    pub unwind: crate::options::Unwind,
    /// Load values were recorded (`values`): values.csv.
    #[serde(default)]
    pub values: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            event: Event::TaskClock,
            period: None,
            freq: None,
            lbr: Lookahead::default().default_lbr(),
            lookahead: Lookahead::default(),
            callstack: 0,
            unwind: crate::options::Unwind::Fp,
            values: false,
        }
    }
}

/// A loaded module that has samples.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleSummary {
    pub path: PathBuf,
    /// The GNU build id in hex, when the module has one: what ties the
    /// profile to one build of the file at `path`.
    pub build_id: Option<String>,
    #[serde(with = "hex")]
    pub load_address: u64,
    /// Runtime address minus link-time address.
    #[serde(with = "hex")]
    pub bias: u64,
    /// Its `create_llvm_prof --profiler=text` profile.
    pub afdo: String,
    /// Its `llvm-bolt -pa` profile.
    pub bolt: String,
    /// Taken branches with both ends in the module.
    pub branches: u64,
}

/// Why summary.json could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a breakdance summary: {source}", path.display())]
    Malformed {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "{} has schema {found}, this tool reads schema {SCHEMA_VERSION}: \
         record again, or read it with the breakdance that wrote it",
        path.display()
    )]
    Version { path: PathBuf, found: u32 },
}

#[derive(Deserialize)]
struct SchemaOnly {
    #[serde(default)]
    schema: u32,
}

impl Summary {
    /// Parses summary.json's text; `path` names it in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Summary, SchemaError> {
        let malformed = |source| SchemaError::Malformed {
            path: path.to_path_buf(),
            source,
        };
        let probe: SchemaOnly = serde_json::from_str(text).map_err(malformed)?;
        if probe.schema != SCHEMA_VERSION {
            return Err(SchemaError::Version {
                path: path.to_path_buf(),
                found: probe.schema,
            });
        }
        serde_json::from_str(text).map_err(malformed)
    }

    /// Reads `dir/summary.json`; `Ok(None)` when there is none.
    pub fn load(dir: &Path) -> Result<Option<Summary>, SchemaError> {
        let path = dir.join(SUMMARY_FILE);
        match fs::read_to_string(&path) {
            Ok(text) => Summary::from_json(&text, &path).map(Some),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SchemaError::Io { path, source }),
        }
    }

    /// The JSON text (one line).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a summary always serialises")
    }

    /// Every drop of the session, by reason.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        self.counters.drops.entries()
    }

    /// The time counters, by name: the handlers', the part of them spent
    /// emulating, the worker's, the start and stop's.
    pub fn time_counters(&self) -> Vec<(&'static str, u64)> {
        self.counters
            .entries()
            .into_iter()
            .filter(|(_, kind, _)| *kind == CounterKind::Time)
            .map(|(name, _, n)| (name, n))
            .collect()
    }

    /// The module summary of the file whose build id is `build_id`.
    pub fn module_by_build_id(&self, build_id: &str) -> Option<&ModuleSummary> {
        self.modules
            .iter()
            .find(|m| m.build_id.as_deref() == Some(build_id))
    }
}

/// Addresses as `0x…` strings, as a person reads them in the file.
mod hex {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:#x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let text = String::deserialize(d)?;
        let digits = text.strip_prefix("0x").unwrap_or(&text);
        u64::from_str_radix(digits, 16)
            .map_err(|_| D::Error::custom(format!("'{text}' is not a hex address")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::AbortReason;

    fn example() -> Summary {
        let mut s = Summary {
            schema: SCHEMA_VERSION,
            pid: 42,
            command: "./demo 3".into(),
            output_dir: "/o".into(),
            traces_written: 7,
            modules: vec![ModuleSummary {
                path: "/bin/demo".into(),
                build_id: Some("ab12".into()),
                load_address: 0x5555_0000,
                bias: 0x5555_0000,
                afdo: "demo.afdo.txt".into(),
                bolt: "demo.bolt.fdata".into(),
                branches: 9,
            }],
            ..Default::default()
        };
        s.counters.samples = 10;
        s.counters.drops.no_free_buffer = 2;
        *s.counters.aborts.get_mut(AbortReason::Rseq) = 1;
        s.counters.drops.trace_table_full = 3;
        s
    }

    #[test]
    fn round_trips_with_flat_counters_and_hex_addresses() {
        let s = example();
        let text = s.to_json();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["samples"], 10);
        assert_eq!(v["aborts"]["rseq"], 1);
        assert_eq!(v["drops"]["trace_table_full"], 3);
        assert_eq!(v["config"]["event"], "task-clock");
        assert_eq!(v["modules"][0]["load_address"], "0x55550000");
        assert_eq!(Summary::from_json(&text, Path::new("s")).unwrap(), s);
        assert_eq!(
            s.drops().iter().filter(|(_, n)| *n > 0).count(),
            2,
            "{:?}",
            s.drops()
        );
        assert!(s.module_by_build_id("ab12").is_some());
        assert!(s.module_by_build_id("ab13").is_none());
    }

    #[test]
    fn another_schema_is_refused_by_number() {
        let e = Summary::from_json(r#"{"pid": 1}"#, Path::new("d/summary.json")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d/summary.json has schema 0, this tool reads schema 3: record again, or read it \
             with the breakdance that wrote it"
        );
        let e = Summary::from_json("{", Path::new("s")).unwrap_err();
        assert!(
            e.to_string().starts_with("s is not a breakdance summary"),
            "{e}"
        );
    }
}
