//! What a chaos run is asked to do ([`Options`]: its seed, length, faults
//! and workload, the replicas' settings) and which binaries it runs
//! ([`Binaries`]).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

/// The variable that names a seed to replay.
pub const SEED_VAR: &str = "BATON_CHAOS_SEED";

/// The variable that names the directory holding `baton-orchestrator` and
/// `baton-context-store`.
pub const BIN_DIR_VAR: &str = "BATON_BIN_DIR";

/// One chaos run's settings. [`Options::short`] is the test suite's,
/// [`Options::long`] the soak's (`baton-bench chaos`).
#[derive(Debug, Clone)]
pub struct Options {
    /// Drives every choice of the nemesis and the workload.
    pub seed: u64,
    /// How long faults are injected and new runs started.
    pub duration: Duration,
    /// Whether replicas forward run-scoped calls to each other
    /// (`peers.endpoints` set to all three replicas, each one included).
    pub peers: bool,
    /// Concurrent clients.
    pub clients: usize,
    /// The pause between two faults: a random duration in this range.
    pub fault_every: (Duration, Duration),
    /// `runs.lease` of every replica.
    pub lease: Duration,
    /// `runs.park_after` of every replica.
    pub park_after: Duration,
    /// `shutdown_grace` of every replica; a SIGTERM drain must end within
    /// it (plus [`Options::drain_margin`]).
    pub shutdown_grace: Duration,
    /// What a drain may take beyond `shutdown_grace` (process exit and the
    /// last writes).
    pub drain_margin: Duration,
    /// `runs.approval_timeout`: a question nobody answered is closed by its
    /// deadline after this long (which the checker reports).
    pub approval_timeout: Duration,
    /// After the faults stop and every replica is up again, how long runs
    /// still going may take to end before they are reported.
    pub heal_wait: Duration,
    /// The deadline of one call of the checker (GetRun, a whole
    /// WatchRun(0) of an ended run, a metrics scrape).
    pub check_timeout: Duration,
    /// The binaries to run.
    pub binaries: Binaries,
    /// More of every replica's environment (`BATON_ORCH_…` settings).
    pub extra_env: Vec<(String, String)>,
}

impl Options {
    /// The test suite's run: 30 s of faults every 2–5 s on a 2 s lease,
    /// ten clients.
    pub fn short(seed: u64, peers: bool, binaries: Binaries) -> Self {
        Self {
            seed,
            duration: Duration::from_secs(30),
            peers,
            clients: 10,
            fault_every: (Duration::from_secs(2), Duration::from_secs(5)),
            lease: Duration::from_secs(2),
            park_after: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(2),
            drain_margin: Duration::from_secs(3),
            approval_timeout: Duration::from_secs(25),
            heal_wait: Duration::from_secs(20),
            check_timeout: Duration::from_secs(5),
            binaries,
            extra_env: Vec::new(),
        }
    }

    /// The soak: faults every 10–30 s, forty clients, for `duration`.
    pub fn long(seed: u64, peers: bool, duration: Duration, binaries: Binaries) -> Self {
        Self {
            duration,
            clients: 40,
            fault_every: (Duration::from_secs(10), Duration::from_secs(30)),
            approval_timeout: Duration::from_secs(60),
            heal_wait: Duration::from_secs(60),
            check_timeout: Duration::from_secs(10),
            ..Self::short(seed, peers, binaries)
        }
    }
}

/// The seed [`SEED_VAR`] names, else a fresh one (from the clock and the
/// process id).
pub fn seed_from_env() -> anyhow::Result<u64> {
    match std::env::var(SEED_VAR) {
        Ok(s) => s
            .trim()
            .parse()
            .with_context(|| format!("{SEED_VAR}={s:?} is not a number")),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or_default();
            // A short number is easier to copy from a log.
            Ok((nanos ^ u64::from(std::process::id()).rotate_left(32)) % 1_000_000_000)
        }
    }
}

/// The service binaries a chaos run starts.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `baton-orchestrator`.
    pub orchestrator: PathBuf,
    /// `baton-context-store`.
    pub context_store: PathBuf,
}

impl Binaries {
    /// `baton-orchestrator` and `baton-context-store` in `dir`; an error
    /// that says how to build them when one is missing.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Self> {
        let found = |name: &str| -> anyhow::Result<PathBuf> {
            let path = dir.join(name);
            anyhow::ensure!(
                path.is_file(),
                "{} is missing: build it first (cargo build [--release] -p {name}), or name the directory holding it with {BIN_DIR_VAR}",
                path.display()
            );
            Ok(path)
        };
        Ok(Self {
            orchestrator: found("baton-orchestrator")?,
            context_store: found("baton-context-store")?,
        })
    }

    /// The binaries in [`BIN_DIR_VAR`] when it is set.
    pub fn from_env() -> Option<anyhow::Result<Self>> {
        std::env::var_os(BIN_DIR_VAR).map(|dir| Self::in_dir(Path::new(&dir)))
    }

    /// The binaries in [`BIN_DIR_VAR`], else next to the running executable
    /// (`target/<profile>/`; a test binary in `target/<profile>/deps` looks
    /// in its parent).
    pub fn locate() -> anyhow::Result<Self> {
        if let Some(found) = Self::from_env() {
            return found;
        }
        let exe = std::env::current_exe().context("cannot find the running executable")?;
        let mut dir = exe
            .parent()
            .context("the running executable has no directory")?
            .to_path_buf();
        if dir.ends_with("deps") {
            dir.pop();
        }
        Self::in_dir(&dir)
    }
}
