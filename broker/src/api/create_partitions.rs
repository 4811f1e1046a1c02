//! CreatePartitions: grow topics; one result per requested topic.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller;

pub fn handle(broker: &Broker, request: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let results = request
        .topics
        .iter()
        .map(|topic| {
            let name = topic.name.0.to_string();
            let assignments: Option<Vec<Vec<i32>>> = topic
                .assignments
                .as_ref()
                .map(|a| a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect());
            let outcome = broker.commit(|image| {
                let records = controller::create_partitions(image, &name, topic.count, assignments.as_deref())?;
                Ok((if request.validate_only { Vec::new() } else { records }, ()))
            });
            let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
            match outcome {
                Ok(_) => {
                    if !request.validate_only {
                        tracing::info!(topic = %name, partitions = topic.count, "added partitions");
                    }
                    result
                }
                Err(e) => {
                    let (code, message) = commit_error(&e);
                    result.with_error_code(code).with_error_message(Some(str_bytes(message)))
                }
            }
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
