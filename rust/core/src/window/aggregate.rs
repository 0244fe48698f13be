//! The built-in aggregations that run entirely in the kernels: count, and
//! sum, min, max and mean of a numeric value (Kafka's `Initializer`,
//! `Aggregator` and, for sessions, `Merger`, fused into one type).
//!
//! Integer arithmetic wraps as Java's `long` does; min and max of doubles
//! follow `Math.min` / `Math.max` (NaN wins, -0.0 < 0.0). Results encode as
//! Kafka's `LongSerializer` / `DoubleSerializer` bytes (big-endian, NaN in
//! Java's canonical form).

use crate::error::{Error, Result};

/// A result value with a Kafka serde encoding.
pub trait KafkaValue: Copy + Default + Send + PartialEq + std::fmt::Debug + 'static {
    /// `LongSerializer` / `DoubleSerializer` bytes.
    fn to_kafka_bytes(self) -> [u8; 8];
}

impl KafkaValue for i64 {
    #[inline]
    fn to_kafka_bytes(self) -> [u8; 8] {
        self.to_be_bytes()
    }
}

impl KafkaValue for f64 {
    /// Java's `Double.doubleToLongBits` collapses every NaN to one pattern.
    #[inline]
    fn to_kafka_bytes(self) -> [u8; 8] {
        if self.is_nan() {
            0x7ff8_0000_0000_0000u64.to_be_bytes()
        } else {
            self.to_be_bytes()
        }
    }
}

/// A numeric input value: `i64` (Java `long`) or `f64` (Java `double`).
pub trait Num: KafkaValue + Sync {
    const ZERO: Self;
    /// The identity of `min` (the largest value).
    const MIN_IDENTITY: Self;
    /// The identity of `max` (the smallest value).
    const MAX_IDENTITY: Self;
    /// Java's `+` (wrapping for `long`).
    #[must_use]
    fn plus(self, other: Self) -> Self;
    /// Java's `Math.min`.
    #[must_use]
    fn java_min(self, other: Self) -> Self;
    /// Java's `Math.max`.
    #[must_use]
    fn java_max(self, other: Self) -> Self;
    fn to_f64(self) -> f64;
    fn from_kafka_bytes(bytes: [u8; 8]) -> Self;
}

impl Num for i64 {
    const ZERO: Self = 0;
    const MIN_IDENTITY: Self = i64::MAX;
    const MAX_IDENTITY: Self = i64::MIN;

    #[inline]
    fn plus(self, other: Self) -> Self {
        self.wrapping_add(other)
    }

    #[inline]
    fn java_min(self, other: Self) -> Self {
        self.min(other)
    }

    #[inline]
    fn java_max(self, other: Self) -> Self {
        self.max(other)
    }

    #[inline]
    fn to_f64(self) -> f64 {
        self as f64
    }

    fn from_kafka_bytes(bytes: [u8; 8]) -> Self {
        i64::from_be_bytes(bytes)
    }
}

impl Num for f64 {
    const ZERO: Self = 0.0;
    const MIN_IDENTITY: Self = f64::INFINITY;
    const MAX_IDENTITY: Self = f64::NEG_INFINITY;

    #[inline]
    fn plus(self, other: Self) -> Self {
        self + other
    }

    #[inline]
    fn java_min(self, other: Self) -> Self {
        if self.is_nan() {
            self
        } else if self == 0.0 && other == 0.0 && other.is_sign_negative() {
            other
        } else if self <= other {
            self
        } else {
            other
        }
    }

    #[inline]
    fn java_max(self, other: Self) -> Self {
        if self.is_nan() {
            self
        } else if self == 0.0 && other == 0.0 && self.is_sign_negative() {
            other
        } else if self >= other {
            self
        } else {
            other
        }
    }

    #[inline]
    fn to_f64(self) -> f64 {
        self
    }

    fn from_kafka_bytes(bytes: [u8; 8]) -> Self {
        f64::from_be_bytes(bytes)
    }
}

/// An aggregation the kernels run natively: Kafka's initializer,
/// aggregator and session merger in one type, with the aggregate state
/// kept apart from the result (a mean keeps sum and count, emits their
/// quotient).
pub trait Aggregate: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// The per-record input (`()` for a count).
    type Value: Copy;
    type State: Copy + Default + Send + PartialEq + std::fmt::Debug + 'static;
    type Output: KafkaValue;

    /// Whether a record with a null value is aggregated (Kafka's count on
    /// time and session windows counts it) or skipped as dropped (every
    /// aggregation of the value itself; Kafka's sliding windows skip null
    /// values whatever the aggregation).
    const AGGREGATES_NULL_VALUES: bool;

    /// Bytes of an encoded state in the store.
    const STATE_SIZE: usize;

    /// Kafka's `Initializer`.
    fn init(&self) -> Self::State;

    /// Kafka's `Aggregator`; `value` is None for a null value (only when
    /// [`Aggregate::AGGREGATES_NULL_VALUES`]).
    fn add(&self, state: Self::State, value: Option<Self::Value>) -> Self::State;

    /// Kafka's session `Merger`: the state of two merged sessions.
    fn merge(&self, left: Self::State, right: Self::State) -> Self::State;

    /// The result value forwarded downstream.
    fn output(&self, state: Self::State) -> Self::Output;

    /// The state as stored in the window or session store (and its
    /// changelog): the result's Kafka serde bytes where the state is the
    /// result, so Kafka-compatible readers see a `Long` or `Double`.
    fn encode_state(&self, state: Self::State, out: &mut Vec<u8>);

    fn decode_state(&self, bytes: &[u8]) -> Result<Self::State>;
}

