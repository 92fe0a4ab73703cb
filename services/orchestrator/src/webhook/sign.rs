//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): a
//! secret is `whsec_` and the base64 of its key; a delivery is signed by
//! HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` under each
//! valid key, each signature `v1,<base64>`, space-separated in
//! `webhook-signature` (two during a rotation: receivers accept any).

use base64::{Engine, engine::general_purpose::STANDARD};
use hmac::{KeyInit, Mac};

/// The prefix of a secret's text.
pub const PREFIX: &str = "whsec_";

/// Fewest bytes a secret's key may have (Standard Webhooks asks for
/// 24 to 64).
pub const MIN_KEY: usize = 24;
/// Most bytes a secret's key may have.
pub const MAX_KEY: usize = 64;

/// A signing key. Its `Debug` never shows it: a secret is never logged.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(whsec_…)")
    }
}

impl Secret {
    /// A secret from its text, `whsec_<base64 of 24 to 64 bytes>`; the
    /// error says what is wrong (never the secret).
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(b64) = text.strip_prefix(PREFIX) else {
            return Err(format!("must start with \"{PREFIX}\""));
        };
        let key = STANDARD
            .decode(b64.trim())
            .map_err(|_| format!("is not \"{PREFIX}\" and base64"))?;
        if !(MIN_KEY..=MAX_KEY).contains(&key.len()) {
            return Err(format!(
                "must hold {MIN_KEY} to {MAX_KEY} bytes of key (has {})",
                key.len()
            ));
        }
        Ok(Self(key))
    }

    /// A new random secret of 32 bytes (two version-4 UUIDs' random bits,
    /// from the operating system's generator).
    pub fn generate() -> Self {
        let mut key = Vec::with_capacity(32);
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        key.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self(key)
    }

    /// The secret's text, `whsec_…`: shown once, to whoever made it.
    pub fn text(&self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(&self.0))
    }

    /// `v1,<base64 HMAC-SHA256 of id.timestamp.body>`.
    fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut mac =
            hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }
}

/// The `webhook-signature` header of a delivery: one signature per valid
/// secret, space-separated.
pub fn signature<'a>(
    secrets: impl IntoIterator<Item = &'a Secret>,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .into_iter()
        .map(|s| s.sign(id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_as_the_specification_s_example() {
        // The example of the Standard Webhooks specification.
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let sig = signature(
            [&secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn refuses_bad_secrets_without_showing_them() {
        assert!(Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(Secret::parse("whsec_???").is_err());
        let short = format!("{PREFIX}{}", STANDARD.encode([1u8; 23]));
        assert!(
            Secret::parse(&short)
                .expect_err("23 bytes")
                .contains("24 to 64")
        );
        let at = format!("{PREFIX}{}", STANDARD.encode([1u8; 24]));
        assert!(Secret::parse(&at).is_ok());
        let over = format!("{PREFIX}{}", STANDARD.encode([1u8; 65]));
        assert!(Secret::parse(&over).is_err());
        let s = Secret::generate();
        assert_eq!(Secret::parse(&s.text()).expect("round trip"), s);
        assert!(!format!("{s:?}").contains(&s.text()[6..]));
    }

    #[test]
    fn a_rotation_signs_twice() {
        let (a, b) = (Secret::generate(), Secret::generate());
        let both = signature([&a, &b], "msg_1", 1, b"{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], signature([&a], "msg_1", 1, b"{}"));
        assert_eq!(parts[1], signature([&b], "msg_1", 1, b"{}"));
    }
}
