//! Several `sluice` processes forming one cluster on loopback: each a broker and a voter of
//! the metadata quorum (`--voters`), on ports picked up front so every node gets the same list.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::kafka_client;
use crate::node::{free_loopback_port, NodeOptions, SluiceNode};

pub struct Cluster {
    nodes: Vec<SluiceNode>,
}

impl Cluster {
    /// Starts `size` nodes (ids 1..=size) with `settings` on each, and waits until every one
    /// is registered and lists itself in Metadata.
    pub fn start(size: usize, settings: &[(&str, &str)]) -> Result<Cluster> {
        let ports: Vec<(u16, u16)> = (0..size)
            .map(|_| Ok((free_loopback_port()?, free_loopback_port()?)))
            .collect::<Result<_>>()?;
        let voters: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, controller))| format!("{}@127.0.0.1:{controller}", i + 1))
            .collect();
        let voters = voters.join(",");
        let mut nodes = Vec::with_capacity(size);
        for (i, (port, _)) in ports.iter().enumerate() {
            let mut opts = NodeOptions {
                node_id: i as i32 + 1,
                ..NodeOptions::default()
            }
            .port(*port);
            opts.extra_args = vec!["--voters".into(), voters.clone()];
            opts.ready_timeout = Duration::from_secs(30);
            for (k, v) in settings {
                opts = opts.set(k, v);
            }
            nodes.push(SluiceNode::spawn(opts)?);
        }
        for node in &mut nodes {
            node.wait_ready()?;
        }
        Ok(Cluster { nodes })
    }

    /// Every node's address, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(SluiceNode::bootstrap)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node with Kafka node id `id` (1-based).
    pub fn node(&mut self, id: i32) -> &mut SluiceNode {
        &mut self.nodes[id as usize - 1]
    }

    pub fn addr(&self, id: i32) -> SocketAddr {
        self.nodes[id as usize - 1].addr()
    }

    pub fn ids(&self) -> Vec<i32> {
        (1..=self.nodes.len() as i32).collect()
    }

    /// The active controller as node `asking` reports it, waiting until one is known.
    pub fn controller(&self, asking: i32, timeout: Duration) -> Result<i32> {
        crate::clients::wait_until(timeout, "a known controller", || {
            kafka_client::metadata(self.addr(asking))
                .ok()
                .map(|m| m.controller_id.0)
                .filter(|id| *id > 0)
        })
    }

    /// Fails unless every node in `among` eventually reports the same brokers, controller and
    /// topic leadership; returns that common view.
    pub fn await_identical_metadata(&self, among: &[i32], timeout: Duration) -> Result<String> {
        let view = |id: i32| -> Result<String> {
            let m = kafka_client::metadata(self.addr(id))?;
            let mut brokers: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
            brokers.sort();
            let mut topics: Vec<String> = m
                .topics
                .iter()
                .map(|t| {
                    let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
                    let leaders: Vec<(i32, i32, i32)> = t
                        .partitions
                        .iter()
                        .map(|p| (p.partition_index, p.leader_id.0, p.leader_epoch))
                        .collect();
                    format!("{name} {} {leaders:?}", t.topic_id)
                })
                .collect();
            topics.sort();
            Ok(format!(
                "controller {} brokers {brokers:?} topics {topics:?}",
                m.controller_id.0
            ))
        };
        let deadline = std::time::Instant::now() + timeout;
        let mut last = Vec::new();
        while std::time::Instant::now() < deadline {
            last = among
                .iter()
                .map(|id| view(*id).unwrap_or_else(|e| format!("error: {e:#}")))
                .collect::<Vec<_>>();
            if last.iter().all(|v| v == &last[0] && !v.starts_with("error")) {
                return Ok(last.swap_remove(0));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("nodes {among:?} never agreed on metadata: {last:#?}")
    }

    /// Broker ids node `asking` lists in Metadata (fenced brokers are not listed).
    pub fn listed_brokers(&self, asking: i32) -> Result<Vec<i32>> {
        let m = kafka_client::metadata(self.addr(asking)).context("metadata")?;
        let mut ids: Vec<i32> = m.brokers.iter().map(|b| b.node_id.0).collect();
        ids.sort();
        Ok(ids)
    }
}
