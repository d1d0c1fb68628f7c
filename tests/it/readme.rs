//! The README's examples work as written: its `sh` blocks run in a shell
//! with `cellar` on the PATH, its `sql` blocks one after another through
//! `cellar sql -f`, each on a fresh data directory.

use std::process::Command;

/// The fenced blocks of `lang` in the README, in order.
fn blocks(lang: &str) -> Vec<String> {
    let readme = include_str!("../../README.md");
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in readme.lines() {
        match &mut cur {
            None if line.trim_end() == format!("```{lang}") => cur = Some(String::new()),
            Some(b) if line.starts_with("```") => {
                out.push(std::mem::take(b));
                cur = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn the_readme_shell_examples_run() {
    let sh = blocks("sh");
    assert!(!sh.is_empty(), "the README has sh examples");
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_cellar")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    for block in sh {
        let dir = tempfile::tempdir().unwrap();
        let o = Command::new("sh")
            .arg("-ec")
            .arg(&block)
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("CELLAR_DATA", dir.path().join("data"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{block}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn the_readme_sql_examples_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let sql = blocks("sql");
    assert!(sql.len() >= 2, "the README has sql examples");
    for (i, block) in sql.iter().enumerate() {
        let file = dir.path().join(format!("block{i}.sql"));
        std::fs::write(&file, block).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_cellar"))
            .arg("--data")
            .arg(dir.path().join("data"))
            .args(["sql", "-f", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{block}\nstderr: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
