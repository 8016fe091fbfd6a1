//! A systemd unit as `service` needs it: its name, checked and completed as systemctl
//! completes it, and what its manager says about it (`systemctl show`): whether it
//! exists, the LD_PRELOAD its environment has, and the EnvironmentFile=s that could
//! set one over the drop-in's.

use std::path::PathBuf;
use std::process::Command;

/// Unit types that run no program: a drop-in's `[Service]` means nothing to them.
const NOT_SERVICES: &[&str] =
    &[".socket", ".target", ".timer", ".mount", ".automount", ".swap", ".path", ".slice", ".scope", ".device"];

/// `ollama` → `ollama.service`, as systemctl reads it; refuses what is not a service's
/// name (clap reports it as a usage error).
pub fn parse_name(text: &str) -> Result<String, String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c);
    if text.is_empty() || !text.chars().all(valid) || text.starts_with('.') {
        return Err(format!("'{text}' is not a unit name (EINVAL): letters, digits and :-_.\\@ only"));
    }
    if let Some(suffix) = NOT_SERVICES.iter().find(|suffix| text.ends_with(*suffix)) {
        return Err(format!(
            "{text} is a {} unit, which runs no program: name the .service it starts (EINVAL)",
            &suffix[1..]
        ));
    }
    Ok(if text.ends_with(".service") { text.to_owned() } else { format!("{text}.service") })
}

/// What `systemctl show` says about a unit.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Shown {
    pub found: bool,
    /// The LD_PRELOAD of its environment (Environment= lines, ours included), if any.
    pub preload: Option<String>,
    pub environment_files: Vec<PathBuf>,
}

/// Asks the manager.
pub fn show(unit: &str) -> Result<Shown, String> {
    let output = Command::new("systemctl")
        .args(["show", "-p", "LoadState", "-p", "Environment", "-p", "EnvironmentFiles", "--", unit])
        .output()
        .map_err(|e| format!("cannot run systemctl: {e} (the drop-in is for systemd services)"))?;
    if !output.status.success() {
        return Err(format!("`systemctl show {unit}` failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(parse_show(&String::from_utf8_lossy(&output.stdout)))
}

fn parse_show(text: &str) -> Shown {
    let mut shown = Shown::default();
    for line in text.lines() {
        let Some((property, value)) = line.split_once('=') else { continue };
        match property {
            "LoadState" => shown.found = value != "not-found",
            "Environment" => {
                let preload =
                    split_words(value).into_iter().find_map(|word| word.strip_prefix("LD_PRELOAD=").map(str::to_owned));
                shown.preload = preload.or(shown.preload);
            }
            // `/etc/default/ollama (ignore_errors=no)`, one line per file.
            "EnvironmentFiles" if !value.is_empty() => {
                let path = value.rsplit_once(" (ignore_errors=").map_or(value, |(path, _)| path);
                shown.environment_files.push(PathBuf::from(path));
            }
            _ => {}
        }
    }
    shown
}

/// The words of an `Environment=` line as systemctl shows them: separated by spaces,
/// a word with spaces or quotes in double quotes with backslash escapes.
fn split_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut started) = (Vec::new(), String::new(), false, false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => word.extend(chars.next()),
            '"' => quoted = !quoted,
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
                continue;
            }
            c => word.push(c),
        }
        started = true;
    }
    if started {
        words.push(word);
    }
    words
}

/// Whether an environment file's text sets LD_PRELOAD (`LD_PRELOAD=` or `export
/// LD_PRELOAD=`, as systemd reads such files).
pub fn sets_preload(text: &str) -> bool {
    text.lines()
        .map(str::trim_start)
        .any(|line| line.trim_start_matches("export ").trim_start().starts_with("LD_PRELOAD="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_completed_and_checked_as_systemctl_does() {
        assert_eq!(parse_name("ollama"), Ok("ollama.service".into()));
        assert_eq!(parse_name("vllm@gpu0.service"), Ok("vllm@gpu0.service".into()));
        assert!(parse_name("ollama.socket").unwrap_err().contains("is a socket unit, which runs no program"));
        for bad in ["", "../etc/passwd", "a b", ".service"] {
            assert!(parse_name(bad).unwrap_err().contains("is not a unit name (EINVAL)"), "{bad}");
        }
    }

    #[test]
    fn show_gives_the_preload_and_the_environment_files() {
        let shown = parse_show(
            "LoadState=loaded\nEnvironment=OLLAMA_HOST=0.0.0.0 \"LD_PRELOAD=/opt/a b/libx.so /opt/liby.so\" K=\\\"v\\\"\nEnvironmentFiles=/etc/default/ollama (ignore_errors=no)\nEnvironmentFiles=/etc/ollama/extra env (ignore_errors=yes)\n",
        );
        assert_eq!(
            shown,
            Shown {
                found: true,
                preload: Some("/opt/a b/libx.so /opt/liby.so".into()),
                environment_files: vec!["/etc/default/ollama".into(), "/etc/ollama/extra env".into()],
            }
        );
        assert_eq!(split_words("K=\\\"v\\\" A=1"), ["K=\"v\"", "A=1"]);
        assert_eq!(parse_show("LoadState=not-found\nEnvironment=\nEnvironmentFiles=\n"), Shown::default());
    }

    #[test]
    fn environment_files_setting_the_preload_are_found() {
        assert!(sets_preload("# comment\nexport LD_PRELOAD=/x.so\n"));
        assert!(sets_preload("  LD_PRELOAD=/x.so"));
        assert!(!sets_preload("OLLAMA_LD_PRELOAD=1\n# LD_PRELOAD=/x.so\n"));
    }
}
