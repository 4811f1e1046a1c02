//! DescribeClientQuotas: the quotas of every entity matching the filter, from the applied
//! metadata image, with Kafka's matching (`ClientQuotasImage.describe`): each component names an
//! entity type and matches one name (EXACT), the default entity (DEFAULT) or any name,
//! default included (SPECIFIED); `strict` keeps only entities with no other types. No
//! components and not strict matches everything. Needs DESCRIBE_CONFIGS on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use super::{str_bytes, Access, RequestContext};
use crate::controller::quotas::{CLIENT_ID, IP, USER};
use crate::metadata::acls::AclOperation;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{QuotaEntity, QuotaName};

const MATCH_TYPE_EXACT: i8 = 0;
const MATCH_TYPE_DEFAULT: i8 = 1;
const MATCH_TYPE_SPECIFIED: i8 = 2;

pub fn handle(ctx: &RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    match permitted(access).and_then(|()| describe(&image, &request)) {
        Ok(entries) => DescribeClientQuotasResponse::default().with_entries(Some(entries)),
        Err((error, message)) => DescribeClientQuotasResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)))
            .with_entries(None),
    }
}

/// DESCRIBE_CONFIGS on the cluster, or why not.
fn permitted(access: Access<'_>) -> Result<(), (ResponseError, String)> {
    if access.authorize_cluster(AclOperation::DescribeConfigs) {
        return Ok(());
    }
    Err((
        ResponseError::ClusterAuthorizationFailed,
        access.denied_cluster(AclOperation::DescribeConfigs),
    ))
}

/// What one filter component asks of an entity's dimension.
#[derive(Debug, Clone, PartialEq)]
enum Match {
    /// The entity names this (`QuotaName::Default` for DEFAULT).
    Name(QuotaName),
    /// The entity has the dimension, any name or the default.
    Any,
}

/// A parsed filter: for each dimension, what it must match (`None`: no component names it).
#[derive(Debug, Default)]
struct Filter {
    user: Option<Match>,
    client_id: Option<Match>,
    /// An `ip` component: no entity here has that type, so nothing matches.
    ip: bool,
}

fn describe(
    image: &MetadataImage,
    request: &DescribeClientQuotasRequest,
) -> Result<Vec<EntryData>, (ResponseError, String)> {
    let filter = parse_filter(request)?;
    let components = usize::from(filter.user.is_some()) + usize::from(filter.client_id.is_some());
    if filter.ip || (components == 0 && request.strict) {
        return Ok(Vec::new());
    }
    Ok(image
        .client_quotas
        .iter()
        .filter(|(entity, _)| {
            let dimensions = usize::from(entity.user.is_some()) + usize::from(entity.client_id.is_some());
            matches(&filter.user, &entity.user)
                && matches(&filter.client_id, &entity.client_id)
                && (!request.strict || dimensions == components)
        })
        .map(|(entity, values)| {
            EntryData::default().with_entity(entity_data(entity)).with_values(
                values
                    .iter()
                    .map(|(key, value)| {
                        ValueData::default()
                            .with_key(str_bytes(key.clone()))
                            .with_value(value.0)
                    })
                    .collect(),
            )
        })
        .collect())
}

fn parse_filter(request: &DescribeClientQuotasRequest) -> Result<Filter, (ResponseError, String)> {
    let invalid = |message: String| (ResponseError::InvalidRequest, message);
    let mut filter = Filter::default();
    for component in &request.components {
        let entity_type = &*component.entity_type;
        let twice = || {
            invalid(format!(
                "Entity type {entity_type} cannot appear more than once in the filter."
            ))
        };
        let slot = match entity_type {
            "" => return Err(invalid("Invalid empty entity type.".into())),
            USER => &mut filter.user,
            CLIENT_ID => &mut filter.client_id,
            IP if filter.ip => return Err(twice()),
            IP => {
                filter.ip = true;
                continue;
            }
            other => {
                return Err((
                    ResponseError::UnsupportedVersion,
                    format!("Unsupported entity type {other}"),
                ))
            }
        };
        if slot.is_some() {
            return Err(twice());
        }
        let name = component._match.as_deref();
        *slot = Some(match (component.match_type, name) {
            (MATCH_TYPE_EXACT, Some(name)) => Match::Name(QuotaName::Named(name.to_string())),
            (MATCH_TYPE_EXACT, None) => {
                return Err(invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ))
            }
            (MATCH_TYPE_DEFAULT, None) => Match::Name(QuotaName::Default),
            (MATCH_TYPE_SPECIFIED, None) => Match::Any,
            (MATCH_TYPE_DEFAULT | MATCH_TYPE_SPECIFIED, Some(_)) => {
                return Err(invalid(format!(
                    "Request specified match type {}, which takes no match string, but also specified one.",
                    component.match_type
                )))
            }
            (other, _) => return Err(invalid(format!("Unknown match type {other}"))),
        });
    }
    if filter.ip && (filter.user.is_some() || filter.client_id.is_some()) {
        return Err(invalid(
            "Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.".into(),
        ));
    }
    Ok(filter)
}

fn matches(wanted: &Option<Match>, dimension: &Option<QuotaName>) -> bool {
    match (wanted, dimension) {
        (None, _) => true,
        (Some(Match::Any), found) => found.is_some(),
        (Some(Match::Name(name)), Some(found)) => name == found,
        (Some(Match::Name(_)), None) => false,
    }
}

