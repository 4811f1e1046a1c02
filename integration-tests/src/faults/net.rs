//! Network partitions between the nodes of a test cluster.
//!
//! [`Net::create`] gives each node its own network namespace on one bridge, the topology the
//! compose test builds (`python/netns.py`): the bridge has the host at `.1` of a /24, each node
//! a veth into the bridge and the address `.10 + id`. Every node listens on the same ports
//! ([`KAFKA_PORT`], [`QUORUM_PORT`]) on its own address, so there is no port to pick and none to
//! lose to another process. Clients run on the host and reach every node over the bridge.
//!
//! A fault is a set of nftables rules in the namespaces (table `inet sluice_net`, chains on the
//! `input` and `output` hooks) that *drop* packets between node addresses, so a cut link looks
//! like a lost one (no RST, no ICMP): connections hang until their own timeouts. The rules match
//! addresses and ports, not connection state, so they cut established connections too. Traffic
//! with the host is never matched: an isolated node still answers clients. Rules add up until
//! [`Net::heal`] flushes them all. [`Net::in_force`] says what was applied since, and
//! [`Net::rules`] lists the rules each namespace holds (`ip netns exec NS nft list ruleset` by hand).
//!
//! A node is started as `ip netns exec NS sluice ...` ([`crate::NodeOptions::netns`]). `ip netns
//! exec` enters the namespace and execs the broker in place (it forks only in batch mode), so
//! the child's pid is the broker's and kill/pause/resume/restart signal the broker itself; the
//! harness checks `/proc/<pid>/exe` once the node is ready.
//!
//! Bridges, veths and namespaces carry the creating process's pid in their names
//! (`snb<pid hex>x<n>`, `snv<pid hex>x<n>n<id>`, `sluice-net-<pid>-<n>-node<id>`); they are
//! removed on drop, and a later [`Net::create`] removes those of a process that no longer runs
//! (a test run killed before it could clean up). Needs root (CAP_NET_ADMIN), `ip` (iproute2)
//! and `nft` (nftables).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use anyhow::{bail, ensure, Context, Result};

/// The Kafka listener of every node, on its own address.
pub const KAFKA_PORT: u16 = 9092;
/// The controller (metadata quorum) listener of every node, on its own address.
pub const QUORUM_PORT: u16 = 9093;

/// The /16 the bridges' subnets are taken from, one /24 per cluster.
const SUBNETS: [u8; 2] = [10, 213];
/// The nftables table each namespace holds the fault rules in.
const TABLE: &str = "sluice_net";
/// Namespace names begin with this, then `<pid>-`.
const NAMESPACE_PREFIX: &str = "sluice-net-";
/// Taken while stale networks are removed and a subnet is chosen, so concurrent test processes
/// never pick the same one.
const LOCK_FILE: &str = "/run/lock/sluice-test-net.lock";
/// Longest interface name Linux accepts (IFNAMSIZ - 1).
const MAX_IFNAME: usize = 15;

/// Clusters created by this process, so each gets its own names.
static CREATED: AtomicU32 = AtomicU32::new(0);

/// A listener whose traffic [`Net::cut_port`] cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// The Kafka listener: replica fetching (and clients, who are never cut).
    Kafka,
    /// The controller listener: the metadata quorum, whose traffic is also the brokers' heartbeat.
    Quorum,
}

impl Port {
    pub fn number(self) -> u16 {
        match self {
            Port::Kafka => KAFKA_PORT,
            Port::Quorum => QUORUM_PORT,
        }
    }
}

#[derive(Debug)]
struct Member {
    id: i32,
    namespace: String,
    veth: String,
    address: Ipv4Addr,
}

/// The namespaces and bridge of one cluster, and the faults in force between its nodes.
#[derive(Debug)]
pub struct Net {
    bridge: String,
    host: Ipv4Addr,
    members: Vec<Member>,
    /// What was applied since the last heal, in order, for failure messages.
    in_force: Mutex<Vec<String>>,
}

/// One direction of a chain: `input` matches the peer as source, `output` as destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    Input,
    Output,
}

impl Hook {
    fn chain(self) -> &'static str {
        match self {
            Hook::Input => "input",
            Hook::Output => "output",
        }
    }
    fn peer_field(self) -> &'static str {
        match self {
            Hook::Input => "saddr",
            Hook::Output => "daddr",
        }
    }
}

/// nftables rules to add, per node id.
#[derive(Default)]
struct Rules(BTreeMap<i32, Vec<String>>);

