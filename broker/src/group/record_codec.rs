//! The primitives of Kafka's record encodings that `__consumer_offsets` and
//! `__transaction_state` records share: fixed-width strings, unsigned varints and the compact
//! lengths and tagged fields of flexible versions, and a bounds-checked reader. Everything read
//! is checked against the bytes present before anything is sized by it.

use bytes::{BufMut, Bytes, BytesMut};

/// Why a stored record could not be read; loading skips it and says so.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("record ends early while reading {0}")]
    Truncated(&'static str),
    #[error("unknown key version {0}")]
    UnknownKeyVersion(i16),
    #[error("unknown value version {0}")]
    UnknownValueVersion(i16),
    #[error("record has no key")]
    NoKey,
    #[error("string is not UTF-8")]
    NotUtf8,
}

pub(crate) fn put_string(buf: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    buf.put_i16(len as i16);
    buf.put_slice(&s.as_bytes()[..len]);
}

/// Writes an unsigned varint (flexible versions' lengths and tag counts).
pub(crate) fn put_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// An unsigned varint of at most 5 bytes.
pub(crate) fn uvarint(r: &mut Reader<'_>, what: &'static str) -> Result<u32, RecordError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        let byte = r.take(1, what)?[0];
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RecordError::Truncated(what))
}

/// A compact length (varint N+1; 0 is null, taken as empty): checked against the bytes left
/// at `min_each` bytes per element before anything is sized by it.
pub(crate) fn compact_len(r: &mut Reader<'_>, min_each: usize, what: &'static str) -> Result<usize, RecordError> {
    let n = uvarint(r, what)?.saturating_sub(1) as usize;
    if n.saturating_mul(min_each) > r.0.len() {
        return Err(RecordError::Truncated(what));
    }
    Ok(n)
}

/// Skips a flexible structure's tagged fields.
pub(crate) fn skip_tagged_fields(r: &mut Reader<'_>) -> Result<(), RecordError> {
    let count = uvarint(r, "tagged field count")?;
    for _ in 0..count {
        uvarint(r, "tag")?;
        let size = uvarint(r, "tag size")? as usize;
        r.take(size, "tagged field")?;
    }
    Ok(())
}

/// A bounds-checked reader of Kafka's fixed-width encodings (also `txn/records.rs`'s).
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        if self.0.len() < n {
            return Err(RecordError::Truncated(what));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, RecordError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, RecordError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, RecordError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub(crate) fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, RecordError> {
        let len = self.i16(what)?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize, what)?;
        std::str::from_utf8(b)
            .map(|s| Some(s.to_string()))
            .map_err(|_| RecordError::NotUtf8)
    }

    pub(crate) fn string(&mut self, what: &'static str) -> Result<String, RecordError> {
        Ok(self.nullable_string(what)?.unwrap_or_default())
    }

    pub(crate) fn bytes(&mut self, what: &'static str) -> Result<Bytes, RecordError> {
        let len = self.i32(what)?;
        if len < 0 {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(self.take(len as usize, what)?))
    }
}
