//! The `[network]` catalog section and the verdict it gives each connection the gate is asked
//! for.
//!
//! ```toml
//! [network]
//! mode = "allowlist"                       # open (default): every host | allowlist: only `allow`
//! allow = ["github.com", "*.example.org", "mirror.internal:8443"]
//! deny = ["*.paste.example"]               # wins over allow, in every mode
//! resolve = { "registry.test" = "127.0.0.1" }
//! ```
//!
//! Order of the checks: `deny` (by name or address), then in `allowlist` mode `allow`, then the
//! addresses the name resolves to: link-local and cloud metadata addresses, the machine's own
//! loopback and the unspecified address are refused in every mode unless the catalog names that
//! exact address (an `allow` entry that is the address, or a `resolve` pin to it).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::Deserialize;
use serde::de::Error as _;

/// How hosts are let through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Every host but the denied ones and the internal addresses.
    #[default]
    Open,
    /// Only the hosts `allow` names.
    Allowlist,
}

/// The `[network]` catalog section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// `open` (default) or `allowlist`.
    #[serde(default)]
    pub mode: Mode,
    /// Hosts let through in `allowlist` mode; an exact address here also lifts the
    /// internal-address refusal for it.
    #[serde(default)]
    pub allow: Vec<Pattern>,
    /// Hosts refused in every mode (deny wins over allow).
    #[serde(default)]
    pub deny: Vec<Pattern>,
    /// Names pinned to an address: the gate does not look them up.
    #[serde(default)]
    pub resolve: BTreeMap<HostName, IpAddr>,
}

impl NetworkConfig {
    /// What the section lets through, in a line (for `doctor`).
    pub fn describe(&self) -> String {
        let list = |l: &[Pattern]| {
            l.iter()
                .map(|p| format!("\"{p}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = match self.mode {
            Mode::Open => "mode = open: every host".to_string(),
            Mode::Allowlist if self.allow.is_empty() => {
                "mode = allowlist with an empty allow: no host".to_string()
            }
            Mode::Allowlist => format!("mode = allowlist: only {}", list(&self.allow)),
        };
        if !self.deny.is_empty() {
            out.push_str(&format!(", never {}", list(&self.deny)));
        }
        if !self.resolve.is_empty() {
            let pins: Vec<String> = self
                .resolve
                .iter()
                .map(|(n, ip)| format!("{} = {ip}", n.0))
                .collect();
            out.push_str(&format!("; pinned: {}", pins.join(", ")));
        }
        out.push_str(
            "; link-local and cloud metadata addresses and the machine's own loopback are \
             refused in every mode unless allow or resolve names the exact address",
        );
        out
    }
}

/// A host name as the gate compares it: lower case, without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostName(pub String);

impl HostName {
    /// `name` normalised, or why it is not a host name.
    pub fn parse(name: &str) -> Result<Self, String> {
        let n = name.trim().trim_end_matches('.').to_ascii_lowercase();
        let ok = !n.is_empty()
            && n.len() <= 253
            && n.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            });
        if ok {
            Ok(Self(n))
        } else {
            Err(format!(
                "`{name}` is not a host name (letters, digits, `-` and `_` in dot-separated labels)"
            ))
        }
    }
}

impl<'de> Deserialize<'de> for HostName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

/// The host part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// `*`: every host.
    Any,
    /// `github.com`: that name only.
    Exact(String),
    /// `*.example.org`: names below `example.org` (not `example.org` itself).
    Below(String),
    /// `203.0.113.9`, `[2001:db8::1]`: that address, written as one or resolved to.
    Address(IpAddr),
}

/// One `allow` or `deny` entry: a host pattern and, optionally, a port (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    host: HostPattern,
    port: Option<u16>,
}

