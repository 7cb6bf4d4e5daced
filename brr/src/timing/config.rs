//! Timing-model parameters, read from a `key = value` file.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// The branch direction predictor of the model (`predictor = NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PredictorKind {
    /// gshare + bimodal + per-branch chooser (the paper's core; default).
    Tournament,
    /// gshare alone, `gshare_history_bits` of history and 2^that counters.
    Gshare,
    /// `bimodal_entries` 2-bit counters indexed by address, no history.
    Bimodal,
    /// Never mispredicts: every direction, indirect target and return is
    /// known. CPI under it is CPI with branch mispredictions removed.
    Perfect,
}

impl PredictorKind {
    pub const ALL: [PredictorKind; 4] = [
        PredictorKind::Tournament,
        PredictorKind::Gshare,
        PredictorKind::Bimodal,
        PredictorKind::Perfect,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PredictorKind::Tournament => "tournament",
            PredictorKind::Gshare => "gshare",
            PredictorKind::Bimodal => "bimodal",
            PredictorKind::Perfect => "perfect",
        }
    }

    /// The predictor called `name`; the error lists the valid names.
    pub fn parse(name: &str) -> Result<PredictorKind> {
        PredictorKind::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .with_context(|| {
                let names: Vec<&str> = PredictorKind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown predictor '{name}' (one of: {})", names.join(", "))
            })
    }
}

/// Parameters of the modelled core (defaults: the paper's machine, §5).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Instructions fetched per cycle; a fetch block also ends at a
    /// predicted-taken branch.
    pub fetch_width: u32,
    /// Instructions retired per cycle.
    pub retire_width: u32,
    pub rob_size: u32,
    /// Cycles from a mispredicted branch's execution to the next fetch.
    pub mispredict_penalty: u32,
    /// Bubble of a redirect at decode: a direct jump or call missing in the
    /// BTB, and every taken brr.
    pub decode_redirect_penalty: u32,
    /// Which direction predictor; the next three keys size its tables.
    pub predictor: PredictorKind,
    pub gshare_history_bits: u32,
    pub bimodal_entries: u32,
    pub chooser_entries: u32,
    pub btb_entries: u32,
    pub btb_ways: u32,
    pub ras_entries: u32,
    pub l1i_size: u32,
    pub l1d_size: u32,
    pub l1_ways: u32,
    pub line_size: u32,
    pub l2_size: u32,
    pub l2_ways: u32,
    pub l1_latency: u32,
    pub l2_latency: u32,
    pub memory_latency: u32,
    /// Store-to-load forwarding latency.
    pub forward_latency: u32,
    pub mul_latency: u32,
    pub div_latency: u32,
    /// Cycles lost when a store writes executable memory (self-modifying
    /// code): the pipeline is cleared after the store retires and fetch
    /// restarts this many cycles later.
    pub smc_penalty: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            fetch_width: 3,
            retire_width: 4,
            rob_size: 80,
            mispredict_penalty: 11,
            decode_redirect_penalty: 4,
            predictor: PredictorKind::Tournament,
            gshare_history_bits: 16,
            bimodal_entries: 65536,
            chooser_entries: 65536,
            btb_entries: 1024,
            btb_ways: 4,
            ras_entries: 32,
            l1i_size: 32 * 1024,
            l1d_size: 32 * 1024,
            l1_ways: 4,
            line_size: 64,
            l2_size: 1 << 20,
            l2_ways: 8,
            l1_latency: 3,
            l2_latency: 8,
            memory_latency: 140,
            forward_latency: 4,
            mul_latency: 3,
            div_latency: 25,
            smc_penalty: 100,
        }
    }
}

