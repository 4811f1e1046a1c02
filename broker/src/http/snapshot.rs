//! The cluster as this broker sees it at one moment: metadata (brokers, quorum, partitions),
//! its hosted replicas' offsets and sizes, and the groups it coordinates with their lag. Read
//! once per scrape or console poll from the live state, each lock held only for its copy, and
//! shared by the Prometheus exposition and the console's JSON.
//!
//! A partition's lag is its local last stable offset minus the committed offset, or the high
//! watermark minus it when the commit is past the last stable offset (which only a
//! `read_uncommitted` consumer reaches); never below 0.

use std::collections::HashMap;

use bytes::Bytes;
use serde::Serialize;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::config::listeners::HTTP_ENDPOINT_NAME;
use crate::controller;
use crate::group::records::OffsetAndMetadata;
use crate::metadata::image::{BrokerRegistration, MetadataImage};
use crate::topic_config;

#[derive(Debug, Clone, Serialize)]
pub struct ClusterView {
    pub cluster_id: String,
    pub node_id: i32,
    /// The active controller (the quorum leader), -1 while there is none.
    pub controller_id: i32,
    pub version: &'static str,
    pub now_ms: i64,
    pub quorum: QuorumView,
    pub brokers: Vec<BrokerView>,
    pub topics: Vec<TopicView>,
    pub groups: Vec<GroupView>,
    /// Brokers whose console did not answer (their groups are missing from `groups`).
    pub unreachable: Vec<i32>,
    /// Who is connected: open client connections per broker, listener and principal.
    pub clients: Vec<ClientView>,
    /// Record bytes served to consumers, by the serving brokers' rack (KIP-392's point:
    /// consumers with `client.rack` read in their own rack). Filled by the console.
    pub racks: Vec<RackView>,
}

/// What the brokers of one rack served to consumers.
#[derive(Debug, Clone, Serialize)]
pub struct RackView {
    /// `None`: brokers without `broker.rack`.
    pub rack: Option<String>,
    pub brokers: Vec<i32>,
    /// Since each broker started, over the brokers whose console answered.
    pub consumer_bytes_out: u64,
    /// Over the last sample of each of them.
    pub consumer_bytes_out_per_s: f64,
}

/// The racks of `brokers` and what each served, from the brokers' own counts.
pub fn racks(brokers: &[BrokerView]) -> Vec<RackView> {
    let mut racks: Vec<RackView> = Vec::new();
    for b in brokers {
        let rack = match racks.iter_mut().find(|r| r.rack == b.rack) {
            Some(rack) => rack,
            None => {
                racks.push(RackView {
                    rack: b.rack.clone(),
                    brokers: Vec::new(),
                    consumer_bytes_out: 0,
                    consumer_bytes_out_per_s: 0.0,
                });
                racks.last_mut().expect("just pushed")
            }
        };
        rack.brokers.push(b.node_id);
        rack.consumer_bytes_out += b.consumer_bytes_out.unwrap_or(0);
        rack.consumer_bytes_out_per_s += b.consumer_bytes_out_per_s.unwrap_or(0.0);
    }
    racks.sort_by(|a, b| a.rack.cmp(&b.rack));
    racks
}

/// Open client connections of one principal on one listener of one broker.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ClientView {
    pub node_id: i32,
    pub listener: String,
    /// `User:alice`, `User:<a certificate's mapped name>`, or `User:ANONYMOUS`.
    pub principal: String,
    pub connections: i64,
}

/// This broker's client connections by listener and principal.
pub fn clients(broker: &Broker) -> Vec<ClientView> {
    broker
        .metrics
        .principals()
        .into_iter()
        .map(|(listener, principal, connections)| ClientView {
            node_id: broker.config.node_id,
            listener,
            principal,
            connections,
        })
        .collect()
}

