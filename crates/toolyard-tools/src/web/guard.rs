//! The SSRF guard: which addresses web_fetch may connect to.
//!
//! The guard judges the *resolved* address of every hop, and web_fetch then connects to exactly
//! the address it judged (pinned with reqwest's `resolve_to_addrs`, any other lookup refused),
//! so a name that resolves to a public address once and to 127.0.0.1 the next time (DNS
//! rebinding) cannot slip through.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockReason {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// RFC 1918 (10/8, 172.16/12, 192.168/16) and unique-local fc00::/7.
    Private,
    /// 169.254/16, fe80::/10 (and the deprecated site-local fec0::/10).
    LinkLocal,
    /// Carrier-grade NAT, 100.64/10.
    SharedNat,
    /// Cloud metadata endpoints: 169.254.169.254, fd00:ec2::254, 168.63.129.16.
    Metadata,
    /// 0.0.0.0/8, :: (reaches the local host on Linux).
    Unspecified,
    /// 224/4, ff00::/8.
    Multicast,
    /// 240/4, broadcast, IETF and documentation ranges.
    Reserved,
}

impl BlockReason {
    /// A short human description.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "a loopback address",
            Self::Private => "a private-network address",
            Self::LinkLocal => "a link-local address",
            Self::SharedNat => "a carrier-grade NAT address",
            Self::Metadata => "a cloud metadata address",
            Self::Unspecified => "the unspecified address",
            Self::Multicast => "a multicast address",
            Self::Reserved => "a reserved address",
        }
    }

    /// Whether `allow_private = true` lifts this reason.
    fn lifted_by_allow_private(self) -> bool {
        matches!(
            self,
            Self::Loopback | Self::Private | Self::LinkLocal | Self::SharedNat
        )
    }
}

/// Classify `ip`: `None` for an ordinary public address.
pub fn classify(ip: IpAddr) -> Option<BlockReason> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<BlockReason> {
    let o = ip.octets();
    let reason = if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(168, 63, 129, 16)
    {
        BlockReason::Metadata
    } else if o[0] == 0 {
        BlockReason::Unspecified
    } else if o[0] == 127 {
        BlockReason::Loopback
    } else if o[0] == 10
        || (o[0] == 172 && (16..=31).contains(&o[1]))
        || (o[0] == 192 && o[1] == 168)
    {
        BlockReason::Private
    } else if o[0] == 169 && o[1] == 254 {
        BlockReason::LinkLocal
    } else if o[0] == 100 && (64..=127).contains(&o[1]) {
        BlockReason::SharedNat
    } else if (224..=239).contains(&o[0]) {
        BlockReason::Multicast
    } else if o[0] >= 240
        || (o[0] == 192 && o[1] == 0 && (o[2] == 0 || o[2] == 2))
        || (o[0] == 198 && (o[1] == 18 || o[1] == 19))
        || (o[0] == 198 && o[1] == 51 && o[2] == 100)
        || (o[0] == 203 && o[1] == 0 && o[2] == 113)
    {
        BlockReason::Reserved
    } else {
        return None;
    };
    Some(reason)
}

fn classify_v6(ip: Ipv6Addr) -> Option<BlockReason> {
    let s = ip.segments();
    // Forms that carry an IPv4 address are judged by that address.
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    let reason = if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        BlockReason::Metadata
    } else if ip.is_unspecified() {
        BlockReason::Unspecified
    } else if ip.is_loopback() {
        BlockReason::Loopback
    } else if s[0] & 0xfe00 == 0xfc00 {
        BlockReason::Private
    } else if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
        BlockReason::LinkLocal
    } else if s[0] & 0xff00 == 0xff00 {
        BlockReason::Multicast
    } else if s[0] == 0x2001 && s[1] == 0x0db8 || s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
        BlockReason::Reserved
    } else {
        return None;
    };
    Some(reason)
}

