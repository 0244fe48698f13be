//! Fixed-width encodings of Kafka's Java serdes (all big-endian).

use crate::error::{Error, Result};

/// `LongDeserializer`: exactly 8 bytes, big-endian two's complement.
pub fn decode_long(bytes: &[u8]) -> Result<i64> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::Serialization(format!(
            "size of data received by LongDeserializer is not 8 (got {} bytes)",
            bytes.len()
        ))
    })?;
    Ok(i64::from_be_bytes(array))
}

/// `IntegerDeserializer`: exactly 4 bytes, big-endian two's complement.
pub fn decode_int(bytes: &[u8]) -> Result<i32> {
    let array: [u8; 4] = bytes.try_into().map_err(|_| {
        Error::Serialization(format!(
            "size of data received by IntegerDeserializer is not 4 (got {} bytes)",
            bytes.len()
        ))
    })?;
    Ok(i32::from_be_bytes(array))
}

/// `DoubleDeserializer`: exactly 8 bytes, IEEE 754 big-endian.
pub fn decode_double(bytes: &[u8]) -> Result<f64> {
    let array: [u8; 8] = bytes.try_into().map_err(|_| {
        Error::Serialization(format!(
            "size of data received by DoubleDeserializer is not 8 (got {} bytes)",
            bytes.len()
        ))
    })?;
    Ok(f64::from_be_bytes(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_round_trip_matches_java_layout() {
        assert_eq!(decode_long(&[0, 0, 0, 0, 0, 0, 1, 0]).unwrap(), 256);
        assert_eq!(decode_long(&[0xff; 8]).unwrap(), -1);
        assert!(decode_long(&[1, 2, 3]).is_err());
    }

    #[test]
    fn int_and_double() {
        assert_eq!(decode_int(&[0xff, 0xff, 0xff, 0xfe]).unwrap(), -2);
        assert!((decode_double(&1.5f64.to_be_bytes()).unwrap() - 1.5).abs() < f64::EPSILON);
        assert!(decode_int(&[0; 8]).is_err());
    }
}
