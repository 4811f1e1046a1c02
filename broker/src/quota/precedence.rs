//! Which quota applies to a (user, client-id), with Kafka's precedence (`DefaultQuotaCallback`):
//!
//! 1. `/config/users/<user>/clients/<client-id>`
//! 2. `/config/users/<user>/clients/<default>`
//! 3. `/config/users/<user>`
//! 4. `/config/users/<default>/clients/<client-id>`
//! 5. `/config/users/<default>/clients/<default>`
//! 6. `/config/users/<default>`
//! 7. `/config/clients/<client-id>`
//! 8. `/config/clients/<default>`
//!
//! The first entity holding the key wins. Its rate is kept per actual user and/or client id for
//! the dimensions the entity has (Kafka's metric tags): a default client-id quota limits each
//! client id separately, a user-only quota limits all of that user's clients together.

use std::collections::HashMap;

use crate::metadata::image::MetadataImage;
use crate::metadata::records::{QuotaEntity, QuotaName};

/// One quota key's values by entity, as of one image.
#[derive(Debug, Default)]
pub struct QuotaTable {
    /// The image's `last_offset` this table was built from.
    offset: u64,
    quotas: HashMap<QuotaEntity, f64>,
}

impl QuotaTable {
    pub fn build(image: &MetadataImage, key: &str) -> QuotaTable {
        QuotaTable {
            offset: image.last_offset,
            quotas: image
                .client_quotas
                .iter()
                .filter_map(|(entity, values)| values.get(key).map(|v| (entity.clone(), v.0)))
                .collect(),
        }
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The quota for (user, client-id) and the (user, client-id) tags its rate is kept under,
    /// or `None` when no entity in the precedence order has one.
    pub fn resolve(&self, user: &str, client_id: &str) -> Option<((String, String), f64)> {
        if self.quotas.is_empty() {
            return None;
        }
        let named = |name: &str| Some(QuotaName::Named(name.to_string()));
        let default = || Some(QuotaName::Default);
        let order = [
            (named(user), named(client_id)),
            (named(user), default()),
            (named(user), None),
            (default(), named(client_id)),
            (default(), default()),
            (default(), None),
            (None, named(client_id)),
            (None, default()),
        ];
        order.into_iter().find_map(|(user_name, client_name)| {
            let tags = (
                if user_name.is_some() { user } else { "" }.to_string(),
                if client_name.is_some() { client_id } else { "" }.to_string(),
            );
            let entity = QuotaEntity {
                user: user_name,
                client_id: client_name,
            };
            self.quotas.get(&entity).map(|bound| (tags, *bound))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: Option<&str>) -> QuotaName {
        QuotaName::from_wire(n)
    }

    /// One dimension of an entity: absent, default (`Some(None)`) or named.
    type Dimension<'a> = Option<Option<&'a str>>;

    fn table(entries: &[(Dimension, Dimension, f64)]) -> QuotaTable {
        QuotaTable {
            offset: 0,
            quotas: entries
                .iter()
                .map(|(user, client, value)| {
                    (
                        QuotaEntity {
                            user: user.map(name),
                            client_id: client.map(name),
                        },
                        *value,
                    )
                })
                .collect(),
        }
    }

    fn tags(user: &str, client: &str) -> (String, String) {
        (user.to_string(), client.to_string())
    }

    #[test]
    fn the_most_specific_entity_wins_in_kafkas_order() {
        let mut entries = vec![
            (None, Some(None), 8.0),
            (None, Some(Some("app")), 7.0),
            (Some(None), None, 6.0),
            (Some(None), Some(None), 5.0),
            (Some(None), Some(Some("app")), 4.0),
            (Some(Some("alice")), None, 3.0),
            (Some(Some("alice")), Some(None), 2.0),
            (Some(Some("alice")), Some(Some("app")), 1.0),
        ];
        let expected = [
            (1.0, tags("alice", "app")),
            (2.0, tags("alice", "app")),
            (3.0, tags("alice", "")),
            (4.0, tags("alice", "app")),
            (5.0, tags("alice", "app")),
            (6.0, tags("alice", "")),
            (7.0, tags("", "app")),
            (8.0, tags("", "app")),
        ];
        for (bound, tags) in expected {
            assert_eq!(table(&entries).resolve("alice", "app"), Some((tags, bound)));
            entries.pop();
        }
        assert_eq!(table(&entries).resolve("alice", "app"), None);
    }

    #[test]
    fn a_named_entity_applies_only_to_its_name() {
        let t = table(&[(None, Some(Some("app")), 7.0), (Some(Some("bob")), None, 3.0)]);
        assert_eq!(t.resolve("alice", "other"), None);
        assert_eq!(t.resolve("bob", "other"), Some((tags("bob", ""), 3.0)));
    }
}
