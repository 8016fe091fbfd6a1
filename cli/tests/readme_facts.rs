//! What README.md says that other files decide: the Rust version it asks for (the
//! shim's rust-version), the packages it says the installer installs (install.sh's
//! list), and every relative link of README.md and bench/README.md, to a file that
//! exists and a heading it has.

use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(relative: &str) -> String {
    let path = repository().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text under `## heading`, to the next `## `.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text.find(&format!("\n## {heading}\n")).unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &text[start + 1..];
    rest[3..].find("\n## ").map_or(rest, |end| &rest[..end + 3])
}

#[test]
fn requirements_name_the_rust_version_and_the_packages_installed() {
    let readme = read("README.md");
    let requirements = section(&readme, "Requirements");
    let manifest = read("shim/Cargo.toml");
    let version = manifest.lines().find_map(|line| line.strip_prefix("rust-version = ")).unwrap().trim_matches('"');
    assert!(requirements.contains(&format!("**Rust {version} or later**")), "{requirements}");

    let install = read("scripts/install.sh");
    let list = install.split_once("kmod_packages=(").unwrap().1.split_once(')').unwrap().0;
    let words = requirements.replace(['`', '\n'], " ");
    for package in list.split_whitespace().chain(["dkms", "linux-headers-$(uname", "linux-source-X.Y"]) {
        assert!(words.split_whitespace().any(|word| word == package), "README's Requirements omit {package}");
    }
    assert!(requirements.contains("`make uninstall` keeps these packages"), "{requirements}");
}

/// GitHub's anchor of a heading: lower case, spaces to hyphens, other punctuation gone.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> Vec<String> {
    markdown.lines().filter_map(|line| line.strip_prefix('#')).map(|h| anchor(h.trim_start_matches('#'))).collect()
}

/// `(target)` of every `[text](target)` that is not a URL.
fn relative_links(markdown: &str) -> Vec<String> {
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target.to_owned()))
        .filter(|target| !target.contains("://"))
        .collect()
}

#[test]
fn every_relative_link_leads_to_a_file_and_heading() {
    let mut broken = Vec::new();
    for page in ["README.md", "bench/README.md"] {
        let text = read(page);
        let dir = Path::new(page).parent().unwrap();
        for link in relative_links(&text) {
            let (file, fragment) = link.split_once('#').map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() { page.to_owned() } else { dir.join(file).to_string_lossy().into_owned() };
            if !repository().join(&target).exists() {
                broken.push(format!("{page}: {link}: no {target}"));
            } else if let Some(fragment) = fragment {
                if !anchors(&read(&target)).iter().any(|a| a == fragment) {
                    broken.push(format!("{page}: {link}: {target} has no heading #{fragment}"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn the_link_check_catches_what_it_is_for() {
    assert_eq!(anchor(" The 2026-12-04 run explained (commit 273326e)"), "the-2026-12-04-run-explained-commit-273326e");
    assert_eq!(relative_links("[a](x.md#y) [b](https://e.org) [c](#z)"), ["x.md#y", "#z"]);
}
