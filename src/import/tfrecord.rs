//! TFRecord files: a sequence of records, each `u64 length | u32 masked CRC-32C of the length bytes | data |
//! u32 masked CRC-32C of the data`, little-endian, optionally inside one GZIP stream (`compression_type='GZIP'`,
//! as AndroidControl is published). Framing and CRC mask as TensorFlow documents them
//! (`tensorflow/docs site/en/api_guides/python/python_io.md`, "TFRecords Format Details"): the CRC-32C rotated right
//! by 15 bits plus 0xa282ead8.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

/// The constant TensorFlow adds to a rotated CRC.
const MASK_DELTA: u32 = 0xa282_ead8;

/// The masked CRC-32C (Castagnoli) TFRecord stores.
pub(super) fn masked_crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
        .rotate_right(15)
        .wrapping_add(MASK_DELTA)
}

/// A record that could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum RecordError {
    /// Reading (or inflating) the file failed.
    #[error("read error at byte {offset}: {source}")]
    Io {
        /// Offset in the uncompressed stream.
        offset: u64,
        /// The error.
        source: std::io::Error,
    },
    /// The file ends inside a record.
    #[error("truncated record at byte {offset}")]
    Truncated {
        /// Offset of the record.
        offset: u64,
    },
    /// The length's CRC does not match: the framing cannot be trusted past this point.
    #[error("corrupt record at byte {offset}: the length's CRC does not match")]
    LengthCrc {
        /// Offset of the record.
        offset: u64,
    },
    /// The data's CRC does not match: this record is corrupt, the next one can still be read.
    #[error("corrupt record at byte {offset}: the data's CRC does not match")]
    DataCrc {
        /// Offset of the record.
        offset: u64,
    },
}

impl RecordError {
    /// Whether reading can go on with the next record.
    pub(crate) fn recoverable(&self) -> bool {
        matches!(self, RecordError::DataCrc { .. })
    }

    /// The kind of problem, for the import's counts.
    pub fn kind(&self) -> &'static str {
        match self {
            RecordError::Io { .. } => "unreadable record (rest of the file skipped)",
            RecordError::Truncated { .. } => "truncated record at the end of a file",
            RecordError::LengthCrc { .. } => {
                "corrupt record: length CRC mismatch (rest of the file skipped)"
            }
            RecordError::DataCrc { .. } => "corrupt record: data CRC mismatch",
        }
    }
}

/// Reads records one by one, checking both CRCs.
pub(super) struct RecordReader<R: Read> {
    inner: R,
    offset: u64,
    done: bool,
}

/// Open a TFRecord file, inflating it when it starts with the GZIP magic bytes.
pub(super) fn open(path: &Path) -> std::io::Result<RecordReader<Box<dyn Read>>> {
    let mut file = BufReader::with_capacity(1 << 20, File::open(path)?);
    let mut magic = [0u8; 2];
    let n = file.read(&mut magic)?;
    let head = std::io::Cursor::new(magic[..n].to_vec()).chain(file);
    let inner: Box<dyn Read> = if n == 2 && magic == [0x1f, 0x8b] {
        Box::new(flate2::read::MultiGzDecoder::new(head))
    } else {
        Box::new(head)
    };
    Ok(RecordReader::new(inner))
}

/// Fill `buf` as far as the stream goes: the number of bytes read, `None` when it ended before the first byte.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<Option<usize>> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((got > 0).then_some(got))
}

impl<R: Read> RecordReader<R> {
    /// A reader over an uncompressed record stream.
    pub fn new(inner: R) -> Self {
        RecordReader {
            inner,
            offset: 0,
            done: false,
        }
    }

    fn io(&self, source: std::io::Error) -> RecordError {
        RecordError::Io {
            offset: self.offset,
            source,
        }
    }

    /// The next record's data; `None` at the end. After an unrecoverable error the reader ends.
    pub(crate) fn next_record(&mut self) -> Option<Result<Vec<u8>, RecordError>> {
        if self.done {
            return None;
        }
        let r = self.read_one();
        if matches!(&r, Some(Err(e)) if !e.recoverable()) {
            self.done = true;
        }
        r
    }

