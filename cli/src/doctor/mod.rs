//! `greenboost doctor`: everything GreenBoost needs on this machine, each finding with
//! the command that fixes it. The checks, by concern: `kernel` (can the module be built
//! for the running kernel), `module` (is it installed, loaded and open to you),
//! `system` (memlock, the shim, /etc/ld.so.preload), `swap` (T3's swap areas and their
//! disks) and `gpu` (driver, NVML, HMM, PCIe).

mod gpu;
mod kernel;
mod module;
mod probe;
mod swap;
mod system;

use std::process::ExitCode;

use crate::paths::SystemPaths;
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Info,
    Warn,
    Fail,
}

impl Level {
    /// The JSON's word: lower case, as every other value of the JSON.
    fn name(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }

    /// The text's tag: failures stand out in capitals.
    fn tag(self) -> String {
        match self {
            Level::Fail => self.name().to_ascii_uppercase(),
            _ => self.name().to_owned(),
        }
    }
}

struct Finding {
    area: &'static str,
    level: Level,
    what: String,
    fix: Option<String>,
}

#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, area: &'static str, level: Level, what: impl Into<String>, fix: Option<String>) {
        self.0.push(Finding { area, level, what: what.into(), fix });
    }

    fn worst(&self) -> Level {
        self.0.iter().map(|f| f.level).max().unwrap_or(Level::Ok)
    }

    fn count(&self, level: Level) -> usize {
        self.0.iter().filter(|f| f.level == level).count()
    }
}

fn print_json(release: &str, findings: &Findings) {
    let items: Vec<Value> = findings
        .0
        .iter()
        .map(|f| json!({"area": f.area, "level": f.level.name(), "finding": f.what, "fix": f.fix}))
        .collect();
    let report = json!({"kernel": release, "ok": findings.worst() != Level::Fail, "findings": items});
    println!("{report:#}");
}

fn print_text(release: &str, findings: &Findings) {
    println!("GreenBoost doctor, kernel {release}\n");
    for f in &findings.0 {
        println!("[{:>4}] {:<7} {}", f.level.tag(), f.area, f.what);
        if let Some(fix) = &f.fix {
            println!("{:15}fix: {fix}", "");
        }
    }
    let (failures, warnings) = (findings.count(Level::Fail), findings.count(Level::Warn));
    println!("\n{failures} problem(s), {warnings} warning(s).");
}

pub fn doctor(json: bool) -> ExitCode {
    let paths = SystemPaths::from_env();
    let release = paths.kernel_release().unwrap_or_else(|| "unknown".into());
    let mut findings = Findings::default();
    kernel::check(&mut findings, &paths, &release);
    module::check(&mut findings, &paths, &release);
    system::check(&mut findings, &paths);
    swap::check(&mut findings, &paths);
    gpu::check(&mut findings, &paths);
    if json {
        print_json(&release, &findings);
    } else {
        print_text(&release, &findings);
    }
    if findings.worst() == Level::Fail {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