fn entity_data(entity: &QuotaEntity) -> Vec<EntityData> {
    [(USER, &entity.user), (CLIENT_ID, &entity.client_id)]
        .into_iter()
        .filter_map(|(entity_type, name)| {
            name.as_ref().map(|name| {
                EntityData::default()
                    .with_entity_type(str_bytes(entity_type))
                    .with_entity_name(name.as_wire().map(str_bytes))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_client_quotas_request::ComponentData;

    use crate::metadata::records::{MetadataRecord, QuotaValue};

    fn image() -> MetadataImage {
        let mut image = MetadataImage::new("c".into());
        let entities = [
            (None, Some(QuotaName::Named("app".into()))),
            (None, Some(QuotaName::Default)),
            (Some(QuotaName::Named("alice".into())), None),
            (
                Some(QuotaName::Named("alice".into())),
                Some(QuotaName::Named("app".into())),
            ),
        ];
        for (user, client_id) in entities {
            image.apply(&MetadataRecord::ClientQuota {
                entity: QuotaEntity { user, client_id },
                key: "producer_byte_rate".into(),
                value: Some(QuotaValue(1024.0)),
            });
        }
        image
    }

    /// An entity as described: (entity type, name or null for the default).
    type Entity = Vec<(String, Option<String>)>;

    fn component(entity_type: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(entity_type))
            .with_match_type(match_type)
            .with_match(name.map(str_bytes))
    }

    fn described(components: Vec<ComponentData>, strict: bool) -> Result<Vec<Entity>, ResponseError> {
        let request = DescribeClientQuotasRequest::default()
            .with_components(components)
            .with_strict(strict);
        describe(&image(), &request)
            .map(|entries| {
                entries
                    .into_iter()
                    .map(|e| {
                        e.entity
                            .into_iter()
                            .map(|d| (d.entity_type.to_string(), d.entity_name.map(|n| n.to_string())))
                            .collect()
                    })
                    .collect()
            })
            .map_err(|(error, _)| error)
    }

    fn entity(pairs: &[(&str, Option<&str>)]) -> Entity {
        pairs
            .iter()
            .map(|(t, n)| (t.to_string(), n.map(String::from)))
            .collect()
    }

    #[test]
    fn exact_default_and_specified_match_as_kafka_does() {
        let app = entity(&[(CLIENT_ID, Some("app"))]);
        let default = entity(&[(CLIENT_ID, None)]);
        let alice_app = entity(&[(USER, Some("alice")), (CLIENT_ID, Some("app"))]);
        let alice = entity(&[(USER, Some("alice"))]);
        assert_eq!(
            described(vec![component(CLIENT_ID, MATCH_TYPE_EXACT, Some("app"))], true),
            Ok(vec![app.clone()])
        );
        assert_eq!(
            described(vec![component(CLIENT_ID, MATCH_TYPE_EXACT, Some("app"))], false),
            Ok(vec![app.clone(), alice_app.clone()])
        );
        assert_eq!(
            described(vec![component(CLIENT_ID, MATCH_TYPE_DEFAULT, None)], true),
            Ok(vec![default.clone()])
        );
        assert_eq!(
            described(vec![component(CLIENT_ID, MATCH_TYPE_SPECIFIED, None)], true),
            Ok(vec![default.clone(), app.clone()])
        );
        assert_eq!(described(vec![], true), Ok(vec![]));
        assert_eq!(described(vec![], false).map(|e| e.len()), Ok(4));
        assert_eq!(
            described(vec![component(USER, MATCH_TYPE_EXACT, Some("alice"))], true),
            Ok(vec![alice])
        );
        assert_eq!(
            described(vec![component(IP, MATCH_TYPE_SPECIFIED, None)], false),
            Ok(vec![])
        );
    }

    #[test]
    fn malformed_filters_are_refused_with_kafkas_errors() {
        let invalid = Err(ResponseError::InvalidRequest);
        assert_eq!(
            described(vec![component(CLIENT_ID, MATCH_TYPE_EXACT, None)], false),
            invalid
        );
        assert_eq!(
            described(vec![component(CLIENT_ID, MATCH_TYPE_DEFAULT, Some("x"))], false),
            invalid
        );
        assert_eq!(described(vec![component(CLIENT_ID, 7, None)], false), invalid);
        assert_eq!(described(vec![component("", 2, None)], false), invalid);
        assert_eq!(
            described(vec![component(USER, 2, None), component(USER, 1, None)], false),
            invalid
        );
        assert_eq!(
            described(vec![component(IP, 2, None), component(USER, 2, None)], false),
            invalid
        );
        assert_eq!(
            described(vec![component("group", 2, None)], false),
            Err(ResponseError::UnsupportedVersion)
        );
    }

    #[test]
    fn describing_quotas_needs_describe_configs_on_the_cluster() {
        use crate::api::testing::Acls;
        let refused = permitted(Acls::none().allow_cluster(AclOperation::Describe).access());
        assert_eq!(refused.map_err(|e| e.0), Err(ResponseError::ClusterAuthorizationFailed));
        assert!(permitted(Acls::none().allow_cluster(AclOperation::AlterConfigs).access()).is_ok());
    }
}