impl Pattern {
    /// Parse `github.com`, `*.example.org`, `mirror.internal:8443`, `203.0.113.9:80`,
    /// `[2001:db8::1]:443`, `*`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let bad = |why: &str| {
            format!(
                "`{text}` is not a host pattern: {why} (use `github.com`, `*.example.org`, `mirror.internal:8443`, `203.0.113.9` or `[2001:db8::1]:443`)"
            )
        };
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (addr, after) = rest.split_once(']').ok_or_else(|| bad("no closing `]`"))?;
            let ip: Ipv6Addr = addr.parse().map_err(|_| bad("not an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(
                    parse_port(p.strip_prefix(':').ok_or_else(|| bad("junk after `]`"))?)
                        .map_err(|e| bad(&e))?,
                ),
            };
            return Ok(Self {
                text: t.to_string(),
                host: HostPattern::Address(IpAddr::V6(ip)),
                port,
            });
        } else if let Ok(ip) = t.parse::<IpAddr>() {
            return Ok(Self {
                text: t.to_string(),
                host: HostPattern::Address(ip),
                port: None,
            });
        } else {
            match t.rsplit_once(':') {
                Some((h, p)) => (h, Some(parse_port(p).map_err(|e| bad(&e))?)),
                None => (t, None),
            }
        };
        let host = if host == "*" {
            HostPattern::Any
        } else if let Ok(ip) = host.parse::<Ipv4Addr>() {
            HostPattern::Address(IpAddr::V4(ip))
        } else if let Some(below) = host.strip_prefix("*.") {
            HostPattern::Below(HostName::parse(below).map_err(|e| bad(&e))?.0)
        } else if host.contains('*') {
            return Err(bad(
                "a wildcard may only be a whole first label (`*.example.org`)",
            ));
        } else {
            HostPattern::Exact(HostName::parse(host).map_err(|e| bad(&e))?.0)
        };
        Ok(Self {
            text: t.to_string(),
            host,
            port,
        })
    }

    /// The entry as written in the catalog.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this pattern names `host` (as the program asked for it) on `port`.
    pub fn matches_name(&self, host: &Host, port: u16) -> bool {
        if self.port.is_some_and(|p| p != port) {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(n), Host::Name(h)) => n == &h.0,
            (HostPattern::Below(n), Host::Name(h)) => {
                h.0.len() > n.len() + 1
                    && h.0.ends_with(n.as_str())
                    && h.0[..h.0.len() - n.len()].ends_with('.')
            }
            (HostPattern::Address(a), Host::Address(b)) => same_ip(*a, *b),
            _ => false,
        }
    }

    /// Whether this pattern lets through every host and port `other` names (so a request for
    /// `other` needs nothing more): the same host, or a wider one, on the same port or any.
    pub fn covers(&self, other: &Pattern) -> bool {
        let port = match (self.port, other.port) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        let below = |h: &str, n: &str| {
            h.len() > n.len() + 1 && h.ends_with(n) && h[..h.len() - n.len()].ends_with('.')
        };
        let host = match (&self.host, &other.host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Below(n), HostPattern::Exact(h)) => below(h, n),
            (HostPattern::Below(n), HostPattern::Below(m)) => m == n || below(m, n),
            (HostPattern::Address(a), HostPattern::Address(b)) => same_ip(*a, *b),
            _ => false,
        };
        port && host
    }

    /// The address this pattern is, when it is one.
    pub fn address(&self) -> Option<IpAddr> {
        match self.host {
            HostPattern::Address(ip) => Some(ip),
            _ => None,
        }
    }

    /// Whether it is `*`, every host.
    pub fn is_any(&self) -> bool {
        self.host == HostPattern::Any
    }

    /// Whether this pattern is exactly the address `ip` (and `port`, if it names one).
    fn is_address(&self, ip: IpAddr, port: u16) -> bool {
        matches!(self.host, HostPattern::Address(a) if same_ip(a, ip))
            && self.port.is_none_or(|p| p == port)
    }
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{p}` is not a port (1 to 65535)")),
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(D::Error::custom)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a program asked to reach: a name or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name, resolved by the gate.
    Name(HostName),
    /// An address written as one.
    Address(IpAddr),
}

impl Host {
    /// `text` (a name, an IPv4 address, an IPv6 address with or without brackets).
    pub fn parse(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let inner = t
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(t);
        match inner.parse::<IpAddr>() {
            Ok(ip) => Ok(Self::Address(ip)),
            Err(_) => HostName::parse(t).map(Self::Name),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => f.write_str(&n.0),
            Self::Address(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Self::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// Why an internal address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Internal {
    /// 127.0.0.0/8, ::1: the machine's own loopback, outside the lane.
    Loopback,
    /// 169.254.0.0/16, fe80::/10.
    LinkLocal,
    /// Cloud metadata endpoints (169.254.169.254, fd00:ec2::254, 168.63.129.16, 100.100.100.200).
    Metadata,
    /// 0.0.0.0/8, `::` (the local host on Linux).
    Unspecified,
}

impl Internal {
    /// Which class `ip` is in, if any.
    pub fn of(ip: IpAddr) -> Option<Self> {
        let ip = canonical(ip);
        match ip {
            IpAddr::V4(v4) => {
                let o = v4.octets();
                if [
                    [169, 254, 169, 254],
                    [168, 63, 129, 16],
                    [100, 100, 100, 200],
                ]
                .contains(&o)
                {
                    Some(Self::Metadata)
                } else if o[0] == 169 && o[1] == 254 {
                    Some(Self::LinkLocal)
                } else if o[0] == 127 {
                    Some(Self::Loopback)
                } else if o[0] == 0 {
                    Some(Self::Unspecified)
                } else {
                    None
                }
            }
            IpAddr::V6(v6) => {
                if v6 == "fd00:ec2::254".parse::<Ipv6Addr>().ok()? {
                    Some(Self::Metadata)
                } else if v6.is_loopback() {
                    Some(Self::Loopback)
                } else if v6.is_unspecified() {
                    Some(Self::Unspecified)
                } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                    Some(Self::LinkLocal)
                } else {
                    None
                }
            }
        }
    }

    /// A short description.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Loopback => "the machine's own loopback",
            Self::LinkLocal => "a link-local address",
            Self::Metadata => "a cloud metadata address",
            Self::Unspecified => "the unspecified address (the local host)",
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    canonical(a) == canonical(b)
}

/// Why the gate refused a connection, with the catalog change that would let it through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A `deny` entry names it.
    Denied {
        /// The entry.
        pattern: String,
    },
    /// `allowlist` mode and no `allow` entry names it.
    NotAllowed {
        /// The entry to add to `allow`.
        suggest: String,
    },
    /// It resolves to (or is) an internal address the catalog does not name exactly.
    Internal {
        /// The address.
        ip: IpAddr,
        /// Its class.
        class: Internal,
    },
    /// The gate could not resolve the name.
    Unresolved {
        /// The resolver's error.
        error: String,
    },
}

impl Refusal {
    /// A word or two for the `network:` line.
    pub fn short(&self) -> String {
        match self {
            Self::Denied { pattern } => format!("denied by \"{pattern}\""),
            Self::NotAllowed { .. } => "not in allow".into(),
            Self::Internal { ip, class } => format!("{ip} is {}", class.describe()),
            Self::Unresolved { error } => format!("no address: {error}"),
        }
    }

    /// The catalog line that would let it through, or what to do instead.
    pub fn remedy(&self, host: &Host, port: u16) -> String {
        match self {
            Self::Denied { pattern } => {
                format!("remove \"{pattern}\" from [network] deny to let it through")
            }
            Self::NotAllowed { suggest } => {
                format!("[network] allow = [..., \"{suggest}\"] lets it through")
            }
            Self::Internal { ip, .. } => {
                let addr = Host::Address(*ip);
                match host {
                    Host::Name(n) => format!(
                        "[network] resolve = {{ \"{}\" = \"{ip}\" }} or allow = [..., \"{addr}:{port}\"] lets it through",
                        n.0
                    ),
                    Host::Address(_) => {
                        format!("[network] allow = [..., \"{addr}:{port}\"] lets it through")
                    }
                }
            }
            Self::Unresolved { .. } => match host {
                Host::Name(n) => format!(
                    "check the name; [network] resolve = {{ \"{}\" = \"ADDRESS\" }} pins it",
                    n.0
                ),
                Host::Address(_) => "check the address".into(),
            },
        }
    }
}

/// What the catalog says of a host pattern a command asks for ([`Policy::standing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// The catalog lets it through already: nothing to ask.
    Allowed,
    /// Only an approval lets it through.
    NeedsApproval,
    /// Refused whatever the user says (a deny entry, an internal address, `*`): why.
    Refused(String),
}

