//! `google.protobuf.Timestamp` and `google.protobuf.Duration` for the
//! `baton.v1` messages: the same wire form as `prost_types`'s, plus the
//! proto3 JSON mapping (a Timestamp is an RFC 3339 string in UTC such as
//! `"2026-11-25T17:07:10.123Z"`, a Duration a number of seconds with an
//! `s`, such as `"1.500s"`), which the HTTP face sends and reads. They
//! convert from and to `SystemTime`, `std::time::Duration` and the
//! `prost_types` forms.

use std::time::{Duration as StdDuration, SystemTime};

/// A point in time (`google.protobuf.Timestamp`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Message)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds within the second, 0 to 999,999,999.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// A span of time (`google.protobuf.Duration`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Message)]
pub struct Duration {
    /// Whole seconds (negative for a negative span).
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds, of the same sign as `seconds`.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        prost_types::Timestamp::from(t).into()
    }
}

impl TryFrom<Timestamp> for SystemTime {
    type Error = prost_types::TimestampError;

    fn try_from(t: Timestamp) -> Result<Self, Self::Error> {
        SystemTime::try_from(prost_types::Timestamp::from(t))
    }
}

impl From<prost_types::Timestamp> for Timestamp {
    fn from(t: prost_types::Timestamp) -> Self {
        Self {
            seconds: t.seconds,
            nanos: t.nanos,
        }
    }
}

impl From<Timestamp> for prost_types::Timestamp {
    fn from(t: Timestamp) -> Self {
        Self {
            seconds: t.seconds,
            nanos: t.nanos,
        }
    }
}

impl From<StdDuration> for Duration {
    fn from(d: StdDuration) -> Self {
        Self {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }
    }
}

impl TryFrom<Duration> for StdDuration {
    type Error = prost_types::DurationError;

    fn try_from(d: Duration) -> Result<Self, Self::Error> {
        StdDuration::try_from(prost_types::Duration::from(d))
    }
}

impl From<prost_types::Duration> for Duration {
    fn from(d: prost_types::Duration) -> Self {
        Self {
            seconds: d.seconds,
            nanos: d.nanos,
        }
    }
}

impl From<Duration> for prost_types::Duration {
    fn from(d: Duration) -> Self {
        Self {
            seconds: d.seconds,
            nanos: d.nanos,
        }
    }
}

/// Days since 1970-01-01 of a civil date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `0001-01-01T00:00:00Z` and `9999-12-31T23:59:59.999999999Z`, the range
/// the JSON mapping allows.
const MIN_SECONDS: i64 = -62_135_596_800;
const MAX_SECONDS: i64 = 253_402_300_799;

/// Nanoseconds as the JSON mapping writes them: none, 3, 6 or 9 digits.
fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    }
}

impl std::fmt::Display for Timestamp {
    /// RFC 3339 in UTC, as the JSON mapping writes a Timestamp.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let days = self.seconds.div_euclid(86_400);
        let secs = self.seconds.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60,
            fraction(self.nanos.clamp(0, 999_999_999) as u32)
        )
    }
}

/// Why a text is not a Timestamp or a Duration of the JSON mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(&'static str);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for ParseError {}

/// Digits of `s` as a number (all of them must be digits).
fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Up to nine digits after a point, as nanoseconds.
fn nanos_of(s: &str) -> Option<i32> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: i32 = s.parse().ok()?;
    Some(n * 10_i32.pow(9 - s.len() as u32))
}

impl std::str::FromStr for Timestamp {
    type Err = ParseError;

    /// RFC 3339: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        const BAD: ParseError =
            ParseError("is not an RFC 3339 time such as \"2026-11-25T17:07:10Z\"");
        let b = s.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
            return Err(BAD);
        }
        if b[13] != b':' || b[16] != b':' {
            return Err(BAD);
        }
        let num = |r: std::ops::Range<usize>| s.get(r).and_then(digits).ok_or(BAD);
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
            return Err(BAD);
        }
        let mut rest = &s[19..];
        let mut nanos = 0;
        if let Some(after) = rest.strip_prefix('.') {
            let end = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            nanos = nanos_of(&after[..end]).ok_or(BAD)?;
            rest = &after[end..];
        }
        let offset = match rest {
            "Z" | "z" => 0,
            _ => {
                let sign = match rest.as_bytes().first() {
                    Some(b'+') => 1,
                    Some(b'-') => -1,
                    _ => return Err(BAD),
                };
                if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                    return Err(BAD);
                }
                let oh = rest.get(1..3).and_then(digits).ok_or(BAD)?;
                let om = rest.get(4..6).and_then(digits).ok_or(BAD)?;
                sign * (oh * 3600 + om * 60)
            }
        };
        let seconds = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + se.min(59) - offset;
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&seconds) {
            return Err(ParseError("is outside 0001-01-01 to 9999-12-31"));
        }
        Ok(Self { seconds, nanos })
    }
}

