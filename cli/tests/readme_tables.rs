//! The READMEs' settings tables agree with `greenboost_policy::SETTINGS` (here, so
//! that `make cli-test`, which CI runs, runs it): every setting has a row in
//! shim/README.md's "Environment" table with its variable, its default and (for a
//! choice) its words, and a row in README.md's "Configuration" table with its variable,
//! its `greenboost run` flag and its default; neither table has a row for a variable
//! the table does not define.

use std::path::Path;

use greenboost_policy::{Kind, Setting, SETTINGS};

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The body rows of the first table after the line `heading`, as cells with the
/// Markdown code marks removed (`\|` is a `|` inside a cell).
fn table_after(text: &str, heading: &str) -> Option<Vec<Vec<String>>> {
    let mut lines = text.lines().skip_while(|line| line.trim() != heading).skip(1);
    let rows: Vec<Vec<String>> = lines
        .by_ref()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let line = line.trim().trim_start_matches('|').trim_end_matches('|').replace("\\|", "\u{0}");
            line.split('|').map(|cell| cell.replace('\u{0}', "|").replace('`', "").trim().to_owned()).collect()
        })
        .collect();
    // The header row and the |---| row.
    (rows.len() > 2).then(|| rows[2..].to_vec())
}

/// What is wrong with the two READMEs, one sentence per problem.
fn problems(shim_readme: &str, readme: &str) -> Vec<String> {
    let mut problems = Vec::new();
    match table_after(shim_readme, "## Environment") {
        Some(rows) => check_environment_table(&rows, &mut problems),
        None => problems.push("shim/README.md has no table under \"## Environment\"".into()),
    }
    match table_after(readme, "## Configuration") {
        Some(rows) => check_configuration_table(&rows, &mut problems),
        None => problems.push("README.md has no table under \"## Configuration\"".into()),
    }
    problems
}

/// shim/README.md: | Variable | Values | Default | Meaning |
fn check_environment_table(rows: &[Vec<String>], problems: &mut Vec<String>) {
    for setting in SETTINGS {
        let Some(row) = rows.iter().find(|row| row[0] == setting.env) else {
            problems.push(format!("shim/README.md's Environment table has no row for {}", setting.env));
            continue;
        };
        if row.len() != 4 {
            problems.push(format!("shim/README.md: the {} row has {} cells, not 4", setting.env, row.len()));
            continue;
        }
        if row[2] != setting.default {
            problems.push(format!(
                "shim/README.md: {} default is \"{}\", the policy table says \"{}\"",
                setting.env, row[2], setting.default
            ));
        }
        if let Kind::Choice(names) = setting.kind {
            for name in names.iter().filter(|name| !row[1].contains(*name)) {
                problems.push(format!("shim/README.md: the values of {} do not list {name}", setting.env));
            }
        }
    }
    for row in rows.iter().filter(|row| !SETTINGS.iter().any(|s| s.env == row[0])) {
        problems.push(format!(
            "shim/README.md's Environment table has a row for {}, which policy/ does not define",
            row[0]
        ));
    }
}

/// What README.md's first cell says for a setting: `GREENBOOST_X` (`--flag`).
fn configuration_name(setting: &Setting) -> String {
    match setting.flag {
        Some(flag) => format!("{} (--{flag})", setting.env),
        None => setting.env.to_owned(),
    }
}

/// README.md: | variable (flag) | default | meaning |
fn check_configuration_table(rows: &[Vec<String>], problems: &mut Vec<String>) {
    let variable = |row: &Vec<String>| row[0].split_whitespace().next().unwrap_or("").to_owned();
    for setting in SETTINGS {
        let Some(row) = rows.iter().find(|row| variable(row) == setting.env) else {
            problems.push(format!("README.md's Configuration table has no row for {}", setting.env));
            continue;
        };
        if row[0] != configuration_name(setting) {
            problems.push(format!("README.md: \"{}\" should read \"{}\"", row[0], configuration_name(setting)));
        }
        if row.get(1).map(String::as_str) != Some(setting.default) {
            problems.push(format!(
                "README.md: {} default is {:?}, the policy table says \"{}\"",
                setting.env,
                row.get(1),
                setting.default
            ));
        }
    }
    for row in rows.iter().filter(|row| !SETTINGS.iter().any(|s| s.env == variable(row))) {
        problems
            .push(format!("README.md's Configuration table has a row for {}, which policy/ does not define", row[0]));
    }
}

#[test]
fn readme_tables_match_the_policy_table() {
    let problems = problems(&read("shim/README.md"), &read("README.md"));
    assert!(problems.is_empty(), "the READMEs disagree with policy/src/settings.rs:\n{}", problems.join("\n"));
}

/// The check itself: a missing row, a wrong default, a missing flag and a stale row are
/// each reported.
#[test]
fn the_check_catches_what_it_is_for() {
    let (shim_readme, readme) = (read("shim/README.md"), read("README.md"));
    let without = |text: &str, needle: &str| -> String {
        text.lines().filter(|line| !line.contains(needle)).collect::<Vec<_>>().join("\n")
    };
    let missing = problems(&without(&shim_readme, "| `GREENBOOST_VRAM_HEADROOM` |"), &readme);
    assert_eq!(missing, ["shim/README.md's Environment table has no row for GREENBOOST_VRAM_HEADROOM"]);

    let missing = problems(&shim_readme, &without(&readme, "| `GREENBOOST_HOST_RESERVE` "));
    assert_eq!(missing, ["README.md's Configuration table has no row for GREENBOOST_HOST_RESERVE"]);

    let no_flag = readme.replace("`GREENBOOST_T2_CAP` (`--t2-cap`)", "`GREENBOOST_T2_CAP`");
    assert_eq!(
        problems(&shim_readme, &no_flag),
        ["README.md: \"GREENBOOST_T2_CAP\" should read \"GREENBOOST_T2_CAP (--t2-cap)\""]
    );

    let wrong_default =
        shim_readme.replace("| `GREENBOOST_MIN_T2_SIZE` | size | 2M |", "| `GREENBOOST_MIN_T2_SIZE` | size | 4M |");
    assert_eq!(
        problems(&wrong_default, &readme),
        ["shim/README.md: GREENBOOST_MIN_T2_SIZE default is \"4M\", the policy table says \"2M\""]
    );

    let stale = shim_readme
        .replace("| `GREENBOOST_DISABLE` |", "| `GREENBOOST_OLD` | size | 1G | gone |\n| `GREENBOOST_DISABLE` |");
    assert_eq!(
        problems(&stale, &readme),
        ["shim/README.md's Environment table has a row for GREENBOOST_OLD, which policy/ does not define"]
    );
}
