//! The fence file beside a fenced file: what the resource is bound to and the highest token,
//! kept in two slots written in turn, each with a sequence number and a checksum.
//!
//! A write goes to the slot the last write did not use and is flushed to disk (`fdatasync`)
//! before the fenced file changes. A crash in the middle of a slot's write leaves a slot whose
//! checksum fails, and the other slot, the state before, holds: the token of the torn write
//! was never acknowledged and its data never renamed into place, so going back to the state
//! before loses nothing. The file is never replaced (its `flock` is what serializes writers).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use lockkit_core::FencingToken;

use crate::FenceState;

/// The size of one slot: a header line and the lock's identity (at most 512 + 1 + 1024
/// bytes) fit.
const SLOT: usize = 2048;
const MAGIC: &str = "lockkit-fence 1";

/// One slot's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// Which write this was: the newer valid slot wins.
    pub(crate) seq: u64,
    pub(crate) state: FenceState,
}

/// The newest valid slot of `file`; `None` for a new (empty) file or one without a valid slot.
///
/// # Errors
///
/// When the file cannot be read.
pub(crate) fn read(file: &File) -> io::Result<Option<Record>> {
    let mut bytes = vec![0u8; 2 * SLOT];
    let mut filled = 0;
    while filled < bytes.len() {
        match file.read_at(&mut bytes[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    let slots = bytes[..filled].chunks(SLOT).filter_map(decode);
    Ok(slots.max_by_key(|record| record.seq))
}

/// Writes `record` to its slot (by its sequence number) and flushes it to disk.
///
/// # Errors
///
/// When the slot cannot be written or flushed.
pub(crate) fn write(file: &File, record: &Record) -> io::Result<()> {
    let bytes = encode(record);
    let slot = usize::from(record.seq % 2 == 1);
    file.write_all_at(&bytes, (slot * SLOT) as u64)?;
    file.sync_data()
}

fn encode(record: &Record) -> Vec<u8> {
    let lock = record.state.lock.as_bytes();
    let sum = checksum(record.seq, record.state.highest.get(), lock);
    let mut bytes = format!("{MAGIC} {} {} {} {sum:016x}\n", record.seq, record.state.highest, lock.len()).into_bytes();
    bytes.extend_from_slice(lock);
    bytes.resize(SLOT, 0);
    bytes
}

fn decode(slot: &[u8]) -> Option<Record> {
    let end = slot.iter().position(|b| *b == b'\n')?;
    let header = std::str::from_utf8(&slot[..end]).ok()?;
    let fields = header.strip_prefix(MAGIC)?.split_whitespace().collect::<Vec<_>>();
    let [seq, highest, len, sum] = fields.as_slice() else { return None };
    let (seq, highest, len) = (seq.parse().ok()?, highest.parse().ok()?, len.parse::<usize>().ok()?);
    let lock = slot.get(end + 1..end + 1 + len)?;
    if u64::from_str_radix(sum, 16).ok()? != checksum(seq, highest, lock) {
        return None;
    }
    let lock = String::from_utf8(lock.to_vec()).ok()?;
    Some(Record { seq, state: FenceState { lock, highest: FencingToken::new(highest) } })
}

/// FNV-1a over the record's fields: enough to tell a torn slot from a written one.
fn checksum(seq: u64, highest: u64, lock: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seq.to_le_bytes().iter().chain(&highest.to_le_bytes()).chain(lock) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn record(seq: u64, highest: u64) -> Record {
        Record { seq, state: FenceState { lock: "mem://s#a\nb".into(), highest: FencingToken::new(highest) } }
    }

    #[test]
    fn the_newest_valid_slot_wins_and_a_torn_one_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("f"))
            .unwrap();
        assert_eq!(read(&file).unwrap(), None, "a new file");
        write(&file, &record(1, 10)).unwrap();
        write(&file, &record(2, 20)).unwrap();
        assert_eq!(read(&file).unwrap(), Some(record(2, 20)));
        // A torn write of slot 1 (seq 3): the state before holds.
        let mut torn = encode(&record(3, 30));
        torn[40] ^= 0xff;
        file.write_all_at(&torn[..100], SLOT as u64).unwrap();
        assert_eq!(read(&file).unwrap(), Some(record(2, 20)));
        // A half-written header is no slot either.
        file.write_all_at(b"lockkit-fence 1 9", SLOT as u64).unwrap();
        assert_eq!(read(&file).unwrap(), Some(record(2, 20)));
    }
}