/// The `[network]` section, ready to judge connections.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    config: NetworkConfig,
}

/// Where the addresses of a host come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addresses {
    /// Pinned by `resolve`, or an address to begin with: no lookup.
    Fixed(IpAddr),
    /// To be looked up by the gate, then checked with [`Policy::check_address`].
    Lookup,
}

impl Policy {
    /// The policy of `config`.
    pub fn new(config: NetworkConfig) -> Self {
        Self { config }
    }

    /// The section this policy applies.
    pub fn config(&self) -> &NetworkConfig {
        &self.config
    }

    /// Judge `host:port` by name (deny, then allow), before any lookup: `Ok` says where its
    /// addresses come from.
    pub fn check_name(&self, host: &Host, port: u16) -> Result<Addresses, Refusal> {
        if let Some(p) = self.config.deny.iter().find(|p| p.matches_name(host, port)) {
            return Err(Refusal::Denied {
                pattern: p.text.clone(),
            });
        }
        if self.config.mode == Mode::Allowlist
            && !self.config.allow.iter().any(|p| p.matches_name(host, port))
        {
            return Err(Refusal::NotAllowed {
                suggest: host.to_string(),
            });
        }
        Ok(self.addresses(host))
    }

    /// Where the addresses of `host` come from (a `resolve` pin, the address itself, or a
    /// lookup), whatever the rules say of it.
    pub fn addresses(&self, host: &Host) -> Addresses {
        match host {
            Host::Address(ip) => Addresses::Fixed(*ip),
            Host::Name(n) => match self.config.resolve.get(n) {
                Some(ip) => Addresses::Fixed(*ip),
                None => Addresses::Lookup,
            },
        }
    }

