//! How much of what a timed kernel named it can have read: the read share one sample
//! gives (`launch::kernel_times` keeps it per kernel function): a pure function.
//!
//! A kernel that read a fraction `s` of the bytes it named took at least `s` times the
//! longer of the two reads it would make if it read them all: its T2 bytes at the link's
//! rate and its VRAM bytes at the device memory's peak rate. Its time over that bounds
//! `s` from above. Over T2 the bound is tight for a kernel bound by its reads (llama.cpp's
//! mixture-of-experts product given a layer's whole expert tensor reads the few experts
//! a token routes to). Over VRAM it says something only when it falls below 1: a short
//! kernel named a large range (a decode step's attention given a layer's whole KV cache,
//! a kernel given a tensor inside one of PyTorch's cached segments) and read little of
//! it. A kernel over VRAM that took as long as reading everything is as likely bound by
//! its arithmetic, so that sample says nothing, where over T2 it says "reads all".

/// What a sample was launched over, and how long it took.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub seconds: f64,
    /// Bytes it named, and of them those in T2 as it was launched.
    pub named: u64,
    pub t2: u64,
}

/// The rates its reads could go at, bytes per second: the link's best, and the device
/// memory's peak (`None` when the driver does not say).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    pub link: u64,
    pub vram: Option<u64>,
}

/// The share of what `sample` named that its kernel read at most, in (0, 1]; `None` when
/// the sample says nothing of it (no time, nothing named, a kernel over VRAM that took as
/// long as reading everything, or over VRAM with no rate known for it).
pub fn bound(sample: Sample, rates: Rates) -> Option<f64> {
    let t2 = sample.t2.min(sample.named);
    let vram = sample.named - t2;
    if sample.seconds <= 0.0 || sample.named == 0 {
        return None;
    }
    let over_link = t2 as f64 / rates.link.max(1) as f64;
    let over_vram = match rates.vram {
        Some(rate) => vram as f64 / rate.max(1) as f64,
        None if vram > t2 => return None,
        None => 0.0,
    };
    let share = (sample.seconds / over_link.max(over_vram)).min(1.0);
    let mostly_t2 = t2.saturating_mul(2) >= sample.named;
    (mostly_t2 || share < 1.0).then_some(share)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;
    const RATES: Rates = Rates { link: 50 * GB, vram: Some(3_000 * GB) };

    fn sample(seconds: f64, named: u64, t2: u64) -> Sample {
        Sample { seconds, named, t2 }
    }

    #[test]
    fn over_t2_the_share_is_the_time_over_the_links_time_for_all_of_it() {
        // 1 GB over the link takes 20 ms; 2 ms read a tenth of it.
        let share = bound(sample(0.002, GB, GB), RATES).unwrap();
        assert!((share - 0.1).abs() < 1e-9, "{share}");
        assert_eq!(bound(sample(0.5, GB, GB), RATES), Some(1.0), "longer than reading it all: reads all");
    }

    #[test]
    fn over_vram_a_short_kernel_read_a_part_and_a_long_one_says_nothing() {
        // 3 GB at 3 TB/s takes 1 ms; 0.1 ms read at most a tenth of it.
        let share = bound(sample(0.0001, 3 * GB, 0), RATES).unwrap();
        assert!((share - 0.1).abs() < 1e-9, "{share}");
        assert_eq!(bound(sample(0.002, 3 * GB, 0), RATES), None, "as long as reading it all: its arithmetic, maybe");
        assert_eq!(
            bound(sample(0.0001, 3 * GB, 0), Rates { vram: None, ..RATES }),
            None,
            "no device memory rate: no bound over VRAM"
        );
    }

    #[test]
    fn a_mixed_sample_is_bounded_by_its_slower_part() {
        // 1 GB in T2 (20 ms at the link) beside 3 GB in VRAM (1 ms): the link's part
        // bounds it, as before VRAM was counted.
        let share = bound(sample(0.004, 4 * GB, GB), RATES).unwrap();
        assert!((share - 0.2).abs() < 1e-9, "{share}");
        // Mostly VRAM, little of it in T2: still the slower part, now the VRAM's.
        let share = bound(sample(0.0001, 30 * GB, GB / 100), RATES).unwrap();
        assert!((share - 0.01).abs() < 1e-3, "{share}");
        // Without a VRAM rate, a mostly-T2 sample is timed by its T2 bytes alone.
        let share = bound(sample(0.002, 3 * GB / 2, GB), Rates { vram: None, ..RATES }).unwrap();
        assert!((share - 0.1).abs() < 1e-9, "{share}");
    }

    #[test]
    fn no_time_or_nothing_named_says_nothing() {
        assert_eq!(bound(sample(0.0, GB, GB), RATES), None);
        assert_eq!(bound(sample(0.001, 0, 0), RATES), None);
        assert_eq!(bound(sample(0.001, GB, 2 * GB), RATES).map(|s| s > 0.0), Some(true), "T2 past named: clamped");
    }
}
