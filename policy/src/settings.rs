//! The table of every setting: its variable, its `greenboost run` flag, the kind of
//! value it takes, its default as users read it, and one line of help. The shim reads
//! the variables, the CLI builds its flags from this table, and a test checks the
//! README tables against it.

use crate::choice::{BackendChoice, LogLevel, ReportMode, TieringChoice, SWITCH_NAMES};

/// Most of the budget the default VRAM reserve takes: the reserve is one eighth of the
/// budget, at most this (see `default_vram_reserve`).
pub const DEFAULT_VRAM_RESERVE: u64 = 512 << 20;
/// VRAM kept free on each device for what the shim does not see (other processes, the
/// driver's lazy module loads, library handles and workspaces). Provisional: to be set
/// from measurements.
pub const DEFAULT_VRAM_HEADROOM: u64 = 1 << 30;
/// Allocations smaller than this always go to VRAM.
pub const DEFAULT_MIN_T2_SIZE: u64 = 2 << 20;
/// Freed T2 memory kept registered for reuse: enough for a few large buffers to be
/// freed and allocated again without mapping and registering them anew.
pub const DEFAULT_T2_CACHE: u64 = 1 << 30;
/// Allocations at least this large that the budget sends to T2 are split.
pub const DEFAULT_SPLIT_MIN: u64 = 256 << 20;
/// GEMM operand staging is on unless turned off.
pub const DEFAULT_STAGING: bool = true;
/// Every product: wide ones re-read each T2 tile once per output tile, and even a
/// one-token product (decode) ran 5% faster on the H200 from a copy than zero-copy
/// (8B shape, 8.3 GB of weights in T2: 175.7 vs 184.3 ms per token, same run): the copy
/// engine streams PCIe better than the product's own loads.
pub const DEFAULT_STAGE_MIN_WIDTH: u64 = 1;
/// Largest VRAM scratch buffer staging may hold per context.
pub const DEFAULT_STAGE_MAX: u64 = 256 << 20;
/// A staged operand is copied whole, then multiplied. Slices (the copy of slice i + 1
/// beside the product of slice i, each with the whole product's cuBLASLt algorithm) are
/// bit-identical and pay where products compute long (H200: 8192-token products 0.73 of
/// the time, bench/results/lt-algo-probe-2026-12-03.md) but little for a 512-token prefill
/// (0.98), and the first product of every new shape is verified synchronously: a server
/// whose prompts change length would pay that on each new length. Asked for, they are on.
pub const DEFAULT_STAGE_SLICES: u64 = 1;
/// Look-ahead staging is off until the H200 measures it (`GREENBOOST_STAGE_LOOKAHEAD`).
pub const DEFAULT_STAGE_LOOKAHEAD: bool = false;
/// The most slices a staged operand is copied in (GREENBOOST_STAGE_SLICES above it is
/// clamped to it).
pub const MAX_STAGE_SLICES: u64 = 8;
/// Live tiering demotes movable allocations when others need the VRAM.
pub const DEFAULT_DEMOTE: bool = true;
/// Live tiering does not give back the VRAM the driver keeps after moving managed pages
/// out: for the moment of a give-back all free VRAM is taken, and another process
/// allocating then failed 4 times in 36006 (bench/results/give-back-probe-2026-12-05.md).
pub const DEFAULT_GIVE_BACK: bool = false;
/// How often live tiering looks at the device, in milliseconds.
pub const DEFAULT_TIER_INTERVAL_MS: u64 = 100;
/// The rate the GPU reads host memory over its link, in GB/s: PCIe Gen5 x16 read
/// zero-copy at 51-55 GB/s on the H200. A slower link set here lets sampled kernel times
/// tell a kernel that reads a little of what it names from one that reads all of it; left
/// at this, every kernel on a slower link looks like one that reads all of it.
pub const DEFAULT_LINK_GBPS: u64 = 55;
/// Bounds of the default host reserve (the kernel module's `reserve_mb` default).
pub const HOST_RESERVE_MIN: u64 = 64 << 20;
pub const HOST_RESERVE_MAX: u64 = 1 << 30;

