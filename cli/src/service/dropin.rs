//! The drop-in `service enable` writes: the shim preloaded into this service alone, the
//! policy as environment, the greenboost group (for /dev/greenboost) and no memlock
//! limit (the module charges T2 to it).

/// `Environment="NAME=value"`, quoted as systemd reads it: backslash and double quote
/// escaped, `%` doubled (systemd expands `%` specifiers there).
fn environment(name: &str, value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%");
    format!("Environment=\"{name}={escaped}\"")
}

/// The file's text for `unit`, preloading `preload` with `settings` (variable, value).
pub fn render(unit: &str, preload: &str, settings: &[(&str, String)]) -> String {
    let mut lines = vec![
        format!("# GreenBoost for {unit}: written by `greenboost service enable`, removed by"),
        format!("# `greenboost service disable {unit}`. It applies to this service alone: nothing"),
        "# else on the system loads the shim.".to_owned(),
        format!("# After editing: sudo systemctl daemon-reload && sudo systemctl restart {unit}"),
        "[Service]".to_owned(),
        "# The shim first, then what the service preloaded already.".to_owned(),
        environment("LD_PRELOAD", preload),
    ];
    if !settings.is_empty() {
        lines.push("# The policy: `greenboost run --help` lists every setting with its variable.".to_owned());
        lines.extend(settings.iter().map(|(name, value)| environment(name, value)));
    }
    lines.extend([
        "# /dev/greenboost is group greenboost, mode 0660 (the udev rule).".to_owned(),
        "SupplementaryGroups=greenboost".to_owned(),
        "# The module charges T2 to the locked-memory limit.".to_owned(),
        "LimitMEMLOCK=infinity".to_owned(),
    ]);
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_as_systemd_reads_them() {
        assert_eq!(
            environment("LD_PRELOAD", r#"/opt/50% "x"\lib.so"#),
            r#"Environment="LD_PRELOAD=/opt/50%% \"x\"\\lib.so""#
        );
        let text =
            render("ollama.service", "/usr/local/lib/libgreenboost_cuda.so", &[("GREENBOOST_LOG", "info".into())]);
        let settings: Vec<&str> = text.lines().filter(|line| !line.starts_with('#')).collect();
        assert_eq!(
            settings,
            [
                "[Service]",
                r#"Environment="LD_PRELOAD=/usr/local/lib/libgreenboost_cuda.so""#,
                r#"Environment="GREENBOOST_LOG=info""#,
                "SupplementaryGroups=greenboost",
                "LimitMEMLOCK=infinity",
            ]
        );
    }
}