fn eight_bytes(bytes: &[u8], what: &str) -> Result<[u8; 8]> {
    bytes.try_into().map_err(|_| {
        Error::Serialization(format!(
            "a stored {what} aggregate is 8 bytes (got {})",
            bytes.len()
        ))
    })
}

/// `count()`: the number of records, null values included (Kafka's
/// `countAggregator`), as a `Long`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count;

impl Aggregate for Count {
    type Value = ();
    type State = i64;
    type Output = i64;
    const AGGREGATES_NULL_VALUES: bool = true;
    const STATE_SIZE: usize = 8;

    #[inline]
    fn init(&self) -> i64 {
        0
    }

    #[inline]
    fn add(&self, state: i64, _value: Option<()>) -> i64 {
        state.wrapping_add(1)
    }

    #[inline]
    fn merge(&self, left: i64, right: i64) -> i64 {
        left.wrapping_add(right)
    }

    #[inline]
    fn output(&self, state: i64) -> i64 {
        state
    }

    fn encode_state(&self, state: i64, out: &mut Vec<u8>) {
        out.extend_from_slice(&state.to_be_bytes());
    }

    fn decode_state(&self, bytes: &[u8]) -> Result<i64> {
        Ok(i64::from_be_bytes(eight_bytes(bytes, "count")?))
    }
}

macro_rules! value_aggregate {
    ($(#[$doc:meta])* $name:ident, $init:expr, $add:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name<T>(std::marker::PhantomData<T>);

        impl<T: Num> $name<T> {
            pub fn new() -> Self {
                Self(std::marker::PhantomData)
            }
        }

        impl<T: Num> Aggregate for $name<T> {
            type Value = T;
            type State = T;
            type Output = T;
            const AGGREGATES_NULL_VALUES: bool = false;
            const STATE_SIZE: usize = 8;

            #[inline]
            fn init(&self) -> T {
                $init
            }

            #[inline]
            fn add(&self, state: T, value: Option<T>) -> T {
                match value {
                    Some(v) => $add(state, v),
                    None => state,
                }
            }

            #[inline]
            fn merge(&self, left: T, right: T) -> T {
                $add(left, right)
            }

            #[inline]
            fn output(&self, state: T) -> T {
                state
            }

            fn encode_state(&self, state: T, out: &mut Vec<u8>) {
                out.extend_from_slice(&state.to_kafka_bytes());
            }

            fn decode_state(&self, bytes: &[u8]) -> Result<T> {
                Ok(T::from_kafka_bytes(eight_bytes(bytes, stringify!($name))?))
            }
        }
    };
}

value_aggregate!(
    /// `sum(value)`: wraps on `i64` overflow as Java's `long` does.
    Sum,
    T::ZERO,
    T::plus
);
value_aggregate!(
    /// `min(value)` (Java's `Math.min` for doubles).
    Min,
    T::MIN_IDENTITY,
    T::java_min
);
value_aggregate!(
    /// `max(value)` (Java's `Math.max` for doubles).
    Max,
    T::MAX_IDENTITY,
    T::java_max
);

/// The state of a [`Mean`]: the sum (as a double) and the count.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MeanState {
    pub sum: f64,
    pub count: i64,
}

/// `mean(value)`: a double; keeps sum and count, stored as 16 bytes
/// (sum as a `Double`, count as a `Long`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mean<T>(std::marker::PhantomData<T>);

impl<T: Num> Mean<T> {
    pub fn new() -> Self {
        Self(std::marker::PhantomData)
    }
}

impl<T: Num> Aggregate for Mean<T> {
    type Value = T;
    type State = MeanState;
    type Output = f64;
    const AGGREGATES_NULL_VALUES: bool = false;
    const STATE_SIZE: usize = 16;

    #[inline]
    fn init(&self) -> MeanState {
        MeanState::default()
    }

    #[inline]
    fn add(&self, state: MeanState, value: Option<T>) -> MeanState {
        match value {
            Some(v) => MeanState {
                sum: state.sum + v.to_f64(),
                count: state.count.wrapping_add(1),
            },
            None => state,
        }
    }

    #[inline]
    fn merge(&self, left: MeanState, right: MeanState) -> MeanState {
        MeanState {
            sum: left.sum + right.sum,
            count: left.count.wrapping_add(right.count),
        }
    }