    /// What the catalog already says of `asked`, a host pattern a command asks for: let
    /// through, up to the user, or out of an approval's reach.
    pub fn standing(&self, asked: &Pattern) -> Standing {
        if asked.is_any() {
            return Standing::Refused(
                "`*` would open every host: ask for the hosts the command needs by name".into(),
            );
        }
        if let Some(d) = self.config.deny.iter().find(|d| d.covers(asked)) {
            return Standing::Refused(format!(
                "`{asked}` is refused by \"{d}\" in [network] deny, which an approval cannot lift; remove it from deny in the catalog to let it through"
            ));
        }
        if let Some(ip) = asked.address()
            && let Some(class) = Internal::of(ip)
        {
            let named = self
                .config
                .allow
                .iter()
                .any(|p| p.address().is_some_and(|a| same_ip(a, ip)) && p.covers(asked));
            if !named {
                return Standing::Refused(format!(
                    "`{asked}` is {}, which an approval cannot open; [network] allow = [..., \"{asked}\"] in the catalog can",
                    class.describe()
                ));
            }
        }
        let allowed = match self.config.mode {
            Mode::Open => true,
            Mode::Allowlist => self.config.allow.iter().any(|p| p.covers(asked)),
        };
        if allowed {
            Standing::Allowed
        } else {
            Standing::NeedsApproval
        }
    }

