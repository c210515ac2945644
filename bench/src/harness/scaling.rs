//! `--scaling` (`sluice-bench pipeline`, `sluice-bench nexmark`): the same job at one shard
//! and at N, round after round alternately so both see the same spells of noise, and
//! `scaling_efficiency` = throughput(N) / (N x throughput(1)): 1.0 when each added shard
//! adds a whole shard's worth of events.
//!
//! The figure is the best N-shard round over N times the best one-shard round (each side's
//! figure is its best round, as everywhere in the harness); each round's own ratio is
//! reported beside it, for the spread.

use anyhow::ensure;
use serde::Serialize;

use super::Table;

/// What `--scaling` measured; flattened into a workload's JSON report (all `null` or
/// empty without `--scaling`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scaling {
    /// N, the shard count compared with one.
    pub scaling_shards: Option<usize>,
    /// Events per second at one shard, in its best round.
    pub single_shard_events_per_sec: Option<f64>,
    /// Throughput at N shards (best round) / (N x throughput at one shard (best round)).
    pub scaling_efficiency: Option<f64>,
    /// Events per second at one shard in every round, in order.
    pub round_single_shard_events_per_sec: Vec<f64>,
    /// Each round's N-shard rate / (N x its one-shard rate), in order.
    pub round_scaling_efficiency: Vec<f64>,
}

impl Scaling {
    /// Scaling from one shard to `shards`.
    ///
    /// # Errors
    ///
    /// Fewer than two shards: there is nothing to scale to.
    pub fn to(shards: usize) -> anyhow::Result<Self> {
        ensure!(
            shards >= 2,
            "--scaling compares 1 shard with N: N = --shards (or the CPU count) is {shards}, give --shards 2 or more"
        );
        Ok(Scaling { scaling_shards: Some(shards), ..Scaling::default() })
    }

    /// Whether `--scaling` is on.
    pub fn is_on(&self) -> bool {
        self.scaling_shards.is_some()
    }

    /// Adds a round: `many` events per second at N shards, `one` at one shard.
    pub fn push(&mut self, many: f64, one: f64) {
        let n = self.scaling_shards.unwrap_or(1) as f64;
        self.round_single_shard_events_per_sec.push(one);
        self.round_scaling_efficiency.push(many / (n * one.max(f64::MIN_POSITIVE)));
    }

    /// Sets the figures from the rounds, given the best N-shard rate.
    pub fn finish(&mut self, best_many: f64) {
        let Some(n) = self.scaling_shards else { return };
        let one = self.round_single_shard_events_per_sec.iter().copied().fold(0.0, f64::max);
        self.single_shard_events_per_sec = Some(one);
        self.scaling_efficiency = Some(best_many / (n as f64 * one.max(f64::MIN_POSITIVE)));
    }

    /// The table's rows, if `--scaling` ran.
    pub fn rows(&self, table: &mut Table) {
        let (Some(n), Some(one), Some(efficiency)) =
            (self.scaling_shards, self.single_shard_events_per_sec, self.scaling_efficiency)
        else {
            return;
        };
        table.row("1 shard (scaling)", format!("{one:.0}"), "events/s");
        table.row(format!("scaling efficiency, 1 -> {n} shards"), format!("{efficiency:.2}"), "x (1.00: linear)");
        let rounds: Vec<String> = self.round_scaling_efficiency.iter().map(|e| format!("{e:.2}")).collect();
        table.row("rounds (scaling efficiency)", rounds.join(" "), "");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiency_is_the_best_rates_ratio_per_shard() {
        assert!(Scaling::to(1).is_err());
        let mut s = Scaling::to(2).unwrap();
        assert!(s.is_on() && !Scaling::default().is_on());
        s.push(300.0, 200.0);
        s.push(360.0, 150.0);
        s.finish(360.0);
        assert_eq!(s.round_scaling_efficiency, [0.75, 1.2]);
        assert_eq!((s.single_shard_events_per_sec, s.scaling_efficiency), (Some(200.0), Some(0.9)));
        let mut table = Table::new();
        s.rows(&mut table);
        let text = table.to_string();
        assert!(text.contains("scaling efficiency, 1 -> 2 shards") && text.contains("0.75 1.20"), "{text}");
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["scaling_efficiency"], 0.9);
    }
}
