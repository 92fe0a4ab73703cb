//! Puts the git commit of the build into `baton --version` ("unknown"
//! when built outside a git checkout, e.g. from a source archive).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let suffix = if dirty { "-modified" } else { "" };
    println!("cargo:rustc-env=BATON_GIT_COMMIT={commit}{suffix}");
    // Built again when HEAD moves (a commit, a checkout); only files that
    // exist are named, since a missing one would rebuild every time.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let mut watch = vec![format!("{dir}/HEAD"), format!("{dir}/index")];
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(format!("{dir}/{reference}"));
        }
        for path in watch {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}