    fn read_one(&mut self) -> Option<Result<Vec<u8>, RecordError>> {
        let start = self.offset;
        let truncated = Err(RecordError::Truncated { offset: start });
        let mut header = [0u8; 12];
        match read_full(&mut self.inner, &mut header) {
            Ok(None) => return None,
            Ok(Some(12)) => {}
            Ok(Some(_)) => return Some(truncated),
            Err(e) => return Some(Err(self.io(e))),
        }
        let len_bytes: [u8; 8] = header[..8].try_into().expect("8 bytes");
        let len_crc = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
        if masked_crc(&len_bytes) != len_crc {
            return Some(Err(RecordError::LengthCrc { offset: start }));
        }
        let len = u64::from_le_bytes(len_bytes);
        let mut data = Vec::new();
        match (&mut self.inner).take(len).read_to_end(&mut data) {
            Ok(n) if n as u64 == len => {}
            Ok(_) => return Some(truncated),
            Err(e) => return Some(Err(self.io(e))),
        }
        let mut crc = [0u8; 4];
        match read_full(&mut self.inner, &mut crc) {
            Ok(Some(4)) => {}
            Ok(_) => return Some(truncated),
            Err(e) => return Some(Err(self.io(e))),
        }
        self.offset = start + 16 + len;
        if masked_crc(&data) != u32::from_le_bytes(crc) {
            return Some(Err(RecordError::DataCrc { offset: start }));
        }
        Some(Ok(data))
    }
}

/// One framed record (for tests and the sample writer).
#[cfg(test)]
pub(super) fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = len.to_vec();
    out.extend(masked_crc(&len).to_le_bytes());
    out.extend(data);
    out.extend(masked_crc(data).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(bytes: Vec<u8>) -> Vec<Result<Vec<u8>, RecordError>> {
        let mut r = RecordReader::new(std::io::Cursor::new(bytes));
        std::iter::from_fn(|| r.next_record()).collect()
    }

    #[test]
    fn masked_crc_matches_tensorflow() {
        // crc32c("123456789") = 0xe3069283 (the CRC-32C check value); masked, ((c >> 15) | (c << 17)) +
        // 0xa282ead8 = 0xc78ab0e5 (worked out independently, in Python).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
    }

    #[test]
    fn records_round_trip_and_a_bad_data_crc_skips_only_that_record() {
        let mut bytes = frame(b"first");
        let mut bad = frame(b"second");
        let n = bad.len();
        bad[n - 5] ^= 0x01; // flip a data bit: the data CRC no longer matches
        bytes.extend(bad);
        bytes.extend(frame(b"third"));
        let got = read_all(bytes);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap(), b"first");
        assert!(matches!(got[1], Err(RecordError::DataCrc { offset: 21 })));
        assert_eq!(got[2].as_ref().unwrap(), b"third");
    }

    #[test]
    fn a_bad_length_crc_or_truncation_ends_the_file() {
        let mut bytes = frame(b"first");
        let mut bad = frame(b"second");
        bad[0] ^= 0x01;
        bytes.extend(bad);
        bytes.extend(frame(b"third"));
        let got = read_all(bytes);
        assert_eq!(got.len(), 2);
        assert!(matches!(got[1], Err(RecordError::LengthCrc { .. })));
        let mut cut = frame(b"only");
        cut.truncate(cut.len() - 2);
        let got = read_all(cut);
        assert!(matches!(
            got[..],
            [Err(RecordError::Truncated { offset: 0 })]
        ));
    }

    #[test]
    fn gzip_files_are_inflated() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x-00000-of-00001");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&frame(b"a")).unwrap();
        gz.write_all(&frame(b"bc")).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let mut r = open(&path).unwrap();
        assert_eq!(r.next_record().unwrap().unwrap(), b"a");
        assert_eq!(r.next_record().unwrap().unwrap(), b"bc");
        assert!(r.next_record().is_none());
        // Uncompressed files are read as they are.
        std::fs::write(&path, frame(b"raw")).unwrap();
        assert_eq!(open(&path).unwrap().next_record().unwrap().unwrap(), b"raw");
    }
}
