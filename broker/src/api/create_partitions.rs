//! CreatePartitions: grow topics; one result per requested topic.

use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::records::MetadataCommand;
use crate::metadata::CommitError;

pub async fn handle(broker: Arc<Broker>, request: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let assignments: Option<Vec<Vec<i32>>> = topic
            .assignments
            .as_ref()
            .map(|a| a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect());
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        let outcome = if request.validate_only {
            controller::create_partitions(&broker.metadata.image(), &name, topic.count, assignments.as_deref())
                .map(|_| ())
                .map_err(CommitError::Refused)
        } else {
            let command = MetadataCommand::CreatePartitions {
                name: name.clone(),
                count: topic.count,
                assignments,
            };
            broker.commit(command).await.map(|_| ())
        };
        results.push(match outcome {
            Ok(()) => {
                if !request.validate_only {
                    tracing::info!(topic = %name, partitions = topic.count, "added partitions");
                }
                result
            }
            Err(e) => {
                let (code, message) = commit_error(&e);
                result
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message)))
            }
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