    #[inline]
    fn output(&self, state: MeanState) -> f64 {
        state.sum / state.count as f64
    }

    fn encode_state(&self, state: MeanState, out: &mut Vec<u8>) {
        out.extend_from_slice(&state.sum.to_kafka_bytes());
        out.extend_from_slice(&state.count.to_be_bytes());
    }

    fn decode_state(&self, bytes: &[u8]) -> Result<MeanState> {
        if bytes.len() != 16 {
            return Err(Error::Serialization(format!(
                "a stored mean aggregate is 16 bytes (got {})",
                bytes.len()
            )));
        }
        let (sum, count) = bytes.split_at(8);
        Ok(MeanState {
            sum: f64::from_be_bytes(sum.try_into().expect("8 bytes")),
            count: i64::from_be_bytes(count.try_into().expect("8 bytes")),
        })
    }
}

/// Kafka's `ValueAndTimestampSerializer` layout, used by timestamped window
/// stores: the 8-byte big-endian timestamp, then the value bytes.
pub fn value_and_timestamp(timestamp: i64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + value.len());
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// Splits [`value_and_timestamp`] bytes into (timestamp, value).
pub fn split_value_and_timestamp(bytes: &[u8]) -> Result<(i64, &[u8])> {
    if bytes.len() < 8 {
        return Err(Error::Serialization(format!(
            "a timestamped value is at least 8 bytes (got {})",
            bytes.len()
        )));
    }
    let (ts, value) = bytes.split_at(8);
    Ok((i64::from_be_bytes(ts.try_into().expect("8 bytes")), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold<A: Aggregate>(a: &A, values: &[A::Value]) -> A::Output {
        let state = values.iter().fold(a.init(), |s, &v| a.add(s, Some(v)));
        a.output(state)
    }

    #[test]
    fn builtins_fold_like_java() {
        assert_eq!(fold(&Count, &[(), (), ()]), 3);
        assert_eq!(Count.add(0, None), 1);
        assert_eq!(fold(&Sum::<i64>::new(), &[i64::MAX, 1]), i64::MIN);
        assert!((fold(&Sum::<f64>::new(), &[0.5, 0.25]) - 0.75).abs() < f64::EPSILON);
        assert_eq!(fold(&Min::<i64>::new(), &[3, -2, 5]), -2);
        assert_eq!(fold(&Max::<i64>::new(), &[3, -2, 5]), 5);
        assert!(fold(&Min::<f64>::new(), &[1.0, f64::NAN, 0.0]).is_nan());
        assert!(fold(&Max::<f64>::new(), &[1.0, f64::NAN]).is_nan());
        assert!(
            fold(&Min::<f64>::new(), &[0.0, -0.0])
                .to_bits()
                .eq(&(-0.0f64).to_bits())
        );
        assert!(
            fold(&Max::<f64>::new(), &[-0.0, 0.0])
                .to_bits()
                .eq(&0.0f64.to_bits())
        );
        assert!((fold(&Mean::<i64>::new(), &[1, 2, 4]) - 7.0 / 3.0).abs() < 1e-12);
        assert_eq!(Sum::<i64>::new().add(5, None), 5);
    }

    #[test]
    fn merge_combines_sessions() {
        assert_eq!(Count.merge(2, 3), 5);
        assert_eq!(Min::<i64>::new().merge(i64::MAX, 4), 4);
        let m = Mean::<f64>::new();
        let s = m.merge(m.add(m.init(), Some(1.0)), m.add(m.init(), Some(3.0)));
        assert!((m.output(s) - 2.0).abs() < f64::EPSILON);
    }

    #[test]
    fn encodings_match_kafka_serdes() {
        assert_eq!(256i64.to_kafka_bytes(), [0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(1.5f64.to_kafka_bytes(), 1.5f64.to_be_bytes());
        let odd_nan = f64::from_bits(0x7ff0_0000_0000_0001);
        assert_eq!(odd_nan.to_kafka_bytes(), [0x7f, 0xf8, 0, 0, 0, 0, 0, 0]);
        let m = Mean::<i64>::new();
        let state = MeanState { sum: 6.0, count: 3 };
        let mut bytes = Vec::new();
        m.encode_state(state, &mut bytes);
        assert_eq!(bytes.len(), Mean::<i64>::STATE_SIZE);
        assert_eq!(m.decode_state(&bytes).unwrap(), state);
        assert!(m.decode_state(&bytes[..8]).is_err());
        let mut bytes = Vec::new();
        Count.encode_state(7, &mut bytes);
        assert_eq!(Count.decode_state(&bytes).unwrap(), 7);
        assert!(Count.decode_state(&[1]).is_err());
        let vt = value_and_timestamp(5, &bytes);
        assert_eq!(split_value_and_timestamp(&vt).unwrap(), (5, &bytes[..]));
        assert!(split_value_and_timestamp(&[0; 3]).is_err());
    }
}
