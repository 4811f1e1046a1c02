//! The order record: JSON on the topic, keyed by customer id, padded to the configured size.

use serde::{Deserialize, Serialize};

/// One order as the producer writes it and the consumers read it. Unknown fields (the
/// padding) are ignored when reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// `<run uuid>-<sequence>`: unique across producer runs.
    pub order_id: String,
    pub customer: String,
    pub amount_cents: i64,
    /// When the order was created (ms since the epoch); analytics buckets by its minute.
    pub created_ms: i64,
}

impl Order {
    /// The JSON form, with a `pad` field that brings it to about `size_bytes` (never less
    /// than the order itself).
    pub fn to_padded_json(&self, size_bytes: usize) -> Vec<u8> {
        let mut json = serde_json::to_vec(self).expect("an Order always serializes");
        const PAD_FIELD: &[u8] = b",\"pad\":\"\"}";
        let pad_len = size_bytes.saturating_sub(json.len() - 1 + PAD_FIELD.len());
        json.pop(); // the closing brace
        json.reserve(PAD_FIELD.len() + pad_len);
        json.extend_from_slice(b",\"pad\":\"");
        json.resize(json.len() + pad_len, b'x');
        json.extend_from_slice(b"\"}");
        json
    }

    /// Parses a record value; `None` for anything that is not an order (counted and skipped
    /// by the consumers, never a crash).
    pub fn parse(value: Option<&[u8]>) -> Option<Order> {
        serde_json::from_slice(value?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> Order {
        Order {
            order_id: "3f0c-17".into(),
            customer: "customer-00042".into(),
            amount_cents: 12_345,
            created_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn padded_json_has_the_requested_size_and_reads_back() {
        for size in [0, 50, 2048] {
            let json = order().to_padded_json(size);
            let unpadded = serde_json::to_vec(&order()).unwrap().len() + ",\"pad\":\"\"".len();
            assert_eq!(json.len(), size.max(unpadded), "size {size}");
            assert_eq!(Order::parse(Some(&json)), Some(order()));
        }
    }

    #[test]
    fn non_orders_parse_as_none() {
        assert_eq!(Order::parse(None), None);
        assert_eq!(Order::parse(Some(b"not json")), None);
        assert_eq!(Order::parse(Some(br#"{"order_id":"x"}"#)), None);
    }
}