impl std::fmt::Display for Duration {
    /// Seconds with an `s`, as the JSON mapping writes a Duration.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let negative = self.seconds < 0 || self.nanos < 0;
        let sign = if negative { "-" } else { "" };
        write!(
            f,
            "{sign}{}{}s",
            self.seconds.unsigned_abs(),
            fraction(self.nanos.unsigned_abs().min(999_999_999))
        )
    }
}

impl std::str::FromStr for Duration {
    type Err = ParseError;

    /// `[-]seconds[.fraction]s`.
    fn from_str(s: &str) -> Result<Self, ParseError> {
        const BAD: ParseError = ParseError("is not a duration such as \"1.5s\"");
        let body = s.strip_suffix('s').ok_or(BAD)?;
        let (negative, body) = match body.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, body),
        };
        let (whole, frac) = body.split_once('.').unwrap_or((body, ""));
        let seconds = digits(whole).ok_or(BAD)?;
        let nanos = if frac.is_empty() && !body.contains('.') {
            0
        } else {
            nanos_of(frac).ok_or(BAD)?
        };
        if seconds > 315_576_000_000 {
            return Err(ParseError("is over 10,000 years"));
        }
        Ok(if negative {
            Self {
                seconds: -seconds,
                nanos: -nanos,
            }
        } else {
            Self { seconds, nanos }
        })
    }
}

macro_rules! json_as_string {
    ($t:ty, $what:literal) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $t;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$t, E> {
                        v.parse()
                            .map_err(|e: ParseError| E::custom(format!("{v:?} {e}")))
                    }
                }
                d.deserialize_str(Visitor)
            }
        }
    };
}

json_as_string!(Timestamp, "an RFC 3339 time string");
json_as_string!(Duration, "a duration string such as \"1.5s\"");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_and_write_rfc_3339() {
        let t = Timestamp {
            seconds: 1_795_626_430,
            nanos: 123_000_000,
        };
        assert_eq!(t.to_string(), "2026-11-25T17:07:10.123Z");
        assert_eq!("2026-11-25T17:07:10.123Z".parse::<Timestamp>(), Ok(t));
        assert_eq!("2026-11-25T18:07:10.123+01:00".parse::<Timestamp>(), Ok(t));
        let epoch = Timestamp::default();
        assert_eq!(epoch.to_string(), "1970-01-01T00:00:00Z");
        let before = Timestamp {
            seconds: -1,
            nanos: 500_000,
        };
        assert_eq!(before.to_string(), "1969-12-31T23:59:59.000500Z");
        assert_eq!(before.to_string().parse::<Timestamp>(), Ok(before));
        for bad in [
            "",
            "2026-11-25",
            "2026-13-01T00:00:00Z",
            "2026-11-25T17:07:10",
            "x",
        ] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
        let now = SystemTime::now();
        let back = SystemTime::try_from(Timestamp::from(now)).expect("in range");
        assert_eq!(back, now);
    }

    #[test]
    fn durations_read_and_write_seconds() {
        let d = Duration::from(StdDuration::from_millis(1500));
        assert_eq!(d.to_string(), "1.500s");
        assert_eq!("1.5s".parse::<Duration>(), Ok(d));
        assert_eq!(
            "30s".parse::<Duration>(),
            Ok(Duration {
                seconds: 30,
                nanos: 0
            })
        );
        assert_eq!(
            "-0.000001s".parse::<Duration>(),
            Ok(Duration {
                seconds: 0,
                nanos: -1000
            })
        );
        assert_eq!(
            Duration {
                seconds: 0,
                nanos: -1000
            }
            .to_string(),
            "-0.000001s"
        );
        for bad in ["", "1", "s", "1.s", "1.0000000001s", "a s"] {
            assert!(bad.parse::<Duration>().is_err(), "{bad}");
        }
        let json = serde_json::to_string(&d).expect("json");
        assert_eq!(json, "\"1.500s\"");
        assert_eq!(serde_json::from_str::<Duration>(&json).expect("back"), d);
    }
}
