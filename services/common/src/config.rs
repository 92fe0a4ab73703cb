//! One loader for every service config.
//!
//! Layers, later wins: the config struct's `Default` → a TOML file →
//! environment variables → `--set path=value` flags. Environment variables are
//! named `{prefix}{PATH}`, upper case, with `__` between nested sections:
//! `BATON_STORE_MAX_VALUE_BYTES=2048`, `BATON_STORE_LOG__FORMAT=json`. Values
//! are read as JSON when they parse as JSON (numbers, booleans, arrays) and as
//! strings otherwise; quote a string that looks like a number (`'"123"'`).
//!
//! A variable ending in `__FILE` names a file holding the value instead
//! (a Kubernetes or Docker secret mounted as a file):
//! `BATON_STORE_REDIS__URL__FILE=/var/run/secrets/baton/redis/url` sets
//! `redis.url` to the file's content, taken as a string with its trailing
//! newline removed. It wins over the plain variable of the same field.
//!
//! Every config struct uses `deny_unknown_fields`, so a typo in a file,
//! variable or flag stops the service at start with the name in the error,
//! instead of being ignored.

use std::path::Path;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML.
    #[error("config file {path} is not valid TOML: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What the parser said.
        message: String,
    },
    /// A `--set` flag is not `path=value`.
    #[error("--set {0:?} must look like path.to.field=value")]
    Flag(String),
    /// The merged layers do not form a valid config.
    #[error("invalid config ({layer}): {message}")]
    Invalid {
        /// Which layers were merged when it failed.
        layer: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// Loads a config of type `T` from its layers.
///
/// `env` is passed in (usually `std::env::vars()`) so that nothing else reads
/// the process environment and tests stay hermetic. Only variables starting
/// with `env_prefix` are read.
pub fn load<T>(
    file: Option<&Path>,
    env_prefix: &str,
    env: impl IntoIterator<Item = (String, String)>,
    sets: &[String],
) -> Result<T, ConfigError>
where
    T: Serialize + DeserializeOwned + Default,
{
    let mut merged = serde_json::to_value(T::default()).map_err(|e| ConfigError::Invalid {
        layer: "defaults",
        message: e.to_string(),
    })?;

    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let parsed: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let parsed = serde_json::to_value(parsed).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        merge(&mut merged, parsed);
    }

    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with(env_prefix) && k.len() > env_prefix.len())
        .collect();
    // Sorted, so `X__FILE` (which sorts after `X`) wins over `X`.
    env.sort();
    for (k, v) in env {
        let mut path: Vec<String> = k[env_prefix.len()..]
            .to_ascii_lowercase()
            .split("__")
            .map(str::to_owned)
            .collect();
        let value = if path.len() > 1 && path.last().is_some_and(|p| p == "file") {
            path.pop();
            let text = read_secret_file(&v).map_err(|source| ConfigError::Read {
                path: format!("{v} (from {k})"),
                source,
            })?;
            Value::String(text)
        } else {
            scalar(&v)
        };
        set_path(&mut merged, &path, value);
    }

    set_all(&mut merged, sets)?;
    serde_json::from_value(merged).map_err(|e| ConfigError::Invalid {
        layer: "defaults + file + environment + flags",
        message: e.to_string(),
    })
}

/// `config` with `--set path=value` flags applied, as [`load`] applies them.
pub fn with_sets<T>(config: &T, sets: &[String]) -> Result<T, ConfigError>
where
    T: Serialize + DeserializeOwned,
{
    let mut merged = serde_json::to_value(config).map_err(|e| ConfigError::Invalid {
        layer: "defaults",
        message: e.to_string(),
    })?;
    set_all(&mut merged, sets)?;
    serde_json::from_value(merged).map_err(|e| ConfigError::Invalid {
        layer: "flags",
        message: e.to_string(),
    })
}

fn set_all(merged: &mut Value, sets: &[String]) -> Result<(), ConfigError> {
    for s in sets {
        let (path, value) = s
            .split_once('=')
            .ok_or_else(|| ConfigError::Flag(s.clone()))?;
        if path.is_empty() {
            return Err(ConfigError::Flag(s.clone()));
        }
        let path: Vec<String> = path.split('.').map(str::to_owned).collect();
        set_path(merged, &path, scalar(value));
    }
    Ok(())
}

/// Reads a secret mounted as a file (a Kubernetes or Docker secret): its
/// content without the trailing newline.
pub fn read_secret_file(path: impl AsRef<Path>) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// Renders a config as TOML (for `--print-config`).
pub fn to_toml<T: Serialize>(config: &T) -> Result<String, toml::ser::Error> {
    toml::to_string(config)
}

fn scalar(v: &str) -> Value {
    match serde_json::from_str::<Value>(v) {
        Ok(Value::Object(_)) | Err(_) => Value::String(v.to_owned()),
        Ok(parsed) => parsed,
    }
}

fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