/// The IPv4 address inside an IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d),
/// NAT64 (64:ff9b::/96) or 6to4 (2002::/16) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || (s[5] == 0 && (s[6] != 0 || s[7] > 1))) {
        return Some(tail(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return Some(tail(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(tail(s[1], s[2]));
    }
    None
}

/// One `allowed_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowEntry {
    /// A host name (lowercase) or IP literal, with an optional port.
    Host {
        /// The name or IP as written.
        host: String,
        /// Only this port, when given.
        port: Option<u16>,
    },
    /// An address range.
    Net {
        /// The network address.
        addr: IpAddr,
        /// The prefix length.
        prefix: u8,
    },
}

impl AllowEntry {
    /// Parse `name`, `name:port`, `IP`, `IP:port`, `[v6]:port` or `addr/prefix`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let bad = || {
            format!("allowed_hosts entry `{text}` is not a host, host:port, IP, IP:port or CIDR")
        };
        if text.is_empty() {
            return Err(bad());
        }
        if let Some((addr, prefix)) = text.split_once('/') {
            let addr: IpAddr = addr.parse().map_err(|_| bad())?;
            let prefix: u8 = prefix.parse().map_err(|_| bad())?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            if prefix > max {
                return Err(bad());
            }
            return Ok(Self::Net { addr, prefix });
        }
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Ok(Self::Host {
                host: ip.to_string(),
                port: None,
            });
        }
        if let Ok(sa) = text.parse::<SocketAddr>() {
            return Ok(Self::Host {
                host: sa.ip().to_string(),
                port: Some(sa.port()),
            });
        }
        let (host, port) = match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p.parse::<u16>().map_err(|_| bad())?)),
            None => (text, None),
        };
        if host.is_empty() || host.contains(['/', '[', ']', ' ']) {
            return Err(bad());
        }
        Ok(Self::Host {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// Whether this entry lets `host` (as written in the URL), resolved to `ip`, on `port`
    /// through.
    fn matches(&self, host: &str, ip: IpAddr, port: u16) -> bool {
        match self {
            Self::Host { host: h, port: p } => {
                if p.is_some_and(|p| p != port) {
                    return false;
                }
                let host = host.trim_start_matches('[').trim_end_matches(']');
                h.eq_ignore_ascii_case(host) || h.parse::<IpAddr>().is_ok_and(|a| same_ip(a, ip))
            }
            Self::Net { addr, prefix } => in_net(ip, *addr, *prefix),
        }
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical(a) == canonical(b)
}

/// IPv4-mapped IPv6 addresses compare as their IPv4 form.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (canonical(ip), canonical(net)) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix.min(32)))
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix.min(128)))
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// An address the guard refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{host} resolves to {ip}, {}; web_fetch does not reach internal addresses (a catalog can allow them with [web] allow_private = true or allowed_hosts)",
    reason.describe()
)]
pub struct Blocked {
    /// The host as written in the URL.
    pub host: String,
    /// The address it resolved to.
    pub ip: IpAddr,
    /// Why it was refused.
    pub reason: BlockReason,
}

/// The guard's policy: the ranges it blocks and what the catalog lifted.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow_private: bool,
    allowed: Vec<AllowEntry>,
}

