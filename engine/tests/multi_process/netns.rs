//! Network namespaces for the member processes (issue 27 asks for processes "each in a
//! network namespace of its own"): a bridge in the test's namespace at 10.77.0.1/24 and,
//! per member, a namespace `sl{pid}-{i}` joined to it by a veth pair, its end at
//! 10.77.0.(10 + i). The broker listens on the bridge's address, so each member reaches
//! it over its own veth link as over a network, not over a shared loopback. Needs root
//! (`ip netns`, iproute2): where that is not permitted, [`Netns::new`] says why and the
//! caller skips the variant. Everything made is removed when dropped.

use std::process::Command;

/// The bridge's address: where the broker listens.
pub const BRIDGE_ADDR: &str = "10.77.0.1";

pub struct Netns {
    bridge: String,
    prefix: String,
    made: Vec<String>,
    /// The veth ends in the test's namespace (deleting one deletes its pair).
    links: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip ({e}): install iproute2"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl Netns {
    /// Makes the bridge, or says why it cannot.
    pub fn new() -> Result<Netns, String> {
        let id = std::process::id() % 100_000;
        let ns = Netns { bridge: format!("slbr{id}"), prefix: format!("sl{id}"), made: Vec::new(), links: Vec::new() };
        ip(&["link", "add", &ns.bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{BRIDGE_ADDR}/24"), "dev", &ns.bridge])?;
        ip(&["link", "set", &ns.bridge, "up"])?;
        Ok(ns)
    }

    /// Makes member `i`'s namespace, linked to the bridge; returns its name.
    pub fn member(&mut self, i: usize) -> String {
        let name = format!("{}-{i}", self.prefix);
        let (outside, inside) = (format!("{}a{i}", self.prefix), format!("{}b{i}", self.prefix));
        let addr = format!("10.77.0.{}/24", 10 + i);
        let steps: [&[&str]; 8] = [
            &["netns", "add", &name],
            &["link", "add", &outside, "type", "veth", "peer", "name", &inside],
            &["link", "set", &inside, "netns", &name],
            &["link", "set", &outside, "master", &self.bridge],
            &["link", "set", &outside, "up"],
            &["-n", &name, "addr", "add", &addr, "dev", &inside],
            &["-n", &name, "link", "set", &inside, "up"],
            &["-n", &name, "link", "set", "lo", "up"],
        ];
        self.made.push(name.clone());
        self.links.push(outside.clone());
        for step in steps {
            ip(step).unwrap_or_else(|e| panic!("member {i}'s namespace: {e}"));
        }
        name
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for link in &self.links {
            let _ = ip(&["link", "del", link]);
        }
        for name in &self.made {
            let _ = ip(&["netns", "del", name]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
