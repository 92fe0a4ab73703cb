//! Where deliveries may go (`webhooks.allowed_hosts`): a URL is checked
//! when a subscription is made, and every address its host resolves to is
//! checked again at each try, by the resolver the delivering client uses
//! (so a name that later resolves to a private address is refused, and
//! the address checked is the one connected to).

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
};

/// One entry of `allowed_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// `*`: any host whose addresses are all public.
    Any,
    /// A name, exactly (lower case).
    Name(String),
    /// `*.example.com`: names under it (not itself), public addresses.
    Suffix(String),
    /// An address or a range of them.
    Net(IpAddr, u8),
}

/// The parsed `allowed_hosts`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    entries: Vec<Entry>,
}

/// What a URL's host is allowed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// Named by an entry of its own (any address, plain http too).
    Listed,
    /// Admitted by `*` or a suffix: public addresses only, https only.
    Public,
}

impl HostPolicy {
    /// Parses the entries; an error gives the index of the bad one.
    pub fn parse(entries: &[String]) -> Result<Self, (usize, String)> {
        let mut out = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let e = e.trim().to_ascii_lowercase();
            let entry = if e == "*" {
                Entry::Any
            } else if let Some(rest) = e.strip_prefix("*.") {
                if rest.is_empty() || rest.contains('*') {
                    return Err((i, format!("\"{e}\" is not `*.domain`")));
                }
                Entry::Suffix(format!(".{rest}"))
            } else if let Some((ip, bits)) = e.split_once('/') {
                let ip: IpAddr = ip
                    .parse()
                    .map_err(|_| (i, format!("\"{e}\" is not an address range")))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let bits: u8 = bits
                    .parse()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or((i, format!("\"{e}\": the prefix length must be 0 to {max}")))?;
                Entry::Net(ip, bits)
            } else if let Ok(ip) = e.trim_matches(['[', ']']).parse::<IpAddr>() {
                Entry::Net(ip, if ip.is_ipv4() { 32 } else { 128 })
            } else if e.is_empty() || e.contains(['/', ':', '*', ' ', '@']) {
                return Err((i, format!("\"{e}\" is not a host name, address or range")));
            } else {
                Entry::Name(e)
            };
            out.push(entry);
        }
        Ok(Self { entries: out })
    }

    /// How the policy admits host `host` (lower case, no brackets), if it
    /// does: by an entry of its own, or as a public host.
    fn admit_host(&self, host: &str) -> Option<Admit> {
        let ip = host.parse::<IpAddr>().ok();
        let mut public = false;
        for e in &self.entries {
            match (e, ip) {
                (Entry::Name(n), None) if n == host => return Some(Admit::Listed),
                (Entry::Net(net, bits), Some(ip)) if in_net(ip, *net, *bits) => {
                    return Some(Admit::Listed);
                }
                (Entry::Any, _) => public = true,
                (Entry::Suffix(s), None) if host.ends_with(s.as_str()) => public = true,
                _ => {}
            }
        }
        public.then_some(Admit::Public)
    }

    /// Checks a subscription's URL; the error says why it is refused.
    pub fn check_url(&self, url: &str) -> Result<reqwest::Url, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("is not a URL ({e})"))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("may not hold a user name or password".into());
        }
        let host = match parsed.host_str() {
            Some(h) if !h.is_empty() => h.trim_matches(['[', ']']).to_ascii_lowercase(),
            _ => return Err("has no host".into()),
        };
        let admit = self.admit_host(&host).ok_or_else(|| {
            format!("host \"{host}\" is not in the server's webhooks.allowed_hosts")
        })?;
        match parsed.scheme() {
            "https" => {}
            "http" if admit == Admit::Listed => {}
            "http" => {
                return Err(format!(
                    "must be https (plain http only to a host webhooks.allowed_hosts names: \"{host}\" is not)"
                ));
            }
            other => return Err(format!("must be https, not {other}")),
        }
        if let Ok(ip) = host.parse::<IpAddr>()
            && admit == Admit::Public
            && !is_public(ip)
        {
            return Err(format!(
                "{ip} is a private, loopback or link-local address: webhooks.allowed_hosts must name it"
            ));
        }
        Ok(parsed)
    }

    /// Whether a try to `host` may connect to `ip`.
    pub fn allows_address(&self, host: &str, ip: IpAddr) -> bool {
        match self.admit_host(host) {
            Some(Admit::Listed) => true,
            Some(Admit::Public) => {
                is_public(ip)
                    || self
                        .entries
                        .iter()
                        .any(|e| matches!(e, Entry::Net(n, b) if in_net(ip, *n, *b)))
            }
            None => false,
        }
    }
}

/// Whether `ip` is within `net`/`bits`.
fn in_net(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let (ip, net, width) = match (canonical(ip), canonical(net)) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    if bits == 0 {
        return true;
    }
    let shift = width - u32::from(bits);
    (ip >> shift) == (net >> shift)
}