    /// Judge one address `host` resolved to (or is).
    pub fn check_address(&self, host: &Host, ip: IpAddr, port: u16) -> Result<(), Refusal> {
        if let Some(p) = self.config.deny.iter().find(|p| p.is_address(ip, port)) {
            return Err(Refusal::Denied {
                pattern: p.text.clone(),
            });
        }
        let Some(class) = Internal::of(ip) else {
            return Ok(());
        };
        let pinned = matches!(host, Host::Name(n) if self.config.resolve.get(n).is_some_and(|p| same_ip(*p, ip)));
        if pinned || self.config.allow.iter().any(|p| p.is_address(ip, port)) {
            Ok(())
        } else {
            Err(Refusal::Internal { ip, class })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(toml_text: &str) -> Policy {
        #[derive(Deserialize)]
        struct File {
            network: NetworkConfig,
        }
        let f: File = toml::from_str(toml_text).unwrap();
        Policy::new(f.network)
    }

    fn name(n: &str) -> Host {
        Host::parse(n).unwrap()
    }

    fn verdict(p: &Policy, host: &str, port: u16, ip: Option<&str>) -> Result<(), Refusal> {
        let h = name(host);
        let fixed = match p.check_name(&h, port)? {
            Addresses::Fixed(ip) => ip,
            Addresses::Lookup => ip.unwrap().parse().unwrap(),
        };
        p.check_address(&h, fixed, port)
    }

    #[test]
    fn the_issue_s_example_lets_through_what_it_lists_and_nothing_else() {
        let p = policy(
            r#"[network]
mode = "allowlist"
allow = ["github.com", "*.example.org", "mirror.internal:8443"]
deny = ["*.paste.example", "bad.example.org"]
resolve = { "registry.test" = "127.0.0.1" }
"#,
        );
        let public = Some("203.0.113.9");
        assert_eq!(verdict(&p, "github.com", 443, public), Ok(()));
        assert_eq!(verdict(&p, "GitHub.com.", 22, public), Ok(()));
        assert_eq!(verdict(&p, "a.b.example.org", 80, public), Ok(()));
        assert!(matches!(
            verdict(&p, "example.org", 80, public),
            Err(Refusal::NotAllowed { .. })
        ));
        assert_eq!(
            verdict(&p, "bad.example.org", 443, public),
            Err(Refusal::Denied {
                pattern: "bad.example.org".into()
            })
        );
        assert_eq!(verdict(&p, "mirror.internal", 8443, public), Ok(()));
        assert!(verdict(&p, "mirror.internal", 443, public).is_err());
        assert!(verdict(&p, "x.paste.example", 443, public).is_err());
        assert!(matches!(
            verdict(&p, "203.0.113.9", 80, None),
            Err(Refusal::NotAllowed { suggest }) if suggest == "203.0.113.9"
        ));
        // registry.test is not in allow: the pin alone does not let it through...
        assert!(verdict(&p, "registry.test", 80, None).is_err());
    }

    #[test]
    fn internal_addresses_need_the_exact_address_in_every_mode() {
        let p = policy(
            "[network]\nallow = [\"127.0.0.1:8080\"]\nresolve = { \"registry.test\" = \"127.0.0.1\" }\n",
        );
        assert_eq!(verdict(&p, "registry.test", 80, None), Ok(()));
        assert_eq!(verdict(&p, "127.0.0.1", 8080, None), Ok(()));
        assert!(matches!(
            verdict(&p, "127.0.0.1", 8081, None),
            Err(Refusal::Internal {
                class: Internal::Loopback,
                ..
            })
        ));
        for (ip, class) in [
            ("169.254.169.254", Internal::Metadata),
            ("::ffff:169.254.169.254", Internal::Metadata),
            ("fd00:ec2::254", Internal::Metadata),
            ("169.254.1.1", Internal::LinkLocal),
            ("fe80::1", Internal::LinkLocal),
            ("::1", Internal::Loopback),
            ("0.0.0.0", Internal::Unspecified),
        ] {
            let got = verdict(&p, ip, 80, None);
            assert!(
                matches!(got, Err(Refusal::Internal { class: c, .. }) if c == class),
                "{ip}: {got:?}"
            );
        }
        // A name that resolves to the metadata address is refused too.
        assert!(matches!(
            verdict(&p, "metadata.evil", 80, Some("169.254.169.254")),
            Err(Refusal::Internal {
                class: Internal::Metadata,
                ..
            })
        ));
        assert_eq!(
            verdict(&p, "example.com", 443, Some("93.184.215.14")),
            Ok(())
        );
    }

    #[test]
    fn bad_patterns_say_what_to_write() {
        for bad in [
            "git*hub.com",
            "github.com:0",
            "github.com:x",
            "[::1",
            "a..b",
            "",
        ] {
            let e = Pattern::parse(bad).unwrap_err();
            assert!(e.contains("*.example.org"), "{bad}: {e}");
        }
        let p = Pattern::parse("[2001:db8::1]:443").unwrap();
        assert!(p.is_address("2001:db8::1".parse().unwrap(), 443));
        assert!(!p.is_address("2001:db8::1".parse().unwrap(), 80));
    }

    #[test]
    fn a_requested_host_is_allowed_asked_for_or_out_of_reach() {
        let p = policy(
            r#"[network]
mode = "allowlist"
allow = ["github.com", "*.example.org", "127.0.0.1:8080"]
deny = ["*.paste.example", "bad.example.org"]
"#,
        );
        let standing = |h: &str| p.standing(&Pattern::parse(h).unwrap());
        assert_eq!(standing("github.com"), Standing::Allowed);
        assert_eq!(standing("github.com:443"), Standing::Allowed);
        assert_eq!(standing("a.example.org"), Standing::Allowed);
        assert_eq!(standing("*.b.example.org"), Standing::Allowed);
        assert_eq!(standing("127.0.0.1:8080"), Standing::Allowed);
        assert_eq!(standing("registry.test"), Standing::NeedsApproval);
        assert_eq!(standing("example.org"), Standing::NeedsApproval);
        assert_eq!(standing("*.org"), Standing::NeedsApproval);
        for out_of_reach in [
            "*",
            "x.paste.example",
            "bad.example.org:443",
            "169.254.169.254",
            "127.0.0.1",
            "127.0.0.1:9090",
            "[::1]:80",
        ] {
            assert!(
                matches!(standing(out_of_reach), Standing::Refused(_)),
                "{out_of_reach}: {:?}",
                standing(out_of_reach)
            );
        }
        let Standing::Refused(why) = standing("bad.example.org") else {
            unreachable!()
        };
        assert!(why.contains("[network] deny"), "{why}");
        // Open mode lets through all but deny and the internal addresses.
        let open = policy("[network]\ndeny = [\"evil.test\"]\n");
        assert_eq!(
            open.standing(&Pattern::parse("registry.test").unwrap()),
            Standing::Allowed
        );
        assert!(matches!(
            open.standing(&Pattern::parse("evil.test:80").unwrap()),
            Standing::Refused(_)
        ));
    }

    proptest! {
        /// `covers` agrees with matching: a host a covered pattern names, the covering one
        /// names too.
        #[test]
        fn a_covering_pattern_names_every_host_the_covered_one_does(
            a in "(\\*\\.)?([ab]\\.){0,2}t(:8[01])?",
            b in "(\\*\\.)?([ab]\\.){0,2}t(:8[01])?",
            host in "([ab]\\.){0,3}t",
            port in 80u16..82,
        ) {
            let (a, b) = (Pattern::parse(&a).unwrap(), Pattern::parse(&b).unwrap());
            let h = name(&host);
            if a.covers(&b) && b.matches_name(&h, port) {
                prop_assert!(a.matches_name(&h, port), "{a} covers {b} but not {host}:{port}");
            }
        }

        /// Deny wins: a host matched by a deny entry is refused whatever allow says.
        #[test]
        fn deny_always_wins(label in "[a-z][a-z0-9]{0,8}", sub in "[a-z]{1,5}", port in 1u16..) {
            let host = format!("{sub}.{label}.test");
            let p = Policy::new(NetworkConfig {
                mode: Mode::Allowlist,
                allow: vec![Pattern::parse("*").unwrap(), Pattern::parse(&host).unwrap()],
                deny: vec![Pattern::parse(&format!("*.{label}.test")).unwrap()],
                resolve: BTreeMap::new(),
            });
            let refused = matches!(p.check_name(&name(&host), port), Err(Refusal::Denied { .. }));
            prop_assert!(refused);
            // The apex is not below itself.
            let apex = format!("{label}.test");
            prop_assert!(p.check_name(&name(&apex), port).is_ok());
        }
    }
}
