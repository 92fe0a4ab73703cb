//! How a target is written: `host:port`, a URL (`http://`, `https://`), or
//! a name to balance over (`dns:///host:port`, see [`crate::balance`]).
//!
//! A leaf: [`crate::tls`] and [`crate::balance`] both read the scheme, and
//! neither should need the other for it.

/// The prefix of a balanced target.
pub const DNS_SCHEME: &str = "dns:///";

/// `host:port` as `http://host:port`; anything with a scheme (or a
/// `dns:///` target) as it is.
pub fn with_scheme(endpoint: String) -> String {
    if endpoint.contains("://") || endpoint.starts_with(DNS_SCHEME) {
        endpoint
    } else {
        format!("http://{endpoint}")
    }
}
