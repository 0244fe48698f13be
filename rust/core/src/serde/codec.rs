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

/// `ShortDeserializer`: exactly 2 bytes, big-endian two's complement.
pub fn decode_short(bytes: &[u8]) -> Result<i16> {
    let array: [u8; 2] = bytes.try_into().map_err(|_| {
        Error::Serialization(format!(
            "size of data received by ShortDeserializer is not 2 (got {} bytes)",
            bytes.len()
        ))
    })?;
    Ok(i16::from_be_bytes(array))
}

/// `FloatDeserializer`: exactly 4 bytes, IEEE 754 big-endian.
pub fn decode_float(bytes: &[u8]) -> Result<f32> {
    let array: [u8; 4] = bytes.try_into().map_err(|_| {
        Error::Serialization(format!(
            "size of data received by FloatDeserializer is not 4 (got {} bytes)",
            bytes.len()
        ))
    })?;
    Ok(f32::from_be_bytes(array))
}

/// `BooleanDeserializer`: one byte, 0 or 1.
pub fn decode_bool(bytes: &[u8]) -> Result<bool> {
    match bytes {
        [0] => Ok(false),
        [1] => Ok(true),
        [b] => Err(Error::Serialization(format!(
            "unexpected byte received by BooleanDeserializer: {b}"
        ))),
        _ => Err(Error::Serialization(format!(
            "size of data received by BooleanDeserializer is not 1 (got {} bytes)",
            bytes.len()
        ))),
    }
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
    fn short_float_and_bool() {
        assert_eq!(decode_short(&[0x01, 0x02]).unwrap(), 258);
        assert_eq!(decode_short(&[0xff, 0xfe]).unwrap(), -2);
        assert!(decode_short(&[0; 4]).is_err());
        assert!((decode_float(&[0x3f, 0xc0, 0, 0]).unwrap() - 1.5).abs() < f32::EPSILON);
        assert!(decode_float(&[0; 8]).is_err());
        assert!(decode_bool(&[1]).unwrap());
        assert!(!decode_bool(&[0]).unwrap());
        assert!(decode_bool(&[2]).is_err());
        assert!(decode_bool(&[0, 1]).is_err());
    }

    #[test]
    fn int_and_double() {
        assert_eq!(decode_int(&[0xff, 0xff, 0xff, 0xfe]).unwrap(), -2);
        assert!((decode_double(&1.5f64.to_be_bytes()).unwrap() - 1.5).abs() < f64::EPSILON);
        assert!(decode_int(&[0; 8]).is_err());
    }
}