/// The VRAM reserve when GREENBOOST_VRAM_RESERVE is not set: one eighth of the budget,
/// at most `DEFAULT_VRAM_RESERVE`.
pub const fn default_vram_reserve(budget: u64) -> u64 {
    let eighth = budget / 8;
    if eighth < DEFAULT_VRAM_RESERVE {
        eighth
    } else {
        DEFAULT_VRAM_RESERVE
    }
}

/// The headroom when GREENBOOST_VRAM_HEADROOM is not set, on a GPU of `device` bytes:
/// `DEFAULT_VRAM_HEADROOM`, at most an eighth of the GPU (a small card keeps most of its
/// memory for the program).
pub const fn default_vram_headroom(device: u64) -> u64 {
    let eighth = device / 8;
    if eighth < DEFAULT_VRAM_HEADROOM {
        eighth
    } else {
        DEFAULT_VRAM_HEADROOM
    }
}

/// The host reserve when GREENBOOST_HOST_RESERVE is not set, for `ram` bytes of system
/// RAM: 1/32 of it, from `HOST_RESERVE_MIN` to `HOST_RESERVE_MAX`, as the module's
/// `reserve_mb` default.
pub const fn default_host_reserve(ram: u64) -> u64 {
    let share = ram / 32;
    if share < HOST_RESERVE_MIN {
        HOST_RESERVE_MIN
    } else if share > HOST_RESERVE_MAX {
        HOST_RESERVE_MAX
    } else {
        share
    }
}

/// The kind of value a setting takes, which names its parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `parse_size`.
    Size,
    /// `PerDevice::parse`: one size, or `ordinal:size` items.
    PerDeviceSize,
    /// `SizeOrOff::parse`: a size, or `off` (0 is off too).
    SizeOrOff,
    /// One of these words (the canonical names of a choice enum's `parse`).
    Choice(&'static [&'static str]),
    /// `parse_switch`. A switch's CLI flag sets the opposite of its default
    /// (`--no-staging` sets GREENBOOST_STAGING=off).
    Switch,
    /// `parse_count`: a plain number.
    Count,
}

/// Names every setting; `id.setting()` is its row of `SETTINGS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    VramBudget,
    VramReserve,
    VramHeadroom,
    MinT2Size,
    T2Cap,
    T2Cache,
    HostReserve,
    SplitMin,
    Staging,
    StageMinWidth,
    StageMax,
    StageSlices,
    StageLookahead,
    Tiering,
    Demote,
    GiveBack,
    TierInterval,
    LinkGbps,
    Report,
    Backend,
    Log,
    Disable,
}

/// The values of a count the shim uses: one outside is clamped to the nearer end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    pub min: u64,
    pub max: u64,
}

impl Bounds {
    /// The value the shim uses for `value`.
    pub const fn clamp(self, value: u64) -> u64 {
        if value < self.min {
            self.min
        } else if value > self.max {
            self.max
        } else {
            value
        }
    }
}

/// One setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub id: Id,
    /// The environment variable the shim reads.
    pub env: &'static str,
    /// The `greenboost run`/`demo` flag, without `--`; `None`: no flag.
    pub flag: Option<&'static str>,
    pub kind: Kind,
    /// What applies when the variable is unset, as the READMEs and `--help` show it.
    pub default: &'static str,
    /// One line of help (no variable name, no default: those are shown beside it). A
    /// switch's is a noun phrase, as its flag's help reads "Turn off <help>".
    pub help: &'static str,
    /// For a count the shim clamps: the values it uses.
    pub bounds: Option<Bounds>,
}

impl Id {
    /// This setting's row of `SETTINGS`.
    pub const fn setting(self) -> &'static Setting {
        &TABLE[self as usize]
    }

    /// The environment variable.
    pub const fn env(self) -> &'static str {
        self.setting().env
    }
}

/// Every setting, in the order of the READMEs' tables.
pub static SETTINGS: &[Setting] = &TABLE;

/// The setting read from variable `env`.
pub fn by_env(env: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|setting| setting.env == env)
}