/// An IPv4-mapped IPv6 address as the IPv4 one.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is reachable on the public internet: not loopback,
/// private, link-local, shared (CGNAT), unspecified, multicast, broadcast,
/// documentation or unique-local.
pub fn is_public(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_documentation()
                || o[0] == 0
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || (o[0] == 192 && o[1] == 0 && o[2] == 0)
                || (o[0] == 198 && (o[1] & 0xfe) == 18)
                || o[0] >= 240)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                // NAT64 and 6to4 carry an IPv4 address that may be private.
                || (s[0] == 0x0064 && s[1] == 0xff9b)
                || s[0] == 0x2002)
        }
    }
}

/// The resolver of the delivering client: resolves as the system does and
/// keeps only the addresses the policy allows for the name; none left is
/// an error naming the host.
pub struct GuardedResolver(pub Arc<HostPolicy>);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        let host = name.as_str().to_ascii_lowercase();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| policy.allows_address(&host, a.ip()))
                .collect();
            if found.is_empty() {
                let e: Box<dyn std::error::Error + Send + Sync> = format!(
                    "{host} resolves to no address webhooks.allowed_hosts allows (private, loopback and link-local ones must be listed)"
                )
                .into();
                return Err(e);
            }
            let addrs: reqwest::dns::Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

/// A URL as logs show it: scheme, host and path (no query: it may carry a
/// token).
pub fn redacted(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            format!(
                "{}://{}{}",
                u.scheme(),
                u.host_str().unwrap_or(""),
                u.port().map(|p| format!(":{p}")).unwrap_or_default()
            ) + u.path()
        }
        Err(_) => "(not a URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(entries: &[&str]) -> HostPolicy {
        HostPolicy::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("policy")
    }

    #[test]
    fn star_admits_public_https_only() {
        let p = policy(&["*"]);
        assert!(p.check_url("https://hooks.example.com/x").is_ok());
        assert!(
            p.check_url("http://hooks.example.com/x")
                .expect_err("http")
                .contains("https")
        );
        assert!(
            p.check_url("https://127.0.0.1/x")
                .expect_err("loopback")
                .contains("loopback")
        );
        assert!(p.check_url("https://10.1.2.3/x").is_err());
        assert!(p.check_url("https://[::1]/x").is_err());
        assert!(p.check_url("https://169.254.169.254/").is_err());
        assert!(p.check_url("ftp://hooks.example.com/").is_err());
        assert!(p.check_url("https://u:p@hooks.example.com/").is_err());
        assert!(p.check_url("not a url").is_err());
        assert!(!p.allows_address("hooks.example.com", "10.0.0.1".parse().expect("ip")));
        assert!(!p.allows_address("hooks.example.com", "::ffff:127.0.0.1".parse().expect("ip")));
        assert!(p.allows_address("hooks.example.com", "93.184.216.34".parse().expect("ip")));
        assert_eq!(
            redacted("https://h.example.com:8443/p?token=x"),
            "https://h.example.com:8443/p"
        );
    }

    #[test]
    fn listed_entries_admit_private_addresses_and_http() {
        let p = policy(&[
            "127.0.0.1",
            "10.0.0.0/8",
            "receiver.internal",
            "*.example.com",
        ]);
        assert!(p.check_url("http://127.0.0.1:8080/hook").is_ok());
        assert!(p.check_url("http://10.9.8.7/hook").is_ok());
        assert!(p.check_url("http://receiver.internal/hook").is_ok());
        assert!(p.allows_address("receiver.internal", "10.0.0.1".parse().expect("ip")));
        assert!(p.check_url("https://a.example.com/").is_ok());
        assert!(p.check_url("http://a.example.com/").is_err());
        assert!(
            p.check_url("https://example.com/").is_err(),
            "a suffix is not its own domain"
        );
        assert!(p.check_url("https://other.org/").is_err());
        assert!(
            p.allows_address("a.example.com", "10.1.1.1".parse().expect("ip")),
            "listed range"
        );
        assert!(!p.allows_address("a.example.com", "192.168.1.1".parse().expect("ip")));
        assert!(p.check_url("http://127.0.0.2/").is_err());
    }

    #[test]
    fn bad_entries_are_named() {
        let bad = |e: &str| {
            HostPolicy::parse(&["*".to_string(), e.to_string()])
                .expect_err(e)
                .0
        };
        assert_eq!(bad("10.0.0.0/33"), 1);
        assert_eq!(bad("*."), 1);
        assert_eq!(bad("a/b"), 1);
        assert_eq!(bad(""), 1);
        assert!(HostPolicy::parse(&[]).is_ok());
        assert!(policy(&[]).check_url("https://hooks.example.com/").is_err());
    }
}
