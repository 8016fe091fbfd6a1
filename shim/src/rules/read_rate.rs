//! A part's heat for live tiering: the bytes read of it per tick, measured over the
//! interval between its reads, not summed over recent ticks.
//!
//! A heat that sums reads and halves at every tick is a recency: of weights read once per
//! forward, in layer order, the layer just read is the hottest and the next one to be
//! read the coldest. Once a forward takes longer than a tick, the swaps then trade the
//! weights about to be read for those just read, in every forward (on an H100 a decode
//! of 1.1 tokens/s after an HF prefill, 27.8 GB promoted and as much demoted,
//! bench/results/2026-12-05-4dd3d98c4b53-longctx-h100.md). Measured over the interval
//! between reads, everything a program reads once per pass has the same heat, whatever
//! the phase, and only what is read more often or less is hotter or colder: read `r`
//! bytes every `P` ticks, heat `r / P`. What stops being read cools once it is overdue
//! (twice its interval), halving for every interval more.

/// A part's reads, tick by tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadRate {
    /// Bytes a tick as of its last read: the mean of what the interval before that read
    /// gave and what the heat was then.
    rate: u64,
    /// Ticks between its last two reads (from its allocation for the first); 0 before
    /// its first read.
    gap: u32,
    /// Ticks since its last read (since its allocation before the first).
    since: u32,
}

/// How many of its intervals a part may go unread before it cools.
pub const OVERDUE_GAPS: u32 = 2;

impl ReadRate {
    /// After one more tick in which `read` bytes of it were read (or named).
    pub fn after_tick(self, read: u64) -> ReadRate {
        let since = self.since.saturating_add(1);
        if read == 0 {
            return ReadRate { since, ..self };
        }
        let interval = read / u64::from(since);
        let rate = match self.gap {
            0 => interval,
            _ => self.heat_at(since) / 2 + interval / 2,
        };
        ReadRate { rate, gap: since, since: 0 }
    }

    /// Ticks since its last read (since its allocation before the first).
    pub fn idle_ticks(&self) -> u32 {
        self.since
    }

    /// Its heat now, bytes a tick.
    pub fn heat(&self) -> u64 {
        self.heat_at(self.since)
    }

    /// Its heat `since` ticks after its last read: its rate, halved for every interval
    /// it is overdue by.
    fn heat_at(&self, since: u32) -> u64 {
        if self.gap == 0 {
            return 0;
        }
        let overdue = since.saturating_sub(self.gap.saturating_mul(OVERDUE_GAPS));
        self.rate.checked_shr(overdue.div_ceil(self.gap)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// `reads` (tick, bytes) applied over `ticks` ticks from a fresh part.
    fn run(ticks: u32, reads: &[(u32, u64)]) -> ReadRate {
        (0..ticks).fold(ReadRate::default(), |rate, tick| {
            rate.after_tick(reads.iter().filter(|(at, _)| *at == tick).map(|(_, bytes)| bytes).sum())
        })
    }

    #[test]
    fn parts_read_once_per_pass_are_alike_whatever_their_phase() {
        // Eight layers read in order, one pass every `period` ticks, some passes a tick
        // late: at every tick, the hottest at most twice the coldest (the swaps' margin),
        // where a sum halved every tick would put the layer just read 2^period over the
        // next one.
        for period in 1..=24u32 {
            let layers: Vec<Vec<(u32, u64)>> = (0..8u32)
                .map(|layer| {
                    (0..40u32).map(|pass| (pass * period + pass % 3 / 2 + layer * period / 8, 64 * MIB)).collect()
                })
                .collect();
            for tick in 4 * period + 2..40 * period {
                let heats: Vec<u64> = layers.iter().map(|reads| run(tick, reads).heat()).collect();
                let (least, most) = (*heats.iter().min().unwrap(), *heats.iter().max().unwrap());
                assert!(least > 0 && most < 2 * least, "period {period}, tick {tick}: heats {heats:?} are not alike");
            }
        }
    }

    #[test]
    fn read_more_often_is_hotter_by_as_much() {
        let every_tick: Vec<(u32, u64)> = (0..60).map(|t| (t, MIB)).collect();
        let every_fourth: Vec<(u32, u64)> = (0..60).step_by(4).map(|t| (t, MIB)).collect();
        let (hot, cool) = (run(60, &every_tick).heat(), run(60, &every_fourth).heat());
        assert!(hot >= 3 * cool && hot <= 5 * cool, "{hot} against {cool}");
    }

    #[test]
    fn what_stops_being_read_cools_once_overdue() {
        let mut rate = run(10, &(0..10).map(|t| (t, 64 * MIB)).collect::<Vec<_>>());
        let hot = rate.heat();
        rate = rate.after_tick(0).after_tick(0);
        assert_eq!(rate.heat(), hot, "two intervals unread: not overdue yet");
        rate = rate.after_tick(0);
        assert_eq!(rate.heat(), hot / 2, "one interval overdue: halved");
        rate = (0..10).fold(rate, |r, _| r.after_tick(0));
        assert!(rate.heat() <= hot >> 10, "{} left of {hot}", rate.heat());
    }

    #[test]
    fn idle_ticks_count_from_the_last_read() {
        assert_eq!(run(7, &[]).idle_ticks(), 7, "never read: since its allocation");
        assert_eq!(run(10, &[(2, MIB), (6, MIB)]).idle_ticks(), 3);
    }

    #[test]
    fn the_first_read_counts_over_the_time_since_allocation() {
        assert_eq!(ReadRate::default().heat(), 0, "never read");
        assert_eq!(run(1, &[(0, 8 * MIB)]).heat(), 8 * MIB, "read in its first tick");
        assert_eq!(run(50, &[(49, 8 * MIB)]).heat(), 8 * MIB / 50, "read once, long after");
    }

    #[test]
    fn a_weight_read_at_load_then_once_per_token_comes_to_its_token_rate() {
        // Loaded (read by its copy) at tick 0, read by a prefill at tick 100, then by a
        // token every 3 ticks: within a few tokens its heat is near a third of its bytes.
        let mut reads = vec![(0, 90 * MIB), (100, 90 * MIB)];
        reads.extend((1..=6).map(|token| (100 + 3 * token, 90 * MIB)));
        let heat = run(119, &reads).heat();
        assert!(heat > 90 * MIB / 3 * 3 / 4 && heat <= 90 * MIB / 3, "{} MiB a tick", heat / MIB);
    }
}
