//! Length-prefixed framing: every Kafka request and response is a big-endian `i32` size
//! followed by that many bytes. The size is checked against the limit *before* any buffer
//! for the body is allocated, so a hostile prefix cannot make the broker reserve memory.

use bytes::{Buf, BytesMut};

/// Bytes in the size prefix of every frame.
pub const SIZE_PREFIX_LEN: usize = 4;

/// Why a frame could not be taken from the stream. Each closes the connection.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error(
        "frame size {size} exceeds socket.request.max.bytes ({max}); raise the setting if such requests are legitimate"
    )]
    TooLarge { size: usize, max: usize },
    #[error("frame size {0} is negative; the peer is not speaking the Kafka protocol")]
    Negative(i32),
}

/// Reads the size prefix at the front of `buf` without consuming it.
/// Returns the body size once the prefix is complete.
pub fn peek_frame_size(buf: &[u8], max_bytes: usize) -> Result<Option<usize>, FrameError> {
    let Some(prefix) = buf.get(..SIZE_PREFIX_LEN) else {
        return Ok(None);
    };
    let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if size < 0 {
        return Err(FrameError::Negative(size));
    }
    let size = size as usize;
    if size > max_bytes {
        return Err(FrameError::TooLarge { size, max: max_bytes });
    }
    Ok(Some(size))
}

/// Splits one complete frame body off the front of `buf`, if a whole frame is buffered.
pub fn take_frame(buf: &mut BytesMut, max_bytes: usize) -> Result<Option<BytesMut>, FrameError> {
    let Some(size) = peek_frame_size(buf, max_bytes)? else {
        return Ok(None);
    };
    if buf.len() < SIZE_PREFIX_LEN + size {
        return Ok(None);
    }
    buf.advance(SIZE_PREFIX_LEN);
    Ok(Some(buf.split_to(size)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_frame_is_split_off_and_rest_is_kept() {
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 1, 2, 3, 9][..]);
        let frame = take_frame(&mut buf, 100).unwrap().unwrap();
        assert_eq!(&frame[..], &[1, 2, 3]);
        assert_eq!(&buf[..], &[9]);
    }

    #[test]
    fn partial_frame_waits_for_more_bytes() {
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 1][..]);
        assert_eq!(take_frame(&mut buf, 100).unwrap(), None);
        let mut short = BytesMut::from(&[0, 0][..]);
        assert_eq!(take_frame(&mut short, 100).unwrap(), None);
    }

    #[test]
    fn oversized_and_negative_sizes_are_rejected_before_buffering() {
        let mut big = BytesMut::from(&[0x7f, 0xff, 0xff, 0xff][..]);
        assert!(matches!(take_frame(&mut big, 1024), Err(FrameError::TooLarge { .. })));
        let mut neg = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
        assert_eq!(take_frame(&mut neg, 1024), Err(FrameError::Negative(-1)));
    }
}