#[derive(Debug, Clone, Serialize)]
pub struct QuorumView {
    pub leader_id: i32,
    /// The metadata log's leader epoch (Raft term).
    pub epoch: u64,
    /// The metadata log's high watermark (Raft commit index).
    pub commit_index: u64,
    /// The last entry of this member's metadata log.
    pub last_index: u64,
    /// This member's role: leader, follower, candidate or observer.
    pub role: &'static str,
    pub voters: Vec<VoterView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VoterView {
    pub node_id: i32,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrokerView {
    pub node_id: i32,
    /// The inter-broker listener's advertised address (or the first listener's).
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Partition replicas it registered it can host within its open-files limit (`None`:
    /// unlimited, or registered by an older build).
    pub replica_capacity: Option<u32>,
    pub live: bool,
    /// The broker's console, when it serves one (`metrics.listen`).
    pub console: Option<String>,
    /// Record bytes it has sent to consumers since it started, and per second over its last
    /// sample (`None`: it did not tell, its console being off or not answering).
    pub consumer_bytes_out: Option<u64>,
    pub consumer_bytes_out_per_s: Option<f64>,
    #[serde(skip)]
    pub http: Option<(String, i32)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopicView {
    pub name: String,
    pub internal: bool,
    pub partitions: Vec<PartitionView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PartitionView {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub under_replicated: bool,
    /// The rest is this broker's replica, when it hosts one.
    pub size_bytes: Option<u64>,
    pub high_watermark: Option<i64>,
    /// The high watermark, or the first offset of the oldest open transaction if lower.
    pub last_stable_offset: Option<i64>,
    pub log_start_offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    /// This broker's replica leads the partition (as its own state says, which may run a
    /// moment ahead of or behind `leader`).
    #[serde(skip)]
    pub led_here: bool,
    #[serde(skip)]
    pub under_min_isr: bool,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct GroupView {
    pub group_id: String,
    pub state: String,
    pub protocol: String,
    pub coordinator: i32,
    pub members: Vec<MemberView>,
    pub offsets: Vec<OffsetView>,
    /// Sum of the known lags.
    pub total_lag: i64,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct MemberView {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
    pub assignment: Vec<AssignedTopic>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct AssignedTopic {
    pub topic: String,
    pub partitions: Vec<i32>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct OffsetView {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    /// Where the group's consumers would stop, when this broker hosts a replica of the
    /// partition: the last stable offset, or the high watermark when the committed offset is
    /// past the last stable offset (only a read_uncommitted consumer gets there).
    pub end_offset: Option<i64>,
    pub lag: Option<i64>,
    /// The member the partition is assigned to, if any.
    pub member_id: Option<String>,
}

/// A share group's start offsets (SPSO), as its coordinator stores them, shaped as committed
/// offsets: the console shows them, and the records behind the high watermark as lag.
fn share_start_offsets(broker: &Broker, group_id: &str) -> Vec<(String, i32, Option<OffsetAndMetadata>)> {
    let image = broker.metadata.image();
    broker
        .groups
        .share_states_of(group_id)
        .into_iter()
        .filter_map(|((topic_id, partition), state)| {
            let name = image.topic_by_id(&topic_id)?.name.clone();
            let at = OffsetAndMetadata {
                offset: state.start_offset,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
            };
            Some((name, partition, Some(at)))
        })
        .collect()
}

/// Reads the cluster view from `broker`'s state now. Groups are this broker's own; the
/// console adds the other brokers' (`console.rs`).
pub fn take(broker: &Broker) -> ClusterView {
    let image = broker.metadata.image();
    let status = broker.metadata.quorum_status();
    let topics = topics(broker, &image);
    let groups = groups(broker, &topics);
    ClusterView {
        cluster_id: image.cluster_id.clone(),
        node_id: broker.config.node_id,
        controller_id: broker.metadata.controller_id(),
        version: env!("CARGO_PKG_VERSION"),
        now_ms: now_ms(),
        quorum: QuorumView {
            leader_id: status.leader_id.map_or(-1, crate::metadata::node_id_of),
            epoch: status.term,
            commit_index: status.commit_index,
            last_index: status.last_index,
            role: match status.role {
                sluice_raft_meta::Role::Leader => "leader",
                sluice_raft_meta::Role::Follower => "follower",
                sluice_raft_meta::Role::Candidate => "candidate",
                sluice_raft_meta::Role::Learner => "observer",
            },
            voters: status
                .voters
                .iter()
                .map(|v| VoterView {
                    node_id: crate::metadata::node_id_of(v.id),
                })
                .collect(),
        },
        brokers: image.brokers.values().map(|b| broker_view(broker, b)).collect(),
        topics,
        groups,
        unreachable: Vec::new(),
        clients: clients(broker),
        racks: Vec::new(),
    }
}

fn broker_view(broker: &Broker, b: &BrokerRegistration) -> BrokerView {
    let own = (b.broker_id == broker.config.node_id).then(|| consumer_bytes_out(broker));
    let kafka = b
        .endpoint(&broker.config.listeners.inter_broker)
        .or_else(|| b.endpoints.iter().find(|e| e.listener != HTTP_ENDPOINT_NAME));
    let http = b.endpoint(HTTP_ENDPOINT_NAME).map(|e| (e.host.clone(), e.port));
    BrokerView {
        node_id: b.broker_id,
        host: kafka.map(|e| e.host.clone()).unwrap_or_default(),
        port: kafka.map_or(-1, |e| e.port),
        rack: b.rack.clone(),
        replica_capacity: b.replica_capacity,
        live: b.is_live(),
        console: http
            .as_ref()
            .map(|(host, port)| format!("http://{}/", host_port(host, *port))),
        http,
        consumer_bytes_out: own.map(|(total, _)| total),
        consumer_bytes_out_per_s: own.and_then(|(_, rate)| rate),
    }
}

/// Record bytes this broker has sent to consumers since it started, and per second over its
/// last history sample (none before the first).
pub fn consumer_bytes_out(broker: &Broker) -> (u64, Option<f64>) {
    let rate = broker.history.samples().last().map(|s| s.bytes_out_per_s);
    (broker.metrics.all_topics().bytes_out, rate)
}

/// `host:port`, bracketing an IPv6 address.
pub fn host_port(host: &str, port: i32) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn topics(broker: &Broker, image: &MetadataImage) -> Vec<TopicView> {
    let defaults = broker.topic_defaults(image);
    image
        .topics
        .values()
        .map(|topic| TopicView {
            name: topic.name.clone(),
            internal: controller::is_internal_topic(&topic.name),
            partitions: topic
                .partitions
                .iter()
                .enumerate()
                .map(|(index, registration)| {
                    let index = index as i32;
                    let local = broker.replicas.get(topic.topic_id, index);
                    let min_isr =
                        topic_config::min_insync_replicas(&topic.configs, &defaults, registration.replicas.len());
                    PartitionView {
                        partition: index,
                        leader: registration.leader,
                        leader_epoch: registration.leader_epoch,
                        replicas: registration.replicas.to_vec(),
                        isr: registration.isr.to_vec(),
                        under_replicated: registration.isr.len() < registration.replicas.len(),
                        size_bytes: local.as_ref().map(|p| p.size_bytes()),
                        high_watermark: local.as_ref().map(|p| p.high_watermark()),
                        last_stable_offset: local.as_ref().map(|p| p.last_stable_offset()),
                        log_start_offset: local.as_ref().map(|p| p.log_start_offset()),
                        log_end_offset: local.as_ref().map(|p| p.log_end_offset()),
                        led_here: local.as_ref().is_some_and(|p| p.is_leader()),
                        under_min_isr: registration.isr.len() < min_isr,
                    }
                })
                .collect(),
        })
        .collect()
}

fn groups(broker: &Broker, topics: &[TopicView]) -> Vec<GroupView> {
    let ends: HashMap<(&str, i32), (i64, i64)> = topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().filter_map(move |p| {
                Some((
                    (t.name.as_str(), p.partition),
                    (p.last_stable_offset?, p.high_watermark?),
                ))
            })
        })
        .collect();
    let (listed, _loading) = broker.groups.list_groups();
    listed
        .into_iter()
        .filter_map(|listed| {
            let group_id = listed.group_id;
            // A group that moved or went away between the listing and now is left out.
            let (state, protocol, members) = if listed.group_type == "consumer" {
                let summary = broker.groups.describe_consumer_group(&group_id).ok()?;
                let image = broker.metadata.image();
                let members: Vec<MemberView> = summary
                    .members
                    .iter()
                    .map(|m| {
                        let assignment = m
                            .assignment
                            .iter()
                            .filter_map(|(id, partitions)| {
                                Some(AssignedTopic {
                                    topic: image.topic_by_id(id)?.name.clone(),
                                    partitions: partitions.iter().copied().collect(),
                                })
                            })
                            .collect();
                        member_view(&m.member_id, &m.client_id, &m.client_host, assignment)
                    })
                    .collect();
                (summary.state.to_string(), summary.assignor, members)
            } else if listed.group_type == "share" {
                let summary = broker.groups.describe_share_group(&group_id).ok()?;
                let image = broker.metadata.image();
                let members: Vec<MemberView> = summary
                    .members
                    .iter()
                    .map(|(member_id, m)| {
                        let assignment = m
                            .assignment
                            .iter()
                            .filter_map(|(id, partitions)| {
                                Some(AssignedTopic {
                                    topic: image.topic_by_id(id)?.name.clone(),
                                    partitions: partitions.iter().copied().collect(),
                                })
                            })
                            .collect();
                        member_view(member_id, &m.client_id, &m.client_host, assignment)
                    })
                    .collect();
                (summary.state.to_string(), "share".to_string(), members)
            } else {
                let summary = broker.groups.describe_group(&group_id).ok().flatten()?;
                let members: Vec<MemberView> = summary
                    .members
                    .iter()
                    .map(|m| {
                        let assignment = if summary.protocol_type == "consumer" {
                            consumer_assignment(&m.assignment)
                        } else {
                            Vec::new()
                        };
                        member_view(&m.member_id, &m.client_id, &m.client_host, assignment)
                    })
                    .collect();
                (summary.state.name().to_string(), summary.protocol_name.clone(), members)
            };
            let committed = if listed.group_type == "share" {
                share_start_offsets(broker, &group_id)
            } else {
                broker.groups.fetch_offsets(&group_id, None).unwrap_or_default()
            };
            let owner = |topic: &str, partition: i32| {
                members
                    .iter()
                    .find(|m| {
                        m.assignment
                            .iter()
                            .any(|a| a.topic == topic && a.partitions.contains(&partition))
                    })
                    .map(|m| m.member_id.clone())
            };
            let offsets: Vec<OffsetView> = committed
                .into_iter()
                .filter_map(|(topic, partition, offset)| {
                    let committed = offset?.offset;
                    let end_offset =
                        ends.get(&(topic.as_str(), partition))
                            .map(|&(stable, hw)| if committed <= stable { stable } else { hw });
                    Some(OffsetView {
                        member_id: owner(&topic, partition),
                        lag: end_offset.map(|end| (end - committed).max(0)),
                        end_offset,
                        topic,
                        partition,
                        committed,
                    })
                })
                .collect();
            Some(GroupView {
                total_lag: offsets.iter().filter_map(|o| o.lag).sum(),
                group_id,
                state,
                protocol,
                coordinator: broker.config.node_id,
                members,
                offsets,
            })
        })
        .collect()
}

/// A consumer group member's assignment, as the console shows it.
fn member_view(member_id: &str, client_id: &str, host: &str, assignment: Vec<AssignedTopic>) -> MemberView {
    MemberView {
        member_id: member_id.to_string(),
        client_id: client_id.to_string(),
        host: host.to_string(),
        assignment,
    }
}

fn consumer_assignment(assignment: &Bytes) -> Vec<AssignedTopic> {
    crate::group::consumer_assignment(assignment)
        .into_iter()
        .map(|(topic, partitions)| AssignedTopic { topic, partitions })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(node_id: i32, rack: Option<&str>, served: Option<u64>, rate: Option<f64>) -> BrokerView {
        BrokerView {
            node_id,
            host: String::new(),
            port: 9092,
            rack: rack.map(str::to_string),
            replica_capacity: None,
            live: true,
            console: None,
            http: None,
            consumer_bytes_out: served,
            consumer_bytes_out_per_s: rate,
        }
    }

    #[test]
    fn racks_add_up_what_their_brokers_served_and_a_silent_broker_adds_nothing() {
        let brokers = [
            broker(1, Some("b"), Some(100), Some(10.0)),
            broker(2, Some("a"), Some(5), None),
            broker(3, Some("b"), None, None),
            broker(4, None, Some(7), Some(1.5)),
        ];
        let racks = racks(&brokers);
        let summary: Vec<_> = racks
            .iter()
            .map(|r| {
                (
                    r.rack.as_deref(),
                    r.brokers.clone(),
                    r.consumer_bytes_out,
                    r.consumer_bytes_out_per_s,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (None, vec![4], 7, 1.5),
                (Some("a"), vec![2], 5, 0.0),
                (Some("b"), vec![1, 3], 100, 10.0),
            ]
        );
    }
}
