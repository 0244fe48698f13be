//! Windowing: window specs, window assignment, grace, and the native
//! kernels of windowed aggregations (Kafka's `KStreamWindowAggregate`,
//! `KStreamSlidingWindowAggregate`, `KStreamSessionWindowAggregate`) for the
//! built-in aggregations.
//!
//! Each kernel is one processor's state (one per task and node) and takes a
//! whole columnar batch per call ([`column::Batch`]), looping over it in
//! offset order so that its results equal Kafka Streams' record-at-a-time
//! results: the processor's own observed stream time, grace drops, result
//! timestamps, emission order. Results come back columnar
//! ([`results::WindowedResults`]) with the store writes that back them
//! ([`results::StoreChanges`]).

pub mod aggregate;
pub mod assign;
pub mod column;
mod keys;
pub mod results;
pub mod session;
pub mod sliding;
pub mod spec;
mod table;
pub mod time;

pub use aggregate::{Aggregate, Count, KafkaValue, Max, Mean, MeanState, Min, Num, Sum};
pub use column::{Batch, BinaryBuffer, BinaryColumn, NoValues, Validity, ValueColumn, Values};
pub use results::{BatchStats, ResultKeys, StoreChanges, WindowedResults};
pub use session::SessionWindowedAggregation;
pub use sliding::SlidingWindowedAggregation;
pub use spec::{
    DEFAULT_EMIT_INTERVAL_MS, EmitStrategy, NO_TIMESTAMP, SessionWindows, SlidingWindows,
    TimeWindows,
};
pub use time::TimeWindowedAggregation;

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernels move between the bindings' threads.
    #[test]
    fn kernels_are_send() {
        fn send<T: Send>() {}
        send::<TimeWindowedAggregation<Count>>();
        send::<TimeWindowedAggregation<Mean<f64>>>();
        send::<SlidingWindowedAggregation<Sum<i64>>>();
        send::<SessionWindowedAggregation<Max<f64>>>();
        send::<WindowedResults<f64>>();
        send::<StoreChanges<MeanState>>();
    }
}