/// The setting behind `greenboost run --flag` (`flag` without `--`).
pub fn by_flag(flag: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|setting| setting.flag == Some(flag))
}

const fn row(
    id: Id,
    env: &'static str,
    flag: Option<&'static str>,
    kind: Kind,
    default: &'static str,
    help: &'static str,
) -> Setting {
    Setting { id, env, flag, kind, default, help, bounds: None }
}

impl Setting {
    /// This setting, with the values the shim clamps it to.
    const fn bounded(self, min: u64, max: u64) -> Setting {
        Setting { bounds: Some(Bounds { min, max }), ..self }
    }
}

const TABLE: [Setting; 22] = [
    row(
        Id::VramBudget,
        "GREENBOOST_VRAM_BUDGET",
        Some("vram-budget"),
        Kind::PerDeviceSize,
        "physical VRAM",
        "VRAM the program may use per GPU before allocations go to T2: 8G for every GPU, or 0:20G,1:8G by device ordinal",
    ),
    row(
        Id::VramReserve,
        "GREENBOOST_VRAM_RESERVE",
        Some("vram-reserve"),
        Kind::Size,
        "budget/8, at most 512M",
        "VRAM kept free under the budget while the program loads, for its workspace and activations",
    ),
    row(
        Id::VramHeadroom,
        "GREENBOOST_VRAM_HEADROOM",
        Some("vram-headroom"),
        Kind::PerDeviceSize,
        "1G, at most 1/8 of the GPU",
        "VRAM kept free on the GPU for what the shim does not see (other processes, the driver's lazy module loads, library handles and workspaces): one size, or 0:2G,1:1G by device ordinal",
    ),
    row(
        Id::MinT2Size,
        "GREENBOOST_MIN_T2_SIZE",
        Some("min-t2-size"),
        Kind::Size,
        "2M",
        "Allocations smaller than this always stay in VRAM",
    ),
    row(
        Id::T2Cap,
        "GREENBOOST_T2_CAP",
        Some("t2-cap"),
        Kind::Size,
        "module: its pool_cap_mb; userspace: 3/4 of RAM",
        "Most pinned system RAM (T2) the program may use at once",
    ),
    row(
        Id::T2Cache,
        "GREENBOOST_T2_CACHE",
        Some("t2-cache"),
        Kind::Size,
        "1G",
        "Freed T2 memory kept registered for reuse by a later allocation of the same size; 0: none",
    ),
    row(
        Id::HostReserve,
        "GREENBOOST_HOST_RESERVE",
        Some("host-reserve"),
        Kind::Size,
        "1/32 of RAM, 64M to 1G",
        "System RAM kept available on the host, summed over every process: by the userspace T2 backend, and by host memory the driver allocates for the shim (movable T2, split tails, moves out of VRAM)",
    ),
    row(
        Id::SplitMin,
        "GREENBOOST_SPLIT_MIN",
        Some("split-min"),
        Kind::SizeOrOff,
        "256M",
        "Split allocations at least this large between VRAM and T2; off or 0: never",
    ),
    row(
        Id::Staging,
        "GREENBOOST_STAGING",
        Some("no-staging"),
        Kind::Switch,
        "on",
        "GEMM operand staging, where matrix products read their T2 operands from a VRAM copy",
    ),
    row(
        Id::StageMinWidth,
        "GREENBOOST_STAGE_MIN_WIDTH",
        Some("stage-min-width"),
        Kind::Count,
        "1",
        "Stage a product's T2 operand when the dimension re-reading it is at least this",
    )
    .bounded(1, u64::MAX),
    row(
        Id::StageMax,
        "GREENBOOST_STAGE_MAX",
        Some("stage-max"),
        Kind::Size,
        "256M",
        "Largest VRAM scratch buffer for staged operands, counted against the budget; a larger operand is streamed through two halves of the scratch (grown to 2 x 64 MiB at most for it) where its shape computes bit-identically in slices, else read zero-copy",
    ),
    row(
        Id::StageSlices,
        "GREENBOOST_STAGE_SLICES",
        Some("stage-slices"),
        Kind::Count,
        "1",
        "Copy a staged operand of a product at least 128 wide in up to this many slices (at most 8) and compute each slice as it lands, with the whole product's cuBLASLt algorithm (1: one copy, then the product); a shape is sliced only once its sliced result was bit-identical to the whole product's",
    )
    .bounded(1, MAX_STAGE_SLICES),
    row(
        Id::StageLookahead,
        "GREENBOOST_STAGE_LOOKAHEAD",
        Some("stage-lookahead"),
        Kind::Switch,
        "off",
        "look-ahead staging, where the T2 operand of the product that came next last time is copied into VRAM while the current product runs, and used only if nothing named its memory since",
    ),
    row(
        Id::Tiering,
        "GREENBOOST_TIERING",
        Some("tiering"),
        Kind::Choice(TieringChoice::NAMES),
        TieringChoice::DEFAULT.name(),
        "Live tiering, where allocations move between T2 and VRAM while the program runs, at the same address: auto (T2 allocations the GPU's other users sent to T2; on a GPU others use, or once the program needs more than its budget, its working memory and VRAM too, a weight pool the budget holds half of in 2 MiB parts, so that what it reads most takes the place of what it reads least), on (every allocation) or off (also what CUDA IPC between processes needs on a shared GPU or past the budget)",
    ),
    row(
        Id::Demote,
        "GREENBOOST_DEMOTE",
        Some("no-demote"),
        Kind::Switch,
        "on",
        "demotion, where live tiering gives VRAM back (coldest allocations first) when free VRAM falls below the headroom; off: what moved to VRAM stays there",
    ),
    row(
        Id::GiveBack,
        "GREENBOOST_GIVE_BACK",
        Some("give-back"),
        Kind::Switch,
        "off",
        "after live tiering moves memory out of VRAM where the GPU is short, turn the VRAM the driver keeps of it into free VRAM others see (one allocation of all free VRAM and that much more, freed at once: for 50-200 ms another process's allocation may fail); off: the driver keeps it until someone allocates",
    ),
    row(
        Id::TierInterval,
        "GREENBOOST_TIER_INTERVAL_MS",
        Some("tier-interval-ms"),
        Kind::Count,
        "100",
        "How often live tiering looks at free VRAM, in milliseconds",
    )
    .bounded(1, u64::MAX),
    row(
        Id::LinkGbps,
        "GREENBOOST_LINK_GBPS",
        Some("link-gbps"),
        Kind::Count,
        "55",
        "The rate in GB/s at which the GPU reads host memory over its link (PCIe Gen5 x16: about 55, Gen4: 25, Gen3: 12); live tiering weighs a kernel by how long it ran against this, to tell one that reads a little of what it names from one that reads all of it",
    )
    .bounded(1, 10_000),
    row(
        Id::Report,
        "GREENBOOST_REPORT",
        Some("report"),
        Kind::Choice(ReportMode::NAMES),
        ReportMode::DEFAULT.name(),
        "Capacity the program is told about: physical VRAM, or combined VRAM + T2",
    ),
    row(
        Id::Backend,
        "GREENBOOST_BACKEND",
        Some("backend"),
        Kind::Choice(BackendChoice::NAMES),
        BackendChoice::DEFAULT.name(),
        "Where T2 memory comes from: the module, userspace memory, or auto (the module when usable)",
    ),
    row(
        Id::Log,
        "GREENBOOST_LOG",
        Some("log"),
        Kind::Choice(LogLevel::NAMES),
        LogLevel::DEFAULT.name(),
        "Shim log level on stderr; info adds the backend choice and a peak-T1/T2 summary at exit",
    ),
    row(
        Id::Disable,
        "GREENBOOST_DISABLE",
        None,
        Kind::Switch,
        "0",
        "1: every hook passes straight to the real function",
    ),
];

// Every `Id` indexes its own row, and the names are unique.
const _: () = {
    let mut i = 0;
    while i < TABLE.len() {
        assert!(TABLE[i].id as usize == i);
        i += 1;
    }
    assert!(TABLE.len() == Id::Disable as usize + 1);
    let _ = SWITCH_NAMES;
};

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