impl Guard {
    /// A guard with `allow_private` and the parsed `allowed_hosts`.
    pub fn new(allow_private: bool, allowed_hosts: &[String]) -> Result<Self, String> {
        let allowed = allowed_hosts
            .iter()
            .map(|h| AllowEntry::parse(h))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            allow_private,
            allowed,
        })
    }

    /// Judge one resolved address of `host` on `port`.
    pub fn check(&self, host: &str, ip: IpAddr, port: u16) -> Result<(), Blocked> {
        let Some(reason) = classify(ip) else {
            return Ok(());
        };
        if self.allow_private && reason.lifted_by_allow_private() {
            return Ok(());
        }
        if self.allowed.iter().any(|e| e.matches(host, ip, port)) {
            return Ok(());
        }
        Err(Blocked {
            host: host.to_string(),
            ip,
            reason,
        })
    }

    /// Keep the addresses of `host` the guard allows; when none is left, the first refusal.
    pub fn filter(&self, host: &str, addrs: &[SocketAddr]) -> Result<Vec<SocketAddr>, Blocked> {
        let mut first_block = None;
        let mut ok = Vec::new();
        for a in addrs {
            match self.check(host, a.ip(), a.port()) {
                Ok(()) => ok.push(*a),
                Err(b) => {
                    first_block.get_or_insert(b);
                }
            }
        }
        match (ok.is_empty(), first_block) {
            (true, Some(b)) => Err(b),
            _ => Ok(ok),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn classifies_the_ranges() {
        assert_eq!(classify(ip("8.8.8.8")), None);
        assert_eq!(classify(ip("2606:4700::1111")), None);
        assert_eq!(classify(ip("127.0.0.1")), Some(BlockReason::Loopback));
        assert_eq!(classify(ip("::1")), Some(BlockReason::Loopback));
        assert_eq!(classify(ip("10.1.2.3")), Some(BlockReason::Private));
        assert_eq!(classify(ip("172.31.0.1")), Some(BlockReason::Private));
        assert_eq!(classify(ip("172.32.0.1")), None);
        assert_eq!(classify(ip("192.168.1.1")), Some(BlockReason::Private));
        assert_eq!(classify(ip("fd12::1")), Some(BlockReason::Private));
        assert_eq!(classify(ip("169.254.1.1")), Some(BlockReason::LinkLocal));
        assert_eq!(classify(ip("fe80::1")), Some(BlockReason::LinkLocal));
        assert_eq!(classify(ip("100.64.0.1")), Some(BlockReason::SharedNat));
        assert_eq!(classify(ip("169.254.169.254")), Some(BlockReason::Metadata));
        assert_eq!(classify(ip("fd00:ec2::254")), Some(BlockReason::Metadata));
        assert_eq!(classify(ip("0.0.0.0")), Some(BlockReason::Unspecified));
        assert_eq!(classify(ip("::")), Some(BlockReason::Unspecified));
        assert_eq!(classify(ip("224.0.0.1")), Some(BlockReason::Multicast));
        assert_eq!(classify(ip("ff02::1")), Some(BlockReason::Multicast));
        assert_eq!(classify(ip("255.255.255.255")), Some(BlockReason::Reserved));
    }

    #[test]
    fn ipv4_inside_ipv6_is_judged_as_ipv4() {
        assert_eq!(
            classify(ip("::ffff:127.0.0.1")),
            Some(BlockReason::Loopback)
        );
        assert_eq!(
            classify(ip("::ffff:169.254.169.254")),
            Some(BlockReason::Metadata)
        );
        assert_eq!(classify(ip("::ffff:10.0.0.1")), Some(BlockReason::Private));
        assert_eq!(classify(ip("::127.0.0.1")), Some(BlockReason::Loopback));
        assert_eq!(classify(ip("64:ff9b::a00:1")), Some(BlockReason::Private));
        assert_eq!(classify(ip("2002:7f00:1::")), Some(BlockReason::Loopback));
        assert_eq!(classify(ip("::ffff:8.8.8.8")), None);
    }

    #[test]
    fn allow_private_keeps_metadata_blocked() {
        let g = Guard::new(true, &[]).unwrap();
        assert!(g.check("x", ip("127.0.0.1"), 80).is_ok());
        assert!(g.check("x", ip("10.0.0.1"), 80).is_ok());
        let b = g.check("x", ip("169.254.169.254"), 80).unwrap_err();
        assert_eq!(b.reason, BlockReason::Metadata);
    }

    #[test]
    fn allowlist_entries_match_host_port_and_ranges() {
        let g = Guard::new(
            false,
            &[
                "127.0.0.1:8080".into(),
                "intranet.local".into(),
                "10.1.0.0/16".into(),
            ],
        )
        .unwrap();
        assert!(g.check("127.0.0.1", ip("127.0.0.1"), 8080).is_ok());
        assert!(g.check("localhost", ip("127.0.0.1"), 8080).is_ok());
        assert!(g.check("127.0.0.1", ip("127.0.0.1"), 8081).is_err());
        assert!(g.check("intranet.local", ip("192.168.0.5"), 443).is_ok());
        assert!(g.check("other.local", ip("192.168.0.5"), 443).is_err());
        assert!(g.check("x", ip("10.1.200.3"), 1).is_ok());
        assert!(g.check("x", ip("10.2.0.1"), 1).is_err());
        assert!(Guard::new(false, &["10.0.0.0/99".into()]).is_err());
        assert!(Guard::new(false, &["host:port".into()]).is_err());
    }

    #[test]
    fn filter_keeps_public_and_reports_the_first_block() {
        let g = Guard::default();
        let mixed = [
            "127.0.0.1:80".parse().unwrap(),
            "93.184.216.34:80".parse().unwrap(),
        ];
        assert_eq!(g.filter("h", &mixed).unwrap().len(), 1);
        let private = ["127.0.0.1:80".parse().unwrap()];
        let err = g.filter("h", &private).unwrap_err().to_string();
        assert!(err.contains("loopback"), "{err}");
        assert!(err.contains("allow_private"), "{err}");
    }
}
