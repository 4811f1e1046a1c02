//! Length-prefixed frames on a controller connection: a 4-byte big-endian length, then the
//! body. Used by the handshake and by the raft message transport after it; a leaf of this
//! crate. Reading never allocates by a length before checking it against the caller's limit,
//! and the buffer grows only as bytes arrive.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Initial buffer for a frame body; it grows as the body arrives, never from the length alone.
const FRAME_CHUNK_BYTES: usize = 64 << 10;

pub(crate) async fn write_frame(w: &mut (impl AsyncWrite + Unpin), payload: &[u8]) -> io::Result<()> {
    w.write_all(&(payload.len() as u32).to_be_bytes()).await?;
    w.write_all(payload).await
}

/// Reads one frame; `None` on a clean end of stream between frames.
pub(crate) async fn read_frame(r: &mut (impl AsyncRead + Unpin), max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Ok(None);
    }
    read_frame_rest(r, first[0], max).await.map(Some)
}

/// The rest of a frame whose first length byte was `first`. The length is checked against
/// `max` before any buffer exists, and the buffer grows only as the body arrives, so a length
/// alone (say 2 GiB, or `max` followed by silence) costs nothing.
pub(crate) async fn read_frame_rest(r: &mut (impl AsyncRead + Unpin), first: u8, max: usize) -> io::Result<Vec<u8>> {
    let mut rest = [0u8; 3];
    r.read_exact(&mut rest).await?;
    let len = u32::from_be_bytes([first, rest[0], rest[1], rest[2]]) as usize;
    if len > max {
        return Err(invalid(&format!("frame of {len} bytes exceeds the {max}-byte limit")));
    }
    let mut buf = Vec::with_capacity(len.min(FRAME_CHUNK_BYTES));
    (&mut *r).take(len as u64).read_to_end(&mut buf).await?;
    if buf.len() != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("connection closed {} bytes into a {len}-byte frame", buf.len()),
        ));
    }
    Ok(buf)
}

pub(crate) fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}