impl Rules {
    /// In `node`'s namespace, drop packets to or from `peer` (as `hook` says), optionally only
    /// those with `port` as their source or destination port.
    fn drop(&mut self, node: i32, hook: Hook, peer: Ipv4Addr, port: Option<u16>, why: &str) {
        let base = format!("add rule inet {TABLE} {} ip {} {peer}", hook.chain(), hook.peer_field());
        let rules = self.0.entry(node).or_default();
        match port {
            None => rules.push(format!("{base} drop comment \"{why}\"")),
            Some(p) => {
                for side in ["dport", "sport"] {
                    rules.push(format!("{base} tcp {side} {p} drop comment \"{why}\""));
                }
            }
        }
    }
}

impl Net {
    /// Namespaces for nodes 1..=`size` on a fresh bridge (see the module doc).
    pub fn create(size: usize) -> Result<Net> {
        ensure!(
            (1..=9).contains(&size),
            "a partitionable cluster has 1 to 9 nodes, not {size}"
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            bail!("network namespaces need root (CAP_NET_ADMIN): run the partition tests as root, as CI does");
        }
        for (tool, package) in [("ip", "iproute2"), ("nft", "nftables")] {
            let found = Command::new(tool)
                .arg("-V")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            ensure!(
                found,
                "`{tool}` is not installed: install the Debian package {package} (scripts/test.sh does)"
            );
        }
        let _lock = lock()?;
        remove_stale();
        let pid = std::process::id();
        let n = CREATED.fetch_add(1, Ordering::Relaxed) & 0xfff;
        let tag = format!("{pid:x}x{n:x}");
        let subnet = free_subnet(pid, n)?;
        let prefix = format!("{}.{}.{subnet}", SUBNETS[0], SUBNETS[1]);
        let mut net = Net {
            bridge: format!("snb{tag}"),
            host: format!("{prefix}.1").parse()?,
            members: Vec::with_capacity(size),
            in_force: Mutex::new(Vec::new()),
        };
        ensure!(net.bridge.len() <= MAX_IFNAME, "bridge name {} too long", net.bridge);
        // From here on, dropping `net` removes whatever was made.
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", net.host), "dev", &net.bridge])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        for id in 1..=size as i32 {
            let member = Member {
                id,
                namespace: format!("{NAMESPACE_PREFIX}{pid}-{n}-node{id}"),
                veth: format!("snv{tag}n{id}"),
                address: format!("{prefix}.{}", 10 + id).parse()?,
            };
            ensure!(member.veth.len() <= MAX_IFNAME, "veth name {} too long", member.veth);
            ip(&["netns", "add", &member.namespace])?;
            net.members.push(member);
            let m = net.members.last().expect("just pushed");
            let ns = m.namespace.as_str();
            ip(&[
                "link", "add", &m.veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ])?;
            ip(&["link", "set", &m.veth, "master", &net.bridge, "up"])?;
            ip(&["-n", ns, "addr", "add", &format!("{}/24", m.address), "dev", "eth0"])?;
            ip(&["-n", ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            nft(
                ns,
                &format!(
                    "table inet {TABLE} {{\n\
                     chain input {{ type filter hook input priority filter; policy accept; }}\n\
                     chain output {{ type filter hook output priority filter; policy accept; }}\n\
                     }}\n"
                ),
            )?;
        }
        Ok(net)
    }

    /// The namespace node `id` runs in (for `ip netns exec`).
    pub fn namespace(&self, id: i32) -> Result<&str> {
        Ok(&self.member(id)?.namespace)
    }

    /// Node `id`'s address on the bridge, where it listens and which it advertises.
    pub fn address(&self, id: i32) -> Result<Ipv4Addr> {
        Ok(self.member(id)?.address)
    }

    /// The host's address on the bridge (where clients' connections come from).
    pub fn host_address(&self) -> Ipv4Addr {
        self.host
    }

    /// Node ids, ascending.
    pub fn ids(&self) -> Vec<i32> {
        self.members.iter().map(|m| m.id).collect()
    }

    /// Cuts `node` off from every other node, both directions. Clients still reach it.
    pub fn isolate(&self, node: i32) -> Result<()> {
        let others: Vec<i32> = self.ids().into_iter().filter(|id| *id != node).collect();
        self.member(node)?;
        self.split(&[&[node], &others])
    }

    /// Nodes in different groups exchange no packets: `[[1, 2], [3]]`, `[[1], [2], [3]]`.
    /// Every node is in exactly one group.
    pub fn split(&self, groups: &[&[i32]]) -> Result<()> {
        let mut group_of = BTreeMap::new();
        for (g, group) in groups.iter().enumerate() {
            for id in group.iter() {
                self.member(*id)?;
                ensure!(
                    group_of.insert(*id, g).is_none(),
                    "node {id} is in more than one group of {groups:?}"
                );
            }
        }
        let missing: Vec<i32> = self.ids().into_iter().filter(|id| !group_of.contains_key(id)).collect();
        ensure!(missing.is_empty(), "split {groups:?} leaves out nodes {missing:?}");
        let mut rules = Rules::default();
        let why = format!("split {groups:?}");
        for a in &self.members {
            for b in self.members.iter().filter(|b| group_of[&b.id] != group_of[&a.id]) {
                rules.drop(a.id, Hook::Input, b.address, None, &why);
                rules.drop(a.id, Hook::Output, b.address, None, &why);
            }
        }
        self.apply(rules, why)
    }

    /// Packets from `from` to `to` are dropped; those from `to` to `from` still flow (so a TCP
    /// connection either way gets no further than its first unanswered segment).
    pub fn one_way(&self, from: i32, to: i32) -> Result<()> {
        ensure!(from != to, "one_way needs two different nodes, not {from} twice");
        let (f, t) = (self.member(from)?.address, self.member(to)?.address);
        let why = format!("one way: node {from} -> node {to} dropped");
        let mut rules = Rules::default();
        rules.drop(from, Hook::Output, t, None, &why);
        rules.drop(to, Hook::Input, f, None, &why);
        self.apply(rules, why)
    }

    /// Only `port`'s traffic between `a` and `b` is cut, both directions: connections from
    /// either to the other's `port`. Their other listener keeps working.
    pub fn cut_port(&self, a: i32, b: i32, port: Port) -> Result<()> {
        ensure!(a != b, "cut_port needs two different nodes, not {a} twice");
        let (addr_a, addr_b) = (self.member(a)?.address, self.member(b)?.address);
        let why = format!("{port:?} port ({}) cut between node {a} and node {b}", port.number());
        let mut rules = Rules::default();
        for (node, peer) in [(a, addr_b), (b, addr_a)] {
            rules.drop(node, Hook::Input, peer, Some(port.number()), &why);
            rules.drop(node, Hook::Output, peer, Some(port.number()), &why);
        }
        self.apply(rules, why)
    }

    /// Removes every rule: all links work again.
    pub fn heal(&self) -> Result<()> {
        for m in &self.members {
            nft(&m.namespace, &format!("flush table inet {TABLE}\n"))?;
        }
        self.in_force.lock().expect("in_force lock").clear();
        Ok(())
    }

    /// The faults applied since the last heal, oldest first (empty: the network is whole).
    pub fn in_force(&self) -> Vec<String> {
        self.in_force.lock().expect("in_force lock").clone()
    }

    /// The rules each namespace holds, as `nft` lists them: for failure messages.
    pub fn rules(&self) -> String {
        let mut out = String::new();
        for m in &self.members {
            let listing = run_in(&m.namespace, &["nft", "list", "table", "inet", TABLE], None)
                .unwrap_or_else(|e| format!("(nft list failed: {e:#})"));
            out.push_str(&format!("node {} ({}, {}):\n{listing}\n", m.id, m.namespace, m.address));
        }
        out
    }

    fn member(&self, id: i32) -> Result<&Member> {
        self.members
            .iter()
            .find(|m| m.id == id)
            .with_context(|| format!("node {id} is not in this network (nodes {:?})", self.ids()))
    }

    /// Adds `rules`, one `nft` transaction per namespace, and records `what` as in force.
    fn apply(&self, rules: Rules, what: String) -> Result<()> {
        for (id, lines) in &rules.0 {
            let mut script = lines.join("\n");
            script.push('\n');
            nft(&self.member(*id)?.namespace, &script).with_context(|| format!("applying {what}"))?;
        }
        self.in_force.lock().expect("in_force lock").push(what);
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a veth removes both ends at once; a namespace's removal is asynchronous.
        for m in &self.members {
            let _ = ip(&["link", "del", &m.veth]);
            let _ = ip(&["netns", "del", &m.namespace]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// `ip args...`, failing with its stderr.
fn ip(args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(args), None).with_context(|| format!("ip {}", args.join(" ")))
}

/// `nft -f -` with `script` inside namespace `ns`.
fn nft(ns: &str, script: &str) -> Result<()> {
    run_in(ns, &["nft", "-f", "-"], Some(script)).with_context(|| format!("nft in {ns}:\n{script}"))?;
    Ok(())
}

fn run_in(ns: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    run(Command::new("ip").args(["netns", "exec", ns]).args(args), stdin)
}

fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("spawn {cmd:?}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{} ({})", String::from_utf8_lossy(&out.stderr).trim(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An exclusive lock on [`LOCK_FILE`], released when the file is dropped.
fn lock() -> Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .with_context(|| format!("open {LOCK_FILE}"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a file descriptor we own for the duration of the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        bail!("flock {LOCK_FILE}: {}", std::io::Error::last_os_error());
    }
    Ok(file)
}

/// A third octet in [`SUBNETS`] no address on the host is in yet, starting from one derived
/// from `pid` and `n` so concurrent processes rarely even look at the same one.
fn free_subnet(pid: u32, n: u32) -> Result<u8> {
    let listing = ip(&["-o", "-4", "addr", "show"])?;
    let used: Vec<u8> = listing
        .split_whitespace()
        .filter_map(|word| word.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter(|a| a.octets()[..2] == SUBNETS)
        .map(|a| a.octets()[2])
        .collect();
    let start = (pid.wrapping_mul(31).wrapping_add(n) % 256) as u8;
    (0..=255u8)
        .map(|i| start.wrapping_add(i))
        .find(|octet| !used.contains(octet))
        .with_context(|| format!("every {}.{}.x.0/24 is in use", SUBNETS[0], SUBNETS[1]))
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for the process.
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
}

/// The pid a name of ours carries, if it is one of ours.
fn owner_of_namespace(name: &str) -> Option<u32> {
    name.strip_prefix(NAMESPACE_PREFIX)?.split('-').next()?.parse().ok()
}

fn owner_of_link(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("snb").or_else(|| name.strip_prefix("snv"))?;
    let (pid, _) = rest.split_once('x')?;
    u32::from_str_radix(pid, 16).ok()
}

/// Removes the namespaces, bridges and veths of processes that no longer run, killing what
/// still runs inside such a namespace (the brokers of a killed test run).
fn remove_stale() {
    let stale = |owner: Option<u32>| owner.is_some_and(|pid| pid != std::process::id() && !alive(pid));
    if let Ok(list) = ip(&["netns", "list"]) {
        for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if !stale(owner_of_namespace(ns)) {
                continue;
            }
            if let Ok(pids) = ip(&["netns", "pids", ns]) {
                for pid in pids.split_whitespace().filter_map(|p| p.parse::<libc::pid_t>().ok()) {
                    // SAFETY: plain kill(2) of a process left in a namespace of a dead run.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            eprintln!("[faults::net] removing namespace {ns} left by a test run that no longer runs");
            let _ = ip(&["netns", "del", ns]);
        }
    }
    if let Ok(list) = ip(&["-o", "link", "show"]) {
        for line in list.lines() {
            // "12: snb1a2bx0: <...>" or "13: snv1a2bx0n1@if2: <...>"
            let Some(name) = line.split(": ").nth(1).and_then(|n| n.split('@').next()) else {
                continue;
            };
            if stale(owner_of_link(name)) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_ours_give_their_owner_and_others_none() {
        assert_eq!(owner_of_namespace("sluice-net-4242-3-node1"), Some(4242));
        assert_eq!(owner_of_namespace("slc1-broker"), None);
        assert_eq!(owner_of_link("snb1092x3"), Some(0x1092));
        assert_eq!(owner_of_link("snv1092x3n2"), Some(0x1092));
        assert_eq!(owner_of_link("eth0"), None);
        assert_eq!(owner_of_link("snbridge"), None);
    }

    #[test]
    fn a_port_cut_drops_both_source_and_destination_port() {
        let mut rules = Rules::default();
        let peer: Ipv4Addr = "10.213.1.12".parse().unwrap();
        rules.drop(1, Hook::Input, peer, Some(QUORUM_PORT), "why");
        rules.drop(1, Hook::Output, peer, None, "why");
        assert_eq!(
            rules.0[&1],
            [
                "add rule inet sluice_net input ip saddr 10.213.1.12 tcp dport 9093 drop comment \"why\"",
                "add rule inet sluice_net input ip saddr 10.213.1.12 tcp sport 9093 drop comment \"why\"",
                "add rule inet sluice_net output ip daddr 10.213.1.12 drop comment \"why\"",
            ]
        );
    }
}