fn set_path(root: &mut Value, path: &[String], value: Value) {
    let mut node = root;
    for (i, part) in path.iter().enumerate() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            unreachable!("made an object above")
        };
        if i == path.len() - 1 {
            map.insert(part.clone(), value);
            return;
        }
        node = map
            .entry(part.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Serde helpers for durations written as `500ms`, `30s`, `5m`, `1h`, `7d`
/// (or a plain number of seconds).
pub mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    /// Why a text is not a duration; the message quotes the text.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum DurationError {
        /// It does not start with a number.
        #[error("{0:?} is not a duration like 30s, 5m, 1h or 7d")]
        NotADuration(String),
        /// Its unit is none of `ms`, `s`, `m`, `h`, `d`.
        #[error("{0:?} has an unknown unit; use ms, s, m, h or d")]
        UnknownUnit(String),
        /// It does not fit in a `u64` of milliseconds.
        #[error("{0:?} is too long")]
        TooLong(String),
    }

    /// Parses `500ms`, `30s`, `5m`, `1h`, `7d` or a plain number of seconds.
    pub fn parse(s: &str) -> Result<Duration, DurationError> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num
            .parse()
            .map_err(|_| DurationError::NotADuration(s.to_owned()))?;
        let ms = match unit {
            "ms" => Some(n),
            "" | "s" => n.checked_mul(1000),
            "m" => n.checked_mul(60_000),
            "h" => n.checked_mul(3_600_000),
            "d" => n.checked_mul(86_400_000),
            _ => return Err(DurationError::UnknownUnit(s.to_owned())),
        };
        ms.map(Duration::from_millis)
            .ok_or_else(|| DurationError::TooLong(s.to_owned()))
    }

    /// Formats a duration with the largest unit that divides it exactly.
    pub fn format(d: Duration) -> String {
        let ms = d.as_millis();
        for (unit, size) in [
            ("d", 86_400_000u128),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1000),
        ] {
            if ms != 0 && ms.is_multiple_of(size) {
                return format!("{}{unit}", ms / size);
            }
        }
        format!("{ms}ms")
    }

    /// Serialize with [`format`].
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    /// Deserialize from a string ([`parse`]) or a number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Secs(n) => Ok(Duration::from_secs(n)),
            Raw::Text(t) => parse(&t).map_err(D::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde::{Deserialize, Serialize};

    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Cfg {
        listen: String,
        size: u64,
        #[serde(with = "duration")]
        ttl: Duration,
        nested: Nested,
    }

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Nested {
        flag: bool,
        name: String,
    }

    impl Default for Cfg {
        fn default() -> Self {
            Self {
                listen: "0.0.0.0:1".into(),
                size: 1,
                ttl: Duration::from_secs(3600),
                nested: Nested {
                    flag: false,
                    name: "a".into(),
                },
            }
        }
    }

    #[test]
    fn layers_apply_in_order() {
        let dir = tempfile_dir();
        let file = dir.join("c.toml");
        std::fs::write(&file, "size = 2\nttl = \"5m\"\n[nested]\nname = \"file\"\n")
            .expect("write");
        let env = vec![
            ("X_SIZE".to_owned(), "3".to_owned()),
            ("X_NESTED__FLAG".to_owned(), "true".to_owned()),
            ("OTHER_SIZE".to_owned(), "99".to_owned()),
        ];
        let cfg: Cfg = load(Some(&file), "X_", env, &["nested.name=flag".into()]).expect("load");
        assert_eq!(
            cfg,
            Cfg {
                listen: "0.0.0.0:1".into(),
                size: 3,
                ttl: Duration::from_secs(300),
                nested: Nested {
                    flag: true,
                    name: "flag".into()
                },
            }
        );
    }

    #[test]
    fn a_file_variable_reads_the_value_from_the_file() {
        let dir = tempfile_dir();
        let secret = dir.join("name");
        // Digits stay a string: a secret is never parsed as JSON.
        std::fs::write(&secret, "12345\n").expect("write");
        let env = vec![
            ("X_NESTED__NAME".to_owned(), "plain".to_owned()),
            (
                "X_NESTED__NAME__FILE".to_owned(),
                secret.display().to_string(),
            ),
        ];
        let cfg: Cfg = load(None, "X_", env, &[]).expect("load");
        assert_eq!(cfg.nested.name, "12345");

        let missing = dir.join("missing");
        let env = vec![(
            "X_NESTED__NAME__FILE".to_owned(),
            missing.display().to_string(),
        )];
        let err = load::<Cfg>(None, "X_", env, &[]).expect_err("missing file");
        let text = err.to_string();
        assert!(text.contains("X_NESTED__NAME__FILE"), "{text}");
        assert!(text.contains("missing"), "{text}");
    }

    #[test]
    fn unknown_fields_are_named() {
        let err = load::<Cfg>(None, "X_", vec![("X_SIZ".into(), "3".into())], &[])
            .expect_err("typo must fail");
        assert!(err.to_string().contains("siz"), "{err}");
        let err = load::<Cfg>(None, "X_", Vec::new(), &["nope".into()]).expect_err("bad flag");
        assert!(matches!(err, ConfigError::Flag(_)));
    }

    #[test]
    fn durations_parse_and_format() {
        assert_eq!(duration::parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration::parse("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(duration::parse("42"), Ok(Duration::from_secs(42)));
        assert!(duration::parse("1y").is_err());
        assert!(duration::parse("-1s").is_err());
        assert_eq!(duration::format(Duration::from_secs(3600)), "1h");
        assert_eq!(duration::format(Duration::from_millis(1500)), "1500ms");
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("baton-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }
}
