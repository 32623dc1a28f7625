//! Just enough of the zip format to read `torch.save` archives: PyTorch
//! stores `<name>/data.pkl` uncompressed, so the pickle can be parsed in place.

use crate::error::SnapshotError;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn bad(msg: impl Into<String>) -> SnapshotError {
    SnapshotError::Archive(msg.into())
}

/// The bytes of the archive's `data.pkl` entry.
pub(crate) fn find_data_pkl(data: &[u8]) -> Result<&[u8], SnapshotError> {
    // End of central directory: 22 bytes plus a comment of up to 64 KiB.
    let lo = data.len().saturating_sub(22 + 65535);
    let eocd = (lo..data.len().saturating_sub(21))
        .rev()
        .find(|&i| data[i..].starts_with(b"PK\x05\x06"))
        .ok_or_else(|| {
            bad("expected an end-of-central-directory record, found none (truncated archive?)")
        })?;
    let entries = u16_at(data, eocd + 10).unwrap_or(0) as usize;
    let mut at = u32_at(data, eocd + 16).unwrap_or(u32::MAX) as usize;
    for _ in 0..entries {
        if !data.get(at..).is_some_and(|r| r.starts_with(b"PK\x01\x02")) {
            return Err(bad(format!(
                "expected a central directory entry at byte {at}, found something else"
            )));
        }
        let method = u16_at(data, at + 10).unwrap_or(0);
        let csize = u32_at(data, at + 20).unwrap_or(0) as usize;
        let name_len = u16_at(data, at + 28).unwrap_or(0) as usize;
        let extra_len = u16_at(data, at + 30).unwrap_or(0) as usize;
        let comment_len = u16_at(data, at + 32).unwrap_or(0) as usize;
        let local = u32_at(data, at + 42).unwrap_or(u32::MAX) as usize;
        let name = data.get(at + 46..at + 46 + name_len).unwrap_or(b"");
        if name.ends_with(b"data.pkl") {
            if method != 0 {
                return Err(bad(format!(
                    "expected data.pkl stored uncompressed, found compression method {method}"
                )));
            }
            let lname =
                u16_at(data, local + 26).ok_or_else(|| bad("local header out of range"))? as usize;
            let lextra =
                u16_at(data, local + 28).ok_or_else(|| bad("local header out of range"))? as usize;
            let start = local + 30 + lname + lextra;
            return data.get(start..start.saturating_add(csize)).ok_or_else(|| {
                bad(format!(
                    "data.pkl claims {csize} bytes at byte {start}, beyond the end of the archive"
                ))
            });
        }
        at += 46 + name_len + extra_len + comment_len;
    }
    Err(bad("expected a data.pkl entry, found none"))
}