impl Config {
    /// Reads a config file: `key = value` lines, `#` comments; keys not
    /// given keep their defaults; unknown keys are errors.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read timing config {}", path.display()))?;
        Config::parse(&text).with_context(|| format!("in {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Config> {
        let mut c = Config::default();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                bail!("line {}: expected `key = value`, got '{line}'", n + 1);
            };
            let (key, value) = (key.trim(), value.trim());
            if key == "predictor" {
                c.predictor =
                    PredictorKind::parse(value).with_context(|| format!("line {}", n + 1))?;
                continue;
            }
            let v: u32 = value.parse().with_context(|| {
                format!("line {}: {key}: '{value}' is not a whole number", n + 1)
            })?;
            let slot = match key {
                "fetch_width" => &mut c.fetch_width,
                "retire_width" => &mut c.retire_width,
                "rob_size" => &mut c.rob_size,
                "mispredict_penalty" => &mut c.mispredict_penalty,
                "decode_redirect_penalty" => &mut c.decode_redirect_penalty,
                "gshare_history_bits" => &mut c.gshare_history_bits,
                "bimodal_entries" => &mut c.bimodal_entries,
                "chooser_entries" => &mut c.chooser_entries,
                "btb_entries" => &mut c.btb_entries,
                "btb_ways" => &mut c.btb_ways,
                "ras_entries" => &mut c.ras_entries,
                "l1i_size" => &mut c.l1i_size,
                "l1d_size" => &mut c.l1d_size,
                "l1_ways" => &mut c.l1_ways,
                "line_size" => &mut c.line_size,
                "l2_size" => &mut c.l2_size,
                "l2_ways" => &mut c.l2_ways,
                "l1_latency" => &mut c.l1_latency,
                "l2_latency" => &mut c.l2_latency,
                "memory_latency" => &mut c.memory_latency,
                "forward_latency" => &mut c.forward_latency,
                "mul_latency" => &mut c.mul_latency,
                "div_latency" => &mut c.div_latency,
                "smc_penalty" => &mut c.smc_penalty,
                _ => bail!("line {}: unknown key '{key}'", n + 1),
            };
            *slot = v;
        }
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<()> {
        let pow2 = [
            ("bimodal_entries", self.bimodal_entries),
            ("chooser_entries", self.chooser_entries),
            ("btb_entries", self.btb_entries),
            ("line_size", self.line_size),
        ];
        for (k, v) in pow2 {
            if !v.is_power_of_two() {
                bail!("{k} = {v} must be a power of two");
            }
        }
        for (k, size, ways) in [
            ("l1i", self.l1i_size, self.l1_ways),
            ("l1d", self.l1d_size, self.l1_ways),
            ("l2", self.l2_size, self.l2_ways),
        ] {
            let sets = size / self.line_size / ways.max(1);
            if ways == 0 || sets == 0 || !sets.is_power_of_two() {
                bail!("{k}: size / line_size / ways must be a power of two ≥ 1");
            }
        }
        if self.btb_ways == 0
            || self.btb_entries % self.btb_ways != 0
            || !(self.btb_entries / self.btb_ways).is_power_of_two()
        {
            bail!("btb_entries / btb_ways must be a power of two");
        }
        if self.fetch_width == 0
            || self.retire_width == 0
            || self.rob_size == 0
            || self.ras_entries == 0
        {
            bail!("widths, rob_size and ras_entries must be at least 1");
        }
        if !(1..=30).contains(&self.gshare_history_bits) {
            bail!("gshare_history_bits must be in 1..=30");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_is_the_default() {
        let c = Config::parse(include_str!("../../timing.conf")).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn bad_lines_are_named() {
        let e = format!(
            "{:#}",
            Config::parse("fetch_width = 4\nrob = 3\n").unwrap_err()
        );
        assert!(
            e.contains("line 2") && e.contains("unknown key 'rob'"),
            "{e}"
        );
        let e = format!("{:#}", Config::parse("btb_entries = 1000").unwrap_err());
        assert!(e.contains("btb_entries"), "{e}");
        let e = format!("{:#}", Config::parse("l1_latency = fast").unwrap_err());
        assert!(e.contains("not a whole number"), "{e}");
        let e = format!("{:#}", Config::parse("\npredictor = oracle").unwrap_err());
        assert!(
            e.contains("line 2")
                && e.contains("unknown predictor 'oracle'")
                && e.contains("gshare"),
            "{e}"
        );
    }

    #[test]
    fn every_predictor_parses_by_name() {
        for k in PredictorKind::ALL {
            let c = Config::parse(&format!("predictor = {}  # comment", k.name())).unwrap();
            assert_eq!(c.predictor, k);
        }
    }
}
